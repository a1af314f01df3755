//! The decoder policy: the one set of checks every path that decodes an
//! image runs before it decodes a pixel (the pack's image stage
//! [`crate::transform`], `bale verify --decode` ([`crate::decode_check`]),
//! the loader's [`crate::region`] decoder, libjpeg-turbo's included, and so
//! `bale.decode_image`), so that all of them give the same verdict on every
//! file, with the same message, and no image costs more than its bound.
//!
//! - **Pixels**: the header's width times height is at most the pixel limit
//!   (`max_pixels`, default [`DEFAULT_MAX_PIXELS`](crate::DEFAULT_MAX_PIXELS),
//!   Pillow's bomb limit) and not 0 ([`check_pixels`]). Refused from the
//!   header, before anything is allocated for the pixels.
//! - **JPEG**: the file is whole (every segment and scan ends before its
//!   end-of-image marker, as Pillow requires) and holds at most
//!   [`MAX_SCANS`] scans: a progressive file whose last scan is repeated
//!   costs one pass over every coefficient per scan, whatever its size in
//!   bytes. The limit and its message ("Too many scans, exceeded limit of
//!   100") are the `image` crate's decoder's, checked here from the marker
//!   structure so that libjpeg-turbo, which has no such limit, refuses the
//!   same files. Its frame must be Huffman-coded DCT (baseline, extended or
//!   progressive): a lossless, hierarchical or arithmetic-coded frame, which
//!   libjpeg-turbo decodes and the `image` crate does not, is refused by all.
//! - **PNG**: what is not pixels (an ICC profile inflated from `iCCP`, the
//!   other chunks) at most [`MAX_PNG_METADATA`] bytes ([`reader`]): a
//!   profile of a few KiB that inflates to gigabytes is refused, not
//!   inflated. Data after the last row is not inflated, nor are text chunks.
//!
//! - **GIF**: the pixel limit holds for the first frame's extent too
//!   ([`check_extent`]): a frame may reach past the logical screen the
//!   header gives, and is decoded whole (Pillow enlarges the image to it
//!   and refuses it over its limit), so a header of 10x10 pixels cannot
//!   hide a frame of 20000x20000 (1.6 GB and seconds of decoding for a
//!   300 KB file).
//!
//! With those, decoding an image costs time in proportion to its pixels
//! (times at most [`MAX_SCANS`] passes for a progressive JPEG) plus its
//! bytes, whichever decoder runs.

use crate::ImageError;

/// The most scans a JPEG may hold (the `image` crate's decoder's limit).
pub const MAX_SCANS: usize = 100;

/// Whether `bytes` hold a whole JPEG of at most [`MAX_SCANS`] scans and a
/// Huffman-coded DCT frame, in the words a loader's refusal would use.
pub(crate) fn check_jpeg(bytes: &[u8]) -> Result<(), String> {
    use crate::jpeg::Refusal;
    crate::jpeg::check_complete(bytes, MAX_SCANS).map_err(|r| match r {
        Refusal::Broken(message) => message,
        Refusal::TooManyScans => too_many_scans(),
        Refusal::Frame(marker) => unsupported_frame(marker),
    })
}

/// The message of a JPEG over [`MAX_SCANS`], as the `image` crate's decoder words it.
fn too_many_scans() -> String {
    format!("Too many scans, exceeded limit of {MAX_SCANS}")
}

/// The message of a JPEG whose frame is not Huffman-coded DCT (baseline,
/// extended or progressive): lossless, hierarchical or arithmetic-coded
/// frames, which libjpeg-turbo decodes and the `image` crate's decoder does
/// not, are refused by every path alike.
fn unsupported_frame(marker: u8) -> String {
    let kind = match marker {
        0xc3 => "lossless",
        0xc5..=0xc7 => "hierarchical",
        0xcb | 0xcf => "lossless, arithmetic-coded",
        _ => "arithmetic-coded",
    };
    format!(
        "a {kind} JPEG (frame marker 0xff{marker:02x}) is not decoded: only baseline, \
         extended and progressive Huffman-coded JPEGs are"
    )
}

/// Refuses an image of `w` x `h` over `max` pixels, or of none.
pub(crate) fn check_pixels(ext: &str, w: u32, h: u32, max: u64) -> Result<(), ImageError> {
    let pixels = u64::from(w) * u64::from(h);
    if pixels > max {
        return Err(ImageError::TooLarge {
            ext: ext.to_owned(),
            width: w,
            height: h,
            pixels,
            max,
        });
    }
    if pixels == 0 {
        return Err(ImageError::Decode {
            ext: ext.to_owned(),
            message: "the image has no pixels".into(),
        });
    }
    Ok(())
}

