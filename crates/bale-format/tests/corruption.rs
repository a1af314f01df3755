//! Robustness: a truncated, bit-flipped, spliced or foreign index, shard or
//! manifest is an error that names the file (and the offset), never a panic,
//! and never silently different bytes when checksums are verified.

mod common;

use std::fs;
use std::path::Path;

use bale_format::read::ShardReader;
use bale_format::{
    Compression, CreatedBy, FormatError, IndexBuilder, Manifest, SampleStream, ShardFileWriter,
    ShardIndex, checksum,
};
use common::{ShortReader, TestSample, fixed_samples, write_shard};
use proptest::prelude::*;

/// One way of damaging bytes.
#[derive(Debug, Clone)]
enum Mutation {
    /// Keep this fraction (per mille) of the bytes.
    Truncate(u16),
    /// Flip these bits: (position per million of the length, bit).
    Flip(Vec<(u32, u8)>),
    /// Overwrite bytes at a position with garbage.
    Overwrite(u32, Vec<u8>),
    /// Insert garbage at a position (everything after shifts).
    Insert(u32, Vec<u8>),
    /// Remove a range.
    Remove(u32, u16),
    /// Set a byte to a value (0xff and 0x00 reach the edge cases of number fields).
    Set(u32, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (0u16..1000).prop_map(Mutation::Truncate),
        prop::collection::vec((0u32..1_000_000, 0u8..8), 1..6).prop_map(Mutation::Flip),
        (0u32..1_000_000, prop::collection::vec(any::<u8>(), 1..64))
            .prop_map(|(a, g)| Mutation::Overwrite(a, g)),
        (0u32..1_000_000, prop::collection::vec(any::<u8>(), 1..600))
            .prop_map(|(a, g)| Mutation::Insert(a, g)),
        (0u32..1_000_000, 1u16..1200).prop_map(|(a, n)| Mutation::Remove(a, n)),
        (
            0u32..1_000_000,
            prop_oneof![
                Just(0u8),
                Just(0xff),
                Just(0x80),
                Just(b'7'),
                Just(b' '),
                any::<u8>()
            ]
        )
            .prop_map(|(a, v)| Mutation::Set(a, v)),
    ]
}

fn at(len: usize, per_million: u32) -> usize {
    (len as u64 * u64::from(per_million) / 1_000_000) as usize
}

fn apply(bytes: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in muts {
        match m {
            Mutation::Truncate(keep) => b.truncate(b.len() * usize::from(*keep) / 1000),
            Mutation::Flip(bits) => {
                for &(p, bit) in bits {
                    if !b.is_empty() {
                        let i = at(b.len(), p);
                        b[i] ^= 1 << bit;
                    }
                }
            }
            Mutation::Overwrite(p, g) => {
                let i = at(b.len(), *p);
                let end = (i + g.len()).min(b.len());
                b[i..end].copy_from_slice(&g[..end - i]);
            }
            Mutation::Insert(p, g) => {
                let i = at(b.len(), *p);
                b.splice(i..i, g.iter().copied());
            }
            Mutation::Remove(p, n) => {
                let i = at(b.len(), *p);
                let end = (i + usize::from(*n)).min(b.len());
                b.drain(i..end);
            }
            Mutation::Set(p, v) => {
                if !b.is_empty() {
                    let i = at(b.len(), *p);
                    b[i] = *v;
                }
            }
        }
    }
    b
}

/// An error must name the file; and the offset, unless it is about the version.
fn assert_names(err: &FormatError, file: &str) {
    let msg = err.to_string();
    assert!(msg.contains(file), "error does not name {file}: {msg}");
    if !matches!(
        err,
        FormatError::UnsupportedVersion { .. } | FormatError::Manifest { .. }
    ) {
        assert!(
            msg.contains("offset"),
            "error does not give an offset: {msg}"
        );
    }
}

fn shards() -> [(Compression, Vec<u8>, Vec<u8>); 2] {
    let samples = fixed_samples();
    let (p, pi) = write_shard(&samples, Compression::None);
    let (z, zi) = write_shard(&samples, Compression::Zstd);
    [(Compression::None, p, pi), (Compression::Zstd, z, zi)]
}

