//! The image stage, member by member: sizes, orientation, colour modes,
//! output formats, damaged input and decompression bombs.

use std::io::Cursor;

use bale_image::{ColorMode, ImageError, ImageOptions, OutputFormat, Resize, transform};
use image::{DynamicImage, ImageFormat};

fn encode(img: &DynamicImage, format: ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

/// A colourful RGB test card.
fn card(w: u32, h: u32) -> DynamicImage {
    DynamicImage::ImageRgb8(image::RgbImage::from_fn(w, h, |x, y| {
        image::Rgb([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 128])
    }))
}

fn jpeg(w: u32, h: u32) -> Vec<u8> {
    jpeg_with_exif(&card(w, h).into_rgb8(), None)
}

/// A JPEG with an EXIF APP1 segment holding only an orientation tag.
fn jpeg_with_exif(img: &image::RgbImage, orientation: Option<u16>) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = jpeg_encoder::Encoder::new(&mut out, 95);
    if let Some(o) = orientation {
        // TIFF header (little endian), one IFD with one entry: 0x0112 SHORT 1 = o.
        let mut tiff = b"II*\0\x08\0\0\0".to_vec();
        tiff.extend_from_slice(&1u16.to_le_bytes());
        tiff.extend_from_slice(&0x0112u16.to_le_bytes());
        tiff.extend_from_slice(&3u16.to_le_bytes());
        tiff.extend_from_slice(&1u32.to_le_bytes());
        tiff.extend_from_slice(&o.to_le_bytes());
        tiff.extend_from_slice(&[0, 0]);
        tiff.extend_from_slice(&0u32.to_le_bytes());
        enc.add_exif_metadata(&tiff).unwrap();
    }
    enc.encode(
        img.as_raw(),
        img.width() as u16,
        img.height() as u16,
        jpeg_encoder::ColorType::Rgb,
    )
    .unwrap();
    out
}

/// Parses a `.npy` bale wrote: (descr, shape, data).
fn npy(bytes: &[u8]) -> (String, Vec<usize>, &[u8]) {
    assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    assert_eq!((10 + len) % 64, 0, "header padded to 64 bytes");
    let dict = std::str::from_utf8(&bytes[10..10 + len]).unwrap();
    let descr = dict.split('\'').nth(3).unwrap().to_owned();
    let shape = dict
        .split_once("'shape': (")
        .unwrap()
        .1
        .split_once(')')
        .unwrap()
        .0
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    (descr, shape, &bytes[10 + len..])
}

fn opts(resize: Option<Resize>, format: OutputFormat) -> ImageOptions {
    ImageOptions {
        resize,
        format,
        ..ImageOptions::default()
    }
}

fn dims_of(ext: &str, bytes: &[u8]) -> (u32, u32) {
    bale_image::decode_check(ext, bytes).unwrap()
}

#[test]
fn each_resize_mode_gives_its_size() {
    let src = jpeg(500, 375);
    let cases = [
        (Resize::Shorter(256), (341, 256)),
        (Resize::Longer(256), (256, 192)),
        (
            Resize::Fit {
                width: 100,
                height: 100,
            },
            (100, 75),
        ),
        (
            Resize::Fit {
                width: 1000,
                height: 150,
            },
            (200, 150),
        ),
    ];
    for (resize, want) in cases {
        let out = transform(
            &opts(Some(resize), OutputFormat::Jpeg { quality: 90 }),
            "jpg",
            src.clone(),
        )
        .unwrap();
        assert_eq!(out.ext, "jpg");
        assert_eq!((out.width, out.height), (500, 375), "original size kept");
        assert_eq!((out.out_width, out.out_height), want, "{resize}");
        assert_eq!(dims_of("jpg", &out.data), want, "{resize}: stored bytes");
    }
}

#[test]
fn never_upscales_unless_asked() {
    let src = jpeg(100, 60);
    let o = opts(Some(Resize::Shorter(256)), OutputFormat::Raw);
    let out = transform(&o, "jpg", src.clone()).unwrap();
    let (_, shape, _) = npy(&out.data);
    assert_eq!(shape, [60, 100, 3]);
    let up = ImageOptions { upscale: true, ..o };
    let out = transform(&up, "jpg", src).unwrap();
    assert_eq!(npy(&out.data).1, [256, 427, 3]);
}

