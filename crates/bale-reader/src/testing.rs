//! Small generated datasets for tests, examples and benchmarks.
//!
//! [`TestDataset`] writes `N` samples in `K` shards with the format crate's
//! writers (what `bale pack` produces): sample `i` has key
//! `c<class>/<i:08>`, a `.bin` member of deterministic pseudo-random bytes
//! ([`payload`]) and a `.cls` member holding its class `i % classes` as
//! decimal text; the manifest lists the class names `class-0`, `class-1`, ...

use std::path::Path;

use bale_format::shuffle::SplitMix64;
use bale_format::{
    Compression, CreatedBy, FormatError, Manifest, Member, ShardFileWriter, shard_file_name,
};

/// A dataset to generate: see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestDataset {
    shard_sizes: Vec<u64>,
    compression: Compression,
    classes: u64,
    min_len: usize,
    max_len: usize,
}

impl TestDataset {
    /// `samples` samples spread evenly over `shards` shards (plain tar, 10
    /// classes, payloads of 16 to 2,000 bytes).
    pub fn new(samples: u64, shards: u64) -> Self {
        let shards = shards.max(1);
        let sizes = (0..shards)
            .map(|s| (s + 1) * samples / shards - s * samples / shards)
            .collect();
        Self::with_shard_sizes(sizes)
    }

    /// Shards holding exactly these numbers of samples (zeros allowed).
    pub fn with_shard_sizes(shard_sizes: Vec<u64>) -> Self {
        TestDataset {
            shard_sizes,
            compression: Compression::None,
            classes: 10,
            min_len: 16,
            max_len: 2000,
        }
    }

    /// Writes `.tar.zst` shards (one frame per sample) instead of plain tar.
    pub fn compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    /// Number of classes (at least 1).
    pub fn classes(mut self, classes: u64) -> Self {
        self.classes = classes.max(1);
        self
    }

    /// Payload lengths, uniformly spread in `min..=max`.
    pub fn payload_len(mut self, min: usize, max: usize) -> Self {
        self.min_len = min.min(max);
        self.max_len = max.max(min);
        self
    }

    /// Total number of samples.
    pub fn len(&self) -> u64 {
        self.shard_sizes.iter().sum()
    }

    /// Whether the dataset has no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The key of sample `i`.
    pub fn key(&self, i: u64) -> String {
        format!("c{}/{i:08}", self.label(i))
    }

    /// The class of sample `i`.
    pub fn label(&self, i: u64) -> i64 {
        (i % self.classes) as i64
    }

    /// The `.bin` payload of sample `i`.
    pub fn payload(&self, i: u64) -> Vec<u8> {
        payload(i, self.min_len, self.max_len)
    }

    /// Writes the dataset into `dir` (which must exist) and returns its manifest.
    ///
    /// # Errors
    /// I/O errors from the format crate's writers.
    pub fn write(&self, dir: &Path) -> Result<Manifest, FormatError> {
        let mut entries = Vec::with_capacity(self.shard_sizes.len());
        let mut i = 0u64;
        for (s, &size) in self.shard_sizes.iter().enumerate() {
            let name = shard_file_name("shard", s as u64, self.compression);
            let sample = |i: u64, write: &mut WriteSample<'_>| {
                let data = self.payload(i);
                let cls = self.label(i).to_string();
                write(
                    &self.key(i),
                    &[
                        Member {
                            ext: "bin",
                            data: &data,
                        },
                        Member {
                            ext: "cls",
                            data: cls.as_bytes(),
                        },
                    ],
                )
            };
            if self.compression == Compression::H5 {
                // HDF5 shards need the `hdf5` feature; without it `create` says so.
                let mut w = bale_format::h5::H5ShardWriter::create(dir, &name)?;
                for _ in 0..size {
                    sample(i, &mut |k, m| w.write_sample(k, m))?;
                    i += 1;
                }
                entries.push(w.finish()?);
                continue;
            }
            let mut w = ShardFileWriter::create(dir, &name, self.compression, 0)?;
            for _ in 0..size {
                sample(i, &mut |k, m| w.writer().write_sample(k, m))?;
                i += 1;
            }
            entries.push(w.finish()?);
        }
        let labels = (0..self.classes).map(|c| format!("class-{c}")).collect();
        let created_by = CreatedBy {
            tool: "bale-reader".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command: "testing".into(),
            options: Default::default(),
        };
        let manifest = Manifest::new(entries, Some(labels), created_by);
        manifest.write(dir)?;
        Ok(manifest)
    }
}

/// Writes one sample into a shard writer.
type WriteSample<'a> = dyn FnMut(&str, &[Member<'_>]) -> Result<(), FormatError> + 'a;

/// Deterministic pseudo-random bytes for sample `i`, of a length in `min..=max`.
pub fn payload(i: u64, min: usize, max: usize) -> Vec<u8> {
    let mut rng = SplitMix64::new(i ^ 0x005E_ED0F_BA1E);
    let len = min + rng.below((max - min) as u64 + 1) as usize;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        out.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    out.truncate(len);
    out
}

/// What a run of shard `shard` read in order asks for, for `len` bytes at
/// `offset` (its shard file opened first): for tests of what that leaves
/// in the page cache.
///
/// # Errors
/// The shard's file does not open or map.
pub fn read_in_order(
    ds: &crate::Dataset,
    shard: usize,
    offset: u64,
    len: u64,
) -> crate::Result<()> {
    ds.read_in_order(shard, offset, len)
}

/// `0..n` in a seeded random order (a Fisher-Yates shuffle driven by
/// xorshift64, always the same for the same `n`): the order the
/// `warm_random` and `random_ceiling` examples read in.
pub fn shuffled_order(n: u64) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n).collect();
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    for i in (1..order.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order.swap(i, (x % (i as u64 + 1)) as usize);
    }
    order
}

/// Runs `read` on `threads` threads (at least one), each over its share of
/// `order` (every `threads`-th item from its own number on), and adds up
/// (wrapping) what they return: the examples' checksums of what they read.
///
/// # Errors
/// The first error a thread returns.
///
/// # Panics
/// When a thread panics.
pub fn on_threads<E: Send>(
    order: &[u64],
    threads: usize,
    read: impl Fn(&[u64]) -> Result<u64, E> + Sync,
) -> Result<u64, E> {
    let threads = threads.max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|k| {
                let read = &read;
                scope.spawn(move || {
                    let mine: Vec<u64> = order.iter().skip(k).step_by(threads).copied().collect();
                    read(&mine)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a reader thread panicked"))
            .try_fold(0u64, |a, r| r.map(|s| a.wrapping_add(s)))
    })
}
