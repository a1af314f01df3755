//! The output directory of a command that writes a dataset: locked for the
//! whole run, checked before anything is written, cleaned up after a failure.
//!
//! The rules (docs/reliability.md):
//! - the directory is locked ([`DirLock`]): a second writer fails at once;
//! - a non-empty directory is refused unless `force`; with `force`, the old
//!   manifest and then the files named like bale's output are removed, but
//!   never a file an input of the command refers to ([`Inputs`]);
//! - a command that writes beside other files ([`Output::alongside`], `bale
//!   index`) only refuses or, with `force`, replaces the names it writes;
//! - on failure, only the files this run put in place are removed (and the
//!   directory, if this run created it and it is empty).

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use bale_format::atomic::{APPEND_MARK, TEMP_PREFIX, has_append_mark, temp_name_rest};
use bale_format::files::{DirLock, FileId};
use bale_format::{MANIFEST_NAME, MAX_MANIFEST_BYTES, Manifest, is_bale_file_name};

use crate::error::{PackError, Result};

/// The files a command reads: `--force` never deletes or replaces one.
#[derive(Debug, Default)]
pub(crate) struct Inputs {
    ids: HashSet<FileId>,
}

impl Inputs {
    /// Adds the file `path` reaches (following symlinks); a path that cannot
    /// be stat'ed is skipped (it cannot be the file about to be removed).
    pub fn add(&mut self, path: &Path) {
        if let Some(id) = FileId::of(path) {
            self.ids.insert(id);
        }
    }

    /// Whether the file `path` reaches is one of the inputs.
    pub fn holds(&self, path: &Path) -> bool {
        !self.ids.is_empty() && FileId::of(path).is_some_and(|id| self.ids.contains(&id))
    }
}

/// The dataset an append found in its output: its manifest, and the names
/// of the directory's entries.
pub(crate) type Existing = (Manifest, Vec<String>);

/// An output directory being written. Dropped without [`Output::commit`], it
/// removes every file this run put in place and, if this run created the
/// directory, the directory (when empty); the lock is released last.
#[derive(Debug)]
pub(crate) struct Output {
    pub dir: PathBuf,
    /// The topmost directory this run created (`dir` or an ancestor).
    created: Option<PathBuf>,
    force: bool,
    files: Vec<PathBuf>,
    /// The mark of this run ([`RUN_MARK`]), once [`Output::clear`] wrote it.
    run_mark: Option<PathBuf>,
    /// [`Output::clear`] is removing the old output: a failure then leaves
    /// the mark, over what is left of it.
    clearing: bool,
    committed: bool,
    _lock: DirLock,
}

/// What follows `.bale-tmp-<pid>-` in the name of the mark a run of `pack`,
/// `convert` or `merge` keeps in its output from before its first shard
/// lands until its manifest is written. A run killed in between leaves it:
/// it says that the shards without a manifest beside it are a killed run's,
/// which `--force` may remove; without it (and without a manifest), tars of
/// bale's names may be the user's, and `--force` refuses.
pub(crate) const RUN_MARK: &str = "run";

/// The journal of a merge's moves, in its output while files move.
pub const JOURNAL_NAME: &str = ".bale-merge-journal.json";

impl Output {
    /// Creates `dir` if needed and locks it. Refuses a non-empty directory
    /// unless `force`; nothing is removed yet ([`Output::clear`] does that,
    /// once the command knows its inputs).
    pub fn open(dir: &Path, force: bool) -> Result<Self> {
        let out = Self::open_locked(dir, force)?;
        out.refuse_non_empty()?;
        Ok(out)
    }

