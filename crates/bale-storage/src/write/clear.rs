//! What `--force` replaces under a prefix: the checks at the open, the
//! clear before the first write, and the replacement of the objects a run
//! writes beside others.

use super::*;

/// What `--force` replaces under a prefix, and how far clearing it went.
pub(super) enum Clear {
    /// Nothing to clear.
    Nothing,
    /// Found when the run opened the prefix, to clear before its first
    /// write: the listing, and the objects of bale's names in it.
    Pending(Vec<String>, Vec<String>),
    /// Clearing failed: the run may not write. `had`: there were objects of
    /// bale's names to delete; `removed`: a DELETE of the clear removed
    /// one, or got no answer and may have; `why`: the error, for every
    /// later caller (`None`: the run was interrupted).
    Failed {
        had: bool,
        removed: bool,
        why: Option<String>,
    },
    /// Cleared. `removed`: there were objects of bale's names to delete.
    Done { removed: bool },
}

impl Publisher {
    pub(super) fn check_and_clear(&self) -> Result<()> {
        let mut dated: Vec<(String, i64)> = self
            .list_dated()?
            .into_iter()
            .filter(|(n, _)| n != LOCK_NAME)
            .collect();
        dated.sort();
        let names: Vec<String> = dated.iter().map(|(n, _)| n.clone()).collect();
        if names.is_empty() {
            // Nothing a killed run left: the lock dates what this run
            // writes by its own refreshes.
            lock(&self.carry).leftovers_until = None;
            self.claim()?;
            self.marks_leftovers.store(false, Ordering::SeqCst);
            return Ok(());
        }
        if !self.opts.force {
            let what = if names.iter().any(|n| n == MANIFEST) {
                format!(
                    "it already holds a dataset ({MANIFEST} and {} other objects); pass --force to replace bale's objects there (objects bale did not write are kept)",
                    names.len() - 1
                )
            } else {
                format!(
                    "it already holds {} objects (the first: {:?}); pass --force to replace bale's objects there (objects bale did not write are kept)",
                    names.len(),
                    names[0]
                )
            };
            return Err(StorageError::Exists {
                url: self.store.url().to_owned(),
                what,
            });
        }
        let doomed: Vec<String> = names
            .iter()
            .filter(|n| !n.contains('/') && (*n == MANIFEST || bale_format::is_bale_file_name(n)))
            .cloned()
            .collect();
        self.refuse_inputs(&doomed)?;
        // Tars `bale index` indexed in place are the user's: refused before
        // anything is removed, as is a manifest that cannot tell; so are
        // shard names with neither a manifest nor a killed run's lock.
        if names.iter().any(|n| n == MANIFEST) {
            self.refuse_adopted(&names)?;
        } else if !self.found_claim {
            self.refuse_unclaimed(&names, None)?;
        } else if let (Some(at), Some(until)) = (self.found_at, self.carried().leftovers_until) {
            // A claim covers what its run can have written: nothing later
            // than its last refresh, one refresh, its request timeout and a
            // margin after (or what its lock carried from a run before).
            let late: Vec<String> = dated
                .iter()
                .filter(|(_, t)| *t > until)
                .map(|(n, _)| n.clone())
                .collect();
            self.refuse_unclaimed(&late, Some(at))?;
        }
        // What is there goes only when the run writes its first object
        // ([`Publisher::ensure_cleared`]): a run that fails before (a bad
        // input, Ctrl-C while it walks the input) leaves it whole.
        *lock(&self.clear) = Clear::Pending(names, doomed);
        Ok(())
    }

