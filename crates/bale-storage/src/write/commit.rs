//! The commit: `bale.json` last, the checks that what the run wrote is
//! there around it, an append's replacement over the version read, and the
//! withdrawal of a manifest the run cannot stand behind.

use super::*;

/// Who wrote the `bale.json` under a prefix ([`Publisher::manifest_owner`]).
pub(super) enum Owner {
    /// This run.
    Ours,
    /// Another bale run (its id in the metadata), at this version.
    Run(UpdateVersion),
    /// Someone or something that left no run id (and not this run's bytes).
    Unmarked,
    /// There is none.
    Absent,
    /// It could not be read.
    Unknown,
}

/// How many times a run sends its manifest's create before it gives up
/// on learning its outcome.
pub(super) const MANIFEST_ATTEMPTS: usize = 3;

/// What [`Publisher::withdraw_manifest`] found.
pub(super) enum Withdrawn {
    /// This run's manifest is gone (deleted now, or never landed).
    Yes,
    /// The manifest there is another run's.
    Another,
    /// It could not tell.
    Unknown,
}

impl Publisher {
    /// Checks, by one listing of the prefix, that every object this run
    /// wrote is there, at the size it wrote and with the ETag its write was
    /// answered with. A request of a run that ended before this one took
    /// the prefix over (its undo's DELETE, a PUT of its own shard) may land
    /// late, after this run wrote the same name.
    pub(super) fn check_written(&self) -> Result<()> {
        let (names, sizes) = {
            let w = lock(&self.written);
            (w.names.clone(), w.sizes.clone())
        };
        let listed: std::collections::HashMap<String, (u64, Option<String>)> = self
            .list_meta()?
            .into_iter()
            .map(|(n, _, size, e_tag)| (n, (size, e_tag)))
            .collect();
        for n in names
            .iter()
            .filter(|n| *n != LOCK_NAME && *n != MANIFEST && !n.starts_with(UPLOAD_MARKER))
        {
            let want = sizes.get(n);
            // A listing may lag behind a write on some stores, and some
            // spell an ETag there otherwise than in a write's answer: what
            // it misses or shows otherwise is asked for by name.
            let have = match listed.get(n) {
                Some(have) if want.is_none_or(|want| same_object(want, have)) => continue,
                _ => self.head_meta(n)?,
            };
            let what = match (have, want) {
                (None, _) => "it is gone".to_owned(),
                (Some((have, _)), Some((want, _))) if have != *want => {
                    format!("it is {have} bytes, where this run wrote {want}")
                }
                (Some(have), Some(want)) if !same_object(want, &have) => format!(
                    "its ETag is {}, where this run's write was answered with {}",
                    have.1.as_deref().unwrap_or_default(),
                    want.1.as_deref().unwrap_or_default()
                ),
                _ => continue,
            };
            return Err(StorageError::Changed {
                url: self.url_of(n),
                what: format!(
                    "this run wrote it, and {what}: something removed or replaced it since, most likely a request that got no answer and landed late (an earlier run's undo or upload, or a resent DELETE of this run's clear)"
                ),
            });
        }
        Ok(())
    }

