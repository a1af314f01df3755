//! Writer edge cases: long names, duplicate keys and extensions, invalid
//! names, misuse of the sample API, streamed members. After a refused
//! sample the writer stays usable and the shard holds no trace of it.

mod common;

use std::io::Read;
use std::path::Path;

use bale_format::fuzzing::{PAX_HEADER_NAME, TarReader};
use bale_format::{
    Compression, FormatError, Member, MemberSource, SampleStream, ShardIndex, ShardWriter,
    index_file_name, shard_file_name,
};
use common::{TestSample, as_test_samples, collect_stream, write_shard};

fn writer() -> ShardWriter<Vec<u8>> {
    ShardWriter::new(Vec::new(), "edge-000000.tar", Compression::None, 0).unwrap()
}

fn finish(w: ShardWriter<Vec<u8>>) -> (Vec<TestSample>, ShardIndex, Vec<u8>) {
    let (tar, idx, _) = w.finish().unwrap();
    let index = ShardIndex::from_bytes(idx, "edge.idx").unwrap();
    let samples =
        as_test_samples(&collect_stream(SampleStream::new(&tar[..], "edge.tar")).unwrap());
    (samples, index, tar)
}

fn m<'a>(ext: &'a str, data: &'a [u8]) -> Member<'a> {
    Member { ext, data }
}

#[test]
fn names_over_100_bytes_get_a_pax_path() {
    // Lengths of "<key>.<ext>" around the ustar limit, with multibyte UTF-8
    // straddling byte 100.
    let cases = [
        ("a".repeat(96), 100usize, false),
        ("a".repeat(97), 101, true),
        (
            format!("{}/{}", "dir".repeat(40), "é".repeat(30)),
            185,
            true,
        ),
        (format!("{}é", "b".repeat(98)), 104, true),
        (
            format!("{}/x", "deep/".repeat(200).trim_end_matches('/')),
            1005,
            true,
        ),
    ];
    for (key, len, pax) in cases {
        let name = format!("{key}.bin");
        assert_eq!(name.len(), len, "{key}");
        let mut w = writer();
        w.write_sample(&key, &[m("bin", b"data")]).unwrap();
        let (samples, index, tar) = finish(w);
        assert_eq!(
            samples,
            vec![(key.clone(), vec![("bin".into(), b"data".to_vec())])]
        );
        assert_eq!(index.key(0), key);
        // The first header is a pax extended header exactly when needed.
        assert_eq!(tar[156] == b'x', pax, "{name}");
        if pax {
            assert_eq!(&tar[..PAX_HEADER_NAME.len()], PAX_HEADER_NAME);
            let rec = format!(" path={name}\n");
            assert!(
                tar.windows(rec.len()).any(|w| w == rec.as_bytes()),
                "pax record for {name}"
            );
        }
        let e = TarReader::new(&tar[..], "edge.tar")
            .next_entry()
            .unwrap()
            .unwrap();
        assert_eq!(e.name, name.as_bytes());
        assert_eq!(e.header_offset, 0);
        assert_eq!(e.data_offset, index.member(0).offset);
    }
}