#[test]
fn odd_and_one_pixel_sizes() {
    for (w, h, resize, want) in [
        (1, 1, Resize::Shorter(1), (1, 1)),
        (1, 1, Resize::Longer(8), (1, 1)),
        (7, 5, Resize::Longer(3), (3, 2)),
        (1, 999, Resize::Longer(10), (1, 10)),
        (999, 1, Resize::Shorter(1), (999, 1)),
        (3, 2, Resize::Shorter(1), (2, 1)),
    ] {
        let src = encode(&card(w, h), ImageFormat::Png);
        let out = transform(&opts(Some(resize), OutputFormat::Png), "png", src).unwrap();
        assert_eq!((out.out_width, out.out_height), want, "{w}x{h} {resize}");
        assert_eq!(dims_of("png", &out.data), want);
    }
}

#[test]
fn resampling_is_faithful_on_flat_colour() {
    // Lanczos3 on a flat image stays flat (no ringing, no offset).
    let flat = DynamicImage::ImageRgb8(image::RgbImage::from_pixel(
        300,
        200,
        image::Rgb([10, 120, 250]),
    ));
    let out = transform(
        &opts(Some(Resize::Shorter(50)), OutputFormat::Raw),
        "png",
        encode(&flat, ImageFormat::Png),
    )
    .unwrap();
    let (descr, shape, data) = npy(&out.data);
    assert_eq!((descr.as_str(), shape), ("|u1", vec![50, 75, 3]));
    for px in data.chunks(3) {
        assert_eq!(px, [10, 120, 250]);
    }
}

/// Which quadrant of a raw RGB image is bright: (right?, bottom?).
fn bright_quadrant(raw: &[u8]) -> (bool, bool, usize, usize) {
    let (_, shape, data) = npy(raw);
    let (h, w) = (shape[0], shape[1]);
    let at = |x: usize, y: usize| data[(y * w + x) * 3] as u32;
    let q = |right: bool, bottom: bool| {
        let x = if right { w * 3 / 4 } else { w / 4 };
        let y = if bottom { h * 3 / 4 } else { h / 4 };
        at(x, y)
    };
    let mut best = (false, false);
    for r in [false, true] {
        for b in [false, true] {
            if q(r, b) > q(best.0, best.1) {
                best = (r, b);
            }
        }
    }
    (best.0, best.1, w, h)
}

#[test]
fn exif_orientation_1_to_8_is_applied() {
    // 64x32, the stored top-left quadrant white, the rest black.
    let img = image::RgbImage::from_fn(64, 32, |x, y| {
        if x < 32 && y < 16 {
            image::Rgb([255, 255, 255])
        } else {
            image::Rgb([0, 0, 0])
        }
    });
    // Where the stored top-left ends up when displayed: (right, bottom), and
    // whether the sides swap.
    let expect = [
        (1, (false, false), false),
        (2, (true, false), false),
        (3, (true, true), false),
        (4, (false, true), false),
        (5, (false, false), true),
        (6, (true, false), true),
        (7, (true, true), true),
        (8, (false, true), true),
    ];
    let o = opts(None, OutputFormat::Raw);
    for (orientation, corner, swapped) in expect {
        let src = jpeg_with_exif(&img, Some(orientation));
        let out = transform(&o, "jpg", src).unwrap();
        let (r, b, w, h) = bright_quadrant(&out.data);
        assert_eq!((r, b), corner, "orientation {orientation}");
        let want = if swapped { (32, 64) } else { (64, 32) };
        assert_eq!((w, h), (want.0 as usize, want.1 as usize), "{orientation}");
        assert_eq!((out.width, out.height), want, "original size, upright");
    }
    // With `keep`, an upright image keeps its bytes; a rotated one is re-encoded upright.
    let keep = opts(None, OutputFormat::Keep);
    let upright = jpeg_with_exif(&img, Some(1));
    let out = transform(&keep, "jpg", upright.clone()).unwrap();
    assert!(out.kept);
    assert_eq!(out.data, upright);
    let rotated = jpeg_with_exif(&img, Some(6));
    let out = transform(&keep, "jpg", rotated.clone()).unwrap();
    assert!(!out.kept);
    assert_eq!(dims_of("jpg", &out.data), (32, 64));
}

