//! Output that lies: keys with control characters are refused by the
//! writers; what `bale ls` and `bale stat` print from data is escaped, so a
//! key, class name or label cannot forge a line or reach the terminal as an
//! escape sequence; a label is checked before it is printed; a damaged image
//! is refused by the image stage and reported by `verify --decode` whenever
//! Pillow refuses it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter, ShardIndex};
use bale_tests::run_python;
use serde_json::Value;

use crate::common::{Bounded, bale_bounded};

/// The key and file names with control characters the tests use, each with
/// a fragment of its (escaped) name that must appear in messages.
const CONTROL_NAMES: &[(&str, &str)] = &[
    ("fake\n99\tx.jpg", "x.jpg"),
    ("tab\there.jpg", "here.jpg"),
    ("cr\rhere.jpg", "here.jpg"),
    ("esc\x1b[31mred.jpg", "[31mred.jpg"),
];

/// The control characters in `text` other than newline (and tab when `tab_ok`).
fn raw_controls(text: &str, tab_ok: bool) -> Vec<char> {
    text.chars()
        .filter(|&c| c.is_control() && c != '\n' && !(tab_ok && c == '\t'))
        .collect()
}

fn fails(o: &Bounded) -> bool {
    o.failed_cleanly()
}

fn succeeds(o: &Bounded) -> bool {
    o.killed.is_none() && o.status.is_some_and(|s| s.success())
}

