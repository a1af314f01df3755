//! The xxh3-64 checksum (seed 0) bale records for members, shards and
//! indexes, one-shot and streaming.
//!
//! It is computed with `twox-hash`, which picks AVX2 at run time when the CPU
//! has it (about 1.6x the SSE2-only speed of a portable build on x86-64); the
//! values are those of the reference xxh3 (`xxhsum -H3`).

use std::hash::Hasher;

use twox_hash::XxHash3_64;

/// The xxh3-64 of `bytes`.
pub fn xxh3_64(bytes: &[u8]) -> u64 {
    XxHash3_64::oneshot(bytes)
}

/// A streaming xxh3-64: [`Xxh3::update`] with the bytes in order, then
/// [`Xxh3::digest`]; equal to [`xxh3_64`] of the concatenation.
#[derive(Clone)]
pub struct Xxh3(XxHash3_64);

impl Xxh3 {
    /// An empty state.
    pub fn new() -> Self {
        Self(XxHash3_64::with_seed(0))
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.write(bytes);
    }

    /// The checksum of everything added so far (the state stays usable).
    pub fn digest(&self) -> u64 {
        self.0.finish()
    }
}

impl Default for Xxh3 {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Xxh3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xxh3").finish_non_exhaustive()
    }
}

/// Bytes together with their xxh3-64, computed when the value is made.
///
/// It lets the checksum be computed where the bytes are produced (a reader
/// thread, say) and handed to a writer with them
/// ([`crate::ShardWriter::add_hashed_member`]): the fields are private and
/// the bytes cannot be changed afterwards, so the checksum always matches
/// the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Hashed {
    bytes: Vec<u8>,
    xxh3: u64,
}

impl Hashed {
    /// Takes `bytes` and computes their xxh3-64.
    pub fn new(bytes: Vec<u8>) -> Self {
        let xxh3 = xxh3_64(&bytes);
        Self { bytes, xxh3 }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The xxh3-64 of [`Hashed::bytes`].
    pub fn xxh3(&self) -> u64 {
        self.xxh3
    }

    /// The bytes, giving up the checksum.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl std::fmt::Debug for Hashed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hashed")
            .field("len", &self.bytes.len())
            .field("xxh3", &format_args!("{:016x}", self.xxh3))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known xxh3-64 values (seed 0), as the reference implementation gives.
    #[test]
    fn matches_reference_values() {
        assert_eq!(xxh3_64(b""), 0x2d06_8005_38d3_94c2);
        assert_eq!(xxh3_64(b"a"), 0xe6c6_32b6_1e96_4e1f);
    }

    #[test]
    fn hashed_carries_the_checksum_of_its_bytes() {
        let h = Hashed::new(b"hello".to_vec());
        assert_eq!(h.bytes(), b"hello");
        assert_eq!(h.xxh3(), xxh3_64(b"hello"));
        assert_ne!(h.xxh3(), Hashed::new(b"hellp".to_vec()).xxh3());
        assert_eq!(h.into_bytes(), b"hello");
    }

    #[test]
    fn streaming_equals_one_shot_for_any_split() {
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 253) as u8).collect();
        let whole = xxh3_64(&data);
        for step in [1usize, 63, 64, 240, 1024, 4096, 65_537] {
            let mut h = Xxh3::new();
            for c in data.chunks(step) {
                h.update(c);
            }
            assert_eq!(h.digest(), whole, "chunks of {step}");
        }
    }
}
