//! Image transforms for bale: bytes in, bytes out.
//!
//! For now this crate holds the decode check behind `bale verify --decode`:
//! [`decode_check`] fully decodes a member's bytes as the image format its
//! extension names and returns the dimensions, or says why it does not decode.
//! (The pre-resize / re-encode / pre-decode stage of `bale pack` will live here too.)
//!
//! ```
//! // A 1x1 grey PNG.
//! let png = [
//!     0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
//!     0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x00, 0x00, 0x00, 0x00, 0x3a, 0x7e, 0x9b,
//!     0x55, 0x00, 0x00, 0x00, 0x0a, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x68, 0x00, 0x00, 0x00,
//!     0x82, 0x00, 0x81, 0x77, 0xcd, 0x72, 0xb6, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
//!     0x42, 0x60, 0x82,
//! ];
//! assert_eq!(bale_image::decode_check("png", &png)?, (1, 1));
//! assert!(bale_image::decode_check("png", b"not a png").is_err());
//! assert!(!bale_image::is_image_ext("cls"));
//! # Ok::<(), bale_image::ImageError>(())
//! ```

mod error;

pub use error::ImageError;

use image::ImageFormat;

/// The image format an extension names, looking at its last dot-separated
/// part (`seg.png` is a PNG), for the formats this build decodes.
fn format_of(ext: &str) -> Option<ImageFormat> {
    let last = ext.rsplit('.').next().unwrap_or(ext);
    let format = ImageFormat::from_extension(last)?;
    format.reading_enabled().then_some(format)
}

/// Whether members with this extension are images [`decode_check`] can decode
/// (`jpg`, `jpeg`, `png`, `webp`, `gif`, `bmp`, and compound ones like `seg.png`).
pub fn is_image_ext(ext: &str) -> bool {
    format_of(ext).is_some()
}

/// Decodes `bytes` fully as the image format `ext` names; returns `(width, height)`.
///
/// # Errors
/// [`ImageError::Unsupported`] when `ext` names no image format this build
/// decodes; [`ImageError::Decode`] when the bytes are not a valid image of that
/// format (truncated, corrupt, or another format).
pub fn decode_check(ext: &str, bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    let format = format_of(ext).ok_or_else(|| ImageError::Unsupported {
        ext: ext.to_owned(),
    })?;
    let img =
        image::load_from_memory_with_format(bytes, format).map_err(|e| ImageError::Decode {
            ext: ext.to_owned(),
            message: e.to_string(),
        })?;
    Ok((img.width(), img.height()))
}

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