/// Uses every accessor of an index that validated, so a bad record that
/// slipped through validation would panic here.
fn touch_everything(index: &ShardIndex) {
    for i in 0..index.len() {
        let key = index.key(i).to_owned();
        let _ = index.sample(i);
        for m in index.members(i) {
            assert!(!m.ext.is_empty());
        }
        // A forged lookup table may hide a key, but must not point at a wrong one.
        if let Some(j) = index.find(&key) {
            assert_eq!(index.key(j), key);
        }
    }
    for j in 0..index.member_count() {
        let _ = index.member(j);
    }
}

fn recompute_footer(b: &mut [u8]) {
    if b.len() >= 8 {
        let body = b.len() - 8;
        let sum = checksum(&b[..body]);
        b[body..].copy_from_slice(&sum.to_le_bytes());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Damaged index bytes are refused (the footer checksum catches any
    /// change); the error names the file and offset.
    #[test]
    fn damaged_index_is_an_error(muts in prop::collection::vec(mutation(), 1..4), zstd in any::<bool>()) {
        let [plain, zst] = shards();
        let (_, _, idx) = if zstd { zst } else { plain };
        let bad = apply(&idx, &muts);
        match ShardIndex::from_bytes(bad.clone(), "damaged-000001.idx") {
            Ok(index) => {
                // Only a mutation that changed nothing may pass.
                prop_assert_eq!(&bad, &idx);
                touch_everything(&index);
            }
            Err(e) => assert_names(&e, "damaged-000001.idx"),
        }
    }

    /// The same, with the footer checksum recomputed after the damage (as a
    /// buggy or hostile writer would): the record checks alone must keep
    /// every accessor, and random access through the index, panic-free.
    #[test]
    fn forged_index_never_panics(muts in prop::collection::vec(mutation(), 1..4), zstd in any::<bool>()) {
        let [plain, zst] = shards();
        let (compression, shard, idx) = if zstd { zst } else { plain };
        let mut bad = apply(&idx[..idx.len() - 8], &muts);
        bad.extend_from_slice(&[0; 8]);
        recompute_footer(&mut bad);
        match ShardIndex::from_bytes(bad.clone(), "forged.idx") {
            Ok(index) => {
                touch_everything(&index);
                let dir = tempfile::tempdir().unwrap();
                let shard_path = dir.path().join(format!("forged.{}", compression.extension()));
                fs::write(&shard_path, &shard).unwrap();
                fs::write(dir.path().join("forged.idx"), &bad).unwrap();
                if let Ok(r) = ShardReader::open(&shard_path, dir.path().join("forged.idx")) {
                    for i in 0..r.len() {
                        if let Err(e) = r.read(i, true) {
                            prop_assert!(e.to_string().contains("forged."), "{}", e);
                        }
                    }
                }
            }
            Err(e) => assert_names(&e, "forged.idx"),
        }
    }

    /// A damaged tar streams to samples or to an error naming the file and
    /// offset, never a panic; short reads do not change the outcome.
    #[test]
    fn damaged_tar_stream_never_panics(muts in prop::collection::vec(mutation(), 1..4), seed in any::<u64>()) {
        let [(_, plain, _), _] = shards();
        let bad = apply(&plain, &muts);
        let whole: Result<Vec<_>, String> = SampleStream::new(&bad[..], "damaged-000002.tar")
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| { assert_names(&e, "damaged-000002.tar"); e.to_string() });
        let short: Result<Vec<_>, String> = SampleStream::new(ShortReader::new(&bad[..], seed, true), "damaged-000002.tar")
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string());
        prop_assert_eq!(whole, short);
    }

    /// A damaged `.tar.zst` streams (through the zstd decoder) to samples or to
    /// an error naming the file, never a panic.
    #[test]
    fn damaged_zstd_stream_never_panics(muts in prop::collection::vec(mutation(), 1..4)) {
        let [_, (_, zst, _)] = shards();
        let bad = apply(&zst, &muts);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("damaged-000003.tar.zst");
        fs::write(&path, &bad).unwrap();
        // A damaged start is refused at open or in the stream, naming the file.
        let stream = match bale_format::open_shard_stream(&path, Compression::Zstd) {
            Ok(s) => s,
            Err(e) => {
                assert_names(&e, "damaged-000003.tar.zst");
                return Ok(());
            }
        };
        for item in stream {
            if let Err(e) = item {
                assert_names(&e, "damaged-000003.tar.zst");
            }
        }
    }

    /// Random access to a damaged shard through its intact index: with
    /// verification on, a read either fails naming the shard or returns
    /// exactly the bytes written.
    #[test]
    fn damaged_shard_random_access(muts in prop::collection::vec(mutation(), 1..4), zstd in any::<bool>()) {
        let samples = fixed_samples();
        let [plain, zst] = shards();
        let (compression, shard, idx) = if zstd { zst } else { plain };
        let bad = apply(&shard, &muts);
        let dir = tempfile::tempdir().unwrap();
        let shard_path = dir.path().join(format!("damaged-000004.{}", compression.extension()));
        let idx_path = dir.path().join("damaged-000004.idx");
        fs::write(&shard_path, &bad).unwrap();
        fs::write(&idx_path, &idx).unwrap();
        match ShardReader::open(&shard_path, &idx_path) {
            Ok(r) => {
                for (i, (key, members)) in samples.iter().enumerate() {
                    match r.read(i, true) {
                        Ok(s) => {
                            prop_assert_eq!(&s.key, key);
                            prop_assert_eq!(&s.members, members);
                        }
                        Err(e) => assert_names(&e, "damaged-000004."),
                    }
                }
            }
            Err(e) => {
                // Only a change of length is seen at open.
                prop_assert_ne!(bad.len(), shard.len());
                assert_names(&e, "damaged-000004.");
            }
        }
    }
}