    /// For `--append`: creates `dir` if needed and locks it. Without a
    /// manifest there, as [`Output::open`] without `force` (a fresh pack).
    /// With one, returns it (read strictly) and the names of the
    /// directory's entries, after removing what interrupted runs left:
    /// temporary files and, when a killed append's mark ([`APPEND_MARK`])
    /// is there, the files of bale's names the manifest does not list. Then
    /// puts this run's append mark in, until [`Output::commit`].
    pub fn open_append(dir: &Path) -> Result<(Self, Option<Existing>)> {
        let mut out = Self::open_locked(dir, false)?;
        if out.created.is_some() || fs::symlink_metadata(dir.join(MANIFEST_NAME)).is_err() {
            out.refuse_non_empty()?;
            return Ok((out, None));
        }
        let manifest = Manifest::read(dir)?;
        // An index's tars are the user's files, whatever their names: a
        // killed `index --append` leaves only indexes, which it replaces.
        if has_append_mark(dir) && manifest.created_by.command != "index" {
            let own: HashSet<&std::ffi::OsStr> = manifest
                .shards
                .iter()
                .flat_map(|s| [s.file.as_str(), s.index.as_str()])
                .filter_map(|f| Path::new(f).file_name())
                .collect();
            for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
                let entry = entry.map_err(|e| PackError::io(dir, e))?;
                let name = entry.file_name();
                let shard_named = name.to_str().is_some_and(|n| {
                    is_bale_file_name(n) && !n.starts_with(TEMP_PREFIX) && n != MANIFEST_NAME
                });
                let file = entry.file_type().is_ok_and(|t| t.is_file());
                if shard_named && file && !own.contains(name.as_os_str()) {
                    let path = entry.path();
                    match fs::remove_file(&path) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(PackError::io(&path, e));
                        }
                        _ => {}
                    }
                }
            }
        }
        remove_temps(dir, None)?;
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
            let entry = entry.map_err(|e| PackError::io(dir, e))?;
            if let Some(n) = entry.file_name().to_str() {
                names.push(n.to_owned());
            }
        }
        out.mark_append()?;
        Ok((out, Some((manifest, names))))
    }

    /// Puts this run's append mark ([`APPEND_MARK`]) in, until
    /// [`Output::commit`]: a run killed before its manifest leaves it, and
    /// it says that the files of bale's the manifest does not list are an
    /// interrupted append's (`bale verify` warns of them).
    pub fn mark_append(&mut self) -> Result<()> {
        let mark = self
            .dir
            .join(format!("{TEMP_PREFIX}{}-{RUN_MARK}", std::process::id()));
        bale_format::atomic::replace_atomic(&mark, APPEND_MARK)?;
        self.run_mark = Some(mark);
        Ok(())
    }

    /// Refuses a directory this run did not create that holds anything
    /// but the marks of runs killed before their first shard (the lock is
    /// ours: no live run's), which go; unless `force`.
    fn refuse_non_empty(&self) -> Result<()> {
        let dir = &self.dir;
        if self.created.is_none() && !self.force {
            // Only the marks of runs killed before their first shard (the
            // lock is ours: no live run's) count as empty, and go.
            let mut marks = Vec::new();
            for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
                let entry = entry.map_err(|e| PackError::io(dir, e))?;
                if !is_run_mark(&entry.file_name()) {
                    return Err(PackError::OutputNotEmpty {
                        dir: dir.to_path_buf(),
                    });
                }
                marks.push(entry.path());
            }
            for m in marks {
                let _ = fs::remove_file(m);
            }
        }
        Ok(())
    }

    /// Creates `dir` if needed and locks it, for a command that writes its
    /// files beside others (`bale index` into the tars' own directory): only
    /// the names it writes must be free ([`Output::make_room`]).
    pub fn alongside(dir: &Path, force: bool) -> Result<Self> {
        Self::open_locked(dir, force)
    }

    fn open_locked(dir: &Path, force: bool) -> Result<Self> {
        let created = match fs::metadata(dir) {
            Ok(m) if m.is_dir() => None,
            Ok(_) => {
                return Err(PackError::Refused {
                    path: dir.to_path_buf(),
                    what: "the output exists and is not a directory".into(),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // `x/../ds` with no `x`: making the path would make `x`,
                // which nothing removes (the output is `ds`).
                let mut walked = PathBuf::new();
                for c in dir.components() {
                    if c == std::path::Component::ParentDir
                        && !walked.as_os_str().is_empty()
                        && !walked.is_dir()
                    {
                        return Err(PackError::Refused {
                            path: dir.to_path_buf(),
                            what: format!(
                                "the path steps back out of {} with '..', and that directory does not exist: name the output without it",
                                bale_format::shown(&walked)
                            ),
                        });
                    }
                    walked.push(c);
                }
                // The topmost directory this run creates: on failure, it and
                // the ones below it go (when empty), not only the last.
                let mut top = dir.to_path_buf();
                while let Some(parent) = top.parent() {
                    if parent.as_os_str().is_empty() || parent.exists() {
                        break;
                    }
                    top = parent.to_path_buf();
                }
                if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                    fs::create_dir_all(parent).map_err(|e| PackError::io(parent, e))?;
                }
                // Only the run whose mkdir succeeds created it: a run racing
                // into the same new directory must never remove it.
                match fs::create_dir(dir) {
                    Ok(()) => Some(top),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => None,
                    Err(e) => return Err(PackError::io(dir, e)),
                }
            }
            Err(e) => return Err(PackError::io(dir, e)),
        };
        // A run that does not get the lock leaves the directory as it is:
        // the holder is writing into it.
        let lock = DirLock::try_lock(dir)?;
        if dir.join(JOURNAL_NAME).exists() {
            return Err(PackError::Refused {
                path: dir.to_path_buf(),
                what: format!(
                    "it holds {}, the journal of a `bale merge` that was killed: shards of \
                     its parts are in here; run the same `bale merge` again to finish it or \
                     put them back",
                    JOURNAL_NAME
                ),
            });
        }
        Ok(Self {
            dir: dir.to_path_buf(),
            created,
            force,
            files: Vec::new(),
            run_mark: None,
            clearing: false,
            committed: false,
            _lock: lock,
        })
    }

    /// With `force`, removes the old dataset: the manifest first (from then
    /// on the directory is not a dataset), then every file named like
    /// bale's output; other files are left alone. Refuses, before removing
    /// anything, when one of them is an input of the command, or when
    /// [`Output::victims`] refuses.
    pub fn clear(&mut self, inputs: &Inputs) -> Result<()> {
        let victims = self.victims()?;
        self.clear_victims(victims, inputs)
    }

    /// [`Output::clear`], given what [`Output::victims`] returned (for a
    /// caller that looked at them first).
    pub fn clear_victims(&mut self, mut victims: Vec<PathBuf>, inputs: &Inputs) -> Result<()> {
        if let Some(v) = victims.iter().find(|v| inputs.holds(v)) {
            return Err(PackError::WouldDeleteInput { path: v.clone() });
        }
        refuse_unclaimed(&self.dir, &victims)?;
        let temps = if self.force {
            temps(&self.dir)?
        } else {
            Vec::new()
        };
        // From here until the manifest, the directory may hold shards
        // without one: this run's mark says they are a run's. It goes in
        // before anything old is removed (a run killed while it removes them
        // leaves them marked), and stays when the removal fails.
        let mark = self
            .dir
            .join(format!("{TEMP_PREFIX}{}-{RUN_MARK}", std::process::id()));
        bale_format::atomic::replace_atomic(&mark, b"")?;
        self.run_mark = Some(mark);
        self.clearing = true;
        remove_listed(&temps, self.run_mark.as_deref())?;
        victims.sort_by_key(|v| v.file_name() != Some(MANIFEST_NAME.as_ref()));
        for v in victims {
            match fs::remove_file(&v) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(PackError::io(&v, e)),
            }
        }
        self.clearing = false;
        Ok(())
    }

    /// The files [`Output::clear`] would remove (temporary files aside):
    /// the regular files named like bale's output. Removes nothing, and
    /// refuses:
    /// - an entry named like bale's output that is not a regular file (a
    ///   directory, a FIFO, a symlink): `--force` removes only files, so it
    ///   would stop the run after the old dataset was gone;
    /// - a tar that `bale index` indexed in place (the old manifest's
    ///   command is `index` and lists it): it is the user's, not bale's;
    ///
    /// [`Output::clear`] also refuses, after its check of the inputs, a tar
    /// ([`refuse_unclaimed`]) the directory has no manifest or run mark for.
    pub fn victims(&self) -> Result<Vec<PathBuf>> {
        if self.created.is_some() || !self.force {
            return Ok(Vec::new());
        }
        let adopted = adopted_tars(&self.dir)?;
        let mut victims = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(|e| PackError::io(&self.dir, e))? {
            let entry = entry.map_err(|e| PackError::io(&self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| is_bale_file_name(n)) else {
                continue;
            };
            if name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let path = entry.path();
            let meta = match fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(PackError::io(&path, e)),
            };
            if !meta.is_file() {
                return Err(PackError::Refused {
                    what: format!(
                        "it is {} named like bale's output, which --force does not remove \
                         (regular files only); move it out of {} first",
                        bale_format::files::kind_of(&meta),
                        bale_format::shown(&self.dir)
                    ),
                    path,
                });
            }
            if adopted.holds(&path) {
                return Err(PackError::Refused {
                    what: format!(
                        "it is a tar that `bale index` indexed in place, the user's and not \
                         bale's output, so --force does not remove it; write to another \
                         directory, or move the tars out of {} first",
                        bale_format::shown(&self.dir)
                    ),
                    path,
                });
            }
            victims.push(path);
        }
        Ok(victims)
    }

    /// With `force`, removes what interrupted runs left under bale's
    /// temporary prefix (`.bale-tmp-*` files, and the staging directories of
    /// `convert --format dir`): never a symlink's target.
    pub fn clear_temps(&self) -> Result<()> {
        if !self.force {
            return Ok(());
        }
        remove_temps(&self.dir, None)
    }

    /// Whether [`Output::make_room`] would make room for `name` (it is
    /// free, or `force` and not an input), removing nothing.
    pub fn check_room(&self, name: &str, inputs: &Inputs) -> Result<()> {
        let path = self.dir.join(name);
        if fs::symlink_metadata(&path).is_err() {
            return Ok(());
        }
        if inputs.holds(&path) {
            return Err(PackError::WouldDeleteInput { path });
        }
        if !self.force {
            return Err(PackError::WouldReplace { path });
        }
        Ok(())
    }

    /// Makes sure the file `name` of the directory can be created: absent,
    /// or (with `force`) removed, unless an input refers to it.
    pub fn make_room(&self, name: &str, inputs: &Inputs) -> Result<()> {
        self.check_room(name, inputs)?;
        let path = self.dir.join(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(PackError::io(&path, e)),
            _ => Ok(()),
        }
    }

    /// Records a file this run put in place, to remove on failure.
    pub fn track(&mut self, path: PathBuf) {
        self.files.push(path);
    }

    /// The run succeeded: keep everything but the run's mark (the manifest
    /// is written: the shards are claimed).
    pub fn commit(mut self) {
        self.committed = true;
        if let Some(mark) = self.run_mark.take() {
            let _ = fs::remove_file(mark);
        }
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        for f in self.files.iter().rev() {
            let _ = fs::remove_file(f);
        }
        if let Some(mark) = self.run_mark.as_ref().filter(|_| !self.clearing) {
            let _ = fs::remove_file(mark);
        }
        if let Some(top) = &self.created {
            remove_empty_dirs(&self.dir, top);
        }
    }
}

