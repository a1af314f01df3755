//! `bale index` (issue 9): existing WebDataset tars written by GNU tar (gnu,
//! pax and ustar formats, long names), Python's `tarfile` (GNU and PAX) and
//! webdataset's `TarWriter` are indexed in place; random access afterwards
//! returns the bytes tar extracts; `bale verify` passes with and without
//! `--checksum`; wids opens the `--wids-json` index; compressed tars that
//! cannot be read at random are refused; split keys are refused, renamed or
//! regrouped (`--allow-split`, a scattered 1.1 index).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use bale_format::read::ShardReader;
use bale_format::{Manifest, ShardIndex, checksum, split_member_name};
use bale_reader::{Backing, Dataset};
use bale_tests::{bale_bin, gnu_tar, run_python, zstd_cli};

fn bale<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(bale_bin())
        .args(args)
        .output()
        .expect("run bale")
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", show(o));
}

fn tar<S: AsRef<OsStr>>(args: &[S]) {
    let o = Command::new(gnu_tar())
        .args(args)
        .output()
        .expect("run tar");
    ok(&o);
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// Deterministic member bytes of varied sizes (0 up to a few blocks).
fn bytes(i: usize, salt: usize) -> Vec<u8> {
    let n = (i * 733 + salt * 97) % 2600;
    (0..n)
        .map(|j| ((i * 31 + j * 7 + salt) % 251) as u8)
        .collect()
}

/// A tree of `n` samples under `root/d/`: `NNNN.jpg`, `NNNN.cls`, every third
/// with a `.json`, every fifth in a directory whose path is over 100 bytes.
fn tree(root: &Path, n: usize) {
    let long = format!("{}/{}", "l".repeat(60), "m".repeat(60));
    for i in 0..n {
        let dir = if i % 5 == 4 {
            root.join("d").join(&long)
        } else {
            root.join("d")
        };
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(format!("{i:04}.jpg")), bytes(i, 1)).unwrap();
        fs::write(dir.join(format!("{i:04}.cls")), (i % 7).to_string()).unwrap();
        if i % 3 == 0 {
            fs::write(dir.join(format!("{i:04}.json")), format!("{{\"i\": {i}}}")).unwrap();
        }
    }
}

/// A sample: its key and `(extension, bytes)` members.
type Sample = (String, Vec<(String, Vec<u8>)>);

/// Every sample of a dataset through the index: (key, [(ext, bytes)]), checksums checked when present.
fn samples(ds: &Path) -> Vec<Sample> {
    let m = Manifest::read(ds).unwrap();
    let mut out = Vec::new();
    for s in &m.shards {
        let r = ShardReader::open(
            Manifest::resolve(ds, &s.file),
            Manifest::resolve(ds, &s.index),
        )
        .unwrap();
        for i in 0..r.len() {
            let smp = r.read(i, true).unwrap();
            out.push((smp.key, smp.members));
        }
    }
    out
}

/// The regular files of an extracted tree whose base name has an extension: path -> bytes.
fn extracted(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap().flatten() {
            let ty = e.file_type().unwrap();
            if ty.is_dir() {
                stack.push(e.path());
            } else if ty.is_file() {
                let rel = e
                    .path()
                    .strip_prefix(root)
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned();
                if split_member_name(&rel).is_some() {
                    out.insert(rel, fs::read(e.path()).unwrap());
                }
            }
        }
    }
    out
}

/// Checks that random access through the dataset's indexes returns exactly
/// the members GNU tar extracts from its shards, shard by shard, and that
/// `bale get` agrees.
fn matches_extraction(ds: &Path, work: &Path) {
    let m = Manifest::read(ds).unwrap();
    for s in &m.shards {
        let shard = Manifest::resolve(ds, &s.file);
        let x = work.join("extracted");
        fs::create_dir_all(&x).unwrap();
        tar(&["-xf", p(&shard), "-C", p(&x)]);
        let want = extracted(&x);
        fs::remove_dir_all(&x).unwrap();
        let r = ShardReader::open(&shard, Manifest::resolve(ds, &s.index)).unwrap();
        let mut got = BTreeMap::new();
        for i in 0..r.len() {
            let smp = r.read(i, true).unwrap();
            for (ext, data) in smp.members {
                let name = format!("{}.{ext}", smp.key);
                assert!(
                    got.insert(name.clone(), data).is_none(),
                    "{name} twice in {}",
                    s.file
                );
            }
        }
        assert_eq!(
            got.len(),
            want.len(),
            "{}: index {:?}\ntar {:?}",
            s.file,
            got.keys(),
            want.keys()
        );
        for (name, data) in &want {
            assert_eq!(got.get(name), Some(data), "{}: {name}", s.file);
        }
    }
    // One member through the CLI too: the last sample's first member.
    let all = samples(ds);
    // By index: the tars of a test may share keys.
    let (_, members) = all.last().unwrap();
    let last = (all.len() - 1).to_string();
    let o = bale(&["get", p(ds), &last, "--index", "--ext", &members[0].0]);
    ok(&o);
    assert_eq!(o.stdout, members[0].1);
}

