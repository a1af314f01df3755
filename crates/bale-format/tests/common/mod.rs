//! Helpers shared by the integration tests of `bale-format`: sample
//! generators, an in-memory shard writer, and a seeded short-read adapter.

#![allow(dead_code)] // Each test binary uses a different part of this module.

use std::io::{self, Read};

use bale_format::shuffle::SplitMix64;
use bale_format::{Compression, Member, SampleStream, ShardWriter, StreamSample};
use proptest::prelude::*;

/// A sample as the tests hand it to the writer: key and `(ext, data)` members.
pub type TestSample = (String, Vec<(String, Vec<u8>)>);

/// A reader that returns fewer bytes than asked, in a seeded random pattern,
/// and (when `interrupts` is set) now and then fails with `Interrupted`, as
/// a pipe, socket or decompressor may. Code that assumes one `read` fills its
/// buffer gives different results behind it.
#[derive(Debug)]
pub struct ShortReader<R> {
    inner: R,
    rng: SplitMix64,
    interrupts: bool,
}

impl<R: Read> ShortReader<R> {
    pub fn new(inner: R, seed: u64, interrupts: bool) -> Self {
        Self {
            inner,
            rng: SplitMix64::new(seed),
            interrupts,
        }
    }
}

impl<R: Read> Read for ShortReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.interrupts && self.rng.below(8) == 0 {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "short-read adapter",
            ));
        }
        // Mostly tiny reads, sometimes up to a few blocks: both cross header boundaries.
        let cap = match self.rng.below(4) {
            0 => 1,
            1 => 1 + self.rng.below(16) as usize,
            2 => 1 + self.rng.below(700) as usize,
            _ => 1 + self.rng.below(5000) as usize,
        };
        let n = cap.min(buf.len());
        self.inner.read(&mut buf[..n])
    }
}

/// Writes `samples` with [`ShardWriter`]; returns `(shard bytes, index bytes)`.
pub fn write_shard(samples: &[TestSample], compression: Compression) -> (Vec<u8>, Vec<u8>) {
    let mut w = ShardWriter::new(Vec::new(), "mem.tar", compression, 0).expect("writer");
    for (key, members) in samples {
        let members: Vec<Member<'_>> = members
            .iter()
            .map(|(ext, data)| Member { ext, data })
            .collect();
        w.write_sample(key, &members).expect("write_sample");
    }
    let (shard, index, summary) = w.finish().expect("finish");
    assert_eq!(summary.shard_bytes, shard.len() as u64);
    (shard, index)
}

/// Every sample of a stream, or the first error.
pub fn collect_stream<R: Read>(stream: SampleStream<R>) -> bale_format::Result<Vec<StreamSample>> {
    stream.collect()
}

/// The samples of a stream as the writer's input looks.
pub fn as_test_samples(samples: &[StreamSample]) -> Vec<TestSample> {
    samples
        .iter()
        .map(|s| {
            (
                s.key.clone(),
                s.members
                    .iter()
                    .map(|m| (m.ext.clone(), m.data.clone()))
                    .collect(),
            )
        })
        .collect()
}

/// A fixed set of samples that exercises every header path: a name over 100
/// bytes (pax), a name of exactly 100 bytes, an empty member, sizes on and
/// off block boundaries, multibyte UTF-8, several members per sample.
pub fn fixed_samples() -> Vec<TestSample> {
    let long_key = format!("{}/{}", "deep-directory-name".repeat(3), "k".repeat(60));
    let key100 = "x".repeat(96); // "xxx…x.bin" is exactly 100 bytes.
    let binary: Vec<u8> = (0..=255u8).cycle().take(1500).collect();
    vec![
        (
            "n01440764/img_0001".into(),
            vec![
                ("jpg".into(), b"\xff\xd8\xff\xe0 not really a jpeg".to_vec()),
                ("cls".into(), b"0".to_vec()),
                ("json".into(), br#"{"w": 3}"#.to_vec()),
            ],
        ),
        (
            long_key,
            vec![
                ("seg.png".into(), binary.clone()),
                ("txt".into(), Vec::new()),
            ],
        ),
        (key100, vec![("bin".into(), vec![7u8; 512])]),
        (
            "données/é漢字".into(),
            vec![("txt".into(), "é".repeat(300).into_bytes())],
        ),
        ("last".into(), vec![("npy".into(), binary[..513].to_vec())]),
    ]
}

// ---- proptest strategies ----

/// A key component: any characters but `/`, `\` and control characters; `.` only in directory components.
fn dir_component() -> impl Strategy<Value = String> {
    "[^/\\\\\\p{Cc}]{1,24}".prop_filter("not . or ..", |c| c != "." && c != "..")
}

fn base_component() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[A-Za-z0-9_-]{1,12}",
        1 => "[^/\\\\.\\p{Cc}]{1,40}",
    ]
}

/// Keys obeying [`bale_format::validate_key`], short and long (over 100 bytes).
pub fn key_strategy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(dir_component(), 0..4),
        base_component(),
    )
        .prop_map(|(dirs, base)| {
            let mut k = dirs.join("/");
            if !k.is_empty() {
                k.push('/');
            }
            k.push_str(&base);
            k
        })
}

/// Extensions a writer takes ([`bale_format::validate_written_ext`]).
pub fn ext_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9_]{1,5}",
        1 => "[a-z]{1,4}\\.[a-z0-9]{1,4}",
        1 => "[^/\\\\.\\p{Cc}]{1,6}",
    ]
    // `__*__` names are reserved for the readers' fields.
    .prop_filter("a valid extension", |e| {
        bale_format::validate_written_ext(e).is_ok()
    })
}

/// Member data: empty, small, around a block boundary, a few blocks.
pub fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        1 => Just(Vec::new()),
        3 => prop::collection::vec(any::<u8>(), 0..64),
        2 => prop::collection::vec(any::<u8>(), 505..520),
        1 => prop::collection::vec(any::<u8>(), 1000..3000),
        1 => (0..2000usize, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

fn dedup_by_first<T>(items: Vec<(String, T)>) -> Vec<(String, T)> {
    let mut seen = std::collections::HashSet::new();
    items
        .into_iter()
        .filter(|(k, _)| seen.insert(k.clone()))
        .collect()
}

/// A sample with 1–4 members of distinct extensions, in random order.
pub fn sample_strategy() -> impl Strategy<Value = TestSample> {
    (
        key_strategy(),
        prop::collection::vec((ext_strategy(), data_strategy()), 1..5).prop_map(dedup_by_first),
    )
}

/// 0–8 samples with distinct keys, in random order.
pub fn samples_strategy() -> impl Strategy<Value = Vec<TestSample>> {
    prop::collection::vec(sample_strategy(), 0..9).prop_map(dedup_by_first)
}