#[test]
fn colour_modes_for_every_input_layout() {
    use DynamicImage as D;
    let (w, h) = (6, 4);
    let l8 = D::ImageLuma8(image::GrayImage::from_fn(w, h, |x, _| {
        image::Luma([x as u8 * 40])
    }));
    let la8 = D::ImageLumaA8(image::GrayAlphaImage::from_fn(w, h, |x, _| {
        image::LumaA([x as u8 * 40, 200])
    }));
    let rgba8 = D::ImageRgba8(image::RgbaImage::from_fn(w, h, |x, y| {
        image::Rgba([x as u8 * 40, y as u8 * 60, 7, 99])
    }));
    let l16 = D::ImageLuma16(image::ImageBuffer::from_fn(w, h, |x, _| {
        image::Luma([x as u16 * 10_000 + 3])
    }));
    let rgb16 = D::ImageRgb16(image::ImageBuffer::from_fn(w, h, |x, _| {
        image::Rgb([x as u16 * 10_000, 65_535, 0])
    }));
    let rgba16 = D::ImageRgba16(image::ImageBuffer::from_fn(w, h, |_, _| {
        image::Rgba([1, 2, 3, 4])
    }));
    // (input, channels kept, bytes per sample kept)
    let cases = [
        (l8, 1, 1),
        (la8, 2, 1),
        (rgba8, 4, 1),
        (l16, 1, 2),
        (rgb16, 3, 2),
        (rgba16, 4, 2),
    ];
    for (img, channels, depth) in cases {
        let name = format!("{:?}", img.color());
        let png = encode(&img, ImageFormat::Png);
        // rgb: always 8-bit RGB.
        let out = transform(&opts(None, OutputFormat::Raw), "png", png.clone()).unwrap();
        let (descr, shape, data) = npy(&out.data);
        assert_eq!(
            (descr.as_str(), shape.as_slice()),
            ("|u1", &[4, 6, 3][..]),
            "{name}"
        );
        let want = img.to_rgb8();
        assert_eq!(data, want.as_raw().as_slice(), "{name}: rgb pixels");
        // keep: the layout survives in raw and PNG.
        let keep = ImageOptions {
            mode: ColorMode::Keep,
            ..opts(None, OutputFormat::Raw)
        };
        let out = transform(&keep, "png", png.clone()).unwrap();
        let (descr, shape, data) = npy(&out.data);
        let want_descr = if depth == 2 { "<u2" } else { "|u1" };
        assert_eq!(descr, want_descr, "{name}");
        assert_eq!(shape, [4, 6, channels], "{name}");
        if depth == 1 {
            assert_eq!(data, img.as_bytes(), "{name}: raw keeps the pixels");
        } else {
            let le: Vec<u8> = img
                .as_bytes()
                .chunks(2)
                .flat_map(|c| u16::from_ne_bytes([c[0], c[1]]).to_le_bytes())
                .collect();
            assert_eq!(data, le.as_slice(), "{name}: 16-bit little endian");
        }
        let png_keep = ImageOptions {
            format: OutputFormat::Png,
            ..keep.clone()
        };
        let out = transform(&png_keep, "png", png.clone()).unwrap();
        let back = image::load_from_memory_with_format(&out.data, ImageFormat::Png).unwrap();
        assert_eq!(back.color(), img.color(), "{name}: png keeps the layout");
        assert_eq!(back.as_bytes(), img.as_bytes(), "{name}: png is lossless");
        // JPEG output: 8 bits, alpha dropped, gray stays gray with keep.
        let jpeg_keep = ImageOptions {
            format: OutputFormat::Jpeg { quality: 90 },
            ..keep
        };
        let out = transform(&jpeg_keep, "png", png).unwrap();
        assert_eq!(out.ext, "jpg");
        let back = image::load_from_memory_with_format(&out.data, ImageFormat::Jpeg).unwrap();
        let want = if channels <= 2 {
            image::ColorType::L8
        } else {
            image::ColorType::Rgb8
        };
        assert_eq!(back.color(), want, "{name}: jpeg layout");
    }
}