fn verify_passes(ds: &Path) {
    for level in [&[][..], &["--quick"][..]] {
        let mut args = vec!["verify", p(ds)];
        args.extend_from_slice(level);
        let o = bale(&args);
        assert_eq!(o.status.code(), Some(0), "verify {level:?}: {}", show(&o));
    }
}

/// Indexes `shards` into `ds` without and then with `--checksum`, checking
/// read-back, verify and what each mode records.
fn index_both_ways(shards: &[&Path], ds: &Path, work: &Path) {
    for with_sums in [false, true] {
        // A tar may repeat another's sample: the formats are under test, not the keys.
        let mut args: Vec<&str> = vec![
            "index",
            "-q",
            "--force",
            "--allow-duplicate-keys",
            "-o",
            p(ds),
        ];
        if with_sums {
            args.push("--checksum");
        }
        args.extend(shards.iter().map(|s| p(s)));
        ok(&bale(&args));
        let m = Manifest::read(ds).unwrap();
        assert_eq!(m.created_by.command, "index");
        for s in &m.shards {
            let idx = ShardIndex::open(Manifest::resolve(ds, &s.index)).unwrap();
            assert_eq!(idx.has_checksums(), with_sums);
            let file = fs::read(Manifest::resolve(ds, &s.file)).unwrap();
            assert_eq!(s.bytes, file.len() as u64);
            let want = with_sums.then(|| format!("{:016x}", checksum(&file)));
            assert_eq!(s.shard_xxh3, want);
        }
        matches_extraction(ds, work);
        verify_passes(ds);
    }
}

#[test]
fn gnu_tar_formats_with_long_names_index_read_back_and_verify() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src, 25);
    for format in ["gnu", "pax", "ustar"] {
        let shards = t.path().join(format!("shards-{format}"));
        fs::create_dir_all(&shards).unwrap();
        let shard = shards.join("train-000000.tar");
        tar(&[
            "--sort=name",
            &format!("--format={format}"),
            "-cf",
            p(&shard),
            "-C",
            p(&src),
            "d",
        ]);
        // A one-sample tar: GNU tar pads it to a 10240-byte record, after its end blocks.
        let tiny = shards.join("train-000001.tar");
        tar(&[
            &format!("--format={format}"),
            "-cf",
            p(&tiny),
            "-C",
            p(&src),
            "d/0000.jpg",
        ]);
        let ds = t.path().join(format!("ds-{format}"));
        index_both_ways(&[&shard, &tiny], &ds, t.path());
        let m = Manifest::read(&ds).unwrap();
        assert_eq!(m.samples, 26, "{format}");
        assert_eq!(
            m.shards[0].file,
            format!("../shards-{format}/train-000000.tar")
        );
        for s in &m.shards {
            assert_eq!(s.bytes % 10240, 0, "{format}");
        }
        // Header (and, for pax, an extended header of 2 blocks), 1 block of data, 2 end blocks.
        let blocks = if format == "pax" { 6 } else { 4 };
        assert_eq!(
            (m.shards[1].tar_bytes, m.shards[1].bytes),
            (blocks * 512, 10240),
            "{format}"
        );
    }
}

