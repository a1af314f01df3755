//! `bale convert` through the real binary: tar <-> tar.zst (<-> h5 with the
//! `hdf5` feature) keeping every byte, resharding, atomic output, and the
//! `dir` form refusing names that would leave the output directory.

use std::fs;
use std::path::Path;

use bale_format::fuzzing::{BLOCK, encode_member_header, padded};
use bale_format::{Compression, CreatedBy, IndexBuilder, Manifest, ShardEntry, checksum};

use crate::common::samples;
pub(crate) use bale_tests::{assert_success as ok, describe as text, run_bale as bale};

/// An ImageFolder-like tree: 3 classes, `n` files, every 3rd with a `.json`,
/// every 5th with a `.seg.png` (so some samples lack some fields).
pub(crate) fn tree(root: &Path, n: usize) {
    for i in 0..n {
        let dir = root.join(format!("class_{}", i % 3));
        fs::create_dir_all(&dir).unwrap();
        let data: Vec<u8> = (0..(300 + (i * 53) % 1200))
            .map(|j| ((i * 29 + j * 7) % 256) as u8)
            .collect();
        fs::write(dir.join(format!("{i:05}.jpg")), data).unwrap();
        if i % 3 == 0 {
            fs::write(dir.join(format!("{i:05}.json")), format!("{{\"i\": {i}}}")).unwrap();
        }
        if i % 5 == 0 {
            fs::write(dir.join(format!("{i:05}.seg.png")), vec![i as u8; i]).unwrap();
        }
    }
}

fn verify(dir: &Path) {
    ok(&bale(&["verify"], &[dir]));
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn tar_to_tar_zst_and_back_keeps_every_byte_and_reshards() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 40);
    let a = t.path().join("a");
    ok(&bale(
        &["pack", "--shard-size", "16KiB", "-o"],
        &[&a, &input],
    ));
    let z = t.path().join("z");
    let o = bale(
        &[
            "convert",
            "--format",
            "tar.zst",
            "--shard-size",
            "16KiB",
            "--json",
        ],
        &[&a, Path::new("-o"), &z],
    );
    ok(&o);
    let summary: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(summary["samples"], 40);
    assert_eq!(summary["format"], "tar.zst");
    verify(&z);
    let mz = Manifest::read(&z).unwrap();
    assert!(mz.shards.iter().all(|s| s.compression == Compression::Zstd));
    assert_eq!(mz.labels, Manifest::read(&a).unwrap().labels);
    assert_eq!(mz.created_by.command, "convert");
    let b = t.path().join("b");
    ok(&bale(
        &["convert", "--shard-size", "16KiB"],
        &[&z, Path::new("-o"), &b],
    ));
    verify(&b);
    assert_eq!(samples(&a), samples(&b));
    // Same shard size, same rule: the pack's tar shards come back byte for byte.
    let ma = Manifest::read(&a).unwrap();
    let mb = Manifest::read(&b).unwrap();
    assert_eq!(ma.shards.len(), mb.shards.len());
    for (x, y) in ma.shards.iter().zip(&mb.shards) {
        assert_eq!(
            fs::read(a.join(&x.file)).unwrap(),
            fs::read(b.join(&y.file)).unwrap()
        );
        assert_eq!(
            fs::read(a.join(&x.index)).unwrap(),
            fs::read(b.join(&y.index)).unwrap()
        );
    }
    // Resharding: one shard of at most 7 samples each.
    let c = t.path().join("c");
    ok(&bale(
        &["convert", "--shard-samples", "7"],
        &[&a, Path::new("-o"), &c],
    ));
    let mc = Manifest::read(&c).unwrap();
    assert_eq!(mc.shards.len(), 6);
    assert!(mc.shards.iter().all(|s| s.samples <= 7));
    assert_eq!(samples(&a), samples(&c));
}

#[test]
fn convert_refuses_a_non_empty_output_and_force_replaces_the_dataset() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 6);
    let a = t.path().join("a");
    ok(&bale(&["pack", "-o"], &[&a, &input]));
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    fs::write(out.join("notes.txt"), b"mine").unwrap();
    let o = bale(&["convert"], &[&a, Path::new("-o"), &out]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--force"),
        "{}",
        text(&o)
    );
    ok(&bale(
        &["convert", "--force", "--format", "tar.zst"],
        &[&a, Path::new("-o"), &out],
    ));
    assert!(files_in(&out).contains(&"notes.txt".to_string()));
    verify(&out);
    // The source is refused as its own output.
    let o = bale(&["convert", "--force"], &[&a, Path::new("-o"), &a]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    verify(&a);
}

#[test]
fn a_corrupt_source_leaves_no_dataset() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 12);
    let a = t.path().join("a");
    ok(&bale(&["pack", "-o"], &[&a, &input]));
    // Flip a byte of the last sample's data: its checksum no longer matches.
    let m = Manifest::read(&a).unwrap();
    let shard = a.join(&m.shards[0].file);
    let mut bytes = fs::read(&shard).unwrap();
    let at = bytes.len() - 1024 - 600;
    bytes[at] ^= 0x55;
    fs::write(&shard, bytes).unwrap();
    for format in ["tar", "dir"] {
        let out = t.path().join(format!("out-{format}"));
        let o = bale(
            &["convert", "--format", format],
            &[&a, Path::new("-o"), &out],
        );
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("checksum mismatch"),
            "{}",
            text(&o)
        );
        assert!(
            !out.exists(),
            "{format}: the output directory it made is removed"
        );
    }
}