    /// Clears what [`Publisher::check_and_clear`] found, once, before the
    /// run's first write; a second caller waits for the first.
    ///
    /// # Errors
    /// The clear's (every later call fails too: the prefix is not clear).
    pub(super) fn ensure_cleared(&self) -> Result<()> {
        let mut state = lock(&self.clear);
        let (names, doomed) = match &*state {
            Clear::Nothing | Clear::Done { .. } => return Ok(()),
            Clear::Failed { why: None, .. } => return Err(StorageError::Cancelled),
            Clear::Failed { why: Some(why), .. } => {
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!("clearing what was there before this run failed: {why}"),
                });
            }
            Clear::Pending(names, doomed) => (names, doomed),
        };
        let had = !doomed.is_empty();
        let dataset = names.iter().any(|n| n == MANIFEST);
        let cleared = self.clear(names, doomed);
        *state = match &cleared {
            Ok(()) => Clear::Done { removed: had },
            Err(e) => {
                let removed = had && self.deleted_any.load(Ordering::SeqCst);
                // A whole dataset the clear never touched is its manifest's:
                // this run's lock need not stay over it.
                if dataset && !removed && !self.found_claim {
                    self.marks_leftovers.store(false, Ordering::SeqCst);
                }
                Clear::Failed {
                    had,
                    removed,
                    why: (!matches!(e, StorageError::Cancelled)).then(|| e.to_string()),
                }
            }
        };
        cleared
    }

    /// Whether this run found objects of a dataset or a killed run under
    /// the prefix that `--force` would replace, and has not removed them
    /// (it fails or stops before its first write): they are as they were.
    pub fn kept_old(&self) -> bool {
        matches!(&*lock(&self.clear), Clear::Pending(_, doomed) if !doomed.is_empty())
    }

    /// Whether this run's clear of what `--force` replaces under the prefix
    /// failed before it removed any of it: what was there is as it was.
    pub fn kept_old_after_failed_clear(&self) -> bool {
        matches!(
            *lock(&self.clear),
            Clear::Failed {
                had: true,
                removed: false,
                ..
            }
        )
    }

    /// Whether this run began to remove what `--force` replaces under the
    /// prefix (a dataset, or what a killed run left): after a failure, it
    /// is gone, or partly.
    pub fn removed_old(&self) -> bool {
        matches!(
            *lock(&self.clear),
            Clear::Failed { removed: true, .. } | Clear::Done { removed: true }
        )
    }

    /// Deletes what `--force` replaces under the prefix: `names` is the
    /// listing, `doomed` the objects of bale's names in it.
    pub(super) fn clear(&self, names: &[String], doomed: &[String]) -> Result<()> {
        // Claimed before anything is deleted: a run killed while it clears
        // leaves what remains marked as a run's.
        self.claim()?;
        // The manifest first: from then on the prefix is not a dataset.
        if names.iter().any(|n| n == MANIFEST) {
            self.delete(MANIFEST)?;
        }
        // Uploads a killed run left open (S3 lists them; elsewhere the
        // markers below name them): only beside a dataset or a killed run's
        // claim, since an upload of the user's own shard-000000.tar may be
        // going on in a prefix that is neither.
        let ours = names.iter().any(|n| n == MANIFEST) || self.found_claim;
        for (name, id) in self.open_uploads()? {
            if ours && !name.contains('/') && bale_format::is_bale_file_name(&name) {
                self.abort_upload(&name, &id)?;
            }
        }
        for n in names.iter().filter(|n| n.starts_with(UPLOAD_MARKER)) {
            // A marker gone since the listing was removed with its upload
            // (by the run that wrote it, ending).
            let bytes = match self.get(n) {
                Ok(b) => b,
                Err(StorageError::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            };
            // The marker itself says bale opened the upload, whatever its
            // name: abort it (on stores without a listing of open uploads,
            // nothing else could find it again).
            if let Ok(m) = serde_json::from_slice::<Marker>(&bytes) {
                self.abort_upload(&m.name, &m.upload_id)?;
            }
            self.delete(n)?;
        }
        let rest: Vec<&str> = doomed
            .iter()
            .filter(|n| *n != MANIFEST && !n.starts_with(UPLOAD_MARKER))
            .map(String::as_str)
            .collect();
        if rest.len() > DELETES_PER_REQUEST {
            crate::notice(&format!(
                "{}: removing the {} objects --force replaces there ({DELETES_PER_REQUEST} to a request)",
                self.store.url(),
                rest.len()
            ));
        }
        self.delete_all(&rest, true)?;
        // An attempt of a DELETE above that got no answer lands before this
        // run writes, not over what it writes.
        self.wait_out_own_deletes("it writes")?;
        // Cleared: from here, undoing the run deletes what it wrote itself,
        // and the lock dates what this run writes by its own refreshes. Said
        // in the lock at once, before this run writes: killed after its first
        // shard, the killed run's older bound would refuse that shard as the
        // user's.
        if lock(&self.carry).leftovers_until.take().is_some() {
            self.claim()?;
        }
        self.marks_leftovers.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Refuses `--force` when an object it would delete is one the run
    /// reads ([`WriteOptions::inputs`]): `convert s3://b/ds -o s3://b/ds`,
    /// or a dataset whose manifest names tars under the output prefix.
    pub(super) fn refuse_inputs(&self, names: &[String]) -> Result<()> {
        if self.opts.inputs.is_empty() {
            return Ok(());
        }
        for n in names {
            let url = self.url_of(n);
            let Some(key) = crate::store::object_key(&url) else {
                continue;
            };
            if self
                .opts
                .inputs
                .iter()
                .any(|i| crate::store::may_name_object(i, &key))
            {
                return Err(StorageError::Exists {
                    url,
                    what: "this run reads it (an object of its source), and --force never \
                           deletes an input; write to another prefix"
                        .into(),
                });
            }
        }
        Ok(())
    }

    /// Refuses `--force` over a prefix whose manifest `bale index` wrote
    /// when it lists one of the objects `--force` would delete (a tar named
    /// like bale's shards, indexed in place: the user's), or whose manifest
    /// is not JSON (then whose the tars are cannot be told). Read
    /// leniently: only `created_by.command` and `shards[].file`.
    pub(super) fn refuse_adopted(&self, names: &[String]) -> Result<()> {
        let refuse = |what: String| StorageError::Exists {
            url: self.store.url().to_owned(),
            what,
        };
        let bytes = self.manifest_bytes()?;
        let listed = bale_format::indexed_in_place(&bytes).map_err(|why| {
            refuse(format!(
                "its {MANIFEST}: {why}; --force cannot tell whether the tars there are \
                 bale's output or tars `bale index` indexed in place (the user's), so it \
                 removes nothing. Write to another prefix, or delete {MANIFEST} and the \
                 objects named like bale's output there by hand if they are yours to remove"
            ))
        })?;
        if let Some(tar) = names
            .iter()
            .filter(|n| !n.contains('/') && bale_format::is_bale_file_name(n))
            .find(|n| {
                listed
                    .iter()
                    .flatten()
                    .any(|f| self.entry_names(f, n, false))
            })
        {
            return Err(refuse(format!(
                "{tar} is a tar that `bale index` indexed in place, the user's and not bale's \
                 output, so --force does not remove it; write to another prefix"
            )));
        }
        // A committed dataset's objects are the ones its manifest lists (a
        // --force before it cleared every other name of bale's): a shard
        // name it does not list was put there later, by someone else.
        // Listing grants the deletion, so a URL entry must name the very
        // object.
        let own = bale_format::listed_files(&bytes);
        let unlisted: Vec<&String> = names
            .iter()
            .filter(|n| {
                !n.contains('/')
                    && *n != MANIFEST
                    && !n.starts_with(".bale-tmp-")
                    && bale_format::is_bale_file_name(n)
                    && !own.iter().any(|f| self.entry_names(f, n, true))
            })
            .collect();
        if let Some(n) = self.first_not_bales(&unlisted)? {
            return Err(refuse(format!(
                "{n} is named like bale's output, but the {MANIFEST} there does not list it: \
                 it is not the old dataset's, so --force does not remove it; move it (or \
                 delete it by hand if it is a leftover of bale's), or write to another prefix"
            )));
        }
        Ok(())
    }

    /// The prefix's `bale.json`, read whole (within the manifests' bound).
    pub(super) fn manifest_bytes(&self) -> Result<Bytes> {
        self.store
            .object(MANIFEST)?
            .get_sized(0, bale_format::MAX_MANIFEST_BYTES, "manifest")
    }

    /// Whether the manifest entry `f` names the object `n` of the prefix:
    /// relative to it (`n` or `./n`), or by a URL. Loosely, any URL whose key
    /// could be this object's (to protect what it names); `exact`, only one
    /// of this very store and key (to grant its deletion).
    pub(super) fn entry_names(&self, f: &str, n: &str, exact: bool) -> bool {
        let f = f.strip_prefix("./").unwrap_or(f);
        if !crate::is_url(std::path::Path::new(f)) {
            return f == n;
        }
        let Some(key) = crate::store::object_key(&self.url_of(n)) else {
            return false;
        };
        if !exact {
            return crate::store::may_name_object(f, &key);
        }
        crate::Store::open(f, self.store.options())
            .is_ok_and(|other| other.same_client(&self.store))
            && crate::store::object_key(f).as_deref() == Some(key.as_str())
    }

    /// Of `names` (objects under the prefix), the first that is not bale's
    /// for certain: a tar first, else an `.idx` that does not begin as one
    /// of bale's indexes ([`Publisher::is_bale_index`]); `None` when every
    /// one is an index of bale's.
    pub(super) fn first_not_bales<'a>(&self, names: &[&'a String]) -> Result<Option<&'a String>> {
        if let Some(tar) = names.iter().find(|n| !n.ends_with(".idx")) {
            return Ok(Some(tar));
        }
        for n in names {
            if !self.is_bale_index(n)? {
                return Ok(Some(n));
            }
        }
        Ok(None)
    }

    /// Refuses `--force` over a prefix without a manifest when it holds an
    /// object named like bale's shards (`shard-000000.tar` is a common
    /// WebDataset name) and no run of bale's left its lock there: then the
    /// object may be the user's. So is an object named like bale's indexes
    /// that does not begin as one (`shard-000000.idx` is also the name of a
    /// DALI tar index). bale's own indexes and temporary objects are cleared
    /// without that.
    pub(super) fn refuse_unclaimed(&self, names: &[String], claimed_at: Option<i64>) -> Result<()> {
        let shards: Vec<&String> = names
            .iter()
            .filter(|n| {
                !n.contains('/')
                    && !n.starts_with(".bale-tmp-")
                    && bale_format::is_bale_file_name(n)
            })
            .collect();
        let Some(tar) = self.first_not_bales(&shards)? else {
            return Ok(());
        };
        let why = match claimed_at {
            None => {
                format!("no lock object ({LOCK_NAME}) of a killed bale run that had claimed it")
            }
            Some(_) => format!(
                "it was written after the bale run whose lock object ({LOCK_NAME}) is there \
                 had stopped"
            ),
        };
        let named = if tar.ends_with(".idx") {
            "named like bale's indexes but is not one"
        } else {
            "named like bale's shards"
        };
        Err(StorageError::Exists {
            url: self.url_of(tar),
            what: format!(
                "it is {named}, but the prefix has no {MANIFEST}, and {why}: it \
                 may be yours, so --force removes nothing; delete it by hand if it is a leftover \
                 of bale's, or write to another prefix"
            ),
        })
    }

    /// Whether object `name` begins as one of bale's indexes
    /// ([`bale_format::is_index_head`]); one gone since the listing counts
    /// as bale's (nothing of it is left to delete).
    pub(super) fn is_bale_index(&self, name: &str) -> Result<bool> {
        let object = self.store.object(name)?;
        let size = match object.head() {
            Ok(size) => size,
            Err(StorageError::NotFound { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        let head = match object.get_range(0..size.min(8)) {
            Ok(head) => head,
            Err(StorageError::NotFound { .. }) => return Ok(true),
            Err(e) => return Err(e),
        };
        Ok(bale_format::is_index_head(&head))
    }

    /// For a run opened with [`Publisher::open_alongside`], with all it
    /// will upload at hand: checks the names again (the prefix may have
    /// changed since the open) and deletes those there, the old `bale.json`
    /// first, and with `force` aborts open uploads of them. Nothing for
    /// other runs.
    ///
    /// Returns whether the run writes beside others (and so replaced what
    /// was there).
    ///
    /// # Errors
    /// As [`Publisher::open_alongside`]'s checks; request errors; another
    /// run having taken the prefix over.
    pub fn replace_alongside(&self) -> Result<bool> {
        let Mode::Alongside(names) = &self.mode else {
            return Ok(false);
        };
        // The scan may have taken hours, and a run that stalled meanwhile
        // (its lock's refreshes with it) may have been taken over by a
        // --force run that has committed since: what is there is that
        // run's dataset now, and not this one's to delete.
        {
            let _writing = lock(&self.lock_write);
            self.check_not_lost()?;
            if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
                self.lost.store(true, Ordering::SeqCst);
                return Err(self.lost_error());
            }
        }
        self.check_and_clear_names(names)?;
        Ok(true)
    }

    pub(super) fn check_and_clear_names(&self, names: &[String]) -> Result<()> {
        let mut present = self.check_names(names)?;
        // Never what this run wrote itself.
        let written = lock(&self.written).names.clone();
        present.retain(|n| !written.contains(n));
        // The manifest first, then the rest, as few requests as the store
        // takes.
        let (manifest, rest): (Vec<&str>, Vec<&str>) = present
            .iter()
            .map(String::as_str)
            .partition(|n| *n == MANIFEST);
        for group in [manifest, rest] {
            if group.is_empty() {
                continue;
            }
            // The heartbeat sees a takeover within its beat.
            self.check_not_lost()?;
            self.delete_all(&group, true)?;
        }
        if self.opts.force {
            for (name, id) in self.open_uploads()? {
                if names.contains(&name) {
                    self.abort_upload(&name, &id)?;
                }
            }
        }
        // A DELETE above sent twice lands before the run writes the same
        // names, not over them.
        self.wait_out_own_deletes("it writes")
    }

    /// Which of `names` are there, each one that `force` may replace;
    /// refused without `force`, or when one is not bale's (a `bale.json` no
    /// bale run wrote, another tool's `.idx`) or is an input of the run.
    pub(super) fn check_names(&self, names: &[String]) -> Result<Vec<String>> {
        let listed: std::collections::HashSet<String> = self.list()?.into_iter().collect();
        let present: Vec<&String> = names.iter().filter(|n| listed.contains(*n)).collect();
        // A bale.json no bale run wrote is not an old dataset to replace.
        if present.iter().any(|n| *n == MANIFEST)
            && let Err(why) = bale_format::indexed_in_place(&self.manifest_bytes()?)
        {
            return Err(StorageError::Exists {
                url: self.url_of(MANIFEST),
                what: format!(
                    "it cannot be taken for an old dataset of bale's: {why}, so even \
                     --force does not replace it; move it, or index into a local directory"
                ),
            });
        }
        // bale's indexes may be replaced, never another tool's object of the
        // same name (DALI's tar indexer writes `<tar>.idx` too).
        let indexes: Vec<&String> = present
            .iter()
            .copied()
            .filter(|n| n.ends_with(".idx"))
            .collect();
        if let Some(n) = self.first_not_bales(&indexes)? {
            return Err(StorageError::Exists {
                url: self.url_of(n),
                what: "it is where bale would write an index, but it is not one of bale's \
                       indexes (a DALI tar index has this name too), so even --force does \
                       not replace it; move it, or index into a local directory"
                    .into(),
            });
        }
        if let Some(first) = present.first()
            && !self.opts.force
        {
            return Err(StorageError::Exists {
                url: self.url_of(first),
                what: "it exists; pass --force to replace it (only the objects this command writes are replaced)".into(),
            });
        }
        let present: Vec<String> = present.iter().map(|n| (*n).clone()).collect();
        if self.opts.force {
            self.refuse_inputs(&present)?;
        }
        Ok(present)
    }
}
