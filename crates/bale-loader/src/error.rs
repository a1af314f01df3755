//! The one error type of `bale-loader`.

/// A result with [`LoaderError`].
pub type Result<T, E = LoaderError> = std::result::Result<T, E>;

/// Everything that can go wrong loading batches.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoaderError {
    /// Reading the dataset failed (names the file and offset).
    #[error(transparent)]
    Reader(#[from] bale_reader::ReaderError),
    /// A sample's image could not be decoded.
    #[error("sample {index} ({key:?}): {source}")]
    Image {
        /// The sample's global index.
        index: u64,
        /// Its key.
        key: String,
        /// What went wrong.
        #[source]
        source: bale_image::ImageError,
    },
    /// A sample has no member to take the image (or a field) from.
    #[error("sample {index} ({key:?}) has no member {ext:?} (it has {has})")]
    MissingField {
        /// The sample's global index.
        index: u64,
        /// Its key.
        key: String,
        /// The member looked for.
        ext: String,
        /// The members it has.
        has: String,
    },
    /// A sample's target (a mask, its boxes, its label) is damaged or does
    /// not fit its image: a mask of another size, boxes outside the image
    /// or not numbers, a label that does not parse. `on_error` applies.
    #[error("sample {index} ({key:?}): {member}: {what}")]
    Target {
        /// The sample's global index.
        index: u64,
        /// Its key.
        key: String,
        /// The member the target comes from.
        member: String,
        /// What is wrong.
        what: String,
    },
    /// Memory for a batch could not be had (the allocation failed softly:
    /// the process goes on).
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
        /// What they were for.
        what: String,
    },
    /// The dataset holds no sample: there is nothing to load.
    #[error("the dataset {path} is empty: it holds no sample to load")]
    Empty {
        /// The dataset.
        path: String,
    },
    /// A sample index past the dataset's end.
    #[error("sample index {index} is past the dataset's end ({len} samples)")]
    Index {
        /// The index asked for.
        index: u64,
        /// The samples there are.
        len: u64,
    },
    /// An option that cannot be used.
    #[error("invalid loader option {name}: {what}")]
    Option {
        /// The option.
        name: &'static str,
        /// What is wrong.
        what: String,
    },
    /// A worker thread failed (it panicked or could not be started).
    #[error("loader thread failed: {0}")]
    Thread(String),
}

impl LoaderError {
    /// Whether this error is damage of one sample, the only kind
    /// `OnError::Skip` leaves out: its image does not decode (or is over
    /// the pixel or scan limit), it has no image member, a target does not
    /// fit its image, or the reader found its own bytes damaged
    /// ([`bale_reader::ReaderError::is_sample_damage`]). Anything else (a
    /// shard missing, cut short or replaced under the loader, an I/O error,
    /// object storage failing, an index that does not describe its shard,
    /// memory, a thread) is raised whatever `on_error` says: skipping it
    /// would leave out every sample after it.
    pub fn is_sample_damage(&self) -> bool {
        match self {
            LoaderError::Image { .. }
            | LoaderError::MissingField { .. }
            | LoaderError::Target { .. } => true,
            LoaderError::Reader(r) => r.is_sample_damage(),
            _ => false,
        }
    }
}
