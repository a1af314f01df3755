//! Tests of the scan: hand-made tars, bale's own shards, damage.

use super::*;
use crate::read::ShardReader;
use crate::tar::encode_member_header;
use crate::{Member, ShardWriter};

/// A tar built by hand: (name, typeflag, data) entries, then end blocks and `pad` zero bytes.
fn tar(entries: &[(&str, u8, &[u8])], pad: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for &(name, t, data) in entries {
        let start = out.len();
        encode_member_header(name, data.len() as u64, &mut out);
        if t != b'0' {
            // Retype the (last) ustar header and fix its checksum.
            let h = out.len() - 512;
            out[h + 156] = t;
            out[h + 148..h + 156].copy_from_slice(b"        ");
            let sum: u32 = out[h..h + 512].iter().map(|&b| u32::from(b)).sum();
            out[h + 148..h + 156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        }
        let _ = start;
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024 + pad, 0);
    out
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn scan(bytes: &[u8], opts: ScanOptions) -> (tempfile::TempDir, PathBuf, Result<ScannedShard>) {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "t.tar", bytes);
    let r = scan_shard(&p, &opts);
    (dir, p, r)
}

type Samples = Vec<(String, Vec<(String, Vec<u8>)>)>;

/// Reads every sample back through a written index.
fn read_back(s: &ScannedShard, dir: &Path) -> Samples {
    let idx = dir.join("t.idx");
    s.write_index(&idx).unwrap();
    let r = ShardReader::open(&s.path, &idx).unwrap();
    (0..r.len())
        .map(|i| {
            let smp = r.read(i, true).unwrap();
            (smp.key, smp.members)
        })
        .collect()
}

#[test]
fn groups_members_skips_non_members_and_pads() {
    let bytes = tar(
        &[
            ("d/", b'5', b""),
            ("./d/0001.jpg", b'0', b"JPEG1"),
            ("d/sub/", b'5', b""),
            ("./d/0001.cls", b'0', b"3"),
            ("README", b'0', b"not a member"),
            ("d/0002.jpg", b'0', &[7u8; 700]),
            ("link.jpg", b'2', b""),
        ],
        10240 - 1024,
    );
    let (dir, _, r) = scan(&bytes, ScanOptions::default());
    let s = r.unwrap();
    assert_eq!((s.samples, s.members), (2, 3));
    assert_eq!(s.shard_len, bytes.len() as u64);
    assert_eq!(s.tar_len, bytes.len() as u64 - (10240 - 1024));
    assert_eq!(s.stats.skipped_not_files, 3);
    assert_eq!(s.stats.skipped_no_extension, 1);
    assert_eq!(s.stats.stripped_dot_slash, 2);
    assert_eq!(s.shard_checksum, None);
    // Headers only: 8 headers of 512 bytes (7 entries and the zero block),
    // and the one byte of the .cls member (a label is checked).
    assert_eq!(s.stats.bytes_read, 8 * 512 + 1);
    let got = read_back(&s, dir.path());
    assert_eq!(got[0].0, "d/0001");
    assert_eq!(
        got[0].1,
        vec![
            ("jpg".into(), b"JPEG1".to_vec()),
            ("cls".into(), b"3".to_vec())
        ]
    );
    assert_eq!(got[1].1, vec![("jpg".into(), vec![7u8; 700])]);
    let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
    assert!(!idx.has_checksums());
    // The first sample's range covers the directory header between its members.
    let e = idx.sample(0);
    assert_eq!((e.tar_offset, e.tar_len), (512, 5 * 512));
}

#[test]
fn checksums_read_everything_and_match_the_file() {
    let bytes = tar(
        &[("a.txt", b'0', b"hello"), ("b.txt", b'0', &[1u8; 3000])],
        512,
    );
    let (dir, _, r) = scan(
        &bytes,
        ScanOptions {
            checksums: true,
            ..Default::default()
        },
    );
    let s = r.unwrap();
    assert_eq!(s.shard_checksum, Some(crate::checksum(&bytes)));
    assert_eq!(s.stats.bytes_read, bytes.len() as u64);
    let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
    assert!(idx.has_checksums());
    assert_eq!(idx.member(1).checksum, crate::checksum(&[1u8; 3000]));
    assert_eq!(read_back(&s, dir.path()).len(), 2);
}

#[test]
fn long_names_through_pax_are_indexed() {
    let long = format!("{}/0001.jpg", "d".repeat(150));
    let bytes = tar(&[(&long, b'0', b"x"), ("k.txt", b'0', b"y")], 0);
    let (dir, _, r) = scan(&bytes, ScanOptions::default());
    let s = r.unwrap();
    assert_eq!(s.stats.long_names, 1);
    let got = read_back(&s, dir.path());
    assert_eq!(got[0].0, format!("{}/0001", "d".repeat(150)));
    // The pax header is part of the sample's range.
    let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
    assert_eq!(idx.sample(0).tar_offset, 0);
}

#[test]
fn split_keys_are_refused_naming_both_places_or_renamed() {
    let bytes = tar(
        &[
            ("a.jpg", b'0', b"1"),
            ("b.jpg", b'0', b"2"),
            ("a.cls", b'0', b"3"),
        ],
        0,
    );
    let (_d, _, r) = scan(&bytes, ScanOptions::default());
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("t.tar") && err.contains("offset 0") && err.contains("offset 2048"),
        "{err}"
    );
    let (dir, _, r) = scan(
        &bytes,
        ScanOptions {
            split: SplitPolicy::Rename,
            ..Default::default()
        },
    );
    let s = r.unwrap();
    assert_eq!(
        s.stats.renamed,
        vec![Renamed {
            tar_key: "a".into(),
            key: "a~2".into(),
            tar_offset: 2048
        }]
    );
    let keys: Vec<String> = read_back(&s, dir.path()).into_iter().map(|s| s.0).collect();
    assert_eq!(keys, ["a", "b", "a~2"]);
    // A real key that collides with a renamed one gets the next free name.
    let bytes = tar(
        &[
            ("a.jpg", b'0', b"1"),
            ("b.jpg", b'0', b"2"),
            ("a.cls", b'0', b"3"),
            ("a~2.x", b'0', b"4"),
        ],
        0,
    );
    let (dir, _, r) = scan(
        &bytes,
        ScanOptions {
            split: SplitPolicy::Rename,
            ..Default::default()
        },
    );
    let keys: Vec<String> = read_back(&r.unwrap(), dir.path())
        .into_iter()
        .map(|s| s.0)
        .collect();
    assert_eq!(keys, ["a", "b", "a~2", "a~2~2"]);
}

