//! The bounded shuffle buffer of shard-shuffled plans, below both the plan
//! that draws from it and the resume that replays its draws.

use bale_format::shuffle::SplitMix64;

/// The bounded shuffle buffer of shard-shuffled plans. The same code runs on
/// indices (to plan and to resume) and on samples (to read), so both agree.
#[derive(Debug)]
pub(crate) struct Reservoir<T> {
    pub buf: Vec<T>,
    pub cap: usize,
    pub rng: SplitMix64,
}

impl<T> Reservoir<T> {
    pub fn new(cap: usize, seed: u64) -> Self {
        Reservoir {
            buf: Vec::new(),
            cap: cap.max(1),
            rng: SplitMix64::new(seed),
        }
    }

    /// Fills the buffer from `next` up to capacity, then removes and returns
    /// a uniformly drawn slot (`swap_remove`); `None` when empty and `next` is done.
    pub fn step(&mut self, mut next: impl FnMut() -> Option<T>) -> Option<T> {
        while self.buf.len() < self.cap {
            match next() {
                Some(x) => self.buf.push(x),
                None => break,
            }
        }
        if self.buf.is_empty() {
            return None;
        }
        let j = self.rng.below(self.buf.len() as u64) as usize;
        Some(self.buf.swap_remove(j))
    }
}