#[test]
fn python_tarfile_gnu_and_pax_index_read_back_and_verify() {
    let t = tempfile::tempdir().unwrap();
    let shards = t.path().join("shards");
    fs::create_dir_all(&shards).unwrap();
    let script = r#"
import io, sys, tarfile
out = sys.argv[1]
for fmt, name in [(tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax")]:
    with tarfile.open(f"{out}/{name}.tar", "w", format=fmt) as tf:
        d = tarfile.TarInfo("s")
        d.type = tarfile.DIRTYPE
        tf.addfile(d)
        for i in range(30):
            key = f"s/{i:04d}" if i % 4 else f"s/{'long' * 30}/{i:04d}"
            if i == 7:
                key = "s/ünïcödé"
            for ext in ["jpg", "bin", "seg.png"][: 1 + i % 3]:
                data = bytes((i * 13 + j) % 256 for j in range((i * 211 + len(ext)) % 1500))
                info = tarfile.TarInfo(f"{key}.{ext}")
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
        readme = tarfile.TarInfo("README")
        readme.size = 3
        tf.addfile(readme, io.BytesIO(b"hi\n"))
"#;
    run_python(script, &[shards.as_os_str()]).unwrap();
    let gnu = shards.join("gnu.tar");
    let pax = shards.join("pax.tar");
    let ds = t.path().join("ds");
    index_both_ways(&[&gnu, &pax], &ds, t.path());
    let m = Manifest::read(&ds).unwrap();
    assert_eq!(m.samples, 60);
    assert_eq!(m.fields["seg.png"].count, 20);
    let keys: Vec<String> = samples(&ds).into_iter().map(|s| s.0).collect();
    assert!(keys.contains(&"s/ünïcödé".to_owned()));
    assert!(keys.contains(&format!("s/{}/0004", "long".repeat(30))));
}

/// Two shards written by webdataset's TarWriter: samples `k0000` ... with `bin`, `cls` and `json`.
fn webdataset_shards(dir: &Path, per_shard: usize) -> Vec<PathBuf> {
    fs::create_dir_all(dir).unwrap();
    let script = r#"
import sys
import webdataset as wds
out, per = sys.argv[1], int(sys.argv[2])
for s in range(2):
    with wds.TarWriter(f"{out}/wds-{s:06d}.tar") as w:
        for j in range(per):
            i = s * per + j
            w.write({
                "__key__": f"k{i:04d}",
                "bin": bytes((i * 7 + k) % 256 for k in range((i * 397) % 3000)),
                "cls": str(i % 10),
                "json": {"i": i},
            })
"#;
    run_python(
        script,
        &[dir.as_os_str(), OsStr::new(&per_shard.to_string())],
    )
    .unwrap();
    (0..2)
        .map(|s| dir.join(format!("wds-{s:06}.tar")))
        .collect()
}

#[test]
fn webdataset_tarwriter_shards_and_wids_reads_the_json() {
    let t = tempfile::tempdir().unwrap();
    let shards = webdataset_shards(&t.path().join("shards"), 12);
    let ds = t.path().join("ds");
    index_both_ways(&[&shards[0], &shards[1]], &ds, t.path());

    // The wids index, through a brace pattern, next to (not in) the dataset.
    let pattern = format!("{}/wds-{{000000..000001}}.tar", p(&t.path().join("shards")));
    let wids_json = t.path().join("meta/wids.json");
    ok(&bale(&[
        "index",
        "-q",
        "--force",
        "-o",
        p(&ds),
        "--wids-json",
        p(&wids_json),
        &pattern,
    ]));
    let doc: serde_json::Value = serde_json::from_slice(&fs::read(&wids_json).unwrap()).unwrap();
    assert_eq!(doc["__kind__"], "wids-shard-index-v1");
    assert_eq!(doc["wids_version"], 1);
    assert_eq!(doc["shardlist"][1]["url"], "../shards/wds-000001.tar");
    assert_eq!(doc["shardlist"][1]["nsamples"], 12);

    // wids imports torch at import time (torch.distributed, and Dataset as a
    // generic base class); stubs stand in: ShardListDataset does not otherwise use torch.
    let script = r#"
import json, sys, types, typing
T = typing.TypeVar("T")
names = ["torch", "torch.distributed", "torch.utils", "torch.utils.data"]
stubs = {name: types.ModuleType(name) for name in names}
stubs["torch.distributed"].is_initialized = lambda: False
class Dataset(typing.Generic[T]):
    pass
class Sampler(typing.Generic[T]):
    pass
stubs["torch.utils.data"].Dataset = Dataset
stubs["torch.utils.data"].Sampler = Sampler
stubs["torch"].distributed = stubs["torch.distributed"]
stubs["torch"].utils = stubs["torch.utils"]
stubs["torch.utils"].data = stubs["torch.utils.data"]
sys.modules.update(stubs)
import wids
ds = wids.ShardListDataset(sys.argv[1], cache_dir=sys.argv[2], transformations=[])
out = {"len": len(ds), "samples": []}
for i in [0, len(ds) - 1]:
    s = ds[i]
    out["samples"].append({
        "key": s["__key__"],
        "members": {k[1:]: v.getvalue().hex() for k, v in s.items() if k.startswith(".")},
    })
print(json.dumps(out))
"#;
    let cache = t.path().join("wids-cache");
    let got = run_python(script, &[wids_json.as_os_str(), cache.as_os_str()]).unwrap();
    let got: serde_json::Value = serde_json::from_str(got.lines().last().unwrap()).unwrap();
    let all = samples(&ds);
    assert_eq!(got["len"], all.len());
    for (g, want) in got["samples"]
        .as_array()
        .unwrap()
        .iter()
        .zip([&all[0], &all[all.len() - 1]])
    {
        assert_eq!(g["key"], want.0);
        let members = g["members"].as_object().unwrap();
        assert_eq!(members.len(), want.1.len());
        for (ext, data) in &want.1 {
            let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(members[ext.as_str()], hex, "{} {ext}", want.0);
        }
    }
}

#[test]
fn per_sample_zstd_is_indexed_and_other_compression_refused() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src, 12);
    let packed = t.path().join("packed");
    ok(&bale(&[
        "pack",
        "-q",
        "--labels",
        "none",
        "--shard-size",
        "20KiB",
        "--compress",
        "zstd",
        "-o",
        p(&packed),
        p(&src.join("d")),
    ]));
    // Copies of the shards alone in a directory: `bale verify` would list the
    // pack's own indexes beside them as unknown files.
    let zdir = t.path().join("zst");
    fs::create_dir_all(&zdir).unwrap();
    let zst: Vec<PathBuf> = Manifest::read(&packed)
        .unwrap()
        .shards
        .iter()
        .map(|s| {
            let to = zdir.join(&s.file);
            fs::copy(packed.join(&s.file), &to).unwrap();
            to
        })
        .collect();
    let ds = t.path().join("ds");
    let mut args = vec!["index", "-o", p(&ds)];
    args.extend(zst.iter().map(|z| p(z)));
    ok(&bale(&args));
    assert_eq!(samples(&ds), samples(&packed));
    verify_passes(&ds);
    // The same indexes bale pack wrote, byte for byte, when checksums are read.
    args.extend(["--force", "--checksum"]);
    ok(&bale(&args));
    let m = Manifest::read(&ds).unwrap();
    let mp = Manifest::read(&packed).unwrap();
    for (a, b) in m.shards.iter().zip(&mp.shards) {
        assert_eq!(
            fs::read(ds.join(&a.index)).unwrap(),
            fs::read(packed.join(&b.index)).unwrap()
        );
    }

    // A plain tar of the same tree, then compressed as one stream.
    let plain = t.path().join("plain.tar");
    tar(&["--sort=name", "-cf", p(&plain), "-C", p(&src), "d"]);
    let single = t.path().join("single.tar.zst");
    let o = Command::new(zstd_cli())
        .args(["-q", "-f", p(&plain), "-o", p(&single)])
        .output()
        .unwrap();
    ok(&o);
    let gz = t.path().join("plain.tar.gz");
    tar(&["--sort=name", "-czf", p(&gz), "-C", p(&src), "d"]);
    for (file, what) in [(&single, "single-frame zstd"), (&gz, "gzip-compressed")] {
        let out = t.path().join("refused");
        let o = bale(&["index", "-o", p(&out), p(file)]);
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(what) && err.contains("cannot be read at random"),
            "{err}"
        );
        assert!(
            err.contains("bale convert") && err.contains("bale pack"),
            "{err}"
        );
        assert!(err.contains(p(file)), "{err}");
        assert!(!out.join("bale.json").exists());
    }
}