fn regroup(checksums: bool) -> ScanOptions {
    ScanOptions {
        checksums,
        split: SplitPolicy::Regroup,
    }
}

#[test]
fn split_keys_are_regrouped_into_a_scattered_index() {
    let jpg = [9u8; 700];
    let bytes = tar(
        &[
            ("a.jpg", b'0', &jpg),
            ("b.jpg", b'0', b"2"),
            ("b.cls", b'0', b"5"),
            ("d/", b'5', b""),
            ("a.cls", b'0', b"3"),
            ("c.jpg", b'0', b"4"),
            ("a.txt", b'0', b"text"),
        ],
        0,
    );
    for checksums in [false, true] {
        let (dir, _, r) = scan(&bytes, regroup(checksums));
        let s = r.unwrap();
        assert!(s.is_scattered());
        assert_eq!((s.samples, s.members), (3, 6));
        assert_eq!(s.tar_len, 0);
        assert_eq!(s.fields["jpg"].count, 3);
        assert_eq!(
            s.stats.regrouped,
            vec![
                Regrouped {
                    key: "a".into(),
                    first_offset: 0,
                    tar_offset: 4096,
                },
                Regrouped {
                    key: "a".into(),
                    first_offset: 0,
                    tar_offset: 6144,
                },
            ]
        );
        let idx = ShardIndex::from_bytes(s.index_bytes(), "t.idx").unwrap();
        assert_eq!(&idx.as_bytes()[8..12], &[1, 0, 1, 0], "version 1.1");
        assert!(idx.is_scattered());
        assert_eq!(idx.compression(), Compression::None);
        assert_eq!(idx.has_checksums(), checksums);
        // Samples in the order of first appearance, members in tar order,
        // offsets absolute in the file.
        let keys: Vec<&str> = (0..idx.len()).map(|i| idx.key(i)).collect();
        assert_eq!(keys, ["a", "b", "c"]);
        let a: Vec<(&str, u64, u64)> = idx.members(0).map(|m| (m.ext, m.offset, m.size)).collect();
        assert_eq!(a, [("jpg", 512, 700), ("cls", 4608, 1), ("txt", 6656, 4)]);
        for i in 0..3 {
            assert_eq!(idx.sample(i).file_len, 0);
        }
        let got = read_back(&s, dir.path());
        assert_eq!(
            got[0],
            (
                "a".to_owned(),
                vec![
                    ("jpg".to_owned(), jpg.to_vec()),
                    ("cls".to_owned(), b"3".to_vec()),
                    ("txt".to_owned(), b"text".to_vec()),
                ]
            )
        );
        assert_eq!(got[1].1.len(), 2);
        assert_eq!(got[2].1, vec![("jpg".to_owned(), b"4".to_vec())]);
        // No sample of the shard is one byte range any more.
        let r = ShardReader::open(&s.path, dir.path().join("t.idx")).unwrap();
        let err = r.read_raw(1).unwrap_err().to_string();
        assert!(err.contains("member by member"), "{err}");
    }
}

