//! Read-around ([`ReadAround`]): the first cold read in each region of a
//! local shard asks the kernel for the whole region.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::options::{READ_AROUND, ReadAround};

/// The largest piece of a region asked for at once: the smallest
/// read-ahead window Linux devices commonly have (`read_ahead_kb` 128), to
/// which `MADV_WILLNEED` and `POSIX_FADV_WILLNEED` cut a longer request.
pub(super) const READ_AROUND_PIECE: u64 = 128 << 10;

/// Which [`READ_AROUND`] regions of one shard file were asked for: one bit each.
#[derive(Debug)]
pub(super) struct Regions {
    bits: Box<[AtomicU64]>,
    len: u64,
}

impl Regions {
    /// The regions of a file of `len` bytes, none asked for.
    pub(super) fn new(len: u64) -> Self {
        let regions = len.div_ceil(READ_AROUND);
        let words = usize::try_from(regions.div_ceil(64)).unwrap_or(0);
        Regions {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            len,
        }
    }

    /// The byte range `(start, len)` of the region holding `offset`, the
    /// first time it is claimed (by any thread); `None` after that, and for
    /// an offset past the end.
    pub(super) fn claim(&self, offset: u64) -> Option<(u64, u64)> {
        if offset >= self.len {
            return None;
        }
        let r = offset / READ_AROUND;
        let word = self.bits.get(usize::try_from(r / 64).ok()?)?;
        let bit = 1u64 << (r % 64);
        if word.load(Ordering::Relaxed) & bit != 0
            || word.fetch_or(bit, Ordering::Relaxed) & bit != 0
        {
            return None;
        }
        let start = r * READ_AROUND;
        Some((start, READ_AROUND.min(self.len - start)))
    }
}

/// The bytes of one shard file asked for ahead of the reader
/// (`MADV_WILLNEED`) and not read yet: one range, grown as runs read in
/// order ask for the run after theirs, moved past what is read. A run
/// read in order was asked for as the run after the one before it; each
/// byte is then asked for once, where every run used to be asked for
/// twice (as the next run, then as itself). The second request found every
/// page in the page cache or on its way and cost only the kernel's walk
/// over them: about a third of a reader thread's system time in a warm
/// sequential epoch of 2 KB samples (docs/benchmarks.md).
#[derive(Debug, Default)]
pub(super) struct Ahead(Mutex<(u64, u64)>);

impl Ahead {
    /// The part of `[start, start + len)` not asked for yet, recorded as
    /// asked for: the caller asks the kernel for it. The whole range when it
    /// does not meet the one ahead (a jump: the range ahead starts over
    /// there), its tail past the range ahead when it starts inside it, and
    /// `None` when it is already asked for.
    pub(super) fn claim(&self, start: u64, len: u64) -> Option<(u64, u64)> {
        let end = start.saturating_add(len);
        let mut ahead = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (s, e) = *ahead;
        if len == 0 || (s <= start && end <= e) {
            return None;
        }
        if s <= start && start <= e {
            *ahead = (s, end);
            Some((e, end - e))
        } else {
            *ahead = (start, end);
            Some((start, len))
        }
    }

    /// The reader has read `[start, start + len)`: what lies before its end
    /// is no longer ahead (a later read of it, as in the next epoch, asks
    /// for it again).
    pub(super) fn read(&self, start: u64, len: u64) {
        let end = start.saturating_add(len);
        let mut ahead = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let (s, e) = *ahead;
        if s < end {
            *ahead = (end, e.max(end));
        }
    }
}

/// Whether a dataset of `total` shard bytes is read around; `available`
/// gives the memory available now (asked only for [`ReadAround::Auto`];
/// `None` when unknown: no read-around).
pub(super) fn decide(
    option: ReadAround,
    total: u64,
    available: impl FnOnce() -> Option<u64>,
) -> bool {
    match option {
        ReadAround::Always => true,
        ReadAround::Never => false,
        ReadAround::Auto => available().is_some_and(|a| total <= a / 2),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_region_is_claimed_once_and_clipped_to_the_file() {
        let len = 2 * READ_AROUND + 100;
        let r = Regions::new(len);
        assert_eq!(r.claim(5), Some((0, READ_AROUND)));
        assert_eq!(r.claim(READ_AROUND - 1), None, "same region");
        assert_eq!(r.claim(READ_AROUND + 7), Some((READ_AROUND, READ_AROUND)));
        assert_eq!(r.claim(2 * READ_AROUND + 99), Some((2 * READ_AROUND, 100)));
        assert_eq!(r.claim(2 * READ_AROUND), None);
        assert_eq!(r.claim(len), None, "past the end");
        assert_eq!(Regions::new(0).claim(0), None);
    }

    #[test]
    fn regions_past_64_use_further_words() {
        let r = Regions::new(200 * READ_AROUND);
        for i in 0..200 {
            assert!(r.claim(i * READ_AROUND + 1).is_some(), "region {i}");
        }
        for i in 0..200 {
            assert!(r.claim(i * READ_AROUND).is_none(), "region {i} again");
        }
    }

    #[test]
    fn runs_read_in_order_ask_for_each_byte_once() {
        let a = Ahead::default();
        // Run 0 (bytes 0..100) and the run after it (100..200).
        assert_eq!(a.claim(0, 100), Some((0, 100)));
        assert_eq!(a.claim(100, 100), Some((100, 100)));
        a.read(0, 100);
        // Run 1 was asked for as the run after run 0; a longer run 1 asks
        // only for its tail, then for the run after it.
        assert_eq!(a.claim(100, 130), Some((200, 30)));
        assert_eq!(a.claim(230, 130), Some((230, 130)));
        a.read(100, 130);
        assert_eq!(a.claim(230, 130), None, "asked for as the run after");
        a.read(230, 130);
        assert_eq!(a.claim(360, 0), None, "nothing to ask for");
    }

    #[test]
    fn bytes_read_or_jumped_away_from_are_asked_for_again() {
        let a = Ahead::default();
        assert_eq!(a.claim(0, 100), Some((0, 100)));
        assert_eq!(a.claim(100, 100), Some((100, 100)));
        a.read(0, 100);
        // The next epoch starts over at the start of the shard.
        assert_eq!(a.claim(0, 100), Some((0, 100)));
        // A jump elsewhere: the range ahead starts over there.
        assert_eq!(a.claim(5_000, 10), Some((5_000, 10)));
        assert_eq!(a.claim(100, 100), Some((100, 100)), "no longer ahead");
        // Reading past everything ahead leaves nothing ahead.
        a.read(0, 10_000);
        assert_eq!(a.claim(150, 10), Some((150, 10)));
    }

    #[test]
    fn auto_reads_around_only_what_fits_in_half_the_available_memory() {
        let gib = 1u64 << 30;
        let four = || Some(4 * gib);
        assert!(decide(ReadAround::Auto, gib, four));
        assert!(decide(ReadAround::Auto, 2 * gib, four));
        assert!(!decide(ReadAround::Auto, 2 * gib + 1, four));
        assert!(!decide(ReadAround::Auto, 1, || None));
        let unasked = || -> Option<u64> { panic!("memory asked for without Auto") };
        assert!(decide(ReadAround::Always, u64::MAX, unasked));
        assert!(!decide(ReadAround::Never, 0, unasked));
    }
}