#[test]
fn dir_writes_every_member_as_a_file() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    tree(&input, 10);
    let a = t.path().join("a");
    ok(&bale(&["pack", "--labels", "none", "-o"], &[&a, &input]));
    let d = t.path().join("d");
    ok(&bale(
        &["convert", "--format", "dir"],
        &[&a, Path::new("-o"), &d],
    ));
    let mut n = 0;
    for (key, members) in samples(&a) {
        for (ext, data) in members {
            let f = d.join(format!("{key}.{ext}"));
            assert_eq!(fs::read(&f).unwrap(), data, "{}", f.display());
            n += 1;
        }
    }
    assert_eq!(n, 10 + 4 + 2);
    assert_eq!(files_in(&d), ["class_0", "class_1", "class_2"]);
    // Packing the files again gives the same samples.
    let b = t.path().join("b");
    ok(&bale(&["pack", "--labels", "none", "-o"], &[&b, &d]));
    assert_eq!(samples(&a), samples(&b));
}

/// A one-shard tar dataset whose index names a key the writers would refuse.
fn crafted_dataset(dir: &Path, key: &str) {
    fs::create_dir_all(dir).unwrap();
    let data = b"escaped!";
    let mut tar = Vec::new();
    encode_member_header(&format!("{key}.bin"), data.len() as u64, &mut tar);
    let data_at = tar.len() as u64;
    tar.extend_from_slice(data);
    tar.resize(padded(tar.len() as u64) as usize, 0);
    let sample_len = tar.len() as u64;
    tar.extend_from_slice(&[0u8; 2 * BLOCK as usize]);
    let mut ib = IndexBuilder::new(Compression::None);
    ib.push_sample(
        key,
        0,
        sample_len,
        0,
        sample_len,
        &[("bin", data_at, data.len() as u64, checksum(data))],
    );
    let index = ib.to_bytes(tar.len() as u64, tar.len() as u64);
    fs::write(dir.join("shard-000000.tar"), &tar).unwrap();
    fs::write(dir.join("shard-000000.idx"), &index).unwrap();
    let entry = ShardEntry {
        file: "shard-000000.tar".into(),
        index: "shard-000000.idx".into(),
        samples: 1,
        members: 1,
        bytes: tar.len() as u64,
        tar_bytes: tar.len() as u64,
        compression: Compression::None,
        index_xxh3: bale_format::hex64(u64::from_le_bytes(
            index[index.len() - 8..].try_into().unwrap(),
        )),
        shard_xxh3: None,
        fields: [(
            "bin".to_string(),
            bale_format::FieldStats {
                count: 1,
                bytes: data.len() as u64,
            },
        )]
        .into(),
    };
    let created_by = CreatedBy {
        tool: "test".into(),
        version: "0".into(),
        command: "craft".into(),
        options: Default::default(),
    };
    Manifest::new(vec![entry], None, created_by)
        .write(dir)
        .unwrap();
}

#[test]
fn dir_refuses_keys_that_escape_the_output() {
    let t = tempfile::tempdir().unwrap();
    for (i, key) in ["../escape", "/tmp/abs-escape", "a/../../escape"]
        .iter()
        .enumerate()
    {
        let src = t.path().join(format!("src{i}"));
        crafted_dataset(&src, key);
        let out = t.path().join(format!("out{i}"));
        let o = bale(
            &["convert", "--format", "dir"],
            &[&src, Path::new("-o"), &out],
        );
        assert_eq!(o.status.code(), Some(2), "{key}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("escape the output directory"),
            "{key}: {}",
            text(&o)
        );
        assert!(!out.exists(), "{key}: nothing is left");
    }
    assert!(!t.path().join("escape.bin").exists());
    assert!(!Path::new("/tmp/abs-escape.bin").exists());
}

#[test]
fn dir_never_writes_through_a_symlink_in_the_output() {
    let t = tempfile::tempdir().unwrap();
    let input = t.path().join("in");
    fs::create_dir_all(input.join("a")).unwrap();
    fs::write(input.join("a/0001.bin"), b"data").unwrap();
    let src = t.path().join("src");
    ok(&bale(&["pack", "--labels", "none", "-o"], &[&src, &input]));
    let outside = t.path().join("outside");
    fs::create_dir(&outside).unwrap();
    let out = t.path().join("out");
    fs::create_dir(&out).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("a")).unwrap();
    let o = bale(
        &["convert", "--format", "dir", "--force"],
        &[&src, Path::new("-o"), &out],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("refusing"),
        "{}",
        text(&o)
    );
    assert!(
        files_in(&outside).is_empty(),
        "nothing written through the link"
    );
    assert_eq!(files_in(&out), ["a"], "the staging directory is removed");
    // A plain file in the way is refused the same way, and never overwritten.
    let out2 = t.path().join("out2");
    fs::create_dir_all(out2.join("a")).unwrap();
    fs::write(out2.join("a/0001.bin"), b"keep").unwrap();
    let o = bale(
        &["convert", "--format", "dir", "--force"],
        &[&src, Path::new("-o"), &out2],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(fs::read(out2.join("a/0001.bin")).unwrap(), b"keep");
}