#[test]
fn regrouping_without_split_samples_gives_the_1_0_index() {
    let bytes = tar(
        &[
            ("a.jpg", b'0', b"1"),
            ("a.cls", b'0', b"3"),
            ("x", b'0', b"no extension"),
            ("b.jpg", b'0', b"2"),
        ],
        1536,
    );
    for checksums in [false, true] {
        let (_d, _, plain) = scan(
            &bytes,
            ScanOptions {
                checksums,
                ..Default::default()
            },
        );
        let (_d, _, regrouped) = scan(&bytes, regroup(checksums));
        let (plain, regrouped) = (plain.unwrap(), regrouped.unwrap());
        assert!(!regrouped.is_scattered());
        assert_eq!(regrouped.index_bytes(), plain.index_bytes());
        assert_eq!(regrouped.tar_len, plain.tar_len);
        assert_eq!(regrouped.fields, plain.fields);
        assert_eq!(regrouped.shard_checksum, plain.shard_checksum);
    }
}

#[test]
fn regrouping_a_repeated_extension_names_both_offsets() {
    let bytes = tar(
        &[
            ("a.jpg", b'0', b"1"),
            ("b.jpg", b'0', b"2"),
            ("a.cls", b'0', b"3"),
            ("a.jpg", b'0', b"4"),
        ],
        0,
    );
    let (_d, _, r) = scan(&bytes, regroup(false));
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("t.tar")
            && err.contains("member a.jpg at offset 3072")
            && err.contains("at offset 0 has it already"),
        "{err}"
    );
    // Within one run, as without regrouping.
    let bytes = tar(&[("a.jpg", b'0', b"1"), ("a.jpg", b'0', b"2")], 0);
    let (_d, _, r) = scan(&bytes, regroup(false));
    assert!(r.unwrap_err().to_string().contains("repeats extension"));
}

#[test]
fn regrouping_a_zstd_shard_is_refused() {
    let (_d, _, r) = scan(
        &bale_shard(Compression::Zstd, &[("a", b"1")]),
        regroup(false),
    );
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("t.tar") && err.contains(".tar.zst cannot have its split samples regrouped"),
        "{err}"
    );
}

