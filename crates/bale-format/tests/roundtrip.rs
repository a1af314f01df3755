//! Round trips: whatever samples go into a [`ShardWriter`] come back out,
//! byte for byte, through the index (random access) and through
//! [`SampleStream`] (sequential, plain and zstd, with short reads), and the
//! index agrees with the positions the stream sees.

mod common;

use std::fs;
use std::io::Read;
use std::path::Path;

use bale_format::read::{self, ShardReader};
use bale_format::{
    Compression, Member, SampleStream, ShardFileWriter, ShardIndex, ZSTD_DICT_FRAME_MAGIC,
    ZSTD_DICT_MAX, checksum, index_file_bytes, index_file_name, open_shard_stream, shard_file_name,
};
use common::{
    ShortReader, TestSample, as_test_samples, collect_stream, fixed_samples, samples_strategy,
    write_shard,
};
use proptest::prelude::*;

/// The dictionary a `.tar.zst` shard holds in its opening skippable frame
/// (empty without one).
fn shard_dict(zst: &[u8]) -> &[u8] {
    let magic = u32::from_le_bytes(zst[..4].try_into().unwrap());
    if magic != ZSTD_DICT_FRAME_MAGIC {
        return &[];
    }
    let len = u32::from_le_bytes(zst[4..8].try_into().unwrap()) as usize;
    &zst[8..8 + len]
}

/// Checks everything a written shard promises about `samples`.
fn check_round_trip(samples: &[TestSample], seed: u64) {
    let (plain, plain_idx) = write_shard(samples, Compression::None);
    let (zst, zst_idx) = write_shard(samples, Compression::Zstd);

    // The zstd shard opens with its dictionary (a skippable frame): the first
    // bytes of the plain tar, up to ZSTD_DICT_MAX or the first sample's end.
    let dict = shard_dict(&zst);
    let plain_index = ShardIndex::from_bytes(plain_idx.clone(), "plain.idx").expect("index");
    if !samples.is_empty() {
        let first_len = plain_index.sample(0).tar_len as usize;
        assert_eq!(
            dict.len(),
            first_len.min(ZSTD_DICT_MAX),
            "dictionary length"
        );
        assert_eq!(
            dict,
            &plain[..dict.len()],
            "the dictionary is the tar's start"
        );
    } else {
        assert!(dict.is_empty(), "an empty shard has no dictionary");
    }
    // The zstd shard is the plain tar, compressed: with the dictionary, the zstd
    // CLI (`zstd -D dict -d`) and any decoder see the same tar.
    let mut decoded = Vec::new();
    zstd::stream::read::Decoder::with_dictionary(&zst[..], dict)
        .expect("decoder")
        .read_to_end(&mut decoded)
        .expect("zstd shard decodes with its dictionary");
    assert_eq!(
        decoded, plain,
        "zstd shard does not decode to the plain tar"
    );

    // Sequential: the stream yields exactly the samples written.
    let streamed =
        collect_stream(SampleStream::new(&plain[..], "plain.tar")).expect("stream plain tar");
    assert_eq!(as_test_samples(&streamed), samples);

    // Short reads (with EINTR) of the tar, and of both sides of the zstd decoder, change nothing.
    let short = collect_stream(SampleStream::new(
        ShortReader::new(&plain[..], seed, true),
        "short.tar",
    ))
    .expect("stream plain tar with short reads");
    assert_eq!(short, streamed);
    let dec = zstd::stream::read::Decoder::with_dictionary(
        std::io::BufReader::with_capacity(7, ShortReader::new(&zst[..], seed ^ 1, false)),
        dict,
    )
    .expect("decoder");
    let short_zst = collect_stream(SampleStream::new(
        ShortReader::new(dec, seed ^ 2, true),
        "short.tar.zst",
    ))
    .expect("stream zstd shard with short reads");
    assert_eq!(short_zst, streamed);

    for (compression, shard, idx_bytes) in [
        (Compression::None, &plain, plain_idx),
        (Compression::Zstd, &zst, zst_idx),
    ] {
        let index = ShardIndex::from_bytes(idx_bytes, "mem.idx").expect("index validates");
        let want: &[u8] = if compression == Compression::Zstd {
            dict
        } else {
            &[]
        };
        assert_eq!(
            index.zstd_dict(),
            want,
            "the index holds the shard's dictionary"
        );
        check_index(&index, samples, compression, shard, &plain, &streamed);
    }
}

