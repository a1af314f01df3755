//! Writes the seed inputs of the fuzz targets into `fuzz/seeds/<target>/`:
//! small valid files made by bale-format, so the fuzzers start from the
//! structures they must get through rather than from nothing.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds
//! ```
//!
//! The output is deterministic; the seeds are checked in, so rerun this only
//! when the format changes. `fuzz/seeds/tar_headers/` also holds tars made by
//! GNU tar and Python, and the seeds of `npy_header` and `jpeg_markers` are
//! NumPy's and Pillow's (`fuzz/seeds/gen_numpy_pillow.py`; see
//! fuzz/seeds/README.md); this program leaves them alone.

use std::fs;
use std::path::Path;

use bale_format::{Compression, CreatedBy, Manifest, Member, ShardFileWriter, ShardWriter};

type Sample<'a> = (&'a str, Vec<Member<'a>>);

fn samples<'a>(long_key: &'a str) -> Vec<Sample<'a>> {
    vec![
        (
            "a/0001",
            vec![
                Member {
                    ext: "jpg",
                    data: b"\xff\xd8\xff",
                },
                Member {
                    ext: "cls",
                    data: b"3",
                },
            ],
        ),
        (
            long_key,
            vec![Member {
                ext: "seg.png",
                data: &[0x89, b'P', b'N', b'G'],
            }],
        ),
        (
            "e",
            vec![Member {
                ext: "txt",
                data: b"",
            }],
        ),
    ]
}

fn shard(samples: &[Sample<'_>], compression: Compression) -> (Vec<u8>, Vec<u8>) {
    let mut w = ShardWriter::new(Vec::new(), "seed.tar", compression, 0).expect("writer");
    for (key, members) in samples {
        w.write_sample(key, members).expect("sample");
    }
    let (shard, index, _) = w.finish().expect("finish");
    (shard, index)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let long_key = format!("{}/k", "d".repeat(110));
    let all = samples(&long_key);
    let one = &all[..1];
    let dirs = ["index", "tar_headers", "manifest"].map(|d| root.join(d));
    for d in &dirs {
        fs::create_dir_all(d)?;
    }
    let [index_dir, tar_dir, manifest_dir] = &dirs;

    for (name, samples) in [("three", &all[..]), ("one", one), ("empty", &[][..])] {
        for c in [Compression::None, Compression::Zstd] {
            let (tar, index) = shard(samples, c);
            let tag = c.as_str();
            fs::write(index_dir.join(format!("{name}-{tag}.idx")), &index)?;
            if c == Compression::Zstd {
                // As the index file is stored: one zstd frame around it.
                let stored = bale_format::index_file_bytes(&index);
                fs::write(index_dir.join(format!("{name}-{tag}-stored.idx")), &stored)?;
            }
            if c == Compression::None {
                // The tar target reads its first byte as a read-size seed.
                let mut input = vec![0u8];
                input.extend_from_slice(&tar);
                fs::write(tar_dir.join(format!("{name}.tar")), input)?;
            }
        }
    }

    // A scattered (1.1) index of a plain tar: `bale index --allow-split` over
    // a tar whose key "a" reappears after "b".
    // (The writer refuses a repeated key: join one-sample tars, each without its end blocks but the last.)
    let mut tar = Vec::new();
    for (key, ext, data) in [
        ("a", "jpg", b"A1"),
        ("b", "jpg", b"B1"),
        ("a", "cls", b"3 "),
    ] {
        let (t, _) = shard(&[(key, vec![Member { ext, data }])], Compression::None);
        tar.truncate(tar.len().saturating_sub(1024));
        tar.extend_from_slice(&t);
    }
    let tmp = std::env::temp_dir().join(format!("bale-fuzz-split-{}.tar", std::process::id()));
    fs::write(&tmp, &tar)?;
    let opts = bale_format::scan::ScanOptions {
        checksums: true,
        split: bale_format::scan::SplitPolicy::Regroup,
    };
    let scanned = bale_format::scan::scan_shard(&tmp, &opts);
    fs::remove_file(&tmp)?;
    fs::write(index_dir.join("split-none.idx"), scanned?.index_bytes())?;

    // A manifest over two real shards.
    let dir = std::env::temp_dir().join(format!("bale-fuzz-seeds-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let mut entries = Vec::new();
    for (n, c) in [(0, Compression::None), (1, Compression::Zstd)] {
        let mut w =
            ShardFileWriter::create(&dir, &bale_format::shard_file_name("shard", n, c), c, 0)?;
        for (key, members) in &all {
            w.writer().write_sample(key, members)?;
        }
        entries.push(w.finish()?);
    }
    fs::remove_dir_all(&dir)?;
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "0.1.0".into(),
        command: "pack".into(),
        options: r#"{"shard_size": 1000, "zstd_level": 3}"#.parse()?,
    };
    let m = Manifest::new(entries, Some(vec!["cat".into(), "dog".into()]), created_by);
    fs::write(manifest_dir.join("two-shards.json"), m.to_bytes())?;
    let mut none = m.clone();
    none.shards.clear();
    none.samples = 0;
    none.labels = None;
    fs::write(manifest_dir.join("no-shards.json"), none.to_bytes())?;
    println!("seeds written under {}", root.display());
    Ok(())
}