#[test]
fn bad_input_is_an_error_naming_file_and_offset() {
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            tar(&[("a.jpg", b'0', b"1"), ("a.jpg", b'0', b"2")], 0),
            "repeats extension",
        ),
        (
            tar(&[("a.jpg", b'0', b"1"), ("x/../b.jpg", b'0', b"2")], 0),
            "cannot be indexed",
        ),
        (tar(&[("k.", b'0', b"1")], 0), "cannot be indexed"),
        (tar(&[("s.jpg", b'S', b"1")], 0), "sparse"),
        (
            tar(&[("a.jpg", b'0', b"1")], 0)[..1024].to_vec(),
            "truncated",
        ),
        (
            tar(&[("a.jpg", b'0', &[1u8; 2000])], 0)[..1200].to_vec(),
            "truncated",
        ),
        (vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0], "gzip-compressed"),
        (b"BZh91AY&SY".to_vec(), "bzip2-compressed"),
        (vec![b'x'; 1024], "offset 0"),
        (Vec::new(), "truncated"),
    ];
    for (bytes, want) in cases {
        let (_d, _, r) = scan(&bytes, ScanOptions::default());
        let err = r.unwrap_err().to_string();
        assert!(
            err.contains("t.tar") && err.contains(want),
            "want {want:?}: {err}"
        );
    }
}

/// A shard bale writes, each sample a `.bin` with the bytes given and a `.txt`.
fn bale_shard(compression: Compression, samples: &[(&str, &[u8])]) -> Vec<u8> {
    let name = match compression {
        Compression::Zstd => "x.tar.zst",
        _ => "x.tar",
    };
    let mut w = ShardWriter::new(Vec::new(), name, compression, 0).unwrap();
    for &(k, d) in samples {
        w.write_sample(
            k,
            &[
                Member {
                    ext: "bin",
                    data: d,
                },
                Member {
                    ext: "txt",
                    data: b"t",
                },
            ],
        )
        .unwrap();
    }
    w.finish().unwrap().0
}

#[test]
fn per_sample_zstd_gives_the_writers_own_index() {
    let mut w = ShardWriter::new(Vec::new(), "x.tar.zst", Compression::Zstd, 0).unwrap();
    for i in 0..20u32 {
        let data = vec![i as u8; (i as usize) * 300];
        w.write_sample(
            &format!("k{i:03}"),
            &[Member {
                ext: "bin",
                data: &data,
            }],
        )
        .unwrap();
    }
    let (bytes, want_index, summary) = w.finish().unwrap();
    for checksums in [false, true] {
        let (_d, _, r) = scan(
            &bytes,
            ScanOptions {
                checksums,
                ..Default::default()
            },
        );
        let s = r.unwrap();
        assert_eq!(s.compression, Compression::Zstd);
        assert_eq!(s.tar_len, summary.tar_bytes);
        if checksums {
            // Byte-identical to the index bale wrote while packing.
            assert_eq!(s.index_bytes(), want_index);
            assert_eq!(s.shard_checksum, Some(summary.shard_checksum));
        } else {
            let idx = ShardIndex::from_bytes(s.index_bytes(), "x").unwrap();
            let want = ShardIndex::from_bytes(want_index.clone(), "x").unwrap();
            assert_eq!(idx.len(), 20);
            for i in 0..20 {
                assert_eq!(idx.sample(i), want.sample(i));
            }
        }
    }
    // An empty bale .tar.zst (one frame of end blocks) is an empty shard.
    let (_d, _, r) = scan(&bale_shard(Compression::Zstd, &[]), ScanOptions::default());
    assert_eq!(r.unwrap().samples, 0);
}