#[test]
fn duplicate_key_is_refused_and_leaves_no_trace() {
    let mut w = writer();
    w.write_sample("k/1", &[m("txt", b"one")]).unwrap();
    let before = w.bytes_written();
    let err = w.write_sample("k/1", &[m("txt", b"two")]).unwrap_err();
    assert!(matches!(err, FormatError::DuplicateKey { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("edge-000000.tar") && msg.contains("\"k/1\""),
        "{msg}"
    );
    assert_eq!(w.bytes_written(), before);
    // The low-level API refuses it too.
    assert!(matches!(
        w.begin_sample("k/1"),
        Err(FormatError::DuplicateKey { .. })
    ));
    w.write_sample("k/2", &[m("txt", b"three")]).unwrap();
    let (samples, index, _) = finish(w);
    assert_eq!(
        samples,
        vec![
            ("k/1".into(), vec![("txt".into(), b"one".to_vec())]),
            ("k/2".into(), vec![("txt".into(), b"three".to_vec())]),
        ]
    );
    assert_eq!(index.len(), 2);
}

#[test]
fn refused_samples_leave_the_writer_usable() {
    let mut w = writer();
    w.write_sample("ok/0", &[m("a", b"0")]).unwrap();
    let before = w.bytes_written();
    let refused: Vec<(&str, Vec<Member<'_>>, &str)> = vec![
        (
            "dup",
            vec![m("jpg", b"x"), m("cls", b"1"), m("jpg", b"y")],
            "share an extension",
        ),
        ("noext", vec![m("", b"x")], "empty extension"),
        ("badext", vec![m("ok", b"x"), m("a/b", b"y")], "'/'"),
        ("badext2", vec![m(".jpg", b"x")], "empty dot-separated part"),
        ("empty", vec![], "at least one member"),
        ("", vec![m("a", b"x")], "empty key"),
        ("/abs", vec![m("a", b"x")], "absolute"),
        ("a//b", vec![m("a", b"x")], "empty path component"),
        ("a/../b", vec![m("a", b"x")], "'..'"),
        ("./a", vec![m("a", b"x")], "'..'"),
        ("a/b.c", vec![m("a", b"x")], "holds a dot"),
        ("a\0b", vec![m("a", b"x")], "NUL"),
        ("a\\b", vec![m("a", b"x")], "backslash"),
    ];
    for (key, members, reason) in &refused {
        let err = w.write_sample(key, members).unwrap_err();
        assert!(
            matches!(err, FormatError::InvalidName { .. }),
            "{key:?}: {err}"
        );
        assert!(err.to_string().contains(reason), "{key:?}: {err}");
        assert_eq!(w.bytes_written(), before, "{key:?} wrote bytes");
    }
    // Keys whose samples were refused for their members are still free.
    w.write_sample("dup", &[m("jpg", b"x")]).unwrap();
    w.write_sample("empty", &[m("txt", b"")]).unwrap();
    let (samples, index, _) = finish(w);
    let keys: Vec<&str> = samples.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(keys, ["ok/0", "dup", "empty"]);
    assert_eq!(index.member_count(), 3);
}

#[test]
fn sample_api_misuse_is_an_error() {
    let mut w = writer();
    let e = w.add_member("txt", b"x").unwrap_err();
    assert!(e.to_string().contains("outside a sample"), "{e}");
    let e = w.end_sample().unwrap_err();
    assert!(e.to_string().contains("without an open sample"), "{e}");
    w.begin_sample("s").unwrap();
    let e = w.begin_sample("t").unwrap_err();
    assert!(e.to_string().contains("another sample is open"), "{e}");
    w.add_member("txt", b"x").unwrap();
    let e = w.add_member("txt", b"y").unwrap_err();
    assert!(e.to_string().contains("share an extension"), "{e}");
    w.add_member("cls", b"1").unwrap();
    let mut w2 = writer();
    w2.begin_sample("open").unwrap();
    w2.add_member("a", b"x").unwrap();
    let e = w2.finish().unwrap_err();
    assert!(
        e.to_string().contains("still open") && e.to_string().contains("edge-000000.tar"),
        "{e}"
    );
    w.end_sample().unwrap();
    let (samples, _, _) = finish(w);
    assert_eq!(
        samples,
        vec![(
            "s".into(),
            vec![("txt".into(), b"x".to_vec()), ("cls".into(), b"1".to_vec())]
        )]
    );
}

#[test]
fn zstd_levels_are_checked() {
    for bad in [-1, 23, 100] {
        let e = ShardWriter::new(Vec::new(), "z.tar.zst", Compression::Zstd, bad).unwrap_err();
        assert!(
            e.to_string().contains("z.tar.zst") && e.to_string().contains("1..=22"),
            "{e}"
        );
    }
    // Levels change the bytes, not the tar inside.
    let samples = common::fixed_samples();
    let (plain, _) = write_shard(&samples, Compression::None);
    for level in [1, 19] {
        let mut w = ShardWriter::new(Vec::new(), "z.tar.zst", Compression::Zstd, level).unwrap();
        for (key, members) in &samples {
            let members: Vec<_> = members.iter().map(|(e, d)| m(e, d)).collect();
            w.write_sample(key, &members).unwrap();
        }
        let (z, idx, _) = w.finish().unwrap();
        let idx = ShardIndex::from_bytes(idx, "z.idx").unwrap();
        let mut tar = Vec::new();
        zstd::stream::read::Decoder::with_dictionary(&z[..], idx.zstd_dict())
            .unwrap()
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(tar, plain, "level {level}");
    }
}

#[test]
fn streamed_members_match_in_memory_members() {
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for c in [Compression::None, Compression::Zstd] {
        let mut a = ShardWriter::new(Vec::new(), "a.tar", c, 0).unwrap();
        a.write_sample("big", &[m("bin", &data), m("txt", b"")])
            .unwrap();
        let mut b = ShardWriter::new(Vec::new(), "a.tar", c, 0).unwrap();
        b.begin_sample("big").unwrap();
        // A reader that returns a few bytes at a time.
        let mut src = common::ShortReader::new(&data[..], 5, false);
        b.add_member_from(
            "bin",
            MemberSource {
                size: data.len() as u64,
                reader: &mut src,
                path: Path::new("src.bin"),
            },
        )
        .unwrap();
        b.add_member_from(
            "txt",
            MemberSource {
                size: 0,
                reader: &mut std::io::empty(),
                path: Path::new("empty.txt"),
            },
        )
        .unwrap();
        b.end_sample().unwrap();
        let (ta, ia, _) = a.finish().unwrap();
        let (tb, ib, _) = b.finish().unwrap();
        assert!(ta == tb && ia == ib, "{c:?}: streamed member differs");
    }
    // A source that shrank is an error naming it.
    let mut w = writer();
    w.begin_sample("k").unwrap();
    let mut short = (&data[..100]).take(100);
    let e = w
        .add_member_from(
            "bin",
            MemberSource {
                size: 200,
                reader: &mut short,
                path: Path::new("shrunk.bin"),
            },
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("shrunk.bin") && e.to_string().contains("shrank"),
        "{e}"
    );
}

#[test]
fn empty_members_are_headers_only() {
    let mut w = writer();
    w.write_sample("e", &[m("a", b""), m("b", b""), m("c", b"x")])
        .unwrap();
    let (samples, index, tar) = finish(w);
    assert_eq!(
        samples[0].1,
        vec![
            ("a".into(), vec![]),
            ("b".into(), vec![]),
            ("c".into(), b"x".to_vec())
        ]
    );
    let offsets: Vec<(u64, u64)> = index.members(0).map(|m| (m.offset, m.size)).collect();
    // Header a, header b, header c, one data block, two end blocks.
    assert_eq!(offsets, [(512, 0), (1024, 0), (1536, 1)]);
    assert_eq!(tar.len(), 6 * 512);
    assert_eq!(index.sample(0).tar_len, 4 * 512);
}

#[test]
fn file_names() {
    assert_eq!(
        shard_file_name("shard", 7, Compression::None),
        "shard-000007.tar"
    );
    assert_eq!(
        shard_file_name("train", 1_234_567, Compression::Zstd),
        "train-1234567.tar.zst"
    );
    assert_eq!(index_file_name("shard-000007.tar"), "shard-000007.idx");
    assert_eq!(index_file_name("train-000001.tar.zst"), "train-000001.idx");
}

/// The dictionary is the tar's first 16 KiB when the first sample is longer
/// (streamed member by member: held back only up to that bound), and every
/// sample, the first included, reads back through it; one shorter first
/// sample gives a dictionary of its own length.
#[test]
fn zstd_dictionary_is_the_start_of_the_tar() {
    let big: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 253) as u8).collect();
    for first in [&big[..], &big[..900]] {
        let mut w = ShardWriter::new(Vec::new(), "d.tar.zst", Compression::Zstd, 0).unwrap();
        let mut p = ShardWriter::new(Vec::new(), "d.tar", Compression::None, 0).unwrap();
        for w in [&mut w, &mut p] {
            w.write_sample("s/0", &[m("bin", first), m("cls", b"1")])
                .unwrap();
            for i in 1..50 {
                let body = format!("sample {i} {}", "x".repeat(i * 40));
                w.write_sample(
                    &format!("s/{i}"),
                    &[m("txt", body.as_bytes()), m("cls", b"2")],
                )
                .unwrap();
            }
        }
        let (z, zi, _) = w.finish().unwrap();
        let (plain, _, _) = p.finish().unwrap();
        let zi = ShardIndex::from_bytes(zi, "d.idx").unwrap();
        let dict = zi.zstd_dict();
        let want = (first.len().div_ceil(512) * 512 + 3 * 512).min(bale_format::ZSTD_DICT_MAX);
        assert_eq!(dict.len(), want);
        assert_eq!(dict, &plain[..dict.len()]);
        assert_eq!(&z[..4], &bale_format::ZSTD_DICT_FRAME_MAGIC.to_le_bytes());
        assert_eq!(&z[8..8 + dict.len()], dict);
        assert_eq!(zi.sample(0).file_offset, 8 + dict.len() as u64);
        for i in 0..zi.len() {
            let e = zi.sample(i);
            let frame = &z[e.file_offset as usize..(e.file_offset + e.file_len) as usize];
            let tar = bale_format::read::decompress_frame(
                Path::new("d.tar.zst"),
                e.file_offset,
                frame,
                e.tar_len,
                dict,
            )
            .unwrap();
            assert_eq!(
                tar,
                &plain[e.tar_offset as usize..(e.tar_offset + e.tar_len) as usize]
            );
            // Without it, the frame does not give the sample back.
            let bare = bale_format::read::decompress_frame(
                Path::new("d.tar.zst"),
                e.file_offset,
                frame,
                e.tar_len,
                &[],
            );
            assert!(
                bare.map_or(true, |t| t != tar),
                "sample {i} decodes without the dictionary"
            );
        }
    }
}