#[test]
fn split_keys_are_refused_naming_both_places_or_renamed() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    for (name, data) in [("a.jpg", "A1"), ("b.jpg", "B1"), ("a.cls", "2")] {
        fs::write(src.join(name), data).unwrap();
    }
    let shard = t.path().join("split.tar");
    tar(&["-cf", p(&shard), "-C", p(&src), "a.jpg", "b.jpg", "a.cls"]);
    let ds = t.path().join("ds");

    let o = bale(&["index", "-o", p(&ds), p(&shard)]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(p(&shard)) && err.contains("offset 0") && err.contains("offset 2048"),
        "{err}"
    );
    assert!(
        err.contains("not contiguous") && err.contains("--rename-split"),
        "{err}"
    );
    assert!(!ds.join("bale.json").exists() && !ds.join("split.idx").exists());

    let o = bale(&[
        "index",
        "--allow-split",
        "--rename-split",
        "-o",
        p(&ds),
        p(&shard),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot be used with"),
        "{}",
        show(&o)
    );

    let o = bale(&["index", "--rename-split", "-o", p(&ds), p(&shard)]);
    ok(&o);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("renamed"),
        "{}",
        show(&o)
    );
    let keys: Vec<String> = samples(&ds).into_iter().map(|s| s.0).collect();
    assert_eq!(keys, ["a", "b", "a~2"]);
    let o = bale(&["get", p(&ds), "a~2", "--ext", "cls"]);
    ok(&o);
    assert_eq!(o.stdout, b"2");
}

/// The index file of `shard` in `ds`, as bytes.
fn index_bytes_of(ds: &Path, stem: &str) -> Vec<u8> {
    fs::read(ds.join(format!("{stem}.idx"))).unwrap()
}