#[test]
fn pack_refuses_keys_with_control_characters_and_lists_them_escaped() {
    for (name, shown) in CONTROL_NAMES {
        let t = tempfile::tempdir().unwrap();
        let input = t.path().join("in");
        fs::create_dir_all(input.join("a")).unwrap();
        fs::write(input.join("a/ok.jpg"), b"fine").unwrap();
        fs::write(input.join("a").join(name), b"lying").unwrap();
        let out = t.path().join("out");
        let o = bale_bounded(&[
            "pack".as_ref(),
            "--on-error".as_ref(),
            "fail".as_ref(),
            input.as_os_str(),
            "-o".as_ref(),
            out.as_os_str(),
        ]);
        let err = o.stderr_text();
        assert!(
            fails(&o)
                && err.lines().any(|l| l.contains(shown) && l.contains("a/"))
                && raw_controls(&err, false).is_empty(),
            "pack --on-error fail of {name:?}: should fail naming the file, escaped: {}",
            o.describe()
        );
        assert!(!out.join("bale.json").exists());
    }
    // All of them at once, skipped: listed one per line, escaped.
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("a")).unwrap();
    fs::write(input.join("a/ok.jpg"), b"fine").unwrap();
    for (name, _) in CONTROL_NAMES {
        fs::write(input.join("a").join(name), b"lying").unwrap();
    }
    let out = t.path().join("out");
    let o = bale_bounded(&[
        "pack".as_ref(),
        "--on-error".as_ref(),
        "skip".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    let err = o.stderr_text();
    assert!(succeeds(&o), "{}", o.describe());
    assert!(
        raw_controls(&err, false).is_empty(),
        "raw control characters {:?} on stderr: {}",
        raw_controls(&err, false),
        o.describe()
    );
    assert!(err.contains("skipped 4 files"), "{}", o.describe());
    for (name, shown) in CONTROL_NAMES {
        assert!(
            err.lines().any(|l| l.contains(shown)),
            "{name:?} is not listed: {err}"
        );
    }
    // No listed line was forged by a newline in a name: every line but the
    // summaries is an indented listing.
    assert!(
        !err.lines().any(|l| l.starts_with("99")),
        "a name's newline forged a line: {err}"
    );
    let keys: Vec<String> = crate::common::samples(&out)
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(keys, ["a/ok"]);
}

/// A tar written by Python's tarfile: `a.jpg` then a member named `bad`
/// (its bytes given in hex), then `c.jpg`; returns the bad member's header offset.
fn tar_with_member(path: &Path, bad: &[u8]) -> u64 {
    let hex: String = bad.iter().map(|b| format!("{b:02x}")).collect();
    let out = run_python(
        r#"
import io, sys, tarfile
path, bad = sys.argv[1], bytes.fromhex(sys.argv[2]).decode()
with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
    for name in ["a.jpg", bad, "c.jpg"]:
        info = tarfile.TarInfo(name)
        data = b"x" * 700
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
with tarfile.open(path) as tf:
    for m in tf.getmembers():
        if m.name == bad:
            print(m.offset)
"#,
        &[path.as_os_str(), OsStr::new(&hex)],
    )
    .unwrap();
    out.trim().parse().unwrap()
}

#[test]
fn index_refuses_member_names_with_control_characters_naming_tar_and_offset() {
    for bad in ["fake\n99\tx.jpg", "esc\x1b[2Jclear.jpg", "cr\rx.jpg"] {
        let t = tempfile::tempdir().unwrap();
        let tar = t.path().join("evil.tar");
        let offset = tar_with_member(&tar, bad.as_bytes());
        assert_eq!(offset, 1536, "a.jpg: 512 header + 1024 data");
        let ds = t.path().join("ds");
        let o = bale_bounded(&[
            "index".as_ref(),
            tar.as_os_str(),
            "-o".as_ref(),
            ds.as_os_str(),
        ]);
        let err = o.stderr_text();
        assert!(
            fails(&o)
                && err.contains("evil.tar")
                && err.contains(&offset.to_string())
                && raw_controls(&err, false).is_empty(),
            "bale index of a tar holding {bad:?} should fail naming evil.tar and offset {offset}: {}",
            o.describe()
        );
        assert!(!ds.join("bale.json").exists());
    }
}

/// Class names with control characters (C0 and C1).
const EVIL_LABELS: [&str; 2] = ["c\x1b[31mat\nfake\t9", "dog\r\u{9b}2J"];
/// The `.cls` text of sample 6: not an integer, with an escape sequence.
const EVIL_CLS: &[u8] = b"\x1b]0;owned\x07 six\n";

/// A dataset of 2 shards x 4 samples `cat/0000`, `dog/0001`, ... (members
/// `txt` and `cls`), with class names holding control characters, a `.cls`
/// that is not an integer, and two keys patched in the index to hold
/// control characters (the writers refuse such keys, so the index is
/// crafted: string table patched, footer and manifest checksum recomputed).
fn evil_dataset(dir: &Path) -> PathBuf {
    let ds = dir.join("ds");
    fs::create_dir_all(&ds).unwrap();
    let mut shards = Vec::new();
    for s in 0..2usize {
        let name = bale_format::shard_file_name("shard", s as u64, Compression::None);
        let mut w = ShardFileWriter::create(&ds, &name, Compression::None, 0).unwrap();
        for j in 0..4usize {
            let i = s * 4 + j;
            let key = format!("{}/{i:04}", ["cat", "dog"][i % 2]);
            let cls = if i == 6 {
                EVIL_CLS.to_vec()
            } else {
                (i % 2).to_string().into_bytes()
            };
            let txt = format!("sample {i}");
            w.writer()
                .write_sample(
                    &key,
                    &[
                        Member {
                            ext: "txt",
                            data: txt.as_bytes(),
                        },
                        Member {
                            ext: "cls",
                            data: &cls,
                        },
                    ],
                )
                .unwrap();
        }
        shards.push(w.finish().unwrap());
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "test".into(),
        command: "e2e-fixture".into(),
        options: serde_json::json!({}),
    };
    let mut m = Manifest::new(
        shards,
        Some(EVIL_LABELS.iter().map(|s| (*s).to_owned()).collect()),
        created_by,
    );
    // Keys cat/0000 and dog/0001 of shard 0 become keys with control characters.
    let idx_path = ds.join(&m.shards[0].index);
    let mut b = fs::read(&idx_path).unwrap();
    for (from, to) in [
        (&b"cat/0000"[..], &b"c\n9\t\x1b[1m"[..]),
        (b"dog/0001", b"d\rog\x1b[2J"),
    ] {
        let at = b
            .windows(from.len())
            .position(|w| w == from)
            .expect("key in the string table");
        b[at..at + to.len()].copy_from_slice(to);
    }
    let body = b.len() - 8;
    let sum = bale_format::hash::xxh3_64(&b[..body]);
    b[body..].copy_from_slice(&sum.to_le_bytes());
    fs::write(&idx_path, &b).unwrap();
    m.shards[0].index_xxh3 = format!("{sum:016x}");
    m.write(&ds).unwrap();
    let idx = ShardIndex::open(&idx_path).unwrap();
    assert_eq!(idx.key(0), "c\n9\t\x1b[1m");
    ds
}

#[test]
fn ls_prints_one_escaped_line_per_sample() {
    let t = tempfile::tempdir().unwrap();
    let ds = evil_dataset(t.path());
    let o = bale_bounded(&["ls".as_ref(), ds.as_os_str()]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(succeeds(&o), "{}", o.describe());
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        8,
        "one line per sample, none forged:\n{}",
        o.describe()
    );
    for (i, l) in lines.iter().enumerate() {
        assert!(
            raw_controls(l, true).is_empty(),
            "line {i} holds raw control characters {:?}: {l:?}",
            raw_controls(l, true)
        );
        assert_eq!(
            l.matches('\t').count(),
            3,
            "line {i}: INDEX KEY LABEL MEMBERS, no tab from data: {l:?}"
        );
        assert!(l.starts_with(&format!("{i}\t")), "line {i}: {l:?}");
    }
    // The data is still there, escaped.
    assert!(
        lines[0].contains("9") && lines[0].contains("[1m"),
        "{lines:?}"
    );
    assert!(lines[2].contains("fake"), "{lines:?}");
    // Sample 6's `.cls` is no integer: no label is printed for it, and the
    // warning quotes its bytes escaped.
    assert_eq!(lines[6].split('\t').nth(2), Some("-"), "{lines:?}");
    let err = o.stderr_text();
    assert!(
        err.contains("sample 6") && err.contains("owned"),
        "{}",
        o.describe()
    );
    assert!(raw_controls(&err, false).is_empty(), "{err:?}");
}

#[test]
fn stat_prints_no_raw_escape_from_the_data() {
    let t = tempfile::tempdir().unwrap();
    let ds = evil_dataset(t.path());
    let o = bale_bounded(&["stat".as_ref(), ds.as_os_str()]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(succeeds(&o), "{}", o.describe());
    for text in [&out, &o.stderr_text()] {
        let bad: Vec<char> = text
            .chars()
            .filter(|&c| {
                c == '\x1b' || c == '\r' || c == '\x07' || ('\u{80}'..='\u{9f}').contains(&c)
            })
            .collect();
        assert!(
            bad.is_empty(),
            "raw control characters {bad:?} in stat's output: {}",
            o.describe()
        );
    }
    // The class names are shown, escaped, and did not forge lines: no line
    // starts with the text after a class name's newline.
    assert!(out.contains("[31mat"), "{out}");
    assert!(
        !out.lines().any(|l| l.starts_with("fake")),
        "a class name's newline forged a line: {out}"
    );
}

#[test]
fn ls_checks_the_label_it_prints() {
    let t = tempfile::tempdir().unwrap();
    let ds = t.path().join("ds");
    crate::verify::make_dataset(&ds, Compression::None, false);
    let m = Manifest::read(&ds).unwrap();
    // Sample dog/0005 (shard 1): its `.cls` "1" becomes "0", a valid but false label.
    let idx = ShardIndex::open(ds.join(&m.shards[1].index)).unwrap();
    let i = idx.find("dog/0005").unwrap();
    let cls = idx.members(i).find(|m| m.ext == "cls").unwrap();
    let shard = ds.join(&m.shards[1].file);
    let mut b = fs::read(&shard).unwrap();
    assert_eq!(b[cls.offset as usize], b'1');
    b[cls.offset as usize] = b'0';
    fs::write(&shard, b).unwrap();
    let o = bale_bounded(&["ls".as_ref(), ds.as_os_str()]);
    let err = o.stderr_text();
    assert!(
        fails(&o) && err.contains("dog/0005") && err.contains("checksum"),
        "bale ls should refuse the damaged label of dog/0005: {}",
        o.describe()
    );
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("dog/0005\tcat"),
        "the false label was printed: {}",
        o.describe()
    );
}

/// Writes the test images and their damaged copies into `dir` with Pillow;
/// returns every file name with Pillow's verdict (`true`: `load()` raised).
fn damaged_images(dir: &Path) -> BTreeMap<String, bool> {
    let out = run_python(
        r#"
import io, json, os, sys
import numpy as np
from PIL import Image
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(7)
w, h = 320, 240
x = np.linspace(0, 255, w)[None, :, None]
y = np.linspace(0, 255, h)[:, None, None]
base = np.concatenate([x + 0 * y, y + 0 * x, (x + y) / 2 + 0 * x], axis=2)
pix = np.clip(base + rng.normal(0, 25, (h, w, 3)), 0, 255).astype(np.uint8)
img = Image.fromarray(pix, "RGB")
originals = {}
for name, kw in [("jpeg_base", dict(format="JPEG", quality=90)),
                 ("jpeg_prog", dict(format="JPEG", quality=90, progressive=True)),
                 ("png", dict(format="PNG"))]:
    b = io.BytesIO(); img.save(b, **kw); originals[name] = b.getvalue()

def flip(b, at, mask=0xFF):
    b = bytearray(b); b[at] ^= mask; return bytes(b)

def find(b, marker):
    return b.index(marker)

files = {}
for name, b in originals.items():
    ext = "png" if name == "png" else "jpg"
    n = len(b)
    v = {"ok": b, "cut2000": b[:2000], "cut25": b[: n // 4], "cut50": b[: n // 2],
         "cut75": b[: 3 * n // 4], "cut90": b[: 9 * n // 10], "miss1": b[:-1], "miss2": b[:-2],
         "zerotail30": b[: 7 * n // 10] + bytes(n - 7 * n // 10),
         "zerotail5": b[: 95 * n // 100] + bytes(n - 95 * n // 100),
         "midflip": flip(flip(flip(b, n // 2), n // 2 + 7), n // 2 + 31),
         "lateflip": flip(b, n - 200)}
    if ext == "jpg":
        sof = b.find(b"\xff\xc2") if "prog" in name else b.find(b"\xff\xc0")
        sos = find(b, b"\xff\xda")
        dht = find(b, b"\xff\xc4")
        v["sof_precision"] = flip(b, sof + 4, 0x0F)
        v["sof_components"] = flip(b, sof + 9, 0x07)
        v["sof_width_zero"] = b[: sof + 7] + b"\x00\x00" + b[sof + 9 :]
        v["dht_flip"] = flip(b, dht + 6, 0xFF)
        v["sos_gone"] = flip(b, sos + 1, 0x01)
        v["soi_flip"] = flip(b, 1, 0x10)
        v["ecs_flip"] = flip(flip(b, sos + 40), sos + 41)
        v["eoi_flip"] = flip(b, n - 1, 0x01)
    else:
        v["ihdr_flip"] = flip(b, 18, 0x01)
        v["ihdr_crc"] = flip(b, 30, 0x01)
        idat = find(b, b"IDAT")
        v["idat_start"] = flip(b, idat + 6, 0x55)
        v["iend_gone"] = b[:-12]
        v["sig_flip"] = flip(b, 3, 0x20)
    for k, data in v.items():
        fn = f"{name}_{k}.{ext}"
        with open(os.path.join(d, fn), "wb") as f:
            f.write(data)
        try:
            Image.open(io.BytesIO(data)).load()
            files[fn] = False
        except Exception:
            files[fn] = True
print(json.dumps(files))
"#,
        &[dir.as_os_str()],
    )
    .unwrap();
    serde_json::from_str::<BTreeMap<String, bool>>(&out).unwrap()
}

#[test]
fn damaged_images_pillow_refuses_are_refused_by_the_image_stage_and_verify_decode() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    let imgs = input.join("img");
    let verdict = damaged_images(&imgs);
    let refused: BTreeSet<&String> = verdict
        .iter()
        .filter(|(_, r)| **r)
        .map(|(f, _)| f)
        .collect();
    for ok in ["jpeg_base_ok.jpg", "jpeg_prog_ok.jpg", "png_ok.png"] {
        assert_eq!(
            verdict.get(ok),
            Some(&false),
            "Pillow loads the original {ok}"
        );
    }
    assert!(
        refused.len() >= 15,
        "Pillow refuses too few of the damaged images to mean much: {verdict:?}"
    );

    // --on-error fail: each file Pillow refuses, packed alone, stops the pack.
    let fail_cases: Vec<&String> = refused.iter().copied().collect();
    let failures: Vec<String> = std::thread::scope(|s| {
        let chunks: Vec<Vec<&String>> = fail_cases
            .chunks(fail_cases.len().div_ceil(2))
            .map(<[_]>::to_vec)
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                let root = t.path().to_path_buf();
                let imgs = imgs.clone();
                s.spawn(move || {
                    let mut bad = Vec::new();
                    for f in chunk {
                        let dir = root.join(format!("alone-{f}"));
                        fs::create_dir_all(dir.join("x")).unwrap();
                        fs::copy(imgs.join(f), dir.join("x").join(f)).unwrap();
                        let out = root.join(format!("out-{f}"));
                        let o = bale_bounded(&[
                            "pack".as_ref(),
                            "-q".as_ref(),
                            "--resize".as_ref(),
                            "shorter:64".as_ref(),
                            "--on-error".as_ref(),
                            "fail".as_ref(),
                            dir.as_os_str(),
                            "-o".as_ref(),
                            out.as_os_str(),
                        ]);
                        if !(fails(&o) && o.stderr_text().contains(f.as_str()))
                            || out.join("bale.json").exists()
                        {
                            bad.push(format!("{f}: {}", o.describe()));
                        }
                    }
                    bad
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    assert!(
        failures.is_empty(),
        "pack --resize --on-error fail accepted images Pillow refuses:\n{}",
        failures.join("\n")
    );

    // --on-error skip: all of them at once; every one Pillow refuses is listed.
    let out = t.path().join("skipped");
    let o = bale_bounded(&[
        "pack".as_ref(),
        "--json".as_ref(),
        "--resize".as_ref(),
        "shorter:64".as_ref(),
        "--on-error".as_ref(),
        "skip".as_ref(),
        input.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(succeeds(&o), "{}", o.describe());
    let summary: Value = serde_json::from_slice(&o.stdout).unwrap();
    let skipped: BTreeSet<String> = summary["skipped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            Path::new(s["path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let missed: Vec<&&String> = refused
        .iter()
        .filter(|f| !skipped.contains(f.as_str()))
        .collect();
    assert!(
        missed.is_empty(),
        "--on-error skip packed images Pillow refuses: {missed:?}\n{}",
        o.describe()
    );

    // Packed as they are, `verify --decode` reports each one.
    let plain = t.path().join("plain");
    crate::common::pack_quiet(&input, &plain, &[]);
    let o = bale_bounded(&[
        "verify".as_ref(),
        "--decode".as_ref(),
        "--json".as_ref(),
        plain.as_os_str(),
    ]);
    assert_eq!(o.status.and_then(|s| s.code()), Some(1), "{}", o.describe());
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    let reported: BTreeSet<String> = report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| {
            let key = p["key"].as_str()?;
            let member = p["member"].as_str()?;
            Some(format!(
                "{}.{member}",
                key.strip_prefix("img/").unwrap_or(key)
            ))
        })
        .collect();
    let missed: Vec<&&String> = refused
        .iter()
        .filter(|f| !reported.contains(f.as_str()))
        .collect();
    assert!(
        missed.is_empty(),
        "verify --decode passed images Pillow refuses: {missed:?}\nreported: {reported:?}"
    );
}
