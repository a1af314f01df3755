//! What `--decode` pays per member: a full image decode, or for a raw `.npy`
//! array the header parse and a pass over the array bytes (what a loader pays
//! for pre-decoded pixels).
//!
//! [`decode_member`] is the one place that calls the image code: the image
//! stage's own decoder (`bale_image::transform` to raw pixels, the work a
//! loader does to get a tensor), with the `--resize` of [`set_resize`].

use std::sync::OnceLock;

use anyhow::{Context, bail, ensure};
use bale_image::{ImageOptions, OutputFormat, Resize};

/// The resize `--decode` adds after decoding (`bale bench --resize`); set
/// once per process before measuring, `None` when never set.
static RESIZE: OnceLock<Option<Resize>> = OnceLock::new();

/// Sets the resize every later [`decode_member`] applies; the first call wins.
pub fn set_resize(resize: Option<Resize>) {
    let _ = RESIZE.set(resize);
}

/// What decoding one member did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// An image (or `.npy` array) decoded: its width and height (for `.npy`,
    /// the first two dimensions, 1 when absent).
    Image(u32, u32),
    /// Not an image member (labels, JSON, text): nothing to decode.
    Skipped,
}

/// Decodes one member as a loader would.
///
/// # Errors
/// When the bytes do not decode as the format `ext` names, naming what is wrong.
pub fn decode_member(ext: &str, bytes: &[u8]) -> anyhow::Result<Decoded> {
    let last = ext.rsplit('.').next().unwrap_or(ext);
    if last.eq_ignore_ascii_case("npy") {
        return touch_npy(bytes);
    }
    if !bale_image::is_image_ext(ext) {
        return Ok(Decoded::Skipped);
    }
    let opts = ImageOptions {
        resize: RESIZE.get().copied().flatten(),
        format: OutputFormat::Raw,
        ..ImageOptions::default()
    };
    let t = bale_image::transform(&opts, ext, bytes.to_vec())?;
    Ok(Decoded::Image(t.out_width, t.out_height))
}

/// Parses a `.npy` header ([`bale_format::npy`]), checks the array bytes
/// are all there, and reads every one of them (a checksum), as a loader that
/// copies the array into a tensor does.
fn touch_npy(bytes: &[u8]) -> anyhow::Result<Decoded> {
    let header = bale_format::npy::parse(bytes).map_err(anyhow::Error::msg)?;
    let bale_format::npy::Header::Simple {
        shape, data_offset, ..
    } = &header
    else {
        bail!(".npy member with a structured dtype");
    };
    let count = header
        .data_len()
        .context(".npy header has no usable 'descr' or 'shape'")?;
    let data = &bytes[*data_offset..];
    ensure!(
        data.len() as u64 >= count,
        ".npy array needs {count} bytes, the member holds {}",
        data.len()
    );
    std::hint::black_box(bale_format::hash::xxh3_64(&data[..count as usize]));
    let dim = |i: usize| shape.get(i).map_or(1, |d| (*d).min(u32::MAX as u64) as u32);
    Ok(Decoded::Image(dim(1), dim(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn npy(descr: &str, shape: &str, data: &[u8]) -> Vec<u8> {
        let mut header =
            format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        while (10 + header.len() + 1) % 64 != 0 {
            header.push(' ');
        }
        header.push('\n');
        let mut out = b"\x93NUMPY\x01\x00".to_vec();
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
        out.extend_from_slice(header.as_bytes());
        out.extend_from_slice(data);
        out
    }

    #[test]
    fn npy_arrays_are_parsed_and_their_bytes_checked() {
        let a = npy("|u1", "(2, 3, 3)", &[7; 18]);
        assert_eq!(decode_member("npy", &a).unwrap(), Decoded::Image(3, 2));
        let f = npy("<f4", "(4,)", &[0; 16]);
        assert_eq!(decode_member("x.npy", &f).unwrap(), Decoded::Image(1, 4));
        let scalar = npy("<i8", "()", &[0; 8]);
        assert_eq!(decode_member("npy", &scalar).unwrap(), Decoded::Image(1, 1));
        // One byte short.
        let short = npy("<f4", "(4,)", &[0; 15]);
        let e = decode_member("npy", &short).unwrap_err().to_string();
        assert!(e.contains("needs 16 bytes"), "{e}");
        assert!(decode_member("npy", b"\x93NUMPY").is_err());
        assert!(decode_member("npy", b"not an array at all").is_err());
        let mut bad_len = npy("|u1", "(1,)", &[0]);
        bad_len[8] = 0xff;
        bad_len[9] = 0xff;
        assert!(decode_member("npy", &bad_len).is_err());
    }

    #[test]
    fn non_images_are_skipped_and_bad_images_are_errors() {
        assert_eq!(decode_member("cls", b"3").unwrap(), Decoded::Skipped);
        assert_eq!(decode_member("json", b"{}").unwrap(), Decoded::Skipped);
        assert!(decode_member("jpg", b"not a jpeg").is_err());
    }
}
