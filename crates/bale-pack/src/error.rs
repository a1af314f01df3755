//! The one error type of `bale-pack`.

use std::io;
use std::path::PathBuf;

use bale_format::FormatError;

/// A result with [`PackError`].
pub type Result<T, E = PackError> = std::result::Result<T, E>;

/// The error of a transform hook (see [`crate::PackerBuilder::transform`]).
pub type TransformError = Box<dyn std::error::Error + Send + Sync>;

/// The error of a sample transform (see [`crate::PackerBuilder::sample_transform`]):
/// which member it concerns, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}{source}", ext.as_deref().map(|e| format!(".{e}: ")).unwrap_or_default())]
pub struct SampleTransformError {
    /// Extension of the member at fault, if one is; the pack names that
    /// member's file in its error (else the sample's first file).
    pub ext: Option<String>,
    /// Why.
    #[source]
    pub source: TransformError,
}

/// Everything that can go wrong packing or merging.
///
/// Errors about one input file (the variants [`PackError::is_input_error`]
/// accepts) are the ones `--on-error skip` turns into skipped files; all
/// others stop the pack.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PackError {
    /// An input file or directory could not be read (opened, listed, read).
    #[error("cannot read {}: {source}", bale_format::shown(path))]
    Read {
        /// The input path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// An input file changed while it was being packed.
    #[error("{} changed during the pack: {what}", bale_format::shown(path))]
    Changed {
        /// The input path.
        path: PathBuf,
        /// What changed (size when listed and now).
        what: String,
    },
    /// An input path bale cannot pack: not UTF-8, not a regular file, a
    /// symlink loop, a name that is not a valid sample key, no label.
    #[error("cannot pack {}: {what}", bale_format::shown(path))]
    BadInput {
        /// The input path.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// A tar `bale index` cannot take: not a regular file, a name that is
    /// not UTF-8.
    #[error("cannot index {}: {what}", bale_format::shown(path))]
    BadTar {
        /// The tar as given.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// The transform hook refused a member.
    #[error("transform failed on {}: {source}", bale_format::shown(path))]
    Transform {
        /// The input path.
        path: PathBuf,
        /// The hook's error.
        #[source]
        source: TransformError,
    },
    /// Two input files map to the same sample key and extension.
    #[error(
        "{} and {} both map to member .{ext} of sample {key:?} (a key and extension must be unique)",
        bale_format::shown(first),
        bale_format::shown(second)
    )]
    DuplicateMember {
        /// The sample key.
        key: String,
        /// The extension.
        ext: String,
        /// One file.
        first: PathBuf,
        /// The other file.
        second: PathBuf,
    },
    /// A sample already holds a `.cls` file while labels are being added.
    #[error(
        "{} is a .cls member, but labels are added as .cls; use --labels none or rename it",
        bale_format::shown(path)
    )]
    LabelConflict {
        /// The `.cls` input file.
        path: PathBuf,
    },
    /// The label CSV cannot be used.
    #[error("{} line {line}: {what}", bale_format::shown(path))]
    Labels {
        /// The CSV file.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        what: String,
    },
    /// An option value that cannot be used.
    #[error("invalid option: {0}")]
    Option(String),
    /// A command that cannot work as given (its inputs and output are not
    /// of kinds it joins); the message says what to do instead.
    #[error("{0}")]
    Usage(String),
    /// `--append`: a sample's key is already in the dataset.
    #[error(
        "sample key {key:?} of {} is already in the dataset (in {shard}): an append adds only new keys",
        bale_format::shown(path)
    )]
    KeyInDataset {
        /// The key.
        key: String,
        /// The input file it came from.
        path: PathBuf,
        /// The dataset's shard that holds it.
        shard: String,
    },
    /// `--append`: the run does not fit the dataset it would add to.
    #[error("cannot append to {}: {what}", bale_format::shown(dir))]
    AppendMismatch {
        /// The dataset.
        dir: PathBuf,
        /// What differs, or why the dataset takes no append.
        what: String,
    },
    /// The output directory holds files and `force` was not given.
    #[error(
        "output directory {} is not empty (use --force to write into it)",
        bale_format::shown(dir)
    )]
    OutputNotEmpty {
        /// The output directory.
        dir: PathBuf,
    },
    /// Writing the output would delete or replace a file an input of the
    /// command refers to; `--force` never does that.
    #[error(
        "refusing to delete or replace {}: it is an input of this command (--force never touches inputs); write the output elsewhere",
        bale_format::shown(path)
    )]
    WouldDeleteInput {
        /// The input file.
        path: PathBuf,
    },
    /// A file the command would write exists, and bale did not create it in this run.
    #[error(
        "{} already exists; use --force to replace it",
        bale_format::shown(path)
    )]
    WouldReplace {
        /// The existing file.
        path: PathBuf,
    },
    /// The output cannot be written as asked: a name that exists, a
    /// directory that is a file.
    #[error("cannot write {}: {what}", bale_format::shown(path))]
    Conflict {
        /// The path in the way.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// `--force` refuses to clear the output, before it has removed or
    /// written anything there: something in it is not bale's to remove, or
    /// cannot be removed.
    #[error("cannot write {}: {what}", bale_format::shown(path))]
    Refused {
        /// The path in the way.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// A failure that left part of the output in place, and the message
    /// says where each part is (`convert --format dir` when moving its
    /// export in and moving it back both failed).
    #[error("cannot write {}: {what}", bale_format::shown(path))]
    Partial {
        /// The path that failed.
        path: PathBuf,
        /// What happened, and where everything is.
        what: String,
    },
    /// An I/O error on an output or bookkeeping file.
    #[error("{}: {source}", bale_format::shown(path))]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// `bale merge` cannot join these parts.
    #[error("cannot merge {}: {what}", bale_format::shown(path))]
    Merge {
        /// The part directory concerned.
        path: PathBuf,
        /// Why.
        what: String,
    },
    /// The pack was cancelled (the cancel flag was set, e.g. by Ctrl-C).
    #[error("cancelled")]
    Cancelled,
    /// An error of the on-disk format layer (writing shards, indexes, manifest).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// An error of object storage (an output or parts at a URL).
    #[error(transparent)]
    Storage(#[from] bale_storage::StorageError),
}

impl PackError {
    /// Whether the command stopped before touching its output: a bad option,
    /// an output that is not empty without `force`, one that `force` refuses
    /// to clear, or an output another command holds (its lock).
    pub fn left_output_untouched(&self) -> bool {
        matches!(
            self,
            PackError::Option(_)
                | PackError::Usage(_)
                | PackError::OutputNotEmpty { .. }
                | PackError::KeyInDataset { .. }
                | PackError::AppendMismatch { .. }
                | PackError::Refused { .. }
                | PackError::Format(FormatError::Locked { .. })
                | PackError::Storage(
                    bale_storage::StorageError::BadUrl { .. }
                        | bale_storage::StorageError::BadOption { .. }
                        | bale_storage::StorageError::Exists { .. }
                )
        )
    }

    /// Whether the error is a stop asked for by Ctrl-C (or SIGTERM), from
    /// the run or from its uploads.
    pub fn is_cancel(&self) -> bool {
        matches!(
            self,
            PackError::Cancelled | PackError::Storage(bale_storage::StorageError::Cancelled)
        )
    }

    /// Whether the error concerns one input file, so `--on-error skip` may skip it.
    pub fn is_input_error(&self) -> bool {
        matches!(
            self,
            PackError::Read { .. }
                | PackError::Changed { .. }
                | PackError::BadInput { .. }
                | PackError::Transform { .. }
        )
    }

    /// The input path an input error is about.
    pub fn input_path(&self) -> Option<&std::path::Path> {
        match self {
            PackError::Read { path, .. }
            | PackError::Changed { path, .. }
            | PackError::BadInput { path, .. }
            | PackError::Transform { path, .. } => Some(path),
            _ => None,
        }
    }

    pub(crate) fn read(path: impl Into<PathBuf>, source: io::Error) -> Self {
        PackError::Read {
            path: path.into(),
            source,
        }
    }

    pub(crate) fn bad(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        PackError::BadInput {
            path: path.into(),
            what: what.into(),
        }
    }

    pub(crate) fn bad_tar(path: impl Into<PathBuf>, what: impl Into<String>) -> Self {
        PackError::BadTar {
            path: path.into(),
            what: what.into(),
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        PackError::Io {
            path: path.into(),
            source,
        }
    }
}
