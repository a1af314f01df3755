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
    /// The image has more pixels than allowed (a decompression bomb, or just
    /// too large): refused before its pixels are decoded.
    #[error(
        "{ext} image is {width}x{height} = {pixels} pixels, more than the limit of {max} (raise it with --max-pixels, or max_pixels= from Python)"
    )]
    TooLarge {
        /// The member's extension.
        ext: String,
        /// Width from the header.
        width: u32,
        /// Height from the header.
        height: u32,
        /// `width * height`.
        pixels: u64,
        /// The limit in force.
        max: u64,
    },
    /// The transformed image could not be encoded.
    #[error("cannot encode {width}x{height} image as {format}: {message}")]
    Encode {
        /// The output format.
        format: String,
        /// Width of the image.
        width: u32,
        /// Height of the image.
        height: u32,
        /// The encoder's message.
        message: String,
    },
    /// An option value that cannot be used (a bad `--resize`, `--image-format`, ...).
    #[error("invalid image option: {0}")]
    Option(String),
}