/// Refuses an image whose first frame reaches past `max` pixels: a GIF's
/// frame may lie beyond its logical screen (the header's `w` x `h`), and
/// is decoded whole. The frame's place is read from the block structure;
/// a structure that does not parse is left to the decoder.
///
/// # Errors
/// [`ImageError::TooLarge`] naming the extent (screen and frame together).
pub(crate) fn check_extent(
    ext: &str,
    format: image::ImageFormat,
    bytes: &[u8],
    max: u64,
) -> Result<(), ImageError> {
    if format != image::ImageFormat::Gif {
        return Ok(());
    }
    match gif_extent(bytes) {
        Some((w, h)) => check_pixels(ext, w, h, max),
        None => Ok(()),
    }
}

/// The extent of a GIF's logical screen and first frame together, as
/// Pillow sizes the image: `(max(screen, left + width), max(screen, top +
/// height))`. `None` when the blocks before the frame do not parse.
fn gif_extent(b: &[u8]) -> Option<(u32, u32)> {
    let u16_at = |at: usize| -> Option<u32> {
        Some(u32::from(u16::from_le_bytes([
            *b.get(at)?,
            *b.get(at + 1)?,
        ])))
    };
    if !b.starts_with(b"GIF87a") && !b.starts_with(b"GIF89a") {
        return None;
    }
    let (sw, sh, flags) = (u16_at(6)?, u16_at(8)?, *b.get(10)?);
    let mut at = 13usize;
    if flags & 0x80 != 0 {
        at += 3 << ((flags & 7) + 1);
    }
    loop {
        match *b.get(at)? {
            // An extension: its label, then sub-blocks up to an empty one.
            0x21 => {
                at += 2;
                loop {
                    let n = usize::from(*b.get(at)?);
                    at += 1 + n;
                    if n == 0 {
                        break;
                    }
                }
            }
            0x2c => {
                let (left, top) = (u16_at(at + 1)?, u16_at(at + 3)?);
                let (w, h) = (u16_at(at + 5)?, u16_at(at + 7)?);
                return Some((sw.max(left + w), sh.max(top + h)));
            }
            _ => return None,
        }
    }
}

/// The most the PNG decoder may allocate for what is not pixels (an ICC
/// profile inflated from its `iCCP` chunk, the other chunks kept), besides
/// its row buffer: profiles in use are at most a few MiB.
pub const MAX_PNG_METADATA: u64 = 64 << 20;

/// The one way every path opens a decoder for `bytes` of `format`.
///
/// The pixel limit ([`check_pixels`], checked by the caller from the
/// header) is the guard of the pixels, so the `image` crate's allocation
/// limit is off for them (it would refuse images a raised `max_pixels`
/// allows); a PNG's decoder keeps an allocation limit for the rest: its row
/// buffer (8 bytes a pixel at most, times the header's width) and
/// [`MAX_PNG_METADATA`], so that an `iCCP` chunk of a few MiB that inflates
/// to gigabytes is refused ("Limits are exceeded"), not inflated.
pub(crate) fn reader(
    format: image::ImageFormat,
    bytes: &[u8],
) -> image::ImageReader<std::io::Cursor<&[u8]>> {
    let mut reader = image::ImageReader::with_format(std::io::Cursor::new(bytes), format);
    reader.no_limits();
    if format == image::ImageFormat::Png {
        // IHDR's width, at bytes 16..20 (after the signature, the chunk's
        // length and its type); a header that is not there fails to parse.
        let width = bytes
            .get(16..20)
            .map_or(0, |w| u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        let mut limits = image::Limits::no_limits();
        limits.max_alloc = Some(MAX_PNG_METADATA + 8 * u64::from(width) + 64);
        reader.limits(limits);
    }
    reader
}

/// The checks of the image's format on its bytes (the JPEG's wholeness and
/// scans), before any decoder reads them.
///
/// # Errors
/// [`ImageError::Decode`] saying what is wrong.
pub(crate) fn check_format(
    ext: &str,
    format: image::ImageFormat,
    bytes: &[u8],
) -> Result<(), ImageError> {
    let refused = |message: String| ImageError::Decode {
        ext: ext.to_owned(),
        message,
    };
    match format {
        image::ImageFormat::Jpeg => check_jpeg(bytes).map_err(refused),
        _ => Ok(()),
    }
}
