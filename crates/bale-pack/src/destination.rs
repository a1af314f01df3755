//! Where a command writes its dataset, and the whole protocol around it
//! for every command: a local directory, or a prefix in object storage.
//!
//! [`Destination::open`] takes the output before the command runs: for a
//! prefix, its lock, the checks and `--force`'s clear ([`RemoteOutput`]);
//! a local directory is taken by the command's engine itself (its lock,
//! `--force` that never touches an input). The engine writes into
//! [`Destination::dir`], hands each finished shard to
//! [`Destination::shard_finished`], and [`Destination::finish`] commits
//! (uploads what is left, then `bale.json`) or undoes the run and says what
//! that left ([`Failed`], [`crate::Left`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bale_format::{MANIFEST_NAME, Manifest, ShardEntry};
use bale_storage::{StorageError, StorageOptions};

use crate::error::PackError;
use crate::left::{Failed, Left, Old, Run, Undo};
use crate::merge::{MergeOptions, MergeSummary, merge_cancellable};
use crate::output::JOURNAL_NAME;
use crate::remote::{RemoteOutput, is_remote, merge_remote};

/// The storage options of a command, asked for only when an output or a
/// part is in object storage.
pub type StorageFn<'a> = &'a dyn Fn() -> Result<StorageOptions, StorageError>;

/// A summary that names its output: set to the URL once a run into object
/// storage committed.
pub trait NamesOutput {
    /// Names `url` as the output.
    fn set_output(&mut self, url: &str);
}

impl NamesOutput for crate::PackSummary {
    fn set_output(&mut self, url: &str) {
        self.output = url.into();
    }
}

impl NamesOutput for crate::ConvertSummary {
    fn set_output(&mut self, url: &str) {
        self.output = url.into();
    }
}

impl NamesOutput for crate::IndexSummary {
    fn set_output(&mut self, url: &str) {
        url.clone_into(&mut self.output);
    }
}

/// See the module docs.
#[derive(Debug)]
pub struct Destination {
    output: PathBuf,
    run: Run,
    force: bool,
    cancel: Arc<AtomicBool>,
    remote: Option<RemoteOutput>,
    /// A local output's manifest before a run with `--force`: a run that
    /// fails after `--force` removed it says so.
    old_manifest: Option<PathBuf>,
    /// `bale index -o URL`: the prefix (with its trailing `/`) the manifest
    /// names the tars relative to.
    prefix: Option<String>,
    /// `--append -o URL` over a dataset: the dataset, as read under the
    /// prefix's lock, until [`Destination::take_base`].
    base: Option<crate::AppendBase>,
    /// The run adds to the dataset in a prefix: an undo leaves it as it was.
    appends: bool,
}

impl Destination {
    /// Takes `output` for `run`: a prefix in object storage is locked,
    /// checked and, with `force`, cleared of bale's objects (never one of
    /// `inputs`, the URLs the command reads). `cancel` is the command's
    /// Ctrl-C flag.
    ///
    /// # Errors
    /// What [`RemoteOutput::open`] refuses, with what that left (nothing).
    pub fn open(
        output: &Path,
        run: Run,
        force: bool,
        cancel: &Arc<AtomicBool>,
        storage: StorageFn<'_>,
        inputs: Vec<String>,
    ) -> Result<Self, Failed> {
        Self::take(output, run, force, cancel, storage, None, inputs)
    }

    /// [`Destination::open`] for `bale convert` of `source`: the objects
    /// the source reads are its inputs. The source is checked before the
    /// output is taken: one that cannot be read fails before `--force`
    /// removes anything. With `append`, as [`Destination::open_appending`].
    ///
    /// # Errors
    /// As [`Destination::open`]; a source that cannot be read.
    pub fn open_convert(
        source: &Path,
        output: &Path,
        (force, append): (bool, bool),
        cancel: &Arc<AtomicBool>,
        storage: StorageFn<'_>,
    ) -> Result<Self, Failed> {
        if append {
            return Self::open_appending(output, Run::Convert, cancel, storage);
        }
        let inputs = if is_remote(output) {
            crate::convert_inputs(source).map_err(|e| refused(output, Run::Convert, e))?
        } else {
            Vec::new()
        };
        Self::open(output, Run::Convert, force, cancel, storage, inputs)
    }

