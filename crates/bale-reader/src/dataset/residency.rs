//! When a read of a mapped sample asks the kernel for its pages ahead.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Whether mapped samples are worth a `MADV_WILLNEED` before their pages are
/// touched, learnt from how long recent touches took: a touch that waited
/// for storage ([`Residency::STORAGE_WAIT`] or more) turns hints on for the
/// next [`Residency::HINT_READS`] samples; that many fast touches in a row
/// turn them off. On a warm cache the call does nothing but cost: for a
/// 110 KB sample the kernel walks its 27 pages in the page cache, about a
/// third of a warm `ds[i]`. docs/benchmarks.md gives the measurements behind
/// the figures.
#[derive(Debug)]
pub(super) struct Residency {
    /// Reads left to hint since the last touch that waited for storage.
    pub(super) hint_left: AtomicU32,
}

impl Residency {
    /// A touch of a sample's pages taking this long waited for storage.
    pub(super) const STORAGE_WAIT: Duration = Duration::from_micros(10);
    /// Reads hinted after a touch that waited for storage.
    pub(super) const HINT_READS: u32 = 256;
    /// While reads are not hinted, one touch in this many is timed.
    pub(super) const WARM_SAMPLING: u32 = 8;

    pub(super) fn new() -> Self {
        // A freshly opened dataset is likely cold: hint until shown otherwise.
        Residency {
            hint_left: AtomicU32::new(Self::HINT_READS),
        }
    }

    /// Whether to hint a mapped read.
    pub(super) fn hint(&self) -> bool {
        self.hint_left.load(Ordering::Relaxed) > 0
    }

    /// Whether to time this touch: every touch while reads are hinted, one
    /// in [`Residency::WARM_SAMPLING`] per thread once they are not (two
    /// clock reads are about 4% of a warm random read of a 2 KB sample; a
    /// cache that turns cold is still seen within that many reads).
    pub(super) fn time_touch(&self) -> bool {
        thread_local! {
            static UNTIMED: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        if self.hint() {
            return true;
        }
        UNTIMED.with(|n| {
            let k = n.get() + 1;
            let due = k >= Self::WARM_SAMPLING;
            n.set(if due { 0 } else { k });
            due
        })
    }

    /// Turns hints on for the next [`Residency::HINT_READS`] reads.
    pub(super) fn saw_cold(&self) {
        self.hint_left.store(Self::HINT_READS, Ordering::Relaxed);
    }

    /// Records how long touching a sample's pages took; true if it waited for storage.
    pub(super) fn record(&self, took: Duration) -> bool {
        if took >= Self::STORAGE_WAIT {
            self.saw_cold();
            return true;
        }
        // Racy between threads, and harmless: it only shortens or lengthens the hinting.
        let left = self.hint_left.load(Ordering::Relaxed);
        if left > 0 {
            self.hint_left.store(left - 1, Ordering::Relaxed);
        }
        false
    }
}

/// Whether a read asks the kernel for its pages ahead (mapped shards).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hint {
    /// Always (the caller touches the pages later, or not at all).
    Always,
    /// As [`Residency`] decides (the caller touches the pages right away, timed).
    Learnt,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn residency_hints_reads_until_enough_touches_are_fast() {
        let r = Residency::new();
        let fast = Duration::from_nanos(200);
        let slow = Residency::STORAGE_WAIT;
        assert!(r.hint(), "a fresh dataset is taken for cold");
        for _ in 0..Residency::HINT_READS - 1 {
            assert!(!r.record(fast));
        }
        assert!(r.hint());
        assert!(!r.record(fast));
        assert!(!r.hint(), "warm: reads are not hinted");
        assert!(r.record(slow));
        assert!(r.hint(), "one touch that waited turns hints back on");
    }

    #[test]
    fn every_touch_is_timed_while_hinting_and_one_in_warm_sampling_after() {
        let r = Residency::new();
        let timed = |n: u32| (0..n).filter(|_| r.time_touch()).count() as u32;
        assert_eq!(timed(100), 100, "hinting: every touch timed");
        r.hint_left.store(0, Ordering::Relaxed);
        let n = 40 * Residency::WARM_SAMPLING;
        assert_eq!(timed(n), 40, "warm: one touch in WARM_SAMPLING timed");
        // A touch that waited (seen by a timed one) times every touch again.
        assert!(r.record(Residency::STORAGE_WAIT));
        assert_eq!(timed(100), 100);
    }
}