#[test]
fn a_foreign_skippable_frame_of_the_dictionary_magic_is_skipped() {
    // A foreign .tar.zst may open with a skippable frame of the magic bale
    // keeps its dictionary in, holding something else: too short, too long
    // or not a dictionary. `zstd -d` skips it; so does the scan.
    let empty = bale_shard(Compression::Zstd, &[]);
    let frame = |payload: &[u8]| {
        let mut f = crate::index::ZSTD_DICT_FRAME_MAGIC.to_le_bytes().to_vec();
        f.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut trained = vec![7u8; 600];
    trained[..4].copy_from_slice(&[0x37, 0xA4, 0x30, 0xEC]);
    for payload in [
        vec![1u8; 10],
        vec![2u8; crate::index::ZSTD_DICT_MAX + 1],
        trained,
    ] {
        let mut bytes = frame(&payload);
        bytes.extend_from_slice(&empty);
        let (_d, _, r) = scan(&bytes, ScanOptions::default());
        let s = r.unwrap_or_else(|e| panic!("{} bytes: {e}", payload.len()));
        assert_eq!(s.samples, 0);
        let idx = ShardIndex::from_bytes(s.index_bytes(), "x").unwrap();
        assert!(idx.zstd_dict().is_empty());
    }
}

#[test]
fn plain_bale_tar_gives_the_writers_own_index() {
    let mut w = ShardWriter::new(Vec::new(), "x.tar", Compression::None, 0).unwrap();
    for i in 0..30u32 {
        let data = vec![i as u8; (i as usize) * 97];
        let long = format!("{}{i}", "n".repeat(120));
        w.write_sample(
            &long,
            &[
                Member {
                    ext: "bin",
                    data: &data,
                },
                Member {
                    ext: "cls",
                    data: b"1",
                },
            ],
        )
        .unwrap();
    }
    let (bytes, want_index, _) = w.finish().unwrap();
    let (_d, _, r) = scan(
        &bytes,
        ScanOptions {
            checksums: true,
            ..Default::default()
        },
    );
    assert_eq!(r.unwrap().index_bytes(), want_index);
}

#[test]
fn zstd_not_framed_per_sample_is_refused() {
    let plain = tar(
        &[("a.jpg", b'0', &[1u8; 3000]), ("b.jpg", b'0', &[2u8; 3000])],
        0,
    );
    // One frame for the whole tar.
    let single = zstd::bulk::compress(&plain, 3).unwrap();
    let (_d, _, r) = scan(&single, ScanOptions::default());
    assert!(r.unwrap_err().to_string().contains("single-frame zstd"));
    // Two samples in the first frame, end blocks in the second.
    let cut = plain.len() - 1024;
    let mut two = zstd::bulk::compress(&plain[..cut], 3).unwrap();
    two.extend(zstd::bulk::compress(&plain[cut..], 3).unwrap());
    let (_d, _, r) = scan(&two, ScanOptions::default());
    let err = r.unwrap_err().to_string();
    assert!(err.contains("more than one sample"), "{err}");
    // A frame boundary inside a member.
    let mut cut_mid = zstd::bulk::compress(&plain[..1000], 3).unwrap();
    cut_mid.extend(zstd::bulk::compress(&plain[1000..], 3).unwrap());
    let (_d, _, r) = scan(&cut_mid, ScanOptions::default());
    let err = r.unwrap_err().to_string();
    assert!(err.contains("crosses the end of the zstd frame"), "{err}");
    // One sample over two frames (a frame per member).
    let p2 = tar(&[("a.jpg", b'0', &[1u8; 100]), ("a.cls", b'0', b"1")], 0);
    let mut spread = Vec::new();
    for (a, b) in [(0, 1024), (1024, 2048), (2048, p2.len())] {
        spread.extend(zstd::bulk::compress(&p2[a..b], 3).unwrap());
    }
    let (_d, _, r) = scan(&spread, ScanOptions::default());
    let err = r.unwrap_err().to_string();
    assert!(
        err.contains("spread over more than one zstd frame"),
        "{err}"
    );
}

/// Damaged shards never panic, and whatever the scan accepts is an index
/// that validates and reads back without error.
#[test]
fn every_truncation_and_many_bit_flips_are_errors_or_valid_indexes() {
    let long = format!("{}/k", "x".repeat(120));
    let samples: [(&str, &[u8]); 3] = [("a", b"one"), (&long, &[5u8; 700]), ("c", b"")];
    let plain = bale_shard(Compression::None, &samples);
    let zst = bale_shard(Compression::Zstd, &samples);
    let dir = tempfile::tempdir().unwrap();
    let check = |bytes: &[u8], name: &str| {
        let p = write(dir.path(), name, bytes);
        for checksums in [false, true] {
            if let Ok(s) = scan_shard(
                &p,
                &ScanOptions {
                    checksums,
                    ..Default::default()
                },
            ) {
                let idx = ShardIndex::from_bytes(s.index_bytes(), "mem.idx").unwrap();
                let file = std::fs::File::open(&p).unwrap();
                for i in 0..idx.len() {
                    let buf = crate::read::read_sample(&file, &p, &idx, &idx.sample(i)).unwrap();
                    for m in idx.members(i) {
                        let data = buf.member(&m);
                        assert_eq!(data.len() as u64, m.size);
                        if checksums {
                            crate::read::verify_member(&p, idx.key(i), &m, data).unwrap();
                        }
                    }
                }
            }
        }
    };
    for (bytes, name) in [(&plain, "p.tar"), (&zst, "z.tar.zst")] {
        // Cuts at and around every block boundary, and at seeded random places
        // (all of them would take minutes in a debug build).
        let mut rng = crate::shuffle::SplitMix64::new(bytes.len() as u64);
        let len = bytes.len() as u64;
        let cuts = (0..len)
            .filter(|c| matches!(c % 512, 0 | 1 | 511))
            .chain((0..300).map(|_| rng.below(len)));
        for cut in cuts {
            check(&bytes[..cut as usize], name);
        }
        for _ in 0..400 {
            let i = rng.below(len) as usize;
            let mut b = bytes.clone();
            b[i] ^= 1 << rng.below(8);
            check(&b, name);
        }
    }
}

#[test]
fn zstd_frame_walk_matches_the_library() {
    // Frames with checksums, content sizes and skippable frames in between.
    let mut bytes = Vec::new();
    let mut want = Vec::new();
    for (i, n) in [10usize, 200_000, 0, 5000, 300_000].into_iter().enumerate() {
        if i == 2 {
            let mut skip = 0x184D_2A53u32.to_le_bytes().to_vec();
            skip.extend(7u32.to_le_bytes());
            skip.extend([9u8; 7]);
            want.push(Frame {
                offset: bytes.len() as u64,
                len: skip.len() as u64,
                skippable: true,
            });
            bytes.extend(skip);
        }
        // The last frame repeats one byte: RLE blocks.
        let data: Vec<u8> = (0..n)
            .map(|j| if i == 4 { 5 } else { (j * 7 % 251) as u8 })
            .collect();
        let mut enc = zstd::bulk::Compressor::new(1 + i as i32).unwrap();
        enc.include_checksum(i % 2 == 0).unwrap();
        enc.include_contentsize(i % 2 == 1).unwrap();
        let frame = enc.compress(&data).unwrap();
        want.push(Frame {
            offset: bytes.len() as u64,
            len: frame.len() as u64,
            skippable: false,
        });
        bytes.extend(frame);
    }
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "f.zst", &bytes);
    let file = std::fs::File::open(&p).unwrap();
    let mut at = 0;
    let mut got = Vec::new();
    while at < bytes.len() as u64 {
        let f = frame_at(&file, &p, at, bytes.len() as u64).unwrap();
        at += f.len;
        got.push(f);
    }
    assert_eq!(got, want);
    // A cut frame is truncated, naming the file.
    let p = write(dir.path(), "cut.zst", &bytes[..bytes.len() - 3]);
    let file = std::fs::File::open(&p).unwrap();
    let last = want.last().unwrap().offset;
    let err = frame_at(&file, &p, last, bytes.len() as u64 - 3).unwrap_err();
    assert!(matches!(err, FormatError::Truncated { .. }), "{err}");
}