fn check_index(
    index: &ShardIndex,
    samples: &[TestSample],
    compression: Compression,
    shard: &[u8],
    plain: &[u8],
    streamed: &[bale_format::StreamSample],
) {
    assert_eq!(index.len(), samples.len());
    assert_eq!(
        index.member_count(),
        samples.iter().map(|s| s.1.len()).sum::<usize>()
    );
    assert_eq!(index.compression(), compression);
    assert!(index.has_checksums());
    assert_eq!(index.shard_len(), shard.len() as u64);
    assert_eq!(index.tar_len(), plain.len() as u64);
    let dict = index.zstd_dict();
    let mut prev_file_end = if dict.is_empty() {
        0
    } else {
        8 + dict.len() as u64
    };
    for (i, (key, members)) in samples.iter().enumerate() {
        let e = index.sample(i);
        let s = &streamed[i];
        assert_eq!(index.key(i), key);
        assert_eq!(index.find(key), Some(i), "find({key:?})");
        // The index's ranges are the stream's positions.
        assert_eq!(e.tar_offset, s.tar_offset, "sample {i} tar_offset");
        assert_eq!(e.tar_offset + e.tar_len, s.tar_end, "sample {i} tar end");
        assert_eq!(e.member_count as usize, members.len());
        // Samples are contiguous and in order in the file.
        assert_eq!(
            e.file_offset, prev_file_end,
            "sample {i} does not follow the previous one"
        );
        prev_file_end = e.file_offset + e.file_len;
        for ((m, (ext, data)), sm) in index.members(i).zip(members).zip(&s.members) {
            assert_eq!(m.ext, ext);
            assert_eq!(m.size, data.len() as u64);
            assert_eq!(m.checksum, checksum(data));
            assert_eq!(m.offset, sm.offset, "member {key}.{ext} offset");
            assert_eq!(
                &plain[m.offset as usize..(m.offset + m.size) as usize],
                &data[..]
            );
        }
        // The bytes at file_offset..+file_len are the sample on their own: the
        // tar bytes, or one zstd frame that decodes to them with the
        // shard's dictionary as its only context.
        let file_bytes = &shard[e.file_offset as usize..(e.file_offset + e.file_len) as usize];
        let tar_bytes = &plain[e.tar_offset as usize..(e.tar_offset + e.tar_len) as usize];
        match compression {
            Compression::None => {
                assert_eq!((e.file_offset, e.file_len), (e.tar_offset, e.tar_len));
            }
            Compression::Zstd => {
                let frame = zstd::bulk::Decompressor::with_dictionary(dict)
                    .expect("decompressor")
                    .decompress(file_bytes, e.tar_len as usize)
                    .expect("sample frame decodes alone");
                assert_eq!(frame, tar_bytes, "sample {i}'s frame");
                let via = read::decompress_frame(
                    Path::new("mem.tar.zst"),
                    e.file_offset,
                    file_bytes,
                    e.tar_len,
                    dict,
                )
                .expect("decompress_frame");
                assert_eq!(via, tar_bytes);
            }
            Compression::H5 => unreachable!("this test writes tar shards"),
        }
    }
    // After the samples: the two end-of-archive blocks (their own frame when compressed).
    let tail = &shard[prev_file_end as usize..];
    let tail = match compression {
        Compression::None => tail.to_vec(),
        Compression::Zstd => zstd::bulk::Decompressor::with_dictionary(dict)
            .and_then(|mut d| d.decompress(tail, 1024))
            .expect("end frame decodes alone"),
        Compression::H5 => unreachable!("this test writes tar shards"),
    };
    assert_eq!(tail, vec![0u8; 1024]);
}