#[test]
fn palette_png_is_expanded() {
    // A 2x2 palette PNG: red, green, blue, white.
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, 2, 2);
        enc.set_color(png::ColorType::Indexed);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_palette(vec![255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255]);
        let mut w = enc.write_header().unwrap();
        w.write_image_data(&[0, 1, 2, 3]).unwrap();
    }
    let t = transform(&opts(None, OutputFormat::Raw), "png", out).unwrap();
    let (_, shape, data) = npy(&t.data);
    assert_eq!(shape, [2, 2, 3]);
    assert_eq!(data, [255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255]);
}

#[test]
fn cmyk_jpeg_becomes_rgb() {
    // A flat CMYK JPEG: full magenta, nothing else.
    let (w, h) = (16u16, 16u16);
    let mut src = Vec::new();
    let cmyk: Vec<u8> = (0..w as usize * h as usize)
        .flat_map(|_| [0u8, 255, 0, 0])
        .collect();
    jpeg_encoder::Encoder::new(&mut src, 100)
        .encode(&cmyk, w, h, jpeg_encoder::ColorType::Cmyk)
        .unwrap();
    for mode in [ColorMode::Rgb, ColorMode::Keep] {
        let o = ImageOptions {
            mode,
            ..opts(None, OutputFormat::Raw)
        };
        let t = transform(&o, "jpg", src.clone()).unwrap();
        let (descr, shape, data) = npy(&t.data);
        assert_eq!((descr.as_str(), shape), ("|u1", vec![16, 16, 3]), "{mode}");
        // Full magenta ink, no black: Pillow's convert("RGB") gives (255, 0, 255).
        let px = &data[..3];
        let want = [255u8, 0, 255];
        assert!(
            px.iter().zip(want).all(|(a, b)| a.abs_diff(b) <= 8),
            "{mode}: {px:?}"
        );
    }
    // `keep` with `--mode rgb` re-encodes a CMYK JPEG as RGB; with `--mode keep` it stays.
    let t = transform(&opts(None, OutputFormat::Keep), "jpg", src.clone()).unwrap();
    assert!(!t.kept);
    let o = ImageOptions {
        mode: ColorMode::Keep,
        ..opts(None, OutputFormat::Keep)
    };
    assert!(transform(&o, "jpg", src).unwrap().kept);
}

#[test]
fn other_formats_decode_and_keep_reencodes_in_the_source_format() {
    let img = card(40, 30);
    for (ext, format) in [
        ("bmp", ImageFormat::Bmp),
        ("gif", ImageFormat::Gif),
        ("tif", ImageFormat::Tiff),
        ("tiff", ImageFormat::Tiff),
        ("webp", ImageFormat::WebP),
        ("png", ImageFormat::Png),
        ("jpeg", ImageFormat::Jpeg),
    ] {
        let src = encode(&img, format);
        let t = transform(
            &opts(Some(Resize::Shorter(15)), OutputFormat::Keep),
            ext,
            src.clone(),
        )
        .unwrap();
        assert_eq!(t.ext, ext);
        assert_eq!(dims_of(ext, &t.data), (20, 15), "{ext}");
        let t = transform(
            &opts(Some(Resize::Longer(20)), OutputFormat::Raw),
            &format!("seg.{ext}"),
            src,
        )
        .unwrap();
        assert_eq!(t.ext, "seg.npy");
        assert_eq!(npy(&t.data).1, [15, 20, 3], "{ext}");
    }
}

