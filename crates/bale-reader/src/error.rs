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
}