    /// [`Destination::open`] for `bale index` of `shards`: into a prefix,
    /// every tar must be an object under it (the manifest names them
    /// relative to it), and only the `.idx` objects and `bale.json` it
    /// writes may be replaced there.
    ///
    /// # Errors
    /// As [`Destination::open`]; a tar outside the prefix.
    pub fn open_index(
        shards: &[PathBuf],
        output: &Path,
        force: bool,
        cancel: &Arc<AtomicBool>,
        storage: StorageFn<'_>,
    ) -> Result<Self, Failed> {
        if !is_remote(output) {
            return Self::open(output, Run::Index, force, cancel, storage, Vec::new());
        }
        let refuse = |what: String| refused(output, Run::Index, PackError::Usage(what));
        let out = output
            .to_str()
            .ok_or_else(|| refuse(format!("{}: not a UTF-8 URL", bale_format::shown(output))))?;
        let prefix = format!("{}/", out.trim_end_matches('/'));
        let mut names = Vec::new();
        for t in shards {
            let t = t.to_string_lossy();
            let Some(rel) = t.strip_prefix(&prefix).filter(|r| !r.is_empty()) else {
                return Err(refuse(format!(
                    "{t}: bale index -o {out} indexes tars under that prefix (the manifest names its \
                     shards relative to it); index tars elsewhere into a local directory"
                )));
            };
            let base = rel.rsplit('/').next().unwrap_or(rel);
            names.push(bale_format::index_file_name(base));
        }
        names.push(MANIFEST_NAME.to_owned());
        let inputs = shards
            .iter()
            .map(|t| t.to_string_lossy().into_owned())
            .collect();
        let mut d = Self::take(
            output,
            Run::Index,
            force,
            cancel,
            storage,
            Some(&names),
            inputs,
        )?;
        d.prefix = Some(prefix);
        Ok(d)
    }

    fn take(
        output: &Path,
        run: Run,
        force: bool,
        cancel: &Arc<AtomicBool>,
        storage: StorageFn<'_>,
        alongside: Option<&[String]>,
        inputs: Vec<String>,
    ) -> Result<Self, Failed> {
        let remote = if is_remote(output) {
            let opened = storage().map_err(PackError::from).and_then(|s| {
                RemoteOutput::open(output, &s, force, Arc::clone(cancel), alongside, inputs)
            });
            match opened {
                Ok(r) => Some(r),
                Err(error) => return Err(not_taken(output, run, cancel, error)),
            }
        } else {
            None
        };
        let manifest = output.join(MANIFEST_NAME);
        Ok(Self {
            output: output.to_path_buf(),
            run,
            force,
            cancel: Arc::clone(cancel),
            old_manifest: (force && remote.is_none() && manifest.is_file()).then_some(manifest),
            remote,
            prefix: None,
            base: None,
            appends: false,
        })
    }

    /// [`Destination::open`] for `bale pack --append` and `bale convert
    /// --append` (`run`): a local directory as [`Destination::keeping`]
    /// takes it; a prefix in object storage is
    /// locked over the dataset there ([`RemoteOutput::open_append`]), which
    /// is read (its manifest and the names under the prefix) and checked
    /// as a local one is, before anything is written. An empty prefix gets
    /// a new dataset.
    ///
    /// # Errors
    /// As [`Destination::open`]; a dataset that takes no append (then the
    /// lock is let go, and nothing else was written).
    pub fn open_appending(
        output: &Path,
        run: Run,
        cancel: &Arc<AtomicBool>,
        storage: StorageFn<'_>,
    ) -> Result<Self, Failed> {
        if !is_remote(output) {
            return Self::open(output, run, false, cancel, storage, Vec::new())?.keeping(true);
        }
        let opened = storage()
            .map_err(PackError::from)
            .and_then(|s| RemoteOutput::open_append(output, &s, Arc::clone(cancel)));
        let (remote, found) = match opened {
            Ok(o) => o,
            Err(error) => return Err(not_taken(output, run, cancel, error)),
        };
        let base = found.map(|f| {
            let at = output.join(MANIFEST_NAME);
            let manifest = Manifest::from_slice(&f.manifest, &at)?;
            let base = crate::AppendBase {
                dir: output.to_path_buf(),
                manifest,
                names: f.names,
            };
            // Refused before anything is written: a dataset this command
            // does not add to (its own checks of the run come later).
            match run {
                Run::Convert => base.for_convert().map(drop),
                _ => base.for_pack().map(drop),
            }?;
            Ok::<_, PackError>(base)
        });
        let base = match base.transpose() {
            Ok(b) => b,
            Err(error) => {
                drop(remote.undo(run, false));
                return Err(refused(output, run, error));
            }
        };
        Ok(Self {
            output: output.to_path_buf(),
            run,
            force: false,
            cancel: Arc::clone(cancel),
            old_manifest: None,
            remote: Some(remote),
            prefix: None,
            appends: base.is_some(),
            base,
        })
    }