    /// The size and ETag of object `name` by a HEAD; `None` when it is gone.
    pub(super) fn head_meta(&self, name: &str) -> Result<Option<(u64, Option<String>)>> {
        let path = self.path(name)?;
        let client = Arc::clone(&self.client);
        match runtime::block_on(async move { client.head(&path).await })? {
            Ok(meta) => Ok(Some((meta.size, meta.e_tag))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(from_object_store(&self.url_of(name), None, e)),
        }
    }

    /// Writes the manifest, last: the dataset exists from now on. Releases
    /// the lock.
    ///
    /// # Errors
    /// Request errors; [`StorageError::Exists`] when a manifest appeared
    /// meanwhile (another run without the lock). On error, nothing is
    /// committed and [`Publisher::abort`] still undoes the run.
    pub fn commit(&self, manifest: Bytes) -> Result<()> {
        self.ensure_cleared()?;
        // The lock is refreshed until the manifest's outcome is known: a
        // slow PUT of it must not make this live run look killed to --force.
        if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
            self.lost.store(true, Ordering::SeqCst);
            return Err(self.lost_error());
        }
        // One write over this run's own version: a lock that another run
        // wrote meanwhile (even one putting this run's name back) fails it.
        if self.locked.load(Ordering::SeqCst) {
            let _writing = lock(&self.lock_write);
            self.write_lock(self.own_lock_body(self.claimed.load(Ordering::SeqCst)))?;
        }
        // Every object the manifest names must be there, as written, before
        // it is (and again after: see below).
        self.check_written()
            .map_err(|e| late_request(e, self.store.url(), "nothing of this run is committed"))?;
        *lock(&self.manifest) = Some(manifest.clone());
        let created = self.create_manifest(&manifest);
        self.stop_heartbeat();
        if let Err(e) = created {
            // The PUT may have landed all the same (an answer lost): if
            // another run took the prefix over meanwhile, undoing this
            // one (which then owns nothing) would leave it.
            if self.locked.load(Ordering::SeqCst) && self.lock_hold() == Hold::Lost {
                self.withdraw_manifest();
            }
            return Err(e);
        }
        // The run may have stalled (its refreshes with it) for longer than
        // --force elsewhere watches a lock, while its manifest's PUT was in
        // flight: another run may have taken the prefix over and deleted
        // this run's shards. Then the manifest would name what is gone, so
        // it goes.
        // A lock that cannot be checked now does not confirm it either: the
        // manifest goes, and the run fails (a rerun settles it).
        let hold = if self.locked.load(Ordering::SeqCst) {
            self.lock_hold()
        } else {
            Hold::Held
        };
        if hold == Hold::Unknown {
            let what = match self.withdraw_manifest() {
                Withdrawn::Yes => format!(
                    "this run could not confirm that it still held the prefix after its {MANIFEST} (its lock could not be read or written), so it withdrew its {MANIFEST}; nothing of it is committed, run it again"
                ),
                _ => format!(
                    "this run could not confirm that it still held the prefix after its {MANIFEST} (its lock could not be read or written), nor withdraw its {MANIFEST}; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        if hold == Hold::Lost {
            let what = match self.withdraw_manifest() {
                Withdrawn::Yes => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written; this run withdrew its {MANIFEST}, so nothing of it is committed"
                ),
                Withdrawn::Another => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written; the {MANIFEST} there now is the other run's"
                ),
                Withdrawn::Unknown => format!(
                    "another bale run took this prefix over (--force) while this run's {MANIFEST} was being written, and this run could not withdraw it: its {MANIFEST} may name objects the other run deleted; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        // A request of an earlier run that lands between the check above
        // and the manifest: the manifest would name what is gone, so it goes.
        if let Err(e) = self.check_written() {
            let done = match self.withdraw_manifest() {
                Withdrawn::Yes => {
                    format!("this run withdrew its {MANIFEST}, so nothing of it is committed")
                }
                _ => format!(
                    "this run could not withdraw its {MANIFEST}; check with `bale verify {}`",
                    self.store.url()
                ),
            };
            return Err(late_request(e, self.store.url(), &done));
        }
        *lock(&self.phase) = Phase::Committed;
        // Committed whatever befalls the lock: its DELETE sent twice is
        // waited out, so that the first attempt lands before the run ends,
        // not on the lock of a run that starts next.
        if self.delete(LOCK_NAME).is_ok() {
            let _ = self.wait_out_own_deletes(ENDS);
        }
        Ok(())
    }

    /// Creates the manifest, until its outcome is known. A create refused
    /// because a `bale.json` is there: this run's own (an earlier attempt
    /// landed, its answer lost), done; a stale bale run's (its PUT landed
    /// late, while this run holds the lock and has cleared what it named),
    /// replaced by this one over the version seen; anything else (someone's
    /// own object), refused. When no attempt gets an answer, the manifest
    /// may still land: [`Publisher::abort`] then keeps what it would name.
    pub(super) fn create_manifest(&self, manifest: &Bytes) -> Result<()> {
        if let Mode::Append { version, old } = &self.mode {
            return self.replace_manifest(manifest, version, old);
        }
        let mut last = None;
        for _ in 0..MANIFEST_ATTEMPTS {
            match self.put_mode(MANIFEST, manifest.clone(), PutMode::Create) {
                Ok(()) => return Ok(()),
                Err(e @ StorageError::Exists { .. }) => match self.manifest_owner() {
                    Owner::Ours => return Ok(()),
                    Owner::Run(version)
                        if self.locked.load(Ordering::SeqCst) && self.lock_hold() == Hold::Held =>
                    {
                        match self.put_mode(MANIFEST, manifest.clone(), PutMode::Update(version)) {
                            Ok(()) => return Ok(()),
                            Err(e) => last = Some(e),
                        }
                    }
                    Owner::Run(_) | Owner::Unmarked => return Err(e),
                    // Removed since, or unreadable: the next attempt tells.
                    Owner::Unknown | Owner::Absent => last = Some(e),
                },
                // Refused outright (a 4xx): this attempt did not land, but
                // an earlier one without an answer still may.
                Err(e) if refused_outright(&e) => {
                    if last.is_some() {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(e);
                }
                Err(e) => last = Some(e),
            }
        }
        self.manifest_unsure.store(true, Ordering::SeqCst);
        Err(last.unwrap_or(StorageError::Runtime("no attempt was made".into())))
    }

    /// Replaces the `bale.json` of the dataset an append adds to
    /// ([`Mode::Append`]) by `manifest`, only if it is still the one the run
    /// read (`version`, `old`): compared by a read under the lock first
    /// (a store may ignore `If-Match`), then written by a PUT conditional on
    /// its ETag (where the read gave none, the read's comparison alone).
    /// Sent again until its outcome is known, as [`Self::create_manifest`].
    pub(super) fn replace_manifest(
        &self,
        manifest: &Bytes,
        version: &UpdateVersion,
        old: &Bytes,
    ) -> Result<()> {
        let changed = || {
            StorageError::Changed {
            url: self.url_of(MANIFEST),
            what: "it is no longer the one this run read and adds to (something replaced or removed it meanwhile), so this run did not replace it; nothing of this run is committed; run the append again over the dataset as it is now".into(),
        }
        };
        let mut last = None;
        // An attempt got no definite answer: it may still land.
        let mut may_have_landed = false;
        for _ in 0..MANIFEST_ATTEMPTS {
            match read_seen(&self.client, &self.path(MANIFEST)?) {
                Ok(Some(seen)) if seen.bytes == *old && same_version(&seen.version, version) => {}
                Ok(_) => {
                    // An earlier attempt of this run landed, its answer
                    // lost; or someone else's write did.
                    if matches!(self.manifest_owner(), Owner::Ours) {
                        return Ok(());
                    }
                    if may_have_landed {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(changed());
                }
                Err(e) => {
                    last = Some(from_object_store(&self.url_of(MANIFEST), None, e));
                    continue;
                }
            }
            let mode = if version.e_tag.is_some() {
                PutMode::Update(version.clone())
            } else {
                PutMode::Overwrite
            };
            match self.put_mode(MANIFEST, manifest.clone(), mode) {
                Ok(()) => return Ok(()),
                // Changed since the read above, or this very PUT, sent
                // again by the client, landed the first time: the next
                // round tells.
                Err(e @ StorageError::Changed { .. }) => last = Some(e),
                Err(e) if refused_outright(&e) => {
                    if may_have_landed {
                        self.manifest_unsure.store(true, Ordering::SeqCst);
                    }
                    return Err(e);
                }
                Err(e) => {
                    may_have_landed |= may_land(&e);
                    last = Some(e);
                }
            }
        }
        if matches!(self.manifest_owner(), Owner::Ours) {
            return Ok(());
        }
        if may_have_landed {
            self.manifest_unsure.store(true, Ordering::SeqCst);
        }
        Err(last.unwrap_or_else(changed))
    }

    /// Puts back the `bale.json` an append read (`old`) over this run's
    /// own, which landed: the dataset is as it was before the run.
    pub(super) fn restore_manifest(&self, old: &Bytes) -> Result<()> {
        let path = self.path(MANIFEST)?;
        let client = Arc::clone(&self.client);
        let payload = PutPayload::from(old.clone());
        match runtime::block_on(async move { client.put(&path, payload).await })? {
            Ok(_) => Ok(()),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(MANIFEST), None, e))),
        }
    }

    /// Who wrote the `bale.json` under the prefix: by the run id in its
    /// metadata; where the store kept none, this run when the bytes are its
    /// own and it still holds the lock (no other run can have written it).
    pub(super) fn manifest_owner(&self) -> Owner {
        let Ok(path) = self.path(MANIFEST) else {
            return Owner::Unknown;
        };
        match read_seen(&self.client, &path) {
            Ok(Some(Seen { run: Some(run), .. })) if run == self.run => Owner::Ours,
            Ok(Some(Seen {
                run: Some(_),
                version,
                ..
            })) => Owner::Run(version),
            Ok(Some(Seen { bytes, .. })) => {
                if !self.lost.load(Ordering::SeqCst)
                    && lock(&self.manifest).as_ref() == Some(&bytes)
                    && self.owns_lock().unwrap_or(false)
                {
                    Owner::Ours
                } else {
                    Owner::Unmarked
                }
            }
            Ok(None) => Owner::Absent,
            Err(_) => Owner::Unknown,
        }
    }

    /// Deletes the manifest under the prefix if it is this run's.
    pub(super) fn withdraw_manifest(&self) -> Withdrawn {
        if let Mode::Append { old, .. } = &self.mode {
            // Over the dataset it adds to: the old manifest back.
            return match self.manifest_owner() {
                Owner::Ours if self.restore_manifest(old).is_ok() => Withdrawn::Yes,
                Owner::Run(_) | Owner::Unmarked | Owner::Absent => Withdrawn::Another,
                _ => Withdrawn::Unknown,
            };
        }
        match self.manifest_owner() {
            Owner::Ours if self.delete(MANIFEST).is_ok() => Withdrawn::Yes,
            Owner::Run(_) | Owner::Unmarked => Withdrawn::Another,
            Owner::Absent => Withdrawn::Yes,
            _ => Withdrawn::Unknown,
        }
    }
}

/// Whether an object seen (`have`: size, ETag) is the one written (`want`):
/// the same size, and the same ETag where both have one (quotes and case
/// aside).
pub(super) fn same_object(want: &(u64, Option<String>), have: &(u64, Option<String>)) -> bool {
    let tag = |t: &str| {
        t.trim_start_matches("W/")
            .trim_matches('"')
            .to_ascii_lowercase()
    };
    want.0 == have.0
        && match (&want.1, &have.1) {
            (Some(w), Some(h)) => tag(w) == tag(h),
            _ => true,
        }
}

/// Whether `seen` is the version `read`: the same ETag (and version id)
/// where the store gave them.
pub(super) fn same_version(seen: &UpdateVersion, read: &UpdateVersion) -> bool {
    let tag = |t: &Option<String>| {
        t.as_deref().map(|t| {
            t.trim_start_matches("W/")
                .trim_matches('"')
                .to_ascii_lowercase()
        })
    };
    (read.e_tag.is_none() || tag(&seen.e_tag) == tag(&read.e_tag))
        && (read.version.is_none() || seen.version == read.version)
}

/// A failure of [`Publisher::check_written`], with what the run did about
/// it and what the user can do.
pub(super) fn late_request(e: StorageError, prefix: &str, done: &str) -> StorageError {
    match e {
        StorageError::Changed { url, what } => StorageError::Changed {
            url,
            what: format!("{what}; {done}; run it again with --force"),
        },
        other => StorageError::Exists {
            url: prefix.to_owned(),
            what: format!(
                "this run could not check that the objects it wrote are there ({other}); {done}; run it again"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_is_the_one_written_by_size_and_etag() {
        let o = |size, tag: Option<&str>| (size, tag.map(str::to_owned));
        let want = o(100, Some("\"9b2cf535f27731c974343645a3985328\""));
        // Quotes, case and a weak mark aside, as stores spell them.
        assert!(same_object(
            &want,
            &o(100, Some("9B2CF535F27731C974343645A3985328"))
        ));
        assert!(same_object(
            &want,
            &o(100, Some("W/\"9b2cf535f27731c974343645a3985328\""))
        ));
        // Without an ETag on one side, the size alone.
        assert!(same_object(&want, &o(100, None)));
        assert!(same_object(&o(100, None), &o(100, Some("x"))));
        assert!(!same_object(&want, &o(101, None)));
        // The same size, another ETag: replaced.
        assert!(!same_object(
            &want,
            &o(100, Some("\"0cc175b9c0f1b6a831c399e269772661\""))
        ));
    }
}