/// Refuses the first tar (`.tar`, `.tar.zst`, `.h5`) among `victims` when
/// `dir` has no manifest and no killed run's mark ([`RUN_MARK`]): then the
/// tars may be the user's own. So is an `.idx` that does not begin as one of
/// bale's indexes (a DALI tar index has the same name); bale's go.
fn refuse_unclaimed(dir: &Path, victims: &[PathBuf]) -> Result<()> {
    // The manifest first: a clear removes it before anything else, so with
    // it still there a killed run's mark covers nothing it does not list.
    let manifest = dir.join(MANIFEST_NAME);
    if fs::symlink_metadata(&manifest).is_ok() {
        return refuse_unlisted(dir, &manifest, victims);
    }
    if has_run_mark(dir)? {
        return Ok(());
    }
    let shards: Vec<&PathBuf> = victims
        .iter()
        .filter(|v| !v.ends_with(MANIFEST_NAME))
        .collect();
    let Some(tar) = first_not_bales(&shards)? else {
        return Ok(());
    };
    let named = if tar.extension().is_some_and(|e| e == "idx") {
        "named like bale's indexes but is not one"
    } else {
        "named like bale's shards"
    };
    Err(PackError::Refused {
        what: format!(
            "it is {named}, but {} has no {MANIFEST_NAME} and no mark of a \
             killed bale run: it may be yours, so --force does not remove it; delete it by \
             hand if it is a leftover of bale's, or write to another directory",
            bale_format::shown(dir)
        ),
        path: tar.clone(),
    })
}