#[test]
fn allow_split_regroups_split_keys_into_a_scattered_index() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    fs::create_dir_all(&src).unwrap();
    let a_jpg = bytes(3, 5);
    fs::write(src.join("a.jpg"), &a_jpg).unwrap();
    fs::write(src.join("b.jpg"), bytes(4, 1)).unwrap();
    fs::write(src.join("b.cls"), "1").unwrap();
    fs::write(src.join("a.cls"), "7").unwrap();
    let shards = t.path().join("shards");
    fs::create_dir_all(&shards).unwrap();
    // GNU tar, in the order given: a, b, then a again with another extension.
    let split = shards.join("split.tar");
    tar(&[
        "-cf",
        p(&split),
        "-C",
        p(&src),
        "a.jpg",
        "b.jpg",
        "b.cls",
        "a.cls",
    ]);
    // Python tarfile (pax, a long name), two keys split, one of them twice.
    let script = r#"
import io, sys, tarfile
long = "p/" + "q" * 120
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as tf:
    for name, data in [("k1.jpg", b"J1" * 700), (long + ".jpg", b"L"), ("k1.txt", b"T1"),
                       ("k3.jpg", b"J3"), (long + ".cls", b"2"), ("k1.json", b"{}")]:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
"#;
    let py = shards.join("py.tar");
    run_python(script, &[py.as_os_str()]).unwrap();
    // A tar in sorted order: no split sample.
    let sorted = shards.join("sorted.tar");
    tar(&["--sort=name", "-cf", p(&sorted), "-C", p(&src), "."]);
    let long = format!("p/{}", "q".repeat(120));

    // The sorted tar's index without --allow-split, for comparison.
    let plain_ds = t.path().join("plain");
    ok(&bale(&["index", "-q", "-o", p(&plain_ds), p(&sorted)]));
    let ds = t.path().join("ds");
    for with_sums in [false, true] {
        // The three tars hold the same samples: their keys are shared on purpose.
        let mut args = vec![
            "index",
            "--allow-split",
            "--allow-duplicate-keys",
            "--json",
            "--force",
            "-o",
            p(&ds),
        ];
        if with_sums {
            args.push("--checksum");
        }
        args.extend([p(&split), p(&py), p(&sorted)]);
        let o = bale(&args);
        ok(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let scattered: Vec<bool> = (0..3)
            .map(|i| v["shards"][i]["scattered"].as_bool().unwrap())
            .collect();
        assert_eq!(scattered, [true, true, false], "{v}");
        assert_eq!(v["shards"][0]["regrouped"], 1, "{v}");
        assert_eq!(v["shards"][1]["regrouped"], 3, "{v}");
        assert_eq!(v["samples"], 2 + 3 + 2, "{v}");

        // Index versions: 1.1 where samples were regrouped, 1.0 (and the
        // very bytes `bale index` gives without --allow-split) elsewhere.
        for (stem, minor) in [("split", 1u8), ("py", 1), ("sorted", 0)] {
            let b = index_bytes_of(&ds, stem);
            assert_eq!(&b[8..12], &[1, 0, minor, 0], "{stem}");
            let idx = ShardIndex::open(ds.join(format!("{stem}.idx"))).unwrap();
            assert_eq!(idx.is_scattered(), minor == 1);
            assert_eq!(idx.has_checksums(), with_sums);
        }
        if !with_sums {
            assert_eq!(
                index_bytes_of(&ds, "sorted"),
                index_bytes_of(&plain_ds, "sorted")
            );
        }
        let m = Manifest::read(&ds).unwrap();
        assert_eq!(m.created_by.options["allow_split"], true);
        assert_eq!(m.shards[0].tar_bytes, 0);
        // Scattered indexes make it a format 1.1 dataset.
        assert_eq!(m.format_version, "1.1");
        assert_ne!(m.shards[2].tar_bytes, 0);

        // Samples in the order of first appearance, members in tar order.
        let all = samples(&ds);
        let shape: Vec<(&str, Vec<&str>)> = all
            .iter()
            .map(|(k, ms)| (k.as_str(), ms.iter().map(|m| m.0.as_str()).collect()))
            .collect();
        assert_eq!(
            shape,
            [
                ("a", vec!["jpg", "cls"]),
                ("b", vec!["jpg", "cls"]),
                ("k1", vec!["jpg", "txt", "json"]),
                (long.as_str(), vec!["jpg", "cls"]),
                ("k3", vec!["jpg"]),
                ("a", vec!["cls", "jpg"]),
                ("b", vec!["cls", "jpg"]),
            ]
        );
        assert_eq!(all[0].1[0].1, a_jpg);
        assert_eq!(all[2].1[0].1, b"J1".repeat(700));
        // Every member is the bytes GNU tar extracts; `bale get` agrees.
        matches_extraction(&ds, t.path());
        verify_passes(&ds);

        // "a" is a key of split.tar and of sorted.tar: ambiguous by key.
        let o = bale(&["get", p(&ds), "a", "--key", "--ext", "cls"]);
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("indices 0, 5"),
            "{}",
            show(&o)
        );
        let o = bale(&["get", p(&ds), "0", "--index", "--ext", "cls"]);
        ok(&o);
        assert_eq!(o.stdout, b"7");
        let o = bale(&["get", p(&ds), "k1", "--key", "--ext", "json"]);
        ok(&o);
        assert_eq!(o.stdout, b"{}");
        let o = bale(&["ls", p(&ds)]);
        ok(&o);
        let ls = String::from_utf8_lossy(&o.stdout);
        let first = ls.lines().next().unwrap();
        assert_eq!(first, format!("0\ta\t7\tjpg:{},cls:1", a_jpg.len()), "{ls}");
        // `bale stat`: a regrouped shard has no tar stream to size ("-"),
        // the untouched one shows its tar length.
        let o = bale(&["stat", p(&ds), "--all"]);
        ok(&o);
        let stat = String::from_utf8_lossy(&o.stdout);
        let row = |stem: &str| {
            stat.lines()
                .find(|l| l.contains(&format!("{stem}.tar")))
                .unwrap_or_else(|| panic!("no {stem}.tar row in\n{stat}"))
                .split_whitespace()
                .collect::<Vec<_>>()
        };
        assert_eq!(row("split")[row("split").len() - 2], "-", "{stat}");
        assert_ne!(row("sorted")[row("sorted").len() - 2], "-", "{stat}");

        // The reader, mapped and with positioned reads, checksums checked when present.
        for backing in [Backing::Mmap, Backing::Pread] {
            let d = Dataset::options()
                .backing(backing)
                .verify_on_read(true)
                .open(&ds)
                .unwrap();
            assert_eq!(d.len(), 7);
            let s = d.get(0).unwrap();
            assert_eq!(s.key(), "a");
            let fields: Vec<(&str, &[u8])> = s.fields().collect();
            assert_eq!(fields, [("jpg", &a_jpg[..]), ("cls", &b"7"[..])]);
            let s = d.get_by_key(&long).unwrap();
            assert_eq!(s.field("jpg"), Some(&b"L"[..]));
            assert_eq!(s.field("cls"), Some(&b"2"[..]));
            assert_eq!(s.label(), Some(2));
            assert_eq!(d.get_by_key("k3").unwrap().index(), 4);
        }
    }

    // `bale verify --checksum`-indexed shards: a changed member byte is found.
    let mut b = fs::read(&split).unwrap();
    let idx = ShardIndex::open(ds.join("split.idx")).unwrap();
    let cls = idx.members(0).nth(1).unwrap();
    assert_eq!(cls.ext, "cls");
    b[cls.offset as usize] = b'8';
    fs::write(&split, &b).unwrap();
    let o = bale(&["verify", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("do not match the index checksum"),
        "{}",
        show(&o)
    );
    // A tar rewritten with other names (same sizes, same length): the quick
    // check compares its headers with the index.
    fs::rename(src.join("a.cls"), src.join("a.txt")).unwrap();
    tar(&[
        "-cf",
        p(&split),
        "-C",
        p(&src),
        "a.jpg",
        "b.jpg",
        "b.cls",
        "a.txt",
    ]);
    assert_eq!(fs::read(&split).unwrap().len(), b.len());
    let o = bale(&["verify", "--quick", p(&ds)]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("split.tar") && out.contains("members (extension, offset, size) differ"),
        "{}",
        show(&o)
    );
}

