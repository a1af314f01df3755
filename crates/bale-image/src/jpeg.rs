//! The JPEG marker structure, walked without decoding: whether a file is
//! whole (every segment present, every scan ended, an end-of-image marker),
//! and the frame's component count.
//!
//! The decoder fills a truncated JPEG with grey and reports success; Pillow
//! (libjpeg) refuses it ("image file is truncated"). [`check_complete`] gives
//! the same verdict before any pixel is decoded, so the image stage and
//! `bale verify --decode` refuse what a loader would fail on.

/// A marker segment: its marker byte and its payload (after the length
/// field; empty for standalone markers).
struct Segment<'a> {
    marker: u8,
    payload: &'a [u8],
}

/// Markers without a length field: TEM, RST0-7, SOI, EOI.
fn standalone(marker: u8) -> bool {
    marker == 0x01 || (0xd0..=0xd9).contains(&marker)
}

/// Walks the segments of `b` from the SOI on, calling `f` for each (scans'
/// entropy-coded data is stepped over). Stops at EOI, or when `f` says so.
///
/// # Errors
/// Where the structure breaks: no SOI, a byte that is not a marker, a
/// segment or scan that runs past the end, no EOI.
fn walk<'a>(b: &'a [u8], mut f: impl FnMut(&Segment<'a>) -> bool) -> Result<(), String> {
    if b.len() < 2 || b[0] != 0xff || b[1] != 0xd8 {
        return Err("it does not start with a JPEG start-of-image marker".into());
    }
    let truncated = |at: usize, what: &str| {
        format!(
            "the file is truncated: it ends at byte {} {what}, before its end-of-image marker",
            at.min(b.len())
        )
    };
    let mut i = 2;
    loop {
        // Fill bytes (0xFF) may precede a marker.
        if i >= b.len() {
            return Err(truncated(i, "between segments"));
        }
        if b[i] != 0xff {
            return Err(format!(
                "byte {i} is 0x{:02x} where a marker (0xff) should start",
                b[i]
            ));
        }
        let start = i;
        while i < b.len() && b[i] == 0xff {
            i += 1;
        }
        let Some(&marker) = b.get(i) else {
            return Err(truncated(i, "inside a marker"));
        };
        i += 1;
        if (0x02..0xc0).contains(&marker) || marker == 0x00 {
            return Err(format!(
                "byte {start} holds an unknown marker (0xff{marker:02x})"
            ));
        }
        if standalone(marker) {
            let seg = Segment {
                marker,
                payload: &[],
            };
            if marker == 0xd9 || !f(&seg) {
                return Ok(());
            }
            continue;
        }
        if i + 2 > b.len() {
            return Err(truncated(i, "inside a segment's length"));
        }
        let len = usize::from(u16::from_be_bytes([b[i], b[i + 1]]));
        if len < 2 {
            return Err(format!(
                "the segment at byte {start} has a length of {len}, less than its length field"
            ));
        }
        let end = i + len;
        if end > b.len() {
            return Err(truncated(
                b.len(),
                &format!("inside the segment at byte {start}"),
            ));
        }
        let seg = Segment {
            marker,
            payload: &b[i + 2..end],
        };
        if !f(&seg) {
            return Ok(());
        }
        i = end;
        if marker == 0xda {
            // Entropy-coded data runs to the next marker that is not a
            // stuffed 0xFF00 or a restart marker.
            loop {
                let Some(p) = memchr::memchr(0xff, &b[i..]) else {
                    let what = format!("inside the scan that starts at byte {start}");
                    return Err(truncated(b.len(), &what));
                };
                i += p;
                match b.get(i + 1) {
                    None => {
                        return Err(truncated(b.len(), "inside a scan"));
                    }
                    Some(0x00) | Some(0xd0..=0xd7) => i += 2,
                    Some(0xff) => i += 1,
                    Some(_) => break,
                }
            }
        }
    }
}

/// Why [`check_complete`] refused a JPEG: the marker walk knows the
/// structure, the decoder policy (`policy.rs`) words the limits.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// The structure is broken or cut short: what and where, in words.
    Broken(String),
    /// More scans than the limit it was given.
    TooManyScans,
    /// A frame that is not Huffman-coded DCT: its SOF marker byte.
    Frame(u8),
}

impl Refusal {
    /// Whether the file ends before its end-of-image marker.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn is_truncation(&self) -> bool {
        matches!(self, Refusal::Broken(m) if m.contains("truncated"))
    }
}

/// Checks that `bytes` hold a whole JPEG: segments and scans complete up to
/// the end-of-image marker (anything after it is ignored, as decoders do),
/// at most `max_scans` scans, and a Huffman-coded DCT frame (SOF0-SOF2).
///
/// # Errors
/// What is wrong ([`Refusal`]), found before any scan is decoded.
pub(crate) fn check_complete(bytes: &[u8], max_scans: usize) -> Result<(), Refusal> {
    let mut scans = 0usize;
    let mut over = false;
    let mut frame = None;
    walk(bytes, |s| {
        if s.marker == 0xda {
            scans += 1;
            over = scans > max_scans;
        }
        if is_frame(s.marker) && !(0xc0..=0xc2).contains(&s.marker) {
            frame = Some(s.marker);
        }
        !over && frame.is_none()
    })
    .map_err(Refusal::Broken)?;
    if over {
        return Err(Refusal::TooManyScans);
    }
    if let Some(m) = frame {
        return Err(Refusal::Frame(m));
    }
    Ok(())
}

/// Whether `marker` starts a frame: SOF0..SOF15, but DHT (C4), JPG (C8)
/// and DAC (CC).
fn is_frame(marker: u8) -> bool {
    (0xc0..=0xcf).contains(&marker) && ![0xc4, 0xc8, 0xcc].contains(&marker)
}

/// The number of colour components of a JPEG's frame (4 for CMYK/YCCK),
/// from its first SOF marker; the decoder reports CMYK as RGB.
pub(crate) fn components(bytes: &[u8]) -> Option<u8> {
    let mut found = None;
    let _ = walk(bytes, |s| {
        if is_frame(s.marker) {
            found = s.payload.get(5).copied();
            return false;
        }
        s.marker != 0xda
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jpeg() -> Vec<u8> {
        let img =
            image::RgbImage::from_fn(40, 30, |x, y| image::Rgb([x as u8 * 6, y as u8 * 8, 99]));
        let mut out = std::io::Cursor::new(Vec::new());
        img.write_to(&mut out, image::ImageFormat::Jpeg).unwrap();
        out.into_inner()
    }

    #[test]
    fn whole_jpegs_pass_and_cut_ones_do_not() {
        let good = jpeg();
        check_complete(&good, 100).unwrap();
        assert_eq!(components(&good), Some(3));
        // Trailing bytes after the end-of-image marker are ignored.
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"junk");
        check_complete(&trailing, 100).unwrap();
        for cut in [
            2,
            3,
            10,
            100,
            good.len() / 2,
            good.len() - 2,
            good.len() - 1,
        ] {
            let err = check_complete(&good[..cut], 100).unwrap_err();
            assert!(err.is_truncation(), "cut at {cut}: {err:?}");
        }
        // A zero-filled tail hides the end-of-image marker.
        let mut zeros = good.clone();
        let n = zeros.len();
        zeros[n / 2..].fill(0);
        assert!(check_complete(&zeros, 100).is_err());
        // A damaged marker after the SOI.
        let mut bad = good.clone();
        bad[3] ^= 0xff;
        assert!(check_complete(&bad, 100).is_err());
        assert!(check_complete(b"not a jpeg", 100).is_err());
    }
}