#[test]
fn damaged_and_mislabelled_images_are_errors() {
    let good = jpeg(64, 48);
    let o = opts(
        Some(Resize::Shorter(16)),
        OutputFormat::Jpeg { quality: 80 },
    );
    let truncated = good[..good.len() / 3].to_vec();
    assert!(matches!(
        transform(&o, "jpg", truncated),
        Err(ImageError::Decode { .. })
    ));
    let png = encode(&card(8, 8), ImageFormat::Png);
    assert!(matches!(
        transform(&o, "jpg", png.clone()),
        Err(ImageError::Decode { .. })
    ));
    assert!(matches!(
        transform(&o, "png", good.clone()),
        Err(ImageError::Decode { .. })
    ));
    assert!(matches!(
        transform(&o, "png", png[..20].to_vec()),
        Err(ImageError::Decode { .. })
    ));
    assert!(matches!(
        transform(&o, "jpg", Vec::new()),
        Err(ImageError::Decode { .. })
    ));
    assert!(matches!(
        transform(&o, "cls", b"3".to_vec()),
        Err(ImageError::Unsupported { .. })
    ));
    // A corrupted byte in the middle of the entropy-coded data is either an
    // error or a decoded image of the right size, never a panic.
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    for b in &mut flipped[mid..mid + 50] {
        *b ^= 0x5a;
    }
    if let Ok(t) = transform(&o, "jpg", flipped) {
        assert_eq!((t.out_width, t.out_height), (21, 16));
    }
}

/// A PNG that claims `w` x `h` pixels in its header and holds almost nothing.
fn png_bomb(w: u32, h: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        let mut c = kind.to_vec();
        c.extend_from_slice(data);
        out.extend_from_slice(&crc32(&c).to_be_bytes());
    }
    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

#[test]
fn decompression_bombs_are_refused_from_the_header() {
    let o = opts(Some(Resize::Shorter(256)), OutputFormat::Raw);
    // 100,000 x 100,000 RGB would be 30 GB of pixels: refused at once.
    match transform(&o, "png", png_bomb(100_000, 100_000)) {
        Err(ImageError::TooLarge {
            width,
            height,
            pixels,
            max,
            ..
        }) => {
            assert_eq!((width, height, pixels), (100_000, 100_000, 10_000_000_000));
            assert_eq!(max, bale_image::DEFAULT_MAX_PIXELS);
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    // The limit is configurable, and exact: at the limit passes the check.
    let src = jpeg(40, 30);
    let tight = ImageOptions {
        max_pixels: 1199,
        ..o.clone()
    };
    let e = transform(&tight, "jpg", src.clone()).unwrap_err();
    assert!(e.to_string().contains("40x30 = 1200 pixels"), "{e}");
    let at = ImageOptions {
        max_pixels: 1200,
        ..o
    };
    assert!(transform(&at, "jpg", src).is_ok());
}

#[test]
fn output_is_deterministic() {
    let src = jpeg(333, 251);
    let o = opts(
        Some(Resize::Shorter(100)),
        OutputFormat::Jpeg { quality: 85 },
    );
    let a = transform(&o, "jpg", src.clone()).unwrap();
    let b = std::thread::spawn({
        let o = o.clone();
        move || transform(&o, "jpg", src).unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(a, b);
}

mod untrusted {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        /// Damaged images (bytes flipped, cut short) give a result or an
        /// error, never a panic, in every output format.
        #[test]
        fn damaged_images_never_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
            cut in any::<prop::sample::Index>(),
            png in any::<bool>(),
            format in 0usize..3,
        ) {
            let (ext, mut bytes) = if png {
                ("png", encode(&card(24, 17), ImageFormat::Png))
            } else {
                ("jpg", jpeg_with_exif(&card(24, 17).into_rgb8(), Some(6)))
            };
            for (at, v) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= v;
            }
            let keep = cut.index(bytes.len() + 1).max(1);
            bytes.truncate(keep);
            let format = [OutputFormat::Raw, OutputFormat::Keep, OutputFormat::Jpeg { quality: 50 }][format];
            // A flipped header may claim a large image: keep the test's memory small.
            let o = ImageOptions { max_pixels: 1 << 20, ..opts(Some(Resize::Shorter(8)), format) };
            if let Ok(t) = transform(&o, ext, bytes) {
                prop_assert!(t.out_width <= 24 && t.out_height <= 24);
            }
        }
    }
}
