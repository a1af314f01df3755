//! The one error type of `bale-image`.

/// Everything that can go wrong in `bale-image`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The extension does not name an image format bale can decode.
    #[error("extension {ext:?} is not an image format bale decodes")]
    Unsupported {
        /// The member's extension.
        ext: String,
    },
    /// The bytes do not decode as the format the extension names.
    #[error("{ext} does not decode: {message}")]
    Decode {
        /// The member's extension.
        ext: String,
        /// The decoder's message.
        message: String,
    },
}