#[test]
fn allow_split_refuses_repeated_extensions_zstd_and_wids() {
    let t = tempfile::tempdir().unwrap();
    let (one, two) = (t.path().join("one"), t.path().join("two"));
    fs::create_dir_all(&one).unwrap();
    fs::create_dir_all(&two).unwrap();
    fs::write(one.join("a.jpg"), "A1").unwrap();
    fs::write(one.join("b.jpg"), "B1").unwrap();
    fs::write(two.join("a.jpg"), "A2").unwrap();
    fs::write(one.join("a.cls"), "3").unwrap();
    let ds = t.path().join("ds");
    // a.jpg, b.jpg, a.jpg: regrouping would give "a" two jpg members.
    let dup = t.path().join("dup.tar");
    tar(&[
        "-cf",
        p(&dup),
        "-C",
        p(&one),
        "a.jpg",
        "b.jpg",
        "-C",
        p(&two),
        "a.jpg",
    ]);
    let o = bale(&["index", "--allow-split", "-o", p(&ds), p(&dup)]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(p(&dup))
            && err.contains("member a.jpg at offset 2048")
            && err.contains("at offset 0 has it already"),
        "{err}"
    );
    assert!(!ds.join("bale.json").exists() && !ds.join("dup.idx").exists());

    // .tar.zst shards cannot be regrouped: refused by name, and by content.
    let split = t.path().join("split.tar");
    tar(&["-cf", p(&split), "-C", p(&one), "a.jpg", "b.jpg", "a.cls"]);
    ok(&bale(&[
        "pack",
        "-q",
        "--compress",
        "zstd",
        p(&one),
        "-o",
        p(&t.path().join("packed")),
    ]));
    let zst = fs::read_dir(t.path().join("packed"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|f| f.to_string_lossy().ends_with(".tar.zst"))
        .unwrap();
    let disguised = t.path().join("disguised.tar");
    fs::copy(&zst, &disguised).unwrap();
    for shard in [&zst, &disguised] {
        let o = bale(&["index", "--allow-split", "-o", p(&ds), p(&split), p(shard)]);
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(p(shard)) && err.contains("--allow-split") && err.contains("zstd frame"),
            "{err}"
        );
        assert!(!ds.join("bale.json").exists() && !ds.join("split.idx").exists());
    }
    // Without --allow-split the .tar.zst is indexed.
    ok(&bale(&["index", "-q", "-o", p(&ds), p(&zst)]));
    fs::remove_dir_all(&ds).unwrap();

    // wids needs contiguous samples: refused when a sample was regrouped.
    let wids = t.path().join("wids.json");
    let o = bale(&[
        "index",
        "--allow-split",
        "--wids-json",
        p(&wids),
        "-o",
        p(&ds),
        p(&split),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--wids-json") && err.contains("regrouped by --allow-split"),
        "{err}"
    );
    assert!(!wids.exists() && !ds.join("bale.json").exists());
    // A shard without split samples is fine with both.
    let sorted = t.path().join("sorted.tar");
    tar(&["--sort=name", "-cf", p(&sorted), "-C", p(&one), "."]);
    ok(&bale(&[
        "index",
        "-q",
        "--allow-split",
        "--wids-json",
        p(&wids),
        "-o",
        p(&ds),
        p(&sorted),
    ]));
    assert!(wids.exists());
}

#[test]
fn dot_slash_names_links_and_files_without_extension() {
    let t = tempfile::tempdir().unwrap();
    let src = t.path().join("src");
    tree(&src, 6);
    fs::write(src.join("README"), "no extension").unwrap();
    std::os::unix::fs::symlink("d/0000.jpg", src.join("link.jpg")).unwrap();
    let shards = t.path().join("shards");
    fs::create_dir_all(&shards).unwrap();
    let shard = shards.join("dot.tar");
    tar(&["--sort=name", "-cf", p(&shard), "-C", p(&src), "."]);
    let ds = t.path().join("ds");
    let o = bale(&["index", "--json", "-o", p(&ds), p(&shard)]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let s = &v["shards"][0];
    assert_eq!(s["samples"], 6);
    assert_eq!(s["skipped_no_extension"], 1, "{v}");
    // ".", "./d", the two long directories and the symlink.
    assert_eq!(s["skipped_not_files"], 5, "{v}");
    assert_eq!(s["stripped_dot_slash"], s["members"], "{v}");
    let keys: Vec<String> = samples(&ds).into_iter().map(|s| s.0).collect();
    assert_eq!(keys[0], "d/0000");
    matches_extraction(&ds, t.path());
}

#[test]
fn relative_and_absolute_paths_survive_moves_and_patterns_keep_order() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("project");
    webdataset_shards(&root.join("shards"), 5);
    let ds = root.join("ds");
    // Glob and brace patterns, expanded by bale; the order is the arguments'.
    let glob = format!("{}/wds-*1.tar", p(&root.join("shards")));
    let brace = format!("{}/wds-00000{{0,0}}.tar", p(&root.join("shards")));
    let o = bale(&["index", "-o", p(&ds), &glob, &brace]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("given twice"));
    let brace = format!("{}/wds-00000{{0,9}}.tar", p(&root.join("shards")));
    let o = bale(&["index", "-o", p(&ds), &glob, &brace]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("wds-000009.tar (from the pattern"));
    let brace = format!("{}/wds-00000{{0..0}}.tar", p(&root.join("shards")));
    ok(&bale(&["index", "-o", p(&ds), &glob, &brace]));
    let m = Manifest::read(&ds).unwrap();
    let files: Vec<&str> = m.shards.iter().map(|s| s.file.as_str()).collect();
    assert_eq!(
        files,
        ["../shards/wds-000001.tar", "../shards/wds-000000.tar"]
    );
    let before = samples(&ds);
    assert_eq!(before[0].0, "k0005");

    // Relative: move the project as a whole.
    let moved = t.path().join("moved");
    fs::rename(&root, &moved).unwrap();
    assert_eq!(samples(&moved.join("ds")), before);
    verify_passes(&moved.join("ds"));

    // Absolute: move the dataset directory alone.
    let abs_ds = moved.join("abs");
    ok(&bale(&[
        "index",
        "--absolute",
        "-o",
        p(&abs_ds),
        &format!("{}/wds-*.tar", p(&moved.join("shards"))),
    ]));
    let elsewhere = t.path().join("elsewhere");
    fs::rename(&abs_ds, &elsewhere).unwrap();
    let m = Manifest::read(&elsewhere).unwrap();
    assert!(Path::new(&m.shards[0].file).is_absolute());
    assert_eq!(samples(&elsewhere).len(), 10);
    let o = bale(&["get", p(&elsewhere), "k0009", "--ext", "cls"]);
    ok(&o);
    assert_eq!(o.stdout, b"9");
}

#[test]
fn a_failed_run_leaves_no_manifest_and_no_new_index() {
    let t = tempfile::tempdir().unwrap();
    let shards = webdataset_shards(&t.path().join("shards"), 3);
    let bad = t.path().join("shards/zz-bad.tar");
    fs::write(&bad, b"\x1f\x8b\x08\x00 not a tar").unwrap();
    let ds = t.path().join("ds");
    fs::create_dir_all(&ds).unwrap();
    fs::write(ds.join("notes.txt"), "mine").unwrap();
    let o = bale(&[
        "index",
        "-j",
        "1",
        "-o",
        p(&ds),
        p(&shards[0]),
        p(&shards[1]),
        p(&bad),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("zz-bad.tar") && err.contains("no manifest was written"),
        "{err}"
    );
    // The indexes of the two good shards (written first, on one thread) are
    // removed; what was in the directory before stays.
    let left: Vec<_> = fs::read_dir(&ds)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left, ["notes.txt"]);
    // An existing dataset is not replaced without --force.
    ok(&bale(&["index", "-q", "-o", p(&ds), p(&shards[0])]));
    let o = bale(&["index", "-o", p(&ds), p(&shards[1])]);
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--force"));
    assert_eq!(
        Manifest::read(&ds).unwrap().shards[0].file,
        "../shards/wds-000000.tar"
    );
}

#[test]
fn sparse_files_are_refused_in_gnu_and_pax_archives() {
    let t = tempfile::tempdir().unwrap();
    let hole = t.path().join("hole.bin");
    let f = fs::File::create(&hole).unwrap();
    f.set_len(1 << 20).unwrap();
    drop(f);
    for format in ["gnu", "pax"] {
        let shard = t.path().join(format!("{format}.tar"));
        tar(&[
            "-S",
            &format!("--format={format}"),
            "-cf",
            p(&shard),
            "-C",
            p(t.path()),
            "hole.bin",
        ]);
        let ds = t.path().join(format!("ds-{format}"));
        let o = bale(&["index", "-o", p(&ds), p(&shard)]);
        assert_eq!(o.status.code(), Some(2), "{}", show(&o));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(p(&shard)) && err.contains("sparse files are not supported"),
            "{err}"
        );
        assert!(
            !ds.exists(),
            "{format}: the output directory this run created is removed"
        );
    }
}