/// Writes `samples` through files (the way `bale pack` does) and reads them
/// back with [`ShardReader`] and [`open_shard_stream`].
fn check_files(samples: &[TestSample], compression: Compression) {
    let dir = tempfile::tempdir().unwrap();
    let name = shard_file_name("shard", 3, compression);
    let mut fw = ShardFileWriter::create(dir.path(), &name, compression, 0).unwrap();
    for (key, members) in samples {
        let members: Vec<Member<'_>> = members
            .iter()
            .map(|(ext, data)| Member { ext, data })
            .collect();
        fw.writer().write_sample(key, &members).unwrap();
    }
    let entry = fw.finish().unwrap();
    assert_eq!(entry.file, name);
    assert_eq!(entry.index, index_file_name(&name));
    // Only the two final files are left: no temporary file behind.
    let mut names: Vec<String> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let mut want = vec![entry.file.clone(), entry.index.clone()];
    want.sort();
    assert_eq!(names, want);

    // The file writer writes what the in-memory writer writes.
    let (mem_shard, mem_idx) = write_shard(samples, compression);
    let shard_path = dir.path().join(&entry.file);
    let index_path = dir.path().join(&entry.index);
    assert_eq!(fs::read(&shard_path).unwrap(), mem_shard);
    assert_eq!(fs::read(&index_path).unwrap(), &*index_file_bytes(&mem_idx));
    assert_eq!(entry.samples, samples.len() as u64);
    assert_eq!(entry.bytes, mem_shard.len() as u64);
    assert_eq!(
        entry.shard_xxh3,
        Some(format!("{:016x}", checksum(&mem_shard)))
    );

    let reader = ShardReader::open(&shard_path, &index_path).unwrap();
    assert_eq!(
        entry.index_xxh3,
        format!("{:016x}", reader.index().checksum())
    );
    assert_eq!(reader.len(), samples.len());
    for (i, (key, members)) in samples.iter().enumerate() {
        let s = reader.read(i, true).unwrap();
        assert_eq!(&s.key, key);
        assert_eq!(&s.members, members);
        for (ext, data) in members {
            assert_eq!(s.get(ext), Some(&data[..]));
        }
    }
    let streamed = collect_stream(open_shard_stream(&shard_path, compression).unwrap()).unwrap();
    assert_eq!(as_test_samples(&streamed), samples);
}

#[test]
fn fixed_samples_round_trip() {
    let samples = fixed_samples();
    check_round_trip(&samples, 7);
    check_files(&samples, Compression::None);
    check_files(&samples, Compression::Zstd);
}

#[test]
fn empty_shard_round_trips() {
    check_round_trip(&[], 1);
    check_files(&[], Compression::None);
    check_files(&[], Compression::Zstd);
    let (plain, _) = write_shard(&[], Compression::None);
    assert_eq!(plain, vec![0u8; 1024]);
}

#[test]
fn output_is_deterministic_and_headers_are_fixed() {
    let samples = fixed_samples();
    for c in [Compression::None, Compression::Zstd] {
        assert_eq!(write_shard(&samples, c), write_shard(&samples, c));
    }
    // Every ustar header carries mode 0644, uid/gid 0, mtime 0, no owner names.
    let (plain, idx) = write_shard(&samples, Compression::None);
    let index = ShardIndex::from_bytes(idx, "mem.idx").unwrap();
    for j in 0..index.member_count() {
        let m = index.member(j);
        let h = &plain[m.offset as usize - 512..m.offset as usize];
        assert_eq!(&h[100..108], b"0000644\0");
        assert_eq!(&h[108..116], b"0000000\0");
        assert_eq!(&h[116..124], b"0000000\0");
        assert_eq!(&h[136..148], b"00000000000\0");
        assert_eq!(h[156], b'0');
        assert_eq!(&h[257..265], b"ustar\x0000");
        assert!(h[265..329].iter().all(|&b| b == 0), "owner names are empty");
    }
}

#[test]
fn stream_survives_every_read_size() {
    // Every fixed read size from 1 to 1100 bytes, not just random ones.
    let samples = fixed_samples();
    let (plain, _) = write_shard(&samples, Compression::None);
    let want = collect_stream(SampleStream::new(&plain[..], "x")).unwrap();
    struct Fixed<'a>(&'a [u8], usize);
    impl Read for Fixed<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }
    for size in (1..=1100).step_by(7).chain([511, 512, 513, 1024]) {
        let got = collect_stream(SampleStream::new(Fixed(&plain, size), "x")).unwrap();
        assert_eq!(got, want, "read size {size}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn random_samples_round_trip(samples in samples_strategy(), seed in any::<u64>()) {
        check_round_trip(&samples, seed);
    }
}

proptest! {
    // Through real files: fewer cases, each touches the disk.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn random_samples_round_trip_through_files(samples in samples_strategy(), zstd in any::<bool>()) {
        check_files(&samples, if zstd { Compression::Zstd } else { Compression::None });
    }
}
