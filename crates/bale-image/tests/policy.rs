//! The decoder policy, path by path: the pack's image stage (`transform`),
//! `bale verify --decode` (`decode_check`) and the loader's decoder
//! (`RegionDecoder`, libjpeg-turbo's with the feature `libjpeg`) refuse the
//! same files with the same message, and accept the same files. The bombs
//! are made here, from small images.

use bale_image::region::{CropBox, RegionDecoder};
use bale_image::{ImageOptions, MAX_SCANS, OutputFormat, Resize, decode_check, transform};

/// A progressive JPEG of `w` x `h` whose last scan is repeated until the
/// file holds `scans` scans (decoders take the repeats as refinements).
fn progressive(w: u16, h: u16, scans: usize) -> Vec<u8> {
    let img = image::RgbImage::from_fn(u32::from(w), u32::from(h), |x, y| {
        image::Rgb([
            (x * 7 % 256) as u8,
            (y * 5 % 256) as u8,
            ((x ^ y) % 256) as u8,
        ])
    });
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, 90);
    enc.set_progressive(true);
    enc.encode(img.as_raw(), w, h, jpeg_encoder::ColorType::Rgb)
        .unwrap();
    let sos: Vec<usize> = out
        .windows(2)
        .enumerate()
        .filter(|(_, b)| b == &[0xff, 0xda])
        .map(|(i, _)| i)
        .collect();
    assert!(sos.len() >= 2 && sos.len() <= scans, "{} scans", sos.len());
    let end = out.len() - 2;
    assert_eq!(&out[end..], [0xff, 0xd9]);
    let last = out[*sos.last().unwrap()..end].to_vec();
    let mut bomb = out[..end].to_vec();
    for _ in sos.len()..scans {
        bomb.extend_from_slice(&last);
    }
    bomb.extend_from_slice(&[0xff, 0xd9]);
    bomb
}

/// What each path says of `bytes` (`jpg`): `Ok` or the error's message.
fn verdicts(bytes: &[u8]) -> [Result<(), String>; 4] {
    let opts = ImageOptions {
        resize: Some(Resize::Shorter(8)),
        format: OutputFormat::Raw,
        ..ImageOptions::default()
    };
    let mut d = RegionDecoder::default();
    let (w, h) = bale_image::region::dimensions("jpg", bytes).unwrap_or((64, 48));
    let mut out = vec![0u8; 8 * 8 * 3];
    [
        transform(&opts, "jpg", bytes.to_vec()).map(|_| ()),
        decode_check("jpg", bytes).map(|_| ()),
        d.decode_rgb("jpg", bytes).map(|_| ()),
        d.crop_resize_into("jpg", bytes, CropBox::whole(w, h), 8, 8, true, &mut out)
            .map(|_| ()),
    ]
    .map(|r| r.map_err(|e| e.to_string()))
}

#[test]
fn a_jpeg_of_more_scans_than_the_limit_is_refused_by_every_path_alike() {
    assert_eq!(MAX_SCANS, 100);
    // At the limit: every path decodes it (the `image` crate's decoder
    // counts as the policy does).
    for v in verdicts(&progressive(64, 48, MAX_SCANS)) {
        assert_eq!(v, Ok(()));
    }
    for scans in [MAX_SCANS + 1, 500] {
        for v in verdicts(&progressive(64, 48, scans)) {
            let e = v.unwrap_err();
            assert_eq!(
                e, "jpg does not decode: Too many scans, exceeded limit of 100",
                "{scans} scans"
            );
        }
    }
}

#[test]
fn a_jpeg_frame_one_decoder_lacks_is_refused_by_every_path_alike() {
    // A baseline JPEG relabelled as arithmetic-coded (SOF9), lossless
    // (SOF3) or hierarchical (SOF5): libjpeg-turbo decodes (or tries to
    // decode) such frames, the `image` crate refuses them.
    let good = progressive(64, 48, 12);
    for v in verdicts(&good) {
        assert_eq!(v, Ok(()));
    }
    let at = good
        .windows(2)
        .position(|b| b == [0xff, 0xc2])
        .expect("a progressive frame");
    for (marker, kind) in [
        (0xc9u8, "arithmetic-coded"),
        (0xc3, "lossless"),
        (0xc5, "hierarchical"),
    ] {
        let mut bad = good.clone();
        bad[at + 1] = marker;
        for v in verdicts(&bad) {
            let e = v.unwrap_err();
            assert!(
                e.starts_with(&format!(
                    "jpg does not decode: a {kind} JPEG (frame marker 0xff{marker:02x})"
                )),
                "{e}"
            );
        }
    }
}