/// `bale index --force` over a dataset, with a tar that fails its scan,
/// leaves that dataset as it was: its manifest and indexes are replaced
/// only once every tar is scanned.
#[test]
fn a_failed_index_force_leaves_the_old_dataset_whole() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("tree");
    tree(&root, 30);
    // The old dataset is an index of a packed shard (`index --force`
    // never replaces a dataset `pack` wrote).
    let packed = t.path().join("packed");
    ok(&bale(&["pack", "-q", p(&root), "-o", p(&packed)]));
    let m = Manifest::read(&packed).unwrap();
    let shard = packed.join(&m.shards[0].file);
    let ds = t.path().join("ds");
    ok(&bale(&["index", "-q", p(&shard), "-o", p(&ds)]));
    let bad = t.path().join("bad.tar");
    fs::write(&bad, vec![0x5au8; 1000]).unwrap();
    let snapshot = || {
        let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(&ds)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = snapshot();
    for args in [
        vec!["index", p(&bad), "-o", p(&ds), "--force"],
        vec!["index", p(&shard), p(&bad), "-o", p(&ds), "--force"],
    ] {
        let o = bale(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", show(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("bad.tar"),
            "{}",
            show(&o)
        );
        assert!(snapshot() == before, "{args:?} changed the dataset");
        verify_passes(&ds);
    }
    // The same with good tars replaces it.
    ok(&bale(&["index", p(&shard), "-o", p(&ds), "--force"]));
    verify_passes(&ds);
    assert_eq!(Manifest::read(&ds).unwrap().created_by.command, "index");
}
