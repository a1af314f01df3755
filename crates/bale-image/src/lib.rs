//! Image transforms for bale: bytes in, bytes out, typed options.
//!
//! [`transform`] is the pre-resize / re-encode / pre-decode stage of
//! `bale pack`: it decodes one image member (after checking its header
//! against a pixel limit), turns it upright by its EXIF orientation,
//! converts its colours ([`ColorMode`]), resizes it with Lanczos3
//! ([`Resize`], SIMD through `fast_image_resize`) and stores it as
//! [`OutputFormat`]: JPEG, PNG, the original bytes, or decoded pixels as a
//! NumPy `.npy` file. [`decode_check`] fully decodes a member and returns its
//! dimensions (`bale verify --decode`). [`region`] and [`mask`] are the
//! loader's decoders: an image's crop, a mask's rows.
//!
//! # Decoder policy
//!
//! Every path that decodes an image (the pack's image stage, `bale verify
//! --decode`, the loader's region decoder, libjpeg-turbo's included, and
//! `bale.decode_image`) runs the same checks first, in one place
//! (`policy.rs`), and gives the same verdict on every file: the header's
//! pixels at most the pixel limit ([`DEFAULT_MAX_PIXELS`] unless raised), a
//! JPEG whole and of at most [`MAX_SCANS`] scans ("Too many scans, exceeded
//! limit of 100"), and the format's own bounds on the work its bytes can
//! ask for. Decoding one image then costs time in proportion to its pixels
//! and its bytes.
//!
//! ```
//! use bale_image::{ImageOptions, OutputFormat, Resize};
//! // A 4x2 grey PNG.
//! let img = image::GrayImage::from_pixel(4, 2, image::Luma([128]));
//! let mut png = std::io::Cursor::new(Vec::new());
//! img.write_to(&mut png, image::ImageFormat::Png).unwrap();
//!
//! let opts = ImageOptions {
//!     resize: Some(Resize::Shorter(1)),
//!     format: OutputFormat::Raw,
//!     ..ImageOptions::default()
//! };
//! let out = bale_image::transform(&opts, "png", png.into_inner())?;
//! assert_eq!((out.ext.as_str(), out.width, out.height), ("npy", 4, 2));
//! assert_eq!((out.out_width, out.out_height), (2, 1));
//! assert!(out.data.starts_with(b"\x93NUMPY"));
//! assert!(bale_image::decode_check("png", b"not a png").is_err());
//! assert!(!bale_image::is_image_ext("cls"));
//! # Ok::<(), bale_image::ImageError>(())
//! ```

#![deny(missing_docs)]

mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod jpeg;
pub mod mask;
pub mod ops;
mod options;
mod policy;
pub mod region;
mod transform;

pub use error::ImageError;
pub use options::{
    ColorMode, DEFAULT_IMAGE_EXTS, DEFAULT_JPEG_QUALITY, DEFAULT_MAX_PIXELS, ImageOptions,
    OutputFormat, Resize,
};
pub use policy::MAX_SCANS;
pub use transform::{Transformed, transform};

use image::ImageFormat;

/// The image format an extension names, looking at its last dot-separated
/// part (`seg.png` is a PNG), for the formats this build decodes.
pub(crate) fn format_of(ext: &str) -> Option<ImageFormat> {
    let last = ext.rsplit('.').next().unwrap_or(ext);
    let format = ImageFormat::from_extension(last)?;
    format.reading_enabled().then_some(format)
}

/// Whether members with this extension are images [`decode_check`] can decode
/// (`jpg`, `jpeg`, `png`, `webp`, `gif`, `bmp`, `tif`, `tiff`, and compound ones like `seg.png`).
pub fn is_image_ext(ext: &str) -> bool {
    format_of(ext).is_some()
}

/// Decodes `bytes` fully as the image format `ext` names; returns `(width,
/// height)`. The decode is the loader's ([`region::RegionDecoder`]) under
/// the one [decoder policy](crate#decoder-policy) and the default
/// pixel limit, so `bale verify --decode` gives the verdict the loader and
/// the pack's image stage give.
///
/// # Errors
/// [`ImageError::Unsupported`] when `ext` names no image format this build
/// decodes; [`ImageError::TooLarge`] over [`DEFAULT_MAX_PIXELS`];
/// [`ImageError::Decode`] when the bytes are not a valid image of that
/// format (truncated, corrupt, another format, over [`MAX_SCANS`]).
pub fn decode_check(ext: &str, bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    decode_check_with(ext, bytes, DEFAULT_MAX_PIXELS)
}

/// [`decode_check`] with the pixel limit `max_pixels` (`bale verify
/// --decode --max-pixels`), as the loader's `max_pixels` raises it.
///
/// # Errors
/// As [`decode_check`], [`ImageError::TooLarge`] over `max_pixels`.
pub fn decode_check_with(
    ext: &str,
    bytes: &[u8],
    max_pixels: u64,
) -> Result<(u32, u32), ImageError> {
    format_of(ext).ok_or_else(|| ImageError::Unsupported {
        ext: ext.to_owned(),
    })?;
    region::RegionDecoder::with(|d| {
        d.set_max_pixels(max_pixels);
        let r = d.decode_rgb(ext, bytes).map(|(w, h, _)| (w, h));
        // A thread that checked one huge image does not keep its memory.
        d.trim(DECODE_CHECK_KEEP);
        r
    })
}

/// The most of its pixel buffer a thread keeps after [`decode_check`].
const DECODE_CHECK_KEEP: usize = 16 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    fn png(w: u32, h: u32) -> Vec<u8> {
        let img = image::GrayImage::from_fn(w, h, |x, y| image::Luma([(x * 7 + y * 3) as u8]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    #[test]
    fn decodes_valid_and_refuses_damaged_images() {
        let good = png(5, 3);
        assert_eq!(decode_check("png", &good).unwrap(), (5, 3));
        assert_eq!(decode_check("seg.png", &good).unwrap(), (5, 3));
        let truncated = &good[..good.len() / 2];
        assert!(matches!(
            decode_check("png", truncated),
            Err(ImageError::Decode { .. })
        ));
        // PNG bytes under a JPEG name do not decode as JPEG.
        assert!(matches!(
            decode_check("jpg", &good),
            Err(ImageError::Decode { .. })
        ));
        assert!(matches!(
            decode_check("cls", b"3"),
            Err(ImageError::Unsupported { .. })
        ));
    }

    #[test]
    fn knows_image_extensions() {
        for ext in ["jpg", "jpeg", "JPG", "png", "webp", "gif", "bmp", "seg.png"] {
            assert!(is_image_ext(ext), "{ext}");
        }
        for ext in ["cls", "txt", "json", "npy", "png.txt"] {
            assert!(!is_image_ext(ext), "{ext}");
        }
    }
}