/// Beside an old manifest (and no killed run's mark), refuses a file named
/// like bale's output that the manifest does not list: a committed
/// dataset's files are the ones it lists (the `--force` that wrote it
/// cleared every other name of bale's first), so such a file was put there
/// later, by someone else. An unlisted index of bale's goes.
fn refuse_unlisted(dir: &Path, manifest: &Path, victims: &[PathBuf]) -> Result<()> {
    let bytes = bale_format::files::read_capped(manifest, MAX_MANIFEST_BYTES, "manifest")?;
    // A killed append's mark makes its unlisted shards bale's; but an
    // index's tars are the user's, whatever their names, and a killed
    // `index --append` writes indexes only.
    let by_index = serde_json::from_slice::<serde_json::Value>(&bytes)
        .is_ok_and(|m| m["created_by"]["command"] == "index");
    if has_append_mark(dir) && !by_index {
        return Ok(());
    }
    let own: HashSet<std::ffi::OsString> = bale_format::listed_files(&bytes)
        .iter()
        .filter_map(|f| Path::new(f).file_name().map(ToOwned::to_owned))
        .collect();
    let unlisted: Vec<&PathBuf> = victims
        .iter()
        .filter(|v| !v.ends_with(MANIFEST_NAME) && !v.file_name().is_some_and(|n| own.contains(n)))
        .collect();
    if let Some(v) = first_not_bales(&unlisted)? {
        return Err(PackError::Refused {
            what: format!(
                "it is named like bale's output, but the {MANIFEST_NAME} in {} does not list \
                 it: it is not the old dataset's, so --force does not remove it; move it (or \
                 delete it by hand if it is a leftover of bale's), or write to another directory",
                bale_format::shown(dir)
            ),
            path: v.clone(),
        });
    }
    Ok(())
}

