//! The one error type of `bale-reader`.

use std::path::PathBuf;

use bale_format::FormatError;

/// A result with [`ReaderError`].
pub type Result<T, E = ReaderError> = std::result::Result<T, E>;

/// Everything that can go wrong opening or reading a dataset.
///
/// Errors about bytes on disk (bad magic, truncation, checksums, bad zstd
/// frames, an incomplete dataset) come from `bale-format` as
/// [`ReaderError::Format`] and name the file and offset; the other variants
/// name the dataset, shard or key they concern.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReaderError {
    /// An error reading the on-disk format (names the file and, where known, the offset).
    #[error(transparent)]
    Format(#[from] FormatError),
    /// An error reaching object storage (names the URL, byte range and status).
    #[error(transparent)]
    Storage(#[from] bale_storage::StorageError),
    /// A sample index past the end of the dataset.
    #[error(
        "sample {index} out of range: the dataset {} holds {len} samples",
        bale_format::shown(dir)
    )]
    IndexOutOfRange {
        /// The dataset directory.
        dir: PathBuf,
        /// The index asked for.
        index: u64,
        /// Number of samples in the dataset.
        len: u64,
    },
    /// No sample has this key.
    #[error(
        "no sample with key {key:?} in the dataset {}",
        bale_format::shown(dir)
    )]
    UnknownKey {
        /// The dataset directory.
        dir: PathBuf,
        /// The key asked for.
        key: String,
    },
    /// More than one sample has the key asked for.
    #[error(
        "the key {key:?} names {} samples of the dataset {} (indices {indices:?}): its keys are not unique; read by index",
        indices.len(),
        bale_format::shown(dir)
    )]
    AmbiguousKey {
        /// The dataset directory.
        dir: PathBuf,
        /// The key asked for.
        key: String,
        /// The global indices of the samples that have it.
        indices: Vec<u64>,
    },
    /// A shard's index or file disagrees with what the manifest records.
    #[error(
        "shard {shard} ({}) does not match the manifest {}: {what}",
        bale_format::shown(path),
        bale_format::shown(manifest)
    )]
    ManifestMismatch {
        /// The manifest file.
        manifest: PathBuf,
        /// The shard's number in the manifest.
        shard: usize,
        /// The shard's index or shard file.
        path: PathBuf,
        /// What differs.
        what: String,
    },
    /// A shard file replaced after the dataset was opened: its index, read
    /// at the open, does not describe the new file.
    #[error(
        "{}: the shard was replaced or changed after the dataset was opened (by a \
         `bale pack --force` or a copy over it?), so the index read at the open does not \
         describe it; open the dataset again to read the new one",
        bale_format::shown(path)
    )]
    ShardReplaced {
        /// The shard file.
        path: PathBuf,
    },
    /// A shard file removed after the dataset was opened (by a `bale pack
    /// --force` into fewer shards, say): the index read at the open
    /// describes a file that is gone.
    #[error(
        "{}: the shard was removed after the dataset was opened (by a `bale pack --force` \
         or a removal?): open the dataset again to read what is there now",
        bale_format::shown(path)
    )]
    ShardRemoved {
        /// The shard file.
        path: PathBuf,
    },
    /// The bytes a shard's index points to are not there: it puts a sample
    /// or a member outside the bytes read for it. The index does not
    /// describe the shard (it is damaged, or the shard is another file).
    #[error(
        "{} at offset {offset}: the index does not describe the shard: {what}",
        bale_format::shown(path)
    )]
    IndexDisagrees {
        /// The shard file.
        path: PathBuf,
        /// Where the sample starts in the shard.
        offset: u64,
        /// What lies where.
        what: String,
    },
    /// An iterator whose reading threads were started by another process,
    /// used in a process forked from it, which has none of them.
    #[error(
        "this iterator was started in process {pid}, before this process was forked from it, \
         and its reading threads do not exist here: start a new iterator in this process \
         (in a DataLoader worker, in `__iter__`, not before the workers start)"
    )]
    Forked {
        /// The process that started the iterator.
        pid: u32,
    },
    /// A `.cls` member that does not hold a decimal integer.
    #[error(
        "{}: sample {key:?} has a .cls member that is not a decimal integer: {text:?}",
        bale_format::shown(path)
    )]
    BadLabel {
        /// The shard file.
        path: PathBuf,
        /// The sample's key.
        key: String,
        /// The member's text (at most 32 bytes of it, lossily decoded).
        text: String,
    },
    /// A partition that does not make sense (`rank >= world_size`, zero workers, ...).
    #[error("invalid partition: {what}")]
    InvalidPartition {
        /// What is wrong.
        what: String,
    },
    /// A reader option out of range.
    #[error("invalid option {name}: {what}")]
    InvalidOption {
        /// The option.
        name: &'static str,
        /// What is wrong.
        what: String,
    },
    /// A checkpoint's state that does not fit the epoch it resumes: counts
    /// past a partition's share, or a new cut without every worker's count.
    #[error("cannot resume: {what}")]
    InvalidResume {
        /// What does not fit.
        what: String,
    },
    /// `start_at` past the end of the partition's sequence.
    #[error("cannot start at sample {offset}: this partition yields {len} samples per epoch")]
    StartPastEnd {
        /// The offset asked for.
        offset: u64,
        /// Samples the partition yields in one epoch.
        len: u64,
    },
    /// A prefetch thread failed (it panicked or could not be started); the
    /// samples it was reading are lost.
    #[error("prefetch thread failed while reading sample {index}: {what}")]
    Prefetch {
        /// The global index of a sample the thread was reading.
        index: u64,
        /// What happened.
        what: String,
    },
    /// A file members would be written to is refused ([`crate::extract`]):
    /// it exists, is a symlink, or is one of the dataset's.
    #[error("{what}")]
    Refused {
        /// The file, and why it is refused.
        what: String,
    },
    /// A member could not be written to its file.
    #[error("cannot write {}", bale_format::shown(path))]
    Write {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The directory members are written into could not be created.
    #[error("cannot create {}", bale_format::shown(path))]
    Create {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// No sample, or more than one, answers to what was asked for
    /// ([`crate::Dataset::select`]); the message says which and what to say
    /// instead.
    #[error("{what}")]
    NoSuchSample {
        /// What was asked for, and why no one sample answers.
        what: String,
    },
    /// Staging ([`crate::stage::stage`], [`crate::stage::unstage`]) refused
    /// to start, or stopped: `kind` says which case, `what` is the whole
    /// message and names `path`.
    #[error("{what}")]
    Stage {
        /// The target folder, or the source or staged file concerned.
        path: PathBuf,
        /// What went wrong, in words.
        what: String,
        /// Which case, for a front that adds advice (the CLI's `hint:` lines).
        kind: StageErrorKind,
    },
    /// A staging run stopped after it had written its marker: the folder
    /// holds no manifest, so no reader takes it for a dataset, and the next
    /// run resumes the copy.
    #[error(
        "staging into {} did not finish; staging again resumes it, unstaging removes it",
        bale_format::shown(path)
    )]
    StageUnfinished {
        /// The staging folder.
        path: PathBuf,
        /// Why it stopped.
        #[source]
        source: Box<ReaderError>,
    },
}

