//! The on-disk format against the real tools (issue 2, "Compatibility"):
//! shards written by `bale_format` list and extract with GNU tar, iterate
//! with Python's `webdataset` and `tarfile`, and `.tar.zst` shards decompress
//! with the `zstd` CLI into the same tar, one independently decodable frame
//! per sample. The other way round, tars made by GNU tar (gnu, pax, ustar and
//! v7 formats), Python's `tarfile` (GNU and PAX) and webdataset's `TarWriter`
//! read with `SampleStream` into exactly the members Python's `tarfile` sees.

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use bale_format::{
    Compression, Member, SampleStream, ShardEntry, ShardFileWriter, ShardIndex, index_file_name,
    shard_file_name,
};
use bale_tests::{extract_zstd_dict, gnu_tar, run_python, zstd_cli};

/// A sample as written: key and `(ext, data)` members.
type Sample = (String, Vec<(String, Vec<u8>)>);

/// Several samples: multi-member, a name over 100 bytes (pax path), an empty
/// member, binary data with every byte value, sizes on and off block
/// boundaries, a non-ASCII key, an extension with a dot. Extensions are
/// lowercase, as webdataset lowercases them.
fn samples() -> Vec<Sample> {
    let binary: Vec<u8> = (0..=255u8).cycle().take(3 * 256 + 7).collect();
    let long_key = format!(
        "n01440764/{}/{}",
        "a_rather_long_directory_name".repeat(3),
        "x".repeat(40)
    );
    assert!(long_key.len() + 4 > 100);
    let s = |key: &str, members: Vec<(&str, Vec<u8>)>| -> Sample {
        (
            key.to_owned(),
            members
                .into_iter()
                .map(|(e, d)| (e.to_owned(), d))
                .collect(),
        )
    };
    vec![
        s(
            "n01440764/img_0001",
            vec![
                ("jpg", [&b"\xff\xd8\xff\xe0"[..], &binary].concat()),
                ("cls", b"0".to_vec()),
                ("json", br#"{"w": 3, "h": 2}"#.to_vec()),
            ],
        ),
        s(
            &long_key,
            vec![("png", binary.clone()), ("txt", Vec::new())],
        ),
        s(
            "n01443537/img_0002",
            vec![("jpg", vec![0u8; 512]), ("cls", b"1".to_vec())],
        ),
        s(
            "n01443537/café_0003",
            vec![
                ("seg.png", binary[..513].to_vec()),
                ("txt", b"a caption\nwith two lines\n".to_vec()),
            ],
        ),
        s("last", vec![("bin", vec![0xff; 1])]),
    ]
}

/// The member names in shard order: `<key>.<ext>`.
fn member_names(samples: &[Sample]) -> Vec<(String, Vec<u8>)> {
    samples
        .iter()
        .flat_map(|(k, ms)| ms.iter().map(move |(e, d)| (format!("{k}.{e}"), d.clone())))
        .collect()
}

/// Writes `samples` into `dir` as shard 0 with its index.
fn write_shard(dir: &Path, compression: Compression, samples: &[Sample]) -> (PathBuf, ShardEntry) {
    let name = shard_file_name("shard", 0, compression);
    let mut w = ShardFileWriter::create(dir, &name, compression, 0).unwrap();
    for (key, members) in samples {
        let members: Vec<Member<'_>> = members
            .iter()
            .map(|(ext, data)| Member { ext, data })
            .collect();
        w.writer().write_sample(key, &members).unwrap();
    }
    let entry = w.finish().unwrap();
    assert_eq!(entry.index, index_file_name(&name));
    (dir.join(name), entry)
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs a tool; it must succeed and print nothing on stderr (no warnings).
fn run_clean(cmd: &mut Command) -> Vec<u8> {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(o.status.success(), "{cmd:?} failed\n{}", show(&o));
    assert!(o.stderr.is_empty(), "{cmd:?} warned\n{}", show(&o));
    o.stdout
}

fn os(p: &Path) -> &OsStr {
    p.as_os_str()
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn gnu_tar_lists_and_extracts_our_shards() {
    let dir = tempfile::tempdir().unwrap();
    let samples = samples();
    let (shard, _) = write_shard(dir.path(), Compression::None, &samples);
    let want = member_names(&samples);

    let listing = run_clean(
        Command::new(gnu_tar())
            .args(["--quoting-style=literal", "--numeric-owner", "-tvf"])
            .arg(&shard)
            .env("TZ", "UTC"),
    );
    let listing = String::from_utf8(listing).unwrap();
    let lines: Vec<&str> = listing.lines().collect();
    assert_eq!(lines.len(), want.len(), "{listing}");
    for (line, (name, data)) in lines.iter().zip(&want) {
        // "-rw-r--r-- 0/0   1 1970-01-01 00:00 name": five fields, then the name.
        let mut rest = *line;
        let mut fields = Vec::new();
        for _ in 0..5 {
            rest = rest.trim_start();
            let end = rest.find(' ').unwrap_or(rest.len());
            fields.push(&rest[..end]);
            rest = &rest[end..];
        }
        let listed_name = rest.strip_prefix(' ').unwrap_or(rest);
        assert_eq!(
            fields,
            [
                "-rw-r--r--",
                "0/0",
                &data.len().to_string(),
                "1970-01-01",
                "00:00"
            ],
            "{line}"
        );
        assert_eq!(listed_name, name, "{line}");
    }

    let out = dir.path().join("x");
    fs::create_dir(&out).unwrap();
    run_clean(
        Command::new(gnu_tar())
            .arg("-xf")
            .arg(&shard)
            .arg("-C")
            .arg(&out),
    );
    for (name, data) in &want {
        let got = fs::read(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(&got, data, "{name}");
    }
    // Nothing else was extracted than our members (and their directories).
    let files = walk(&out);
    assert_eq!(files.len(), want.len(), "{files:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn zstd_cli_decompresses_to_the_plain_tar_frame_by_frame() {
    let dir = tempfile::tempdir().unwrap();
    let samples = samples();
    let plain_dir = dir.path().join("plain");
    let zst_dir = dir.path().join("zst");
    fs::create_dir_all(&plain_dir).unwrap();
    fs::create_dir_all(&zst_dir).unwrap();
    let (plain, _) = write_shard(&plain_dir, Compression::None, &samples);
    let (zst, entry) = write_shard(&zst_dir, Compression::Zstd, &samples);
    let plain = fs::read(plain).unwrap();
    // The dictionary, written to a file the way docs/format.md says.
    let dict = dir.path().join("dict");
    extract_zstd_dict(&zst, &dict);
    let index = ShardIndex::open(zst_dir.join(&entry.index)).unwrap();
    assert_eq!(fs::read(&dict).unwrap(), index.zstd_dict());
    assert!(!index.zstd_dict().is_empty());
    // `zstd -D dict -q <flag> <file>`.
    let with_dict = |flag: &str, file: &Path| -> Command {
        let mut c = Command::new(zstd_cli());
        c.arg("-D").arg(&dict).args(["-q", flag]).arg(file);
        c
    };

    run_clean(&mut with_dict("-t", &zst));
    let decoded = run_clean(&mut with_dict("-dc", &zst));
    assert!(
        decoded == plain,
        "zstd -D dict -d of the .tar.zst differs from the plain tar"
    );
    // Without the dictionary, zstd refuses the frames rather than decoding them wrong.
    let bare = Command::new(zstd_cli())
        .args(["-q", "-d", "-c"])
        .arg(&zst)
        .output()
        .unwrap();
    assert!(!bare.status.success() && bare.stdout.len() < plain.len());

    // zstd -d | tar t lists our names.
    let mut unzstd = with_dict("-dc", &zst)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let tar = Command::new(gnu_tar())
        .args(["--quoting-style=literal", "-tf", "-"])
        .stdin(unzstd.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(unzstd.wait().unwrap().success());
    assert!(
        tar.status.success() && tar.stderr.is_empty(),
        "{}",
        show(&tar)
    );
    let names: Vec<String> = String::from_utf8(tar.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let want: Vec<String> = member_names(&samples).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, want);

    // Each sample's frame, cut out at the index's file_offset/file_len, is a
    // complete zstd stream on its own that decodes (with the shard's
    // dictionary) to the sample's tar bytes.
    assert_eq!(index.len(), samples.len());
    let bytes = fs::read(&zst).unwrap();
    let mut end = 0;
    for i in 0..index.len() {
        let e = index.sample(i);
        let slice = zst_dir.join(format!("frame-{i}.zst"));
        fs::write(
            &slice,
            &bytes[e.file_offset as usize..(e.file_offset + e.file_len) as usize],
        )
        .unwrap();
        let got = run_clean(&mut with_dict("-dc", &slice));
        let want = &plain[e.tar_offset as usize..(e.tar_offset + e.tar_len) as usize];
        assert!(got == want, "frame of sample {i} ({})", index.key(i));
        end = e.file_offset + e.file_len;
    }
    // What follows the last sample is one more frame: the end-of-archive blocks.
    let slice = zst_dir.join("frame-end.zst");
    fs::write(&slice, &bytes[end as usize..]).unwrap();
    let got = run_clean(&mut with_dict("-dc", &slice));
    assert_eq!(got, vec![0u8; 1024]);
}

/// Prints `[[name, hex], ...]` for the regular files of a tar whose base name
/// holds a dot not at its start (the members WebDataset groups), per tarfile.
const TARFILE_MEMBERS: &str = r#"
import json, sys, tarfile
out = []
with tarfile.open(sys.argv[1]) as t:
    for m in t:
        base = m.name.rsplit("/", 1)[-1]
        if m.isfile() and "." in base and not base.startswith("."):
            out.append([m.name, t.extractfile(m).read().hex()])
print(json.dumps(out))
"#;

fn tarfile_members(tar: &Path) -> Vec<(String, String)> {
    let out = run_python(TARFILE_MEMBERS, &[os(tar)]).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn stream_members(tar: &Path) -> Vec<(String, String)> {
    let bytes = fs::read(tar).unwrap();
    let mut out = Vec::new();
    for s in SampleStream::new(&bytes[..], tar) {
        let s = s.unwrap_or_else(|e| panic!("SampleStream over {}: {e}", tar.display()));
        for m in s.members {
            out.push((format!("{}.{}", s.key, m.ext), hex(&m.data)));
        }
    }
    out
}

#[test]
fn python_webdataset_and_tarfile_read_our_shards() {
    let dir = tempfile::tempdir().unwrap();
    let samples = samples();
    let (shard, _) = write_shard(dir.path(), Compression::None, &samples);

    let script = r#"
import json, sys, webdataset as wds
out = []
for s in wds.WebDataset(sys.argv[1], shardshuffle=False):
    out.append([s["__key__"], {k: v.hex() for k, v in s.items() if not k.startswith("__")}])
print(json.dumps(out))
"#;
    let out = run_python(script, &[os(&shard)]).unwrap();
    let got: Vec<(String, std::collections::BTreeMap<String, String>)> =
        serde_json::from_str(&out).unwrap();
    let want: Vec<(String, std::collections::BTreeMap<String, String>)> = samples
        .iter()
        .map(|(k, ms)| {
            (
                k.clone(),
                ms.iter().map(|(e, d)| (e.clone(), hex(d))).collect(),
            )
        })
        .collect();
    assert_eq!(got, want);

    let want_members: Vec<(String, String)> = member_names(&samples)
        .into_iter()
        .map(|(n, d)| (n, hex(&d)))
        .collect();
    assert_eq!(tarfile_members(&shard), want_members);
    // tarfile sees exactly our members: no extra entries of any kind.
    let all = run_python(
        "import sys, tarfile; print(len(tarfile.open(sys.argv[1]).getmembers()))",
        &[os(&shard)],
    )
    .unwrap();
    assert_eq!(all.trim(), want_members.len().to_string());
}

/// A tree of loose files for GNU tar: long names, an empty file, a file with
/// no extension and a symlink (neither a sample member), nested directories.
fn loose_tree(root: &Path, long_names: bool) {
    let binary: Vec<u8> = (0..=255u8).cycle().take(1500).collect();
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("d/n01/0001.jpg".into(), binary.clone()),
        ("d/n01/0001.cls".into(), b"7".to_vec()),
        ("d/n01/0002.seg.png".into(), binary[..512].to_vec()),
        ("d/n01/0002.txt".into(), Vec::new()),
        ("d/README".into(), b"not a member".to_vec()),
    ];
    if long_names {
        let deep = format!("d/{}/{}", "p".repeat(70), "q".repeat(50));
        files.push((format!("{deep}/0003.json"), b"{}".to_vec()));
        files.push((format!("{deep}/0003.bin"), binary[..700].to_vec()));
    }
    for (name, data) in files {
        let p = root.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }
    std::os::unix::fs::symlink("0001.cls", root.join("d/n01/0001.lnk")).unwrap();
}

#[test]
fn sample_stream_reads_tars_made_by_other_tools() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let mut tars = Vec::new();

    // GNU tar in each of its formats (ustar and v7 cannot hold the long names).
    for (format, long) in [
        ("gnu", true),
        ("pax", true),
        ("ustar", false),
        ("v7", false),
    ] {
        let tree = src.join(format);
        loose_tree(&tree, long);
        let tar = dir.path().join(format!("gnu-{format}.tar"));
        run_clean(
            Command::new(gnu_tar())
                .arg(format!("--format={format}"))
                .args(["--sort=name", "-cf"])
                .arg(&tar)
                .arg("-C")
                .arg(&tree)
                .arg("d"),
        );
        tars.push(tar);
    }

    // Python tarfile (GNU and PAX formats) and webdataset's TarWriter.
    let script = r#"
import io, sys, tarfile, webdataset as wds
long = "k/" + "é" * 40 + "/" + "z" * 30
items = [("a/0001", {"jpg": bytes(range(256)) * 3, "cls": b"2"}),
         (long, {"json": b'{"x": 1}', "txt": b""}),
         ("a/0002", {"seg.png": b"\x89PNG" * 200})]
for fmt, name in [(tarfile.GNU_FORMAT, "py-gnu"), (tarfile.PAX_FORMAT, "py-pax")]:
    with tarfile.open(f"{sys.argv[1]}/{name}.tar", "w", format=fmt) as t:
        for key, members in items:
            for ext, data in members.items():
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
        d = tarfile.TarInfo("a/dir"); d.type = tarfile.DIRTYPE; t.addfile(d)
with wds.TarWriter(f"{sys.argv[1]}/wds.tar") as w:
    for key, members in items:
        w.write({"__key__": key, **members})
"#;
    run_python(script, &[os(dir.path())]).unwrap();
    for name in ["py-gnu", "py-pax", "wds"] {
        tars.push(dir.path().join(format!("{name}.tar")));
    }

    for tar in &tars {
        let want = tarfile_members(tar);
        assert!(want.len() >= 4, "{}: {want:?}", tar.display());
        assert_eq!(stream_members(tar), want, "{}", tar.display());
    }
    // The long names really are there (GNU long-name and pax records).
    let gnu = stream_members(&dir.path().join("gnu-gnu.tar"));
    assert!(
        gnu.iter()
            .any(|(n, _)| n.len() > 100 && n.ends_with("/0003.json"))
    );
    let wds = stream_members(&dir.path().join("wds.tar"));
    assert!(wds.iter().any(|(n, _)| n.starts_with("k/é")));

    // Samples group by key as WebDataset groups them.
    let bytes = fs::read(dir.path().join("py-pax.tar")).unwrap();
    let keys: Vec<(String, usize)> = SampleStream::new(&bytes[..], "py-pax.tar")
        .map(|s| s.map(|s| (s.key, s.members.len())))
        .collect::<Result<_, _>>()
        .unwrap();
    let long = format!("k/{}/{}", "é".repeat(40), "z".repeat(30));
    assert_eq!(
        keys,
        [
            ("a/0001".to_owned(), 2),
            (long, 2),
            ("a/0002".to_owned(), 1)
        ]
    );
}

#[test]
fn webdataset_tariterators_and_streaming_tarfile_read_our_shards() {
    // webdataset's lower-level tariterators API (what custom loaders build
    // on), and tarfile reading from a pipe in streaming mode ("r|"), as a
    // loader reading a shard over the network does.
    let dir = tempfile::tempdir().unwrap();
    let samples: Vec<Sample> = (0..20)
        .map(|i| {
            (
                format!("s{i:04}"),
                vec![
                    ("cls".to_owned(), i.to_string().into_bytes()),
                    ("npy".to_owned(), vec![i as u8; i * 61]),
                ],
            )
        })
        .collect();
    let (shard, _) = write_shard(dir.path(), Compression::None, &samples);
    let script = r#"
import json, sys
from webdataset import tariterators
out = []
for s in tariterators.tarfile_samples([{"url": sys.argv[1]}]):
    out.append([s["__key__"], s["cls"].decode(), len(s["npy"])])
print(json.dumps(out))
"#;
    let out = run_python(script, &[os(&shard)]).unwrap();
    let got: Vec<(String, String, usize)> = serde_json::from_str(&out).unwrap();
    let want: Vec<(String, String, usize)> = (0..20)
        .map(|i| (format!("s{i:04}"), i.to_string(), i * 61))
        .collect();
    assert_eq!(got, want);
    // Also fed through a pipe, as a streaming loader reads it.
    let mut child = Command::new(bale_tests::python())
        .args([
            "-c",
            "import sys, tarfile; print(sum(1 for m in tarfile.open(fileobj=sys.stdin.buffer, mode='r|') if m.isfile()))",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fs::read(&shard).unwrap())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "40");
}
