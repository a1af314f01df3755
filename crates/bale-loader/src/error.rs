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
    /// A sample's image could not be decoded (with `on_error = fail`).
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