impl ReaderError {
    /// Whether this error is damage to one sample's own bytes, found in a
    /// shard that is still the file the dataset opened: a `.cls` member
    /// that is no integer ([`ReaderError::BadLabel`]), a member whose
    /// checksum does not match ([`FormatError::ChecksumMismatch`]), a zstd
    /// frame that does not decompress ([`FormatError::Corrupt`]). The other
    /// samples read as they did.
    ///
    /// Everything else concerns the storage or the dataset as a whole, and
    /// a reader that leaves damaged samples out (`bale.Loader(on_error=
    /// "skip")`) must raise it: a shard missing, shorter than its index,
    /// replaced or changed since the open ([`ReaderError::ShardReplaced`],
    /// [`ReaderError::ShardRemoved`]), not a regular file or unreadable
    /// (I/O errors, permissions), an index that does not describe its shard
    /// ([`ReaderError::IndexDisagrees`]), object storage failing or
    /// answering with another object ([`ReaderError::Storage`]), a fork.
    /// Skipping those would leave out every sample after them, silently.
    ///
    /// A read of a local shard checks, before it reports such damage, that
    /// the shard is still the file it opened (its size, modification and
    /// change times): one replaced or written over since is reported as
    /// [`ReaderError::ShardReplaced`] instead.
    pub fn is_sample_damage(&self) -> bool {
        matches!(
            self,
            ReaderError::BadLabel { .. }
                | ReaderError::Format(
                    FormatError::ChecksumMismatch { .. } | FormatError::Corrupt { .. }
                )
        )
    }
}

/// The cases of [`ReaderError::Stage`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StageErrorKind {
    /// The target holds files but no staging marker, or is not a directory
    /// (stage); the folder to remove has no marker (unstage); the marker is
    /// not one bale wrote.
    NotStagingFolder,
    /// The target and the dataset lie one inside the other.
    Nested,
    /// The manifest names a file outside the dataset directory, a file
    /// twice, or sizes whose sum does not fit in 64 bits.
    BadManifest,
    /// A file of the dataset differs from what its manifest records (type,
    /// size, counts, checksum): the dataset changed or is damaged.
    SourceMismatch,
    /// A staged file fails its check after the copy.
    Damaged,
    /// Too little free space on the target's file system.
    NoSpace {
        /// Bytes still to copy.
        needed: u64,
        /// `needed` with the margin.
        required: u64,
        /// Bytes free.
        free: u64,
    },
    /// Too little available memory for a copy in RAM.
    NoMemory {
        /// Bytes still to copy.
        needed: u64,
        /// `needed` with the margin.
        required: u64,
        /// `MemAvailable`.
        available: u64,
    },
    /// `--mount` asked for a tmpfs of bale's own (for 2 MiB pages) where the
    /// target has none, and mounting one needs root.
    NeedsRoot {
        /// The mount command to run as root.
        command: String,
    },
    /// Mounting a tmpfs failed.
    MountFailed {
        /// The mount command to run by hand.
        command: String,
    },
    /// A mount was asked for where a staged copy already sits outside a
    /// tmpfs bale mounted (on a disk, or on a tmpfs without 2 MiB pages).
    StagedWithoutMount,
    /// The staging folder holds files bale did not write: staging would
    /// replace one, or unstaging would delete them.
    ForeignFiles {
        /// The files (at most a few are named in the message).
        files: Vec<PathBuf>,
    },
    /// Unmounting the staging folder failed.
    Unmount,
}