// ---- the manifest ----

fn valid_manifest() -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    for (n, c) in [(0, Compression::None), (1, Compression::Zstd)] {
        let name = bale_format::shard_file_name("shard", n, c);
        let mut w = ShardFileWriter::create(dir.path(), &name, c, 0).unwrap();
        for (key, members) in fixed_samples() {
            let members: Vec<_> = members
                .iter()
                .map(|(ext, data)| bale_format::Member { ext, data })
                .collect();
            w.writer().write_sample(&key, &members).unwrap();
        }
        entries.push(w.finish().unwrap());
    }
    let created_by = CreatedBy {
        tool: "bale".into(),
        version: "0.1.0".into(),
        command: "pack".into(),
        options: serde_json::json!({"shard_size": 1000, "nested": [1, {"a": null}]}),
    };
    Manifest::new(entries, Some(vec!["cat".into(), "dog".into()]), created_by).to_bytes()
}

/// Every JSON pointer into `v`.
fn pointers(v: &serde_json::Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                pointers(
                    x,
                    format!("{here}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                pointers(x, format!("{here}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::json;
    prop_oneof![
        Just(json!(null)),
        Just(json!(-1)),
        Just(json!(0)),
        Just(json!(u64::MAX)),
        Just(json!(1.5e300)),
        Just(json!("")),
        Just(json!("zstd")),
        Just(json!("2.0")),
        Just(json!("1.999999999999")),
        Just(json!("a\u{0}b")),
        Just(json!([])),
        Just(json!({})),
        Just(json!([[[[[]]]]])),
        any::<i64>().prop_map(|n| json!(n)),
        "[ -~]{0,20}".prop_map(|s| json!(s)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Damaged manifest bytes: an error naming the file, never a panic.
    #[test]
    fn damaged_manifest_bytes(muts in prop::collection::vec(mutation(), 1..4)) {
        let good = valid_manifest();
        let bad = apply(&good, &muts);
        if let Err(e) = Manifest::from_slice(&bad, Path::new("d/bale.json")) {
            prop_assert!(e.to_string().contains("d/bale.json"), "{}", e);
        }
    }

    /// Well-formed JSON with a value replaced: an error naming the file, or a
    /// manifest that writes and reads back to itself.
    #[test]
    fn damaged_manifest_values(pick in any::<prop::sample::Index>(), value in json_value()) {
        let good = valid_manifest();
        let mut v: serde_json::Value = serde_json::from_slice(&good).unwrap();
        let mut ptrs = Vec::new();
        pointers(&v, String::new(), &mut ptrs);
        let ptr = &ptrs[pick.index(ptrs.len())];
        if ptr.is_empty() { v = value; } else { *v.pointer_mut(ptr).unwrap() = value; }
        let bytes = serde_json::to_vec(&v).unwrap();
        match Manifest::from_slice(&bytes, Path::new("d/bale.json")) {
            Ok(m) => {
                let back = Manifest::from_slice(&m.to_bytes(), Path::new("d/bale.json")).unwrap();
                prop_assert_eq!(back, m);
            }
            Err(e) => prop_assert!(e.to_string().contains("d/bale.json"), "{}", e),
        }
    }
}

// ---- deterministic cases ----

/// Every single truncation of a shard's tar stream is an error naming the
/// file and offset, wherever the cut falls, a member boundary included: only
/// a cut inside the end-of-archive blocks, after the first, reads cleanly.
#[test]
fn every_truncation_of_a_tar() {
    let samples = fixed_samples();
    let [(_, plain, _), (_, zst, _)] = shards();
    for cut in 0..plain.len() {
        let got: Result<Vec<_>, _> = SampleStream::new(&plain[..cut], "cut.tar").collect();
        match got {
            Ok(got) => {
                assert_eq!(common::as_test_samples(&got), samples, "cut {cut}");
                assert!(cut >= plain.len() - 512, "cut {cut} read without error");
            }
            Err(e) => assert_names(&e, "cut.tar"),
        }
    }
    // A .tar.zst cut between frames decodes cleanly to a tar cut at a sample
    // boundary: that too is an error.
    let index = ShardIndex::from_bytes(shards()[1].2.clone(), "x").unwrap();
    for i in 0..index.len() {
        let e = index.sample(i);
        let cut = &zst[..(e.file_offset + e.file_len) as usize];
        let dec = zstd::stream::read::Decoder::with_dictionary(cut, index.zstd_dict()).unwrap();
        let got: Result<Vec<_>, _> = SampleStream::new(dec, "cut.tar.zst").collect();
        assert_names(&got.unwrap_err(), "cut.tar.zst");
    }
}

/// Foreign files are refused with an error that says what they are not.
#[test]
fn foreign_files_are_refused() {
    let [(_, plain, _), (_, zst, _)] = shards();
    for (bytes, what) in [
        (&b""[..], "empty"),
        (&plain[..], "a tar"),
        (&zst[..], "a tar.zst"),
        (&b"BALEIDX"[..], "a magic prefix"),
        (&br#"{"format": "bale"}"#[..], "json"),
    ] {
        let err = ShardIndex::from_bytes(bytes.to_vec(), "foreign.idx").unwrap_err();
        assert!(matches!(err, FormatError::BadMagic { .. }), "{what}: {err}");
        assert_names(&err, "foreign.idx");
    }
    for (bytes, what) in [
        (&b""[..], "empty"),
        (&plain[..], "a tar"),
        (&b"[]"[..], "an array"),
    ] {
        let err = Manifest::from_slice(bytes, Path::new("foreign.json")).unwrap_err();
        assert!(err.to_string().contains("foreign.json"), "{what}: {err}");
    }
    // An index read as a tar, a zstd shard read as a plain tar: header errors, not samples.
    let idx = &shards()[0].2;
    for (bytes, name) in [(&idx[..], "idx-as.tar"), (&zst[..], "zst-as.tar")] {
        let err = SampleStream::new(bytes, name).next().unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                FormatError::Tar { offset: 0, .. } | FormatError::Truncated { .. }
            ),
            "{err}"
        );
        assert_names(&err, name);
    }
}

/// A flipped byte of member data is caught by `read(.., verify = true)`,
/// and the error names the shard, the key and the member.
#[test]
fn checksum_mismatch_names_shard_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let samples = fixed_samples();
    let mut w =
        ShardFileWriter::create(dir.path(), "shard-000000.tar", Compression::None, 0).unwrap();
    for (key, members) in &samples {
        let members: Vec<_> = members
            .iter()
            .map(|(ext, data)| bale_format::Member { ext, data })
            .collect();
        w.writer().write_sample(key, &members).unwrap();
    }
    w.finish().unwrap();
    let shard_path = dir.path().join("shard-000000.tar");
    let idx_path = dir.path().join("shard-000000.idx");
    let index = ShardIndex::open(&idx_path).unwrap();
    let m = index.members(1).next().unwrap();
    let mut bytes = fs::read(&shard_path).unwrap();
    bytes[(m.offset + m.size / 2) as usize] ^= 0x20;
    fs::write(&shard_path, &bytes).unwrap();

    let r = ShardReader::open(&shard_path, &idx_path).unwrap();
    let err = r.read(1, true).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, FormatError::ChecksumMismatch { .. }), "{msg}");
    assert!(msg.contains("shard-000000.tar"), "{msg}");
    assert!(msg.contains(&samples[1].0), "{msg}");
    assert!(msg.contains("seg.png"), "{msg}");
    assert!(msg.contains(&m.offset.to_string()), "{msg}");
    // Without verification the damaged bytes come back; the other samples are intact.
    let s = r.read(1, false).unwrap();
    assert_ne!(s.members, samples[1].1);
    for i in [0, 2, 3, 4] {
        assert_eq!(r.read(i, true).unwrap().members, samples[i].1);
    }
}

