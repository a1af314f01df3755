//! What a run that did not commit left in its output ([`Left`]), and the
//! one place its message is written ([`Left`]'s `Display`).
//!
//! Every command that writes a dataset (`pack`, `convert`, `index`,
//! `merge`), into a local directory or a prefix in object storage, says
//! after a failure what is there now. [`crate::Destination`] works it out;
//! this module only words it.

use std::fmt;

use bale_format::FormatError;

use crate::error::PackError;

/// The command a [`Left`] speaks of: it picks the words of the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// `bale pack`.
    Pack,
    /// `bale convert`.
    Convert,
    /// `bale index`.
    Index,
    /// `bale merge`: it moves or copies the parts' files (on the server in
    /// a bucket) rather than writing new ones.
    Merge,
}

/// What the run's undo did to the output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Undo {
    /// The run refused before it took the output; the error says why, and
    /// the output is as it was.
    Refused,
    /// The run stopped before it took the output (`--force` watching
    /// another run's lock, a part that could not be read): nothing of it
    /// is there.
    Untouched,
    /// The run took the prefix (its lock) but had not written to it yet:
    /// what was there before is as it was.
    NothingWritten,
    /// What the run wrote was removed, and it left no manifest.
    Removed,
    /// What the run wrote was removed as far as it could be, and its lock
    /// object stays under the prefix, for the reason given.
    LockKept(LockReason),
    /// The undo did not finish: the error of the object it stopped on.
    Unfinished(String),
    /// Another run took the prefix over: what this run wrote is that run's
    /// now, and stays.
    TakenOver,
    /// A local merge was stopped part way: files of the parts are still in
    /// the output, and the journal (its path, as shown) lists them.
    PartsInOutput {
        /// The merge's journal, as shown.
        journal: String,
    },
}

/// Why a run's lock object stays under its prefix after the undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockReason {
    /// Over what is left of the old dataset `--force` had begun to clear,
    /// so that a rerun with `--force` clears it.
    OldDatasetLeft,
    /// Over writes that may still land (requests that were never
    /// answered): the error says what a rerun must wait for.
    LateWrites(String),
}

/// What became of the dataset that `--force` would replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Old {
    /// There was none (or no `--force`), or nothing can be said of it.
    None,
    /// It is there, as it was.
    Kept,
    /// `--force`'s clear failed before it removed any of it: it is as it was.
    ClearFailed,
    /// `--force` had removed it, wholly or partly, before the failure.
    Removed,
}

/// What a run that did not commit left in its output. Its `Display` is
/// the sentence the command prints after its error (empty when the error
/// says it all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The output as shown: a path or a URL.
    pub output: String,
    /// Whether the output is a prefix in object storage.
    pub remote: bool,
    /// The command.
    pub run: Run,
    /// Whether the run stopped on Ctrl-C (or SIGTERM) rather than an error.
    pub interrupted: bool,
    /// What the undo did.
    pub undo: Undo,
    /// What became of the old dataset.
    pub old: Old,
}

impl Left {
    /// Whether the message adds nothing to the error.
    pub fn is_silent(&self) -> bool {
        self.to_string().is_empty()
    }

    fn local(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let out = &self.output;
        match (&self.run, &self.undo) {
            (Run::Merge, Undo::PartsInOutput { journal }) => write!(
                f,
                "files of the parts are still in {out}: {journal} lists them; run the same `bale merge` again to put them back"
            ),
            (Run::Merge, _) => f.write_str("nothing was merged: the parts are as they were"),
            (Run::Index, _) => {
                f.write_str("no manifest was written, and nothing this run wrote is left")
            }
            (_, Undo::Refused) => Ok(()),
            (run, _) => {
                let removed = if *run == Run::Convert && self.interrupted {
                    "partial files were removed"
                } else {
                    "partial shards and temporary files were removed"
                };
                match self.old {
                    Old::Kept | Old::ClearFailed => write!(
                        f,
                        "no dataset was written to {out} by this run ({removed}); the old dataset there is as it was"
                    ),
                    Old::Removed => write!(
                        f,
                        "no dataset was written to {out} (no manifest; {removed})\nthe old dataset in {out} had been removed by --force before the failure"
                    ),
                    Old::None => {
                        write!(
                            f,
                            "no dataset was written to {out} (no manifest; {removed})"
                        )
                    }
                }
            }
        }
    }

