//! When a read of a mapped sample asks the kernel for its pages ahead.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Whether mapped samples are worth a `MADV_WILLNEED` before their pages are
/// touched, learnt from how long recent touches took: a touch that waited
/// for storage ([`Residency::STORAGE_WAIT`] or more, and the thread's count
/// of major page faults went up: [`waited_for_storage`]) turns hints on for
/// the next [`Residency::HINT_READS`] samples; that many touches in a row
/// that did not wait turn them off. On a warm cache the call does nothing
/// but cost: for a 110 KB sample the kernel walks its 27 pages in the page
/// cache, about a third of a warm `ds[i]`. docs/benchmarks.md gives the
/// measurements behind the figures.
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
        self.record_with(took, waited_for_storage)
    }

    /// [`Residency::record`], with `waited` saying whether a slow touch
    /// waited for storage: a touch slower than [`Residency::STORAGE_WAIT`]
    /// may instead have mapped pages already in memory into a fresh map (a
    /// 110 KB sample on a map no read of this process has touched takes 5 to
    /// 25 us in minor faults), which no hint would have made faster.
    pub(super) fn record_with(&self, took: Duration, waited: impl FnOnce() -> bool) -> bool {
        if took >= Self::STORAGE_WAIT && waited() {
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

/// Whether this thread waited for storage since it last asked: true when its
/// count of major page faults (`getrusage(RUSAGE_THREAD)`) went up since
/// then, and when that count cannot be had. A thread's first ask compares
/// with the count it started with, zero: a new reader thread or DataLoader
/// worker whose first slow touch only mapped cached pages in is not taken
/// for one that waited. Asked only after a slow touch: one system call per
/// touch that took [`Residency::STORAGE_WAIT`] or more.
///
/// A fault on a page not in memory is major, and so is a fault that had to
/// wait for a page still being read in (a hinted one): the kernel counts
/// every fault it retried after waiting. A fault that only maps a page
/// already in memory is minor. A major fault of the thread elsewhere (its
/// own code paged in) since it last asked passes for a wait on the dataset:
/// hints for [`Residency::HINT_READS`] reads, the cost of a wrong guess.
pub(super) fn waited_for_storage() -> bool {
    thread_local! {
        /// The count when this thread last asked; every thread's count starts at zero.
        static SEEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    let Some(now) = major_faults() else {
        return true;
    };
    SEEN.with(|seen| seen.replace(now) != now)
}

/// This thread's count of major page faults so far; `None` where it cannot
/// be had.
fn major_faults() -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        let mut usage = std::mem::MaybeUninit::<libc::rusage>::uninit();
        // SAFETY: `getrusage` fills the struct it is given and touches nothing else.
        let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) };
        if rc != 0 {
            return None;
        }
        // SAFETY: filled by the successful call above.
        let usage = unsafe { usage.assume_init() };
        u64::try_from(usage.ru_majflt).ok()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
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
        assert!(r.record_with(slow, || true));
        assert!(r.hint(), "one touch that waited turns hints back on");
    }

    #[test]
    fn a_slow_touch_that_did_not_wait_for_storage_counts_as_fast() {
        let r = Residency::new();
        let slow = Residency::STORAGE_WAIT * 3;
        for _ in 0..Residency::HINT_READS {
            assert!(!r.record_with(slow, || false));
        }
        assert!(
            !r.hint(),
            "touches slow in minor faults alone turn hints off"
        );
        let mut asked = false;
        assert!(!r.record_with(Duration::from_nanos(500), || {
            asked = true;
            true
        }));
        assert!(!asked, "a fast touch asks for no fault count");
        assert!(r.record_with(slow, || true));
        assert!(r.hint(), "a slow touch that waited turns hints on");
    }

    /// Pages of the files the fault tests map.
    const PAGES: usize = 64;

    /// A file of [`PAGES`] zeroed pages, synced and read into the page cache.
    fn cached_pages(dir: &std::path::Path) -> std::fs::File {
        let path = dir.join("pages");
        std::fs::write(&path, vec![0u8; PAGES * 4096]).unwrap();
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        std::fs::read(&path).unwrap();
        f
    }

    /// A fresh map of `f`, every page of it touched.
    fn map_and_touch(f: &std::fs::File) {
        // SAFETY: a read-only map of a file only the test writes, written before.
        let map = unsafe { memmap2::Mmap::map(f) }.unwrap();
        let mut acc = 0u8;
        for p in 0..PAGES {
            // SAFETY: in bounds; volatile keeps the read.
            acc ^= unsafe { std::ptr::read_volatile(map.as_ptr().add(p * 4096)) };
        }
        assert_eq!(acc, 0);
    }

    /// Drops `f`'s pages from the page cache, and checks that they are gone.
    fn evict(f: &std::fs::File) {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on an open descriptor.
        let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert_eq!(rc, 0);
        // SAFETY: as in `map_and_touch`.
        let map = unsafe { memmap2::Mmap::map(f) }.unwrap();
        let mut resident = vec![0u8; PAGES];
        // SAFETY: the whole map, a byte per page.
        let rc = unsafe {
            libc::mincore(
                map.as_ptr() as *mut libc::c_void,
                PAGES * 4096,
                resident.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0);
        let left = resident.iter().filter(|&&b| b & 1 == 1).count();
        assert_eq!(
            left, 0,
            "{left} pages still cached after POSIX_FADV_DONTNEED (tmpfs?)"
        );
    }

    /// A fresh map of pages in memory faults minor faults only; the same
    /// pages evicted fault major ones: what tells a slow touch that waited
    /// for storage from one that mapped pages in.
    #[test]
    fn major_faults_tell_a_wait_for_storage_from_pages_mapped_in() {
        let dir = tempfile::tempdir().unwrap();
        let f = cached_pages(dir.path());
        // Once before looking, so that this code's own pages are in memory.
        map_and_touch(&f);
        waited_for_storage();
        map_and_touch(&f);
        assert!(
            !waited_for_storage(),
            "a fresh map of cached pages counted a major fault"
        );
        evict(&f);
        waited_for_storage();
        map_and_touch(&f);
        assert!(
            waited_for_storage(),
            "touching evicted pages counted no major fault"
        );
        assert!(!waited_for_storage(), "nothing waited since the last look");
    }

    /// A new thread's first ask, after touching a fresh map of cached pages
    /// (minor faults only), is not taken for a wait on storage; after
    /// touching evicted pages, it is.
    #[test]
    fn a_new_threads_first_ask_counts_from_the_threads_start() {
        let dir = tempfile::tempdir().unwrap();
        let f = cached_pages(dir.path());
        let first_ask_after_touch = || {
            std::thread::scope(|s| {
                s.spawn(|| {
                    map_and_touch(&f);
                    waited_for_storage()
                })
                .join()
                .unwrap()
            })
        };
        // Once before looking, so that this code's own pages are in memory.
        first_ask_after_touch();
        assert!(
            !first_ask_after_touch(),
            "a new thread's first ask took mapping cached pages in for a wait on storage"
        );
        evict(&f);
        assert!(
            first_ask_after_touch(),
            "a new thread's first ask after touching evicted pages saw no wait"
        );
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
        assert!(r.record_with(Residency::STORAGE_WAIT, || true));
        assert_eq!(timed(100), 100);
    }
}