/// A damaged zstd frame is an error naming the shard and the frame's offset.
#[test]
fn damaged_zstd_frame_names_shard_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let [_, (_, zst, idx)] = shards();
    let index = ShardIndex::from_bytes(idx.clone(), "x").unwrap();
    let e = index.sample(1);
    let shard_path = dir.path().join("z-000000.tar.zst");
    let idx_path = dir.path().join("z-000000.idx");
    fs::write(&idx_path, &idx).unwrap();
    // Damage the frame's header: the frame no longer decodes at all.
    let mut bad = zst.clone();
    bad[e.file_offset as usize] ^= 0xff;
    fs::write(&shard_path, &bad).unwrap();
    let r = ShardReader::open(&shard_path, &idx_path).unwrap();
    let msg = r.read(1, true).unwrap_err().to_string();
    assert!(
        msg.contains("z-000000.tar.zst") && msg.contains(&format!("offset {}", e.file_offset)),
        "{msg}"
    );
    assert_eq!(r.read(0, true).unwrap().members, fixed_samples()[0].1);
}

/// An index that claims a sample decompresses to an absurd size (with a
/// valid footer) is refused before any allocation of that size.
#[test]
fn forged_huge_frame_size_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let samples: Vec<TestSample> = vec![("a".into(), vec![("txt".into(), b"hello".to_vec())])];
    let (zst, idx) = write_shard(&samples, Compression::Zstd);
    let good = ShardIndex::from_bytes(idx, "x").unwrap();
    let e = good.sample(0);
    let m = good.member(0);
    for huge in [1u64 << 40, 1 << 62, u64::MAX / 2] {
        let mut b = IndexBuilder::new(Compression::Zstd);
        b.push_sample(
            "a",
            e.file_offset,
            e.file_len,
            0,
            huge,
            &[("txt", m.offset, m.size, m.checksum)],
        );
        let forged = b.to_bytes(zst.len() as u64, huge + 1024);
        fs::write(dir.path().join("h.tar.zst"), &zst).unwrap();
        fs::write(dir.path().join("h.idx"), &forged).unwrap();
        let r = ShardReader::open(dir.path().join("h.tar.zst"), dir.path().join("h.idx")).unwrap();
        let err = r.read(0, true).unwrap_err();
        assert_names(&err, "h.tar.zst");
    }
}