    fn remote(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = &self.output;
        let merge = self.run == Run::Merge;
        let (what, wrote, first, removed) = if merge {
            (
                "merge",
                "copied",
                "the merge has its first object to copy",
                "the objects this merge copied were removed",
            )
        } else {
            (
                "run",
                "uploaded",
                "the run has its first object to upload",
                "open uploads were aborted and the objects this run wrote were removed",
            )
        };
        match &self.undo {
            Undo::Refused if merge => f.write_str("nothing was merged")?,
            Undo::Refused => {}
            Undo::Untouched if merge && !self.interrupted => {
                write!(f, "nothing was merged; what is under {url} is as it was")?;
            }
            Undo::Untouched => {
                write!(
                    f,
                    "nothing was written to {url}; what is there is as it was"
                )?;
            }
            Undo::TakenOver => write!(
                f,
                "nothing of this {what} was committed to {url}: another run took it over, and what this {what} {wrote} is that run's now"
            )?,
            Undo::NothingWritten => write!(
                f,
                "nothing of this {what} was written to {url}, and what was there before it is as it was (--force replaces it only when {first})"
            )?,
            Undo::LockKept(LockReason::OldDatasetLeft) => write!(
                f,
                "no dataset was written to {url} (no manifest; {removed}); its lock object {url}/{} stays over what is left of the old dataset there, so that a rerun with --force clears it",
                bale_storage::LOCK_NAME
            )?,
            // An append: the dataset it adds to keeps its manifest.
            Undo::Removed if self.old == Old::Kept => write!(
                f,
                "nothing of this {what} was committed to {url} ({removed}); the old dataset there is as it was"
            )?,
            Undo::Removed | Undo::PartsInOutput { .. } => {
                write!(
                    f,
                    "no dataset was written to {url} (no manifest; {removed})"
                )?;
            }
            Undo::LockKept(LockReason::LateWrites(e)) => {
                write!(f, "nothing of this {what} was committed to {url}: {e}")?;
            }
            Undo::Unfinished(e) => write!(
                f,
                "nothing of this {what} was committed to {url}, but undoing it did not finish: {e}\nhint: `bale verify {url}` says whether a whole dataset is there; a rerun with --force replaces what remains"
            )?,
        }
        if self.undo == Undo::TakenOver {
            return Ok(());
        }
        match self.old {
            Old::Removed => write!(
                f,
                "\nthe old dataset under {url} is gone, or partly: --force had begun to remove it before the failure"
            ),
            Old::ClearFailed => write!(
                f,
                "\nthe old dataset under {url} is as it was: --force's clear failed before it removed any of it"
            ),
            Old::None | Old::Kept => Ok(()),
        }
    }
}

impl fmt::Display for Left {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.remote {
            self.remote(f)
        } else {
            self.local(f)
        }
    }
}

/// A run that did not commit: why it stopped, and what it left. Its
/// `Display` is the whole message: the error, then what is left (when
/// another run took the prefix over, that first: the error was most likely
/// its doing).
#[derive(Debug)]
pub struct Failed {
    /// Why the run stopped.
    pub error: Box<PackError>,
    /// What it left in its output.
    pub left: Box<Left>,
}

impl Failed {
    /// The run stopped on `error`, and left `left`.
    pub fn new(error: PackError, left: Left) -> Self {
        Self {
            error: Box::new(error),
            left: Box::new(left),
        }
    }

    /// Whether the run stopped on Ctrl-C (or SIGTERM): the command says
    /// `interrupted` and what is left, rather than an error.
    pub fn interrupted(&self) -> bool {
        self.left.interrupted
    }
}

impl fmt::Display for Failed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (e, left) = (&self.error, &self.left);
        if left.undo == Undo::TakenOver {
            return write!(f, "{left}\n(the error this run stopped on: {e})");
        }
        if left.is_silent() {
            return write!(f, "{e}");
        }
        let hint = match &**e {
            PackError::Format(FormatError::SplitSample { .. })
                if left.run == Run::Index && !left.remote =>
            {
                "\nhint: --allow-split regroups the key's members into one sample (plain tars; that shard's index \
                 is then read member by member), --rename-split indexes each later run as a sample of its own (KEY~2, ...)"
            }
            _ => "",
        };
        write!(f, "{e}{hint}\n{left}")
    }
}

impl std::error::Error for Failed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left(remote: bool, run: Run, undo: Undo, old: Old) -> Left {
        Left {
            output: if remote { "s3://b/ds" } else { "out" }.into(),
            remote,
            run,
            interrupted: false,
            undo,
            old,
        }
    }

    #[test]
    fn a_local_failure_says_what_became_of_the_old_dataset() {
        let kept = left(false, Run::Pack, Undo::Removed, Old::Kept).to_string();
        assert!(
            kept.ends_with("the old dataset there is as it was"),
            "{kept}"
        );
        let gone = left(false, Run::Convert, Undo::Removed, Old::Removed).to_string();
        assert!(gone.contains("had been removed by --force"), "{gone}");
        assert!(left(false, Run::Pack, Undo::Refused, Old::None).is_silent());
    }

    #[test]
    fn a_taken_over_prefix_says_nothing_of_the_old_dataset() {
        let t = left(true, Run::Merge, Undo::TakenOver, Old::Removed).to_string();
        assert!(
            t.contains("what this merge copied is that run's now"),
            "{t}"
        );
        assert!(!t.contains("old dataset"), "{t}");
        let r = left(true, Run::Pack, Undo::Removed, Old::Removed).to_string();
        assert!(r.ends_with("before the failure"), "{r}");
    }

    #[test]
    fn an_interrupted_open_of_a_merge_says_nothing_was_written() {
        let mut l = left(true, Run::Merge, Undo::Untouched, Old::None);
        assert!(l.to_string().starts_with("nothing was merged;"));
        l.interrupted = true;
        assert!(
            l.to_string()
                .starts_with("nothing was written to s3://b/ds")
        );
    }
}