    /// The dataset in object storage a `--append` run adds to, for
    /// [`crate::PackerBuilder::append_onto`] and
    /// [`crate::ConvertOptions::onto`]; `None` for a local output
    /// (the packer reads it there) or an empty prefix.
    pub fn take_base(&mut self) -> Option<crate::AppendBase> {
        self.base.take()
    }

    /// For `pack --append` when `append`: a failure then says of the
    /// dataset in the output that it is as it was (the run adds to it,
    /// never removes it).
    ///
    /// # Errors
    /// An output in object storage taken by [`Destination::open`]
    /// (`convert` and `index`; `pack` takes a prefix for an append by
    /// [`Destination::open_appending`]): the taken prefix is let go
    /// untouched.
    pub fn keeping(mut self, append: bool) -> Result<Self, Failed> {
        if !append {
            return Ok(self);
        }
        if self.remote.is_some() {
            let error = PackError::Usage(
                "this --append adds to a local dataset only: append locally, then upload the \
                 dataset (`bale pack --append` adds to one in object storage)"
                    .into(),
            );
            let left = refused(&self.output, self.run, error);
            self.discard();
            return Err(left);
        }
        let manifest = self.output.join(MANIFEST_NAME);
        if manifest.is_file() {
            self.old_manifest = Some(manifest);
        }
        Ok(self)
    }

    /// The local directory the command writes into: the output, or the
    /// spool of a prefix in object storage.
    pub fn dir(&self) -> &Path {
        self.remote.as_ref().map_or(&self.output, |r| r.dir())
    }

    /// Whether the command's engine clears the output with `--force`: a
    /// local directory's engine does; a prefix was cleared when taken.
    pub fn engine_force(&self) -> bool {
        self.force && self.remote.is_none()
    }

    /// Whether the output is a prefix in object storage.
    pub fn is_remote(&self) -> bool {
        self.remote.is_some()
    }

    /// Queues a finished shard and its index for upload (a prefix in
    /// object storage); blocks while the upload queue is full.
    pub fn shard_finished(&self, shard: &ShardEntry) {
        if let Some(r) = &self.remote {
            r.send(&shard.file);
            r.send(&shard.index);
        }
    }

    /// Undoes a run the command itself refused after it began (a plan of
    /// no sample), silently: the command says why.
    pub fn discard(self) {
        if let Some(r) = self.remote {
            drop(r.undo(self.run, false));
        }
    }

    /// Ends the run whose engine returned `result`: commits it into object
    /// storage (the summary then names the URL), or undoes it and says what
    /// that left.
    ///
    /// # Errors
    /// The engine's error, or the commit's, with what the run left.
    pub fn finish<S: NamesOutput>(mut self, result: crate::Result<S>) -> Result<S, Failed> {
        let Some(r) = self.remote.take() else {
            return result.map_err(|e| self.left_local(e));
        };
        let run = self.run;
        match result {
            Ok(mut s) => {
                let url = r.url().to_owned();
                if let Some(prefix) = &self.prefix
                    && let Err(e) = relative_manifest(r.dir(), prefix)
                {
                    return Err(Failed::new(e, r.undo(run, false)));
                }
                match r.finish() {
                    Ok(_) => {
                        s.set_output(&url);
                        Ok(s)
                    }
                    Err(u) => {
                        let interrupted = self.cancel.load(Ordering::SeqCst) && u.error.is_cancel();
                        Err(Failed::new(
                            u.error,
                            self.kept(u.output.undo(run, interrupted)),
                        ))
                    }
                }
            }
            Err(error) if error.is_cancel() => {
                // An upload error stops the run through the cancel flag:
                // it, not the stop, is the cause.
                let upload = r.take_error();
                let left = self.kept(r.undo(run, upload.is_none()));
                Err(Failed::new(upload.map_or(error, PackError::from), left))
            }
            Err(error) => Err(Failed::new(error, self.kept(r.undo(run, false)))),
        }
    }

    /// What an undo `left`, said of the dataset an append adds to: it is
    /// as it was once the run's objects are removed (an append deletes
    /// none of its objects, and puts its manifest back).
    fn kept(&self, mut left: Left) -> Left {
        if self.appends && left.old == Old::None && left.undo == Undo::Removed {
            left.old = Old::Kept;
        }
        left
    }

