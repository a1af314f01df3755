//! What an iterator does in a process forked from the one that made it.
//!
//! Read-ahead threads, decoding threads and requests in flight on the
//! storage runtime belong to the process that started them; `fork` copies
//! none of them into the child. An iterator continued there would wait
//! forever for answers that never come (or for a lock one of those threads
//! held at the fork). Every iterator that owns such work keeps a
//! [`ForkGuard`] and asks it before it waits.

use crate::{ReaderError, Result};

/// The process that made an iterator, and whether the iterator has already
/// told a forked child that it cannot go on there.
#[derive(Debug, Clone)]
pub struct ForkGuard {
    pid: u32,
    told: bool,
}

impl Default for ForkGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl ForkGuard {
    /// A guard for this process.
    pub fn new() -> Self {
        ForkGuard {
            pid: std::process::id(),
            told: false,
        }
    }

    /// Whether this is a process forked from the one that made the guard
    /// (whose threads and requests do not exist here).
    pub fn in_child(&self) -> bool {
        std::process::id() != self.pid
    }

    /// [`ReaderError::Forked`] in a forked child; nothing in the process
    /// that made the guard.
    pub fn check(&self) -> Result<()> {
        if self.in_child() {
            return Err(ReaderError::Forked { pid: self.pid });
        }
        Ok(())
    }

    /// For a feed of samples in a forked child: the error the first time,
    /// then nothing (a caller that pulls on after an error, such as a
    /// shuffle reservoir, would otherwise fill itself with it).
    pub fn tell_once<T>(&mut self) -> Option<Result<T>> {
        if std::mem::replace(&mut self.told, true) {
            return None;
        }
        Some(Err(ReaderError::Forked { pid: self.pid }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_is_quiet_in_its_own_process() {
        let g = ForkGuard::new();
        assert!(!g.in_child());
        assert!(g.check().is_ok());
    }

    #[test]
    fn a_guard_from_another_process_refuses_and_tells_a_feed_once() {
        let mut g = ForkGuard {
            pid: std::process::id().wrapping_add(1),
            told: false,
        };
        assert!(g.in_child());
        assert!(matches!(g.check(), Err(ReaderError::Forked { .. })));
        assert!(matches!(
            g.tell_once::<()>(),
            Some(Err(ReaderError::Forked { .. }))
        ));
        assert!(g.tell_once::<()>().is_none());
        // `check` keeps refusing: a caller that asks before each wait gets
        // the error every time.
        assert!(g.check().is_err());
    }
}