/// Of `files` (named like bale's output), the first that is not bale's for
/// certain: a tar first, else an `.idx` that does not begin as one of
/// bale's indexes ([`is_bale_index`]); `None` when every one is an index of
/// bale's.
fn first_not_bales<'a>(files: &[&'a PathBuf]) -> Result<Option<&'a PathBuf>> {
    let is_idx = |v: &PathBuf| v.extension().is_some_and(|e| e == "idx");
    if let Some(tar) = files.iter().find(|v| !is_idx(v)) {
        return Ok(Some(tar));
    }
    for v in files {
        if !is_bale_index(v)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Whether the file `path` begins as one of bale's indexes
/// ([`bale_format::is_index_head`]): a `shard-000000.idx` may also be a
/// DALI tar index of the user's. A file gone meanwhile counts as bale's
/// (nothing of it is left to remove).
pub(crate) fn is_bale_index(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut head = Vec::with_capacity(8);
    match fs::File::open(path) {
        Ok(f) => f
            .take(8)
            .read_to_end(&mut head)
            .map_err(|e| PackError::io(path, e))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(PackError::io(path, e)),
    };
    Ok(bale_format::is_index_head(&head))
}

/// Whether `dir` holds the mark of a run ([`RUN_MARK`]) of any process.
fn has_run_mark(dir: &Path) -> Result<bool> {
    for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
        let entry = entry.map_err(|e| PackError::io(dir, e))?;
        if is_run_mark(&entry.file_name()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether `name` is a run's mark, `.bale-tmp-<pid>-run` ([`RUN_MARK`]).
fn is_run_mark(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .and_then(temp_name_rest)
        .is_some_and(|rest| rest == RUN_MARK)
}

/// The shard files of the dataset in `dir` when `bale index` made it (its
/// shards are tars it found, not files it wrote); empty when there is no
/// manifest or another command wrote it. Read leniently (only
/// `created_by.command` and `shards[].file`): a manifest that fails the
/// strict checks may still be an index's. One that cannot be read even so
/// is refused, since then the tars beside it cannot be told to be bale's.
fn adopted_tars(dir: &Path) -> Result<Adopted> {
    let path = dir.join(MANIFEST_NAME);
    if fs::symlink_metadata(&path).is_err() {
        return Ok(Adopted::default());
    }
    let refuse = |why: String| PackError::Refused {
        what: format!(
            "{why}; --force cannot tell whether the tars beside it are bale's output or tars \
             `bale index` indexed in place (the user's), so it removes nothing. Write to \
             another directory, or delete it and the files named like bale's output in {} by \
             hand if they are yours to remove",
            bale_format::shown(dir)
        ),
        path: path.clone(),
    };
    let bytes = bale_format::files::read_capped(&path, MAX_MANIFEST_BYTES, "manifest")
        .map_err(|e| refuse(e.to_string()))?;
    let files = bale_format::indexed_in_place(&bytes)
        .map_err(refuse)?
        .unwrap_or_default();
    Ok(Adopted {
        ids: files
            .iter()
            .filter_map(|file| FileId::of(&dir.join(file)))
            .collect(),
        names: files
            .iter()
            .filter_map(|file| Path::new(file).file_name().map(ToOwned::to_owned))
            .collect(),
    })
}

/// The tars a `bale index` manifest lists: by file identity where its paths
/// still resolve, and by file name, since they no longer do once the
/// directory was moved or copied (an absolute path then names the old
/// place, or nothing).
#[derive(Debug, Default)]
struct Adopted {
    ids: HashSet<FileId>,
    names: HashSet<std::ffi::OsString>,
}

impl Adopted {
    /// Whether `path` is one of the listed tars, or has the name of one.
    fn holds(&self, path: &Path) -> bool {
        path.file_name().is_some_and(|n| self.names.contains(n))
            || FileId::of(path).is_some_and(|id| self.ids.contains(&id))
    }
}

/// Removes `dir` and its ancestors up to `top` (included), each only if empty.
pub(crate) fn remove_empty_dirs(dir: &Path, top: &Path) {
    let mut at = Some(dir);
    while let Some(d) = at {
        if fs::remove_dir(d).is_err() || d == top {
            return;
        }
        at = d.parent();
    }
}

/// The suffix of the file `convert --format dir` keeps in the output while
/// it moves its export in ([`CONVERT_STAGING`] + this): a run killed then
/// leaves part of the export in place and the rest in its staging folder.
pub(crate) const MOVING_SUFFIX: &str = ".moving";

/// What follows `.bale-tmp-<pid>-` in the name of `convert --format dir`'s
/// staging folder.
pub(crate) const CONVERT_STAGING: &str = "convert";

/// Removes what interrupted runs left in `dir` under bale's temporary
/// names (`.bale-tmp-<pid>-*` files, and the staging folders
/// `.bale-tmp-<pid>-convert` of `convert --format dir`): never a symlink's
/// target, never a folder of any other name. Refuses, removing nothing,
/// when a `convert --format dir` was killed while it moved its export in:
/// its staging folder holds the rest of that export.
pub(crate) fn remove_temps(dir: &Path, keep: Option<&Path>) -> Result<()> {
    remove_listed(&temps(dir)?, keep)
}

/// What [`remove_temps`] removes in `dir` (path, whether a folder), or its
/// refusal; removes nothing.
fn temps(dir: &Path) -> Result<Vec<(PathBuf, bool)>> {
    let mut temps = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| PackError::io(dir, e))? {
        let entry = entry.map_err(|e| PackError::io(dir, e))?;
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(temp_name_rest) else {
            continue;
        };
        let path = entry.path();
        if rest.strip_suffix(MOVING_SUFFIX) == Some(CONVERT_STAGING) {
            let staging = path.with_file_name(
                name.to_string_lossy()
                    .strip_suffix(MOVING_SUFFIX)
                    .unwrap_or_default(),
            );
            let what = if fs::symlink_metadata(&staging).is_ok() {
                format!(
                    "a `bale convert --format dir` was killed while it moved its export in: \
                     part of it may be in place and the rest is in {}; {} lists the names it \
                     was moving in. Move every entry of that folder (names starting with a \
                     dot included) into {} and delete both, or delete what the list names \
                     and both, then run again",
                    bale_format::shown(&staging),
                    bale_format::shown(&path),
                    bale_format::shown(dir),
                )
            } else {
                format!(
                    "a `bale convert --format dir` was killed just after it moved its whole \
                     export in (the names {} lists); delete that file, then run again",
                    bale_format::shown(&path),
                )
            };
            return Err(PackError::Refused {
                what,
                path: dir.to_path_buf(),
            });
        }
        // The entry's own type: a symlink is removed, not followed.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && rest != CONVERT_STAGING {
            continue;
        }
        temps.push((path, is_dir));
    }
    Ok(temps)
}

/// Removes the `temps` [`temps`] listed, but `keep`.
fn remove_listed(temps: &[(PathBuf, bool)], keep: Option<&Path>) -> Result<()> {
    for (path, is_dir) in temps {
        if keep.is_some_and(|k| k == path) {
            continue;
        }
        let removed = if *is_dir {
            fs::remove_dir_all(path)
        } else {
            fs::remove_file(path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(PackError::io(path, e)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_non_empty_output_and_force_clears_bale_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("out");
        fs::create_dir(&out).unwrap();
        for n in [
            "bale.json",
            "shard-000003.tar",
            "shard-000003.idx",
            "notes.txt",
        ] {
            fs::write(out.join(n), b"x").unwrap();
        }
        // A manifest of pack's (read only for whose the tars are).
        fs::write(
            out.join("bale.json"),
            br#"{"created_by": {"tool": "bale", "command": "pack"},
                 "shards": [{"file": "shard-000003.tar", "index": "shard-000003.idx"}]}"#,
        )
        .unwrap();
        // A shard name the manifest does not list was put there later: the
        // user's, refused before anything goes (a killed run's mark beside
        // the manifest changes nothing). An unlisted index of bale's goes.
        fs::write(out.join("shard-000042.tar"), b"the user's").unwrap();
        fs::write(out.join(".bale-tmp-99999-run"), b"").unwrap();
        let bale_idx = bale_index_head();
        fs::write(out.join("shard-000099.idx"), &bale_idx).unwrap();
        let mut o = Output::open(&out, true).unwrap();
        let err = o.clear(&Inputs::default()).unwrap_err();
        assert!(
            err.to_string().contains("shard-000042.tar")
                && err.to_string().contains("does not list"),
            "{err}"
        );
        o.commit();
        assert!(out.join("bale.json").exists() && out.join("shard-000003.tar").exists());
        fs::remove_file(out.join("shard-000042.tar")).unwrap();
        let err = Output::open(&out, false).unwrap_err();
        assert!(matches!(err, PackError::OutputNotEmpty { .. }), "{err}");
        assert!(out.join("bale.json").exists());
        let mut o = Output::open(&out, true).unwrap();
        o.clear(&Inputs::default()).unwrap();
        o.commit();
        let mut left: Vec<String> = fs::read_dir(&out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["notes.txt"]);
    }

    /// The first 64 bytes of one of bale's indexes: what tells it from
    /// another tool's `.idx`.
    fn bale_index_head() -> Vec<u8> {
        let mut head = b"BALEIDX\0".to_vec();
        head.extend_from_slice(&[0; 56]);
        head
    }

    #[test]
    fn force_without_a_mark_clears_bales_indexes_but_not_a_dali_index_of_the_same_name() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        // A DALI tar index (text) named like bale's, and bale's own index.
        fs::write(out.join("shard-000000.idx"), b"v1.2 3\njpg 0 1536 1024\n").unwrap();
        let bale_idx = bale_index_head();
        fs::write(out.join("shard-000001.idx"), &bale_idx).unwrap();
        let mut o = Output::open(out, true).unwrap();
        let err = o.clear(&Inputs::default()).unwrap_err();
        assert!(
            err.to_string().contains("shard-000000.idx")
                && err.to_string().contains("may be yours"),
            "{err}"
        );
        o.commit();
        assert!(out.join("shard-000000.idx").exists());
        assert!(out.join("shard-000001.idx").exists());
        // Without the user's file, bale's index is cleared.
        fs::remove_file(out.join("shard-000000.idx")).unwrap();
        let mut o = Output::open(out, true).unwrap();
        o.clear(&Inputs::default()).unwrap();
        o.commit();
        assert!(!out.join("shard-000001.idx").exists());
    }

    #[test]
    fn force_never_deletes_an_input() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        fs::write(
            out.join("bale.json"),
            br#"{"created_by": {"tool": "bale", "command": "pack"}, "shards": []}"#,
        )
        .unwrap();
        fs::write(out.join("shard-000000.tar"), b"the user's").unwrap();
        // An input reaching it through a symlink elsewhere.
        let link = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(out.join("shard-000000.tar"), link.path().join("in.tar"))
            .unwrap();
        let mut inputs = Inputs::default();
        inputs.add(&link.path().join("in.tar"));
        let mut o = Output::open(out, true).unwrap();
        let err = o.clear(&inputs).unwrap_err();
        assert!(matches!(err, PackError::WouldDeleteInput { .. }), "{err}");
        assert!(err.to_string().contains("shard-000000.tar"), "{err}");
        // Nothing was removed, the manifest included.
        assert!(out.join("bale.json").exists());
        assert_eq!(
            fs::read(out.join("shard-000000.tar")).unwrap(),
            b"the user's"
        );
    }

    #[test]
    fn force_beside_a_killed_index_append_keeps_unlisted_tars() {
        let dir = tempfile::tempdir().unwrap();
        let out = &dir.path().join("out");
        fs::create_dir(out).unwrap();
        // The index lists a tar of the user's elsewhere.
        let tar = dir.path().join("a.tar");
        fs::write(&tar, b"listed").unwrap();
        let manifest = serde_json::json!({
            "created_by": {"tool": "bale", "command": "index"},
            "shards": [{"file": tar, "index": "shard-000000.idx"}],
        });
        fs::write(out.join("bale.json"), manifest.to_string()).unwrap();
        fs::write(out.join("shard-000000.idx"), b"x").unwrap();
        // The user's next tar, not yet indexed, and a killed index
        // append's mark: the tar is not the killed run's to remove.
        fs::write(out.join("shard-000001.tar"), b"the user's").unwrap();
        fs::write(out.join(".bale-tmp-99999-run"), APPEND_MARK).unwrap();
        let mut o = Output::open(out, true).unwrap();
        let err = o.clear(&Inputs::default()).unwrap_err();
        assert!(
            err.to_string().contains("shard-000001.tar")
                && err.to_string().contains("does not list"),
            "{err}"
        );
        o.commit();
        assert_eq!(
            fs::read(out.join("shard-000001.tar")).unwrap(),
            b"the user's"
        );
    }

    /// A dataset of one listed shard in `dir` (files of one byte).
    fn one_shard_dataset(dir: &Path) {
        let entry = bale_format::ShardEntry {
            file: "shard-000000.tar".into(),
            index: "shard-000000.idx".into(),
            samples: 0,
            members: 0,
            bytes: 0,
            tar_bytes: 0,
            compression: bale_format::Compression::None,
            index_xxh3: bale_format::hex64(0),
            shard_xxh3: None,
            fields: Default::default(),
        };
        let by = bale_format::CreatedBy {
            tool: "bale".into(),
            version: "0".into(),
            command: "pack".into(),
            options: serde_json::Value::Null,
        };
        Manifest::new(vec![entry], None, by).write(dir).unwrap();
        fs::write(dir.join("shard-000000.tar"), b"x").unwrap();
        fs::write(dir.join("shard-000000.idx"), b"x").unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_append_removes_a_killed_appends_unlisted_shards_only_and_marks_its_run() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        one_shard_dataset(out);
        fs::write(out.join("notes.txt"), b"mine").unwrap();
        // Without a killed append's mark, an unlisted shard is not this
        // tool's to remove: it stays (and numbering goes past it).
        fs::write(out.join("shard-000005.tar"), b"someone's").unwrap();
        let (o, found) = Output::open_append(out).unwrap();
        let (m, seen) = found.unwrap();
        assert_eq!(m.shards.len(), 1);
        assert!(seen.contains(&"shard-000005.tar".to_owned()));
        // This run's mark says "append" until the commit.
        assert!(has_append_mark(out));
        o.commit();
        assert!(!has_append_mark(out));
        // A killed append left its mark, shards and a temporary file.
        fs::write(out.join(".bale-tmp-99999-run"), APPEND_MARK).unwrap();
        fs::write(out.join("shard-000001.tar"), b"new").unwrap();
        fs::write(out.join("shard-000001.idx"), b"new").unwrap();
        fs::write(out.join(".bale-tmp-99999-shard-000002.tar"), b"half").unwrap();
        let (o, _) = Output::open_append(out).unwrap();
        drop(o);
        // Beside that mark every unlisted shard name is the killed run's
        // (shard-000005.tar too); the user's other files stay.
        assert_eq!(
            names(out),
            [
                "bale.json",
                "notes.txt",
                "shard-000000.idx",
                "shard-000000.tar"
            ]
        );
    }

    #[test]
    fn a_second_writer_fails_at_once_and_leaves_the_directory_to_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new");
        let first = Output::open(&out, false).unwrap();
        let err = Output::open(&out, true).unwrap_err();
        assert!(err.to_string().contains("another bale command"), "{err}");
        assert!(
            out.is_dir(),
            "the loser does not remove the winner's directory"
        );
        drop(first);
        assert!(!out.exists(), "the first run made it and removes it");
    }

    #[test]
    fn make_room_refuses_foreign_files_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("data.idx"), b"not bale's").unwrap();
        fs::write(dir.path().join("data.tar"), b"tar").unwrap();
        let mut inputs = Inputs::default();
        inputs.add(&dir.path().join("data.tar"));
        let o = Output::alongside(dir.path(), false).unwrap();
        let err = o.make_room("data.idx", &inputs).unwrap_err();
        assert!(matches!(err, PackError::WouldReplace { .. }), "{err}");
        o.make_room("new.idx", &inputs).unwrap();
        drop(o);
        let o = Output::alongside(dir.path(), true).unwrap();
        let err = o.make_room("data.tar", &inputs).unwrap_err();
        assert!(matches!(err, PackError::WouldDeleteInput { .. }), "{err}");
        o.make_room("data.idx", &inputs).unwrap();
        assert!(!dir.path().join("data.idx").exists());
    }

    #[test]
    fn a_failed_run_removes_its_files_and_the_directories_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("new/deeper/out");
        let mut o = Output::open(&out, false).unwrap();
        fs::write(out.join("shard-000000.tar"), b"x").unwrap();
        o.track(out.join("shard-000000.tar"));
        drop(o);
        assert!(!dir.path().join("new").exists());
        assert!(dir.path().exists());
    }

    #[test]
    fn an_output_that_steps_out_of_a_missing_directory_is_refused_and_makes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        for out in ["x/../ds", "x/y/../../ds", "ds/x/../y"] {
            let e = Output::open(&dir.path().join(out), true).err().unwrap();
            assert!(e.to_string().contains("steps back out of"), "{out}: {e}");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "{out}");
        }
        // Through a directory that exists, `..` is the kernel's to resolve.
        fs::create_dir(dir.path().join("x")).unwrap();
        let o = Output::open(&dir.path().join("x/../ds"), false).unwrap();
        assert!(dir.path().join("ds").is_dir());
        drop(o);
    }
}
