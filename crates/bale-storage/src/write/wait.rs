//! The waits of a run: out the requests a killed run may still have in
//! flight, and its own DELETEs that got no answer; said in seconds.

use super::*;

impl Publisher {
    /// Once this run has taken over the lock of a run that ended without
    /// releasing it (killed, or stalled past [`LOCK_STALE`]): waits until
    /// a request that run sent before it ended has landed, or timed out,
    /// before this run looks at what is there and writes. A killed run
    /// leaves no note of what it had in flight; its lock's last refresh
    /// and request timeout bound it. Both ends are dated by the store's
    /// clock (the old lock's last write and this run's), so a lock left
    /// long ago costs no wait.
    pub(super) fn wait_out_in_flight(&self) -> Result<()> {
        let Some(old_at) = self.found_at else {
            return Ok(());
        };
        let Some(until) = self.carried().in_flight_until else {
            return Ok(());
        };
        let Some(mine) = self.seen_lock()? else {
            return Ok(());
        };
        let left = until.saturating_sub(mine.at);
        if left <= 0 {
            return Ok(());
        }
        let left = std::time::Duration::from_millis(left as u64);
        crate::notice(&format!(
            "{}: waiting {} s before this run looks at what is there: a request of the run that left the lock, or of a killed run before it, may land until then (that lock was last refreshed {} s ago and records a request timeout of {} s)",
            self.store.url(),
            left.as_secs().max(1),
            ((mine.at - old_at).max(0) / 1000),
            self.found_wait.as_secs()
        ));
        self.watch(left)
    }

    /// Sleeps `wait` (the watch of another run's lock), in steps that see a
    /// cancel at once.
    pub(super) fn watch(&self, wait: std::time::Duration) -> Result<()> {
        let end = std::time::Instant::now() + wait;
        loop {
            if self.cancelled() {
                return Err(StorageError::Cancelled);
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(());
            }
            std::thread::sleep(left.min(std::time::Duration::from_millis(50)));
        }
    }

    /// Waits until every DELETE of this run that got no answer has landed or
    /// timed out ([`Publisher::delete`]): after the clear, before the run
    /// writes under the names it cleared (`before`: "it writes"), and after
    /// the lock's DELETE, before the run ends (then a Ctrl-C that began an
    /// undo does not end the wait: a second one ends the process).
    pub(super) fn wait_out_own_deletes(&self, before: &str) -> Result<()> {
        let Some(by) = *lock(&self.deletes_land_by) else {
            return Ok(());
        };
        let left = by.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        crate::notice(&format!(
            "{}: a DELETE of this run got no answer at first and may still land: waiting {} s (one request timeout from it) before {before}",
            self.store.url(),
            left.as_secs().max(1)
        ));
        if before == ENDS {
            std::thread::sleep(left);
            return Ok(());
        }
        self.watch(left)
    }
}

/// What [`Publisher::wait_out_own_deletes`] waits before at the end of a
/// run.
pub(super) const ENDS: &str = "it ends";

/// `d` in seconds as a message says it: whole seconds as they are, others
/// to a tenth (a lock's 2,500 ms are "2.5 s", not "2 s").
pub(super) fn secs_text(d: std::time::Duration) -> String {
    if d.subsec_millis() == 0 {
        d.as_secs().to_string()
    } else {
        format!("{:.1}", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_are_said_to_a_tenth_of_a_second() {
        let ms = std::time::Duration::from_millis;
        assert_eq!(secs_text(ms(6000)), "6");
        assert_eq!(secs_text(ms(9500)), "9.5");
        assert_eq!(secs_text(ms(2500)), "2.5");
    }
}