/// Tar size fields at the top of the u64 range are errors, not overflows.
#[test]
fn huge_tar_size_fields_are_errors() {
    for size_field in [
        [
            0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
        [
            0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
        [
            0x80, 0, 0, 0, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        ],
    ] {
        let mut tar = Vec::new();
        bale_format::fuzzing::encode_member_header("k.bin", 0, &mut tar);
        tar[124..136].copy_from_slice(&size_field);
        tar[148..156].copy_from_slice(b"        ");
        let sum: u32 = tar[..512].iter().map(|&b| u32::from(b)).sum();
        tar[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        tar.extend_from_slice(&[0u8; 2048]);
        let err = SampleStream::new(&tar[..], "huge.tar")
            .next()
            .unwrap()
            .unwrap_err();
        assert_names(&err, "huge.tar");
        // Skipping the entry (a directory-like non-sample name) must not overflow either.
        let mut r = bale_format::fuzzing::TarReader::new(&tar[..], "huge.tar");
        let first = r.next_entry();
        if first.is_ok() {
            assert_names(&r.next_entry().unwrap_err(), "huge.tar");
        }
    }
    // The same through a pax size record.
    let mut tar = Vec::new();
    let rec = format!("29 size={}\n", u64::MAX);
    assert_eq!(rec.len(), 29);
    let mut pax = Vec::new();
    bale_format::fuzzing::encode_member_header("x", rec.len() as u64, &mut pax);
    pax[156] = b'x';
    pax[148..156].copy_from_slice(b"        ");
    let sum: u32 = pax[..512].iter().map(|&b| u32::from(b)).sum();
    pax[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    tar.extend_from_slice(&pax);
    tar.extend_from_slice(rec.as_bytes());
    tar.resize(1024, 0);
    bale_format::fuzzing::encode_member_header("k.bin", 0, &mut tar);
    tar.extend_from_slice(&[0u8; 2048]);
    let err = SampleStream::new(&tar[..], "paxsize.tar")
        .next()
        .unwrap()
        .unwrap_err();
    assert_names(&err, "paxsize.tar");
}

/// Sample counts whose sum overflows 64 bits are an error, not an overflow.
#[test]
fn manifest_sample_counts_overflowing_are_an_error() {
    let mut v: serde_json::Value = serde_json::from_slice(&valid_manifest()).unwrap();
    v["shards"][0]["samples"] = u64::MAX.into();
    v["shards"][1]["samples"] = 2.into();
    v["samples"] = 1.into();
    let err = Manifest::from_slice(&serde_json::to_vec(&v).unwrap(), Path::new("o/bale.json"))
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("o/bale.json") && msg.contains("more than 2^64"),
        "{msg}"
    );
}

/// A scattered (index 1.1, HDF5-kind) index over a made-up shard file: three
/// samples whose members lie anywhere in the file, in any order.
fn scattered_shard() -> (Vec<u8>, Vec<u8>) {
    let file: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut b = bale_format::IndexBuilder::new(Compression::H5);
    let m = |ext: &'static str, off: u64, size: u64| {
        let sum = checksum(&file[off as usize..(off + size) as usize]);
        (ext, off, size, sum)
    };
    b.push_sample("s/0", 0, 0, 0, 0, &[m("jpg", 3000, 500), m("cls", 10, 1)]);
    b.push_sample("s/1", 0, 0, 0, 0, &[m("jpg", 100, 900)]);
    b.push_sample("s/2", 0, 0, 0, 0, &[m("json", 4000, 96), m("jpg", 1000, 0)]);
    let idx = b.to_bytes(file.len() as u64, 0);
    (file, idx)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// A forged scattered index (footer recomputed) keeps every accessor and
    /// every member read panic-free; a read that fails names the shard.
    #[test]
    fn forged_scattered_index_never_panics(muts in prop::collection::vec(mutation(), 1..4)) {
        let (file, idx) = scattered_shard();
        let mut bad = apply(&idx[..idx.len() - 8], &muts);
        bad.extend_from_slice(&[0; 8]);
        recompute_footer(&mut bad);
        match ShardIndex::from_bytes(bad.clone(), "forged.idx") {
            Ok(index) => {
                touch_everything(&index);
                let dir = tempfile::tempdir().unwrap();
                let shard_path = dir.path().join("forged.h5");
                fs::write(&shard_path, &file).unwrap();
                fs::write(dir.path().join("forged.idx"), &bad).unwrap();
                if let Ok(r) = ShardReader::open(&shard_path, dir.path().join("forged.idx")) {
                    for i in 0..r.len() {
                        if let Err(e) = r.read(i, true) {
                            prop_assert!(e.to_string().contains("forged."), "{}", e);
                        }
                    }
                }
            }
            Err(e) => assert_names(&e, "forged.idx"),
        }
    }
}

#[test]
fn scattered_shard_reads_back() {
    let (file, idx) = scattered_shard();
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("s.h5"), &file).unwrap();
    fs::write(dir.path().join("s.idx"), &idx).unwrap();
    let r = ShardReader::open(dir.path().join("s.h5"), dir.path().join("s.idx")).unwrap();
    let s = r.read(0, true).unwrap();
    assert_eq!(s.get("jpg").unwrap(), &file[3000..3500]);
    assert_eq!(s.members[1].0, "cls");
    assert_eq!(r.read(2, true).unwrap().get("jpg"), Some(&b""[..]));
}