    /// What a failed local run left: its engine removed what it wrote.
    fn left_local(&self, error: PackError) -> Failed {
        let interrupted = matches!(error, PackError::Cancelled);
        let undo = match self.run {
            Run::Pack if !interrupted && error.left_output_untouched() => Undo::Refused,
            Run::Convert
                if !interrupted
                    && (error.left_output_untouched()
                        || matches!(error, PackError::Partial { .. })) =>
            {
                Undo::Refused
            }
            _ => Undo::Removed,
        };
        let old = match &self.old_manifest {
            Some(m) if m.exists() => Old::Kept,
            Some(_) => Old::Removed,
            None => Old::None,
        };
        Failed::new(
            error,
            Left {
                output: bale_format::shown(&self.output).to_string(),
                remote: false,
                run: self.run,
                interrupted,
                undo,
                old,
            },
        )
    }
}

/// A prefix that could not be taken: refused, or interrupted (`--force`
/// watching another run's lock, Ctrl-C): nothing of the run was written
/// there.
fn not_taken(output: &Path, run: Run, cancel: &AtomicBool, error: PackError) -> Failed {
    let mut f = refused(output, run, error);
    if cancel.load(Ordering::SeqCst) {
        f.left.interrupted = true;
        f.left.undo = Undo::Untouched;
    }
    f
}

/// A failure before the output was taken: it is as it was.
fn refused(output: &Path, run: Run, error: PackError) -> Failed {
    Failed::new(
        error,
        Left {
            output: bale_format::shown(output).to_string(),
            remote: is_remote(output),
            run,
            interrupted: false,
            undo: Undo::Refused,
            old: Old::None,
        },
    )
}

/// Rewrites the manifest in `dir` to name the tars under `prefix` relative
/// to it, as a dataset in object storage names its objects (in the spool:
/// the prefix's `bale.json` is the upload of it).
fn relative_manifest(dir: &Path, prefix: &str) -> crate::Result<()> {
    let mut m = Manifest::read(dir)?;
    for e in &mut m.shards {
        if let Some(rel) = e.file.strip_prefix(prefix) {
            e.file = rel.to_owned();
        }
    }
    Ok(bale_format::atomic::replace_atomic(
        Manifest::path_in(dir),
        &m.to_bytes(),
    )?)
}

/// `bale merge` of `parts` into `output`: local parts into a local
/// directory ([`merge_cancellable`]), or parts in object storage into a
/// prefix of their bucket (server-side copies).
///
/// # Errors
/// As the merge, with what it left ([`Failed::left`]).
pub fn merge_into(
    parts: &[PathBuf],
    output: &Path,
    opts: &MergeOptions,
    cancel: &Arc<AtomicBool>,
    storage: StorageFn<'_>,
) -> Result<MergeSummary, Failed> {
    let remote_parts = parts.iter().filter(|p| is_remote(p)).count();
    if (is_remote(output) || remote_parts > 0)
        && !(is_remote(output) && remote_parts == parts.len())
    {
        return Err(refused(
            output,
            Run::Merge,
            PackError::Usage(
                "bale merge joins local parts into a local directory, or parts in object storage \
                 into a prefix of their bucket (server-side copies); upload the parts first, or \
                 merge locally"
                    .into(),
            ),
        ));
    }
    if !is_remote(output) {
        return merge_cancellable(parts, output, opts, cancel).map_err(|error| {
            let journal = output.join(JOURNAL_NAME);
            let undo = if journal.exists() {
                Undo::PartsInOutput {
                    journal: bale_format::shown(&journal).to_string(),
                }
            } else {
                Undo::Untouched
            };
            let interrupted = matches!(error, PackError::Cancelled);
            Failed::new(
                error,
                Left {
                    output: bale_format::shown(output).to_string(),
                    remote: false,
                    run: Run::Merge,
                    interrupted,
                    undo,
                    old: Old::None,
                },
            )
        });
    }
    let url = |p: &Path| {
        p.to_str().map(str::to_owned).ok_or_else(|| {
            refused(
                output,
                Run::Merge,
                PackError::Usage(format!("{}: not a UTF-8 URL", bale_format::shown(p))),
            )
        })
    };
    let out = url(output)?;
    let parts = parts
        .iter()
        .map(|p| url(p))
        .collect::<Result<Vec<_>, _>>()?;
    let storage = storage().map_err(|e| refused(output, Run::Merge, e.into()))?;
    let opts = MergeOptions {
        copy: true,
        ..*opts
    };
    merge_remote(&parts, &out, &storage, &opts, cancel)
}
