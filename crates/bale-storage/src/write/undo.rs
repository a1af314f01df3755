//! Undoing a run that did not commit ([`Publisher::abort`]).

use super::*;

impl Publisher {
    /// Whether the undo removed everything this run wrote but its lock,
    /// kept (with a note) only because a request of the run may still land:
    /// the undo's error then says so, and nothing else went wrong.
    pub fn kept_for_late(&self) -> bool {
        self.kept_for_late.load(Ordering::SeqCst)
    }

    /// Whether the undo kept this run's lock object under the prefix, over
    /// objects it could not delete or that a clear left (they stay a run's,
    /// which `--force` clears).
    pub fn kept_lock(&self) -> bool {
        self.kept_lock.load(Ordering::SeqCst)
    }

    /// Undoes the run, unless it committed: aborts its open uploads and
    /// deletes every object it wrote (markers and lock last). Runs once;
    /// `Drop` calls it too.
    ///
    /// # Errors
    /// The first request that failed (the others are still tried): the
    /// object it names may remain, and `--force` on a rerun clears it.
    pub fn abort(&self) -> Result<()> {
        {
            let mut phase = lock(&self.phase);
            if *phase != Phase::Running {
                return Ok(());
            }
            *phase = Phase::Undone;
        }
        self.stop_heartbeat();
        let (open, mut names) = {
            let mut w = lock(&self.written);
            (std::mem::take(&mut w.open), std::mem::take(&mut w.names))
        };
        let mut first = None;
        // The upload ids are this run's alone: abort them in any case.
        let mut aborts_unanswered = false;
        for (name, id) in &open {
            if let Err(e) = self.abort_upload(name, id) {
                aborts_unanswered |= may_land(&e);
                first.get_or_insert(e);
            }
        }
        // Shared names (shards, indexes, the lock) are deleted only while
        // this run holds the lock: a run that took over (or that committed
        // after taking over) owns them now. Markers carry this run's id.
        // A lock that cannot be checked proves nothing: those names stay
        // (--force clears them), since another run may own them now.
        let owner = !self.locked.load(Ordering::SeqCst)
            || match self.lock_hold() {
                Hold::Held => true,
                Hold::Lost => false,
                Hold::Unknown => {
                    first.get_or_insert(StorageError::Exists {
                        url: self.url_of(LOCK_NAME),
                        what: "this run could not read or write its lock, so it cannot tell whether another run took the prefix over: it kept the objects it wrote there; clear them with --force".into(),
                    });
                    false
                }
            };
        if !owner {
            names.retain(|n| n.starts_with(UPLOAD_MARKER));
        }
        // The manifest first (a PUT whose answer was lost may have landed:
        // it must never outlive a shard it names), then the objects, then
        // the markers (each group in as few requests as the store takes),
        // the lock last.
        let mut groups: [Vec<&str>; 4] = Default::default();
        for n in &names {
            let at = if n == MANIFEST {
                0
            } else if n == LOCK_NAME {
                3
            } else if n.starts_with(UPLOAD_MARKER) {
                2
            } else {
                1
            };
            groups[at].push(n);
        }
        // Set when a bale.json is there, or may still land, that may be
        // this run's: the objects it may name stay with it, and the lock
        // over them.
        let mut keep = false;
        // A request that failed without a definite answer may still land.
        let mut unanswered = false;
        if self.manifest_unsure.load(Ordering::SeqCst) && owner {
            keep = true;
            first.get_or_insert(StorageError::Exists {
                url: self.url_of(MANIFEST),
                what: "no attempt to write it got an answer, and it may still land: this run kept the objects it wrote, and its lock over them, so that it never names missing ones; check the prefix with `bale verify`, and clear it with --force if it is not whole".into(),
            });
        }
        for group in groups {
            let Some(&n) = group.first() else {
                continue;
            };
            if keep && !n.starts_with(UPLOAD_MARKER) {
                continue;
            }
            // A manifest there is deleted only when it is this run's: the
            // run's create may have been refused (someone else's is there).
            if n == MANIFEST {
                if let Mode::Append { old, .. } = &self.mode {
                    // The old dataset's manifest is never deleted: this
                    // run's, if it landed, gives way to it again.
                    match self.manifest_owner() {
                        Owner::Ours if owner => {
                            if let Err(e) = self.restore_manifest(old) {
                                unanswered |= may_land(&e);
                                first.get_or_insert(e);
                                keep = true;
                            }
                        }
                        Owner::Unknown => {
                            keep = true;
                            first.get_or_insert(StorageError::Exists {
                                url: self.url_of(MANIFEST),
                                what: "this run could not tell whether it is its own, so it left it and the objects it wrote beside it; check the prefix with `bale verify`".into(),
                            });
                        }
                        _ => {}
                    }
                    continue;
                }
                match self.manifest_owner() {
                    Owner::Ours => {}
                    // A stale run's, landed late while this run held the
                    // lock: it names what this run cleared.
                    Owner::Run(_) if owner && self.locked.load(Ordering::SeqCst) => {}
                    Owner::Run(_) | Owner::Unmarked | Owner::Absent => continue,
                    Owner::Unknown => {
                        keep = true;
                        first.get_or_insert(StorageError::Exists {
                            url: self.url_of(MANIFEST),
                            what: "this run could not tell whether it is its own, so it left it and the objects it wrote beside it; check the prefix with `bale verify`, and clear it with --force if it is not whole".into(),
                        });
                        continue;
                    }
                }
            }
            // The lock stays over objects that could not be deleted, or
            // that an earlier run left and this one did not clear: it tells
            // a rerun with --force that they are a run's.
            // So does it over a write of this run that got no answer: it
            // may land after the run ended, and is then still a run's.
            let late = unanswered || aborts_unanswered || self.unanswered.load(Ordering::SeqCst);
            if n == LOCK_NAME
                && (first.is_some() || late || self.marks_leftovers.load(Ordering::SeqCst))
            {
                if late && owner && self.locked.load(Ordering::SeqCst) {
                    first = Some(self.note_unanswered(first));
                }
                self.kept_lock.store(owner, Ordering::SeqCst);
                continue;
            }
            if let Err(e) = self.delete_all(&group, false) {
                unanswered |= may_land(&e);
                first.get_or_insert(e);
                // A manifest that stays keeps what it names.
                keep |= n == MANIFEST;
            } else if n == LOCK_NAME {
                // The lock's DELETE sent twice: its first attempt lands
                // before the run ends, not on a lock a next run created.
                // A Ctrl-C ends the wait, with the error it gives.
                if let Err(e) = self.wait_out_own_deletes(ENDS) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
