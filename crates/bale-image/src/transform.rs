//! The transform: decode (header first, for the pixel limit), orient,
//! convert colours, resize (Lanczos3, SIMD), encode.

use std::cell::RefCell;
use std::io::Cursor;

use fast_image_resize::{FilterType, ResizeAlg, ResizeOptions, Resizer};
use image::metadata::Orientation;
use image::{ColorType, DynamicImage, ExtendedColorType, ImageDecoder, ImageFormat};

use crate::options::{ColorMode, DEFAULT_JPEG_QUALITY, ImageOptions, OutputFormat};
use crate::{ImageError, format_of};
use bale_format::npy;

/// The result of transforming one image member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transformed {
    /// The extension to store the member under (`jpg` -> `npy` for raw,
    /// `seg.png` -> `seg.npy`; unchanged for `keep`).
    pub ext: String,
    /// The bytes to store.
    pub data: Vec<u8>,
    /// Width of the original image, as displayed (after EXIF orientation).
    pub width: u32,
    /// Height of the original image, as displayed (after EXIF orientation).
    pub height: u32,
    /// Width of the stored image.
    pub out_width: u32,
    /// Height of the stored image.
    pub out_height: u32,
    /// Whether the original bytes were kept unchanged (`keep` and nothing to do).
    pub kept: bool,
    /// Whether the image's EXIF orientation turned or mirrored its pixels:
    /// the stored pixels then no longer line up with the source's.
    pub oriented: bool,
}

thread_local! {
    /// One resizer per thread: it keeps its scratch buffers between images.
    static RESIZER: RefCell<Resizer> = RefCell::new(Resizer::new());
}

fn decode_err(ext: &str, e: impl std::fmt::Display) -> ImageError {
    ImageError::Decode {
        ext: ext.to_owned(),
        message: e.to_string(),
    }
}

fn swaps_sides(o: Orientation) -> bool {
    matches!(
        o,
        Orientation::Rotate90
            | Orientation::Rotate270
            | Orientation::Rotate90FlipH
            | Orientation::Rotate270FlipH
    )
}

/// The member name a transformed image is stored under.
fn output_ext(ext: &str, source: ImageFormat, format: OutputFormat) -> String {
    let (head, last) = match ext.rsplit_once('.') {
        Some((h, l)) => (format!("{h}."), l),
        None => (String::new(), ext),
    };
    match format {
        OutputFormat::Keep => ext.to_owned(),
        OutputFormat::Jpeg { .. } if source == ImageFormat::Jpeg => ext.to_owned(),
        OutputFormat::Jpeg { .. } => format!("{head}jpg"),
        OutputFormat::Png if last.eq_ignore_ascii_case("png") => ext.to_owned(),
        OutputFormat::Png => format!("{head}png"),
        OutputFormat::Raw => format!("{head}npy"),
    }
}

/// Converts the decoded image to the layout the mode and the output format
/// hold. `jpeg_out` when the output is a JPEG (8-bit gray or RGB only).
fn convert(img: DynamicImage, mode: ColorMode, jpeg_out: bool, other_out: bool) -> DynamicImage {
    use DynamicImage as D;
    match mode {
        ColorMode::Rgb => match img {
            D::ImageRgb8(_) => img,
            other => D::ImageRgb8(other.into_rgb8()),
        },
        ColorMode::Keep => {
            let kept = match img {
                D::ImageLuma8(_)
                | D::ImageLumaA8(_)
                | D::ImageRgb8(_)
                | D::ImageRgba8(_)
                | D::ImageLuma16(_)
                | D::ImageLumaA16(_)
                | D::ImageRgb16(_)
                | D::ImageRgba16(_) => img,
                other if other.color().has_alpha() => D::ImageRgba8(other.into_rgba8()),
                other => D::ImageRgb8(other.into_rgb8()),
            };
            if jpeg_out {
                match kept {
                    D::ImageLuma8(_) | D::ImageRgb8(_) => kept,
                    D::ImageLumaA8(_) | D::ImageLuma16(_) | D::ImageLumaA16(_) => {
                        D::ImageLuma8(kept.into_luma8())
                    }
                    other => D::ImageRgb8(other.into_rgb8()),
                }
            } else if other_out {
                // BMP, GIF, TIFF, WebP as the image crate encodes them: 8 bits.
                match kept {
                    D::ImageLuma8(_) | D::ImageLumaA8(_) | D::ImageRgb8(_) | D::ImageRgba8(_) => {
                        kept
                    }
                    other if other.color().has_alpha() => D::ImageRgba8(other.into_rgba8()),
                    other => D::ImageRgb8(other.into_rgb8()),
                }
            } else {
                kept
            }
        }
    }
}

fn resize(img: &DynamicImage, width: u32, height: u32) -> Result<DynamicImage, ImageError> {
    let mut dst = DynamicImage::new(width, height, img.color());
    let options = ResizeOptions::new().resize_alg(ResizeAlg::Convolution(FilterType::Lanczos3));
    RESIZER
        .with(|r| r.borrow_mut().resize(img, &mut dst, &options))
        .map_err(|e| ImageError::Encode {
            format: "resized pixels".into(),
            width,
            height,
            message: e.to_string(),
        })?;
    Ok(dst)
}

fn encode_err(format: &str, img: &DynamicImage, e: impl std::fmt::Display) -> ImageError {
    ImageError::Encode {
        format: format.to_owned(),
        width: img.width(),
        height: img.height(),
        message: e.to_string(),
    }
}

/// Baseline JPEG, 4:2:0 chroma subsampling (Pillow's default), SIMD colour
/// conversion and DCT where the CPU has AVX2.
fn encode_jpeg(img: &DynamicImage, quality: u8) -> Result<Vec<u8>, ImageError> {
    let (w, h) = (img.width(), img.height());
    let (Ok(w16), Ok(h16)) = (u16::try_from(w), u16::try_from(h)) else {
        return Err(encode_err("jpeg", img, "JPEG holds at most 65535x65535"));
    };
    let (data, color) = match img {
        DynamicImage::ImageLuma8(b) => (b.as_raw(), jpeg_encoder::ColorType::Luma),
        DynamicImage::ImageRgb8(b) => (b.as_raw(), jpeg_encoder::ColorType::Rgb),
        _ => unreachable!("convert() leaves only 8-bit gray or RGB for JPEG output"),
    };
    let mut out = Vec::with_capacity(data.len() / 8 + 1024);
    let mut enc = jpeg_encoder::Encoder::new(&mut out, quality);
    enc.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    enc.encode(data, w16, h16, color)
        .map_err(|e| encode_err("jpeg", img, e))?;
    Ok(out)
}

fn encode_png(img: &DynamicImage) -> Result<Vec<u8>, ImageError> {
    use png::{BitDepth, ColorType as P};
    let (color, depth) = match img.color() {
        ColorType::L8 => (P::Grayscale, BitDepth::Eight),
        ColorType::La8 => (P::GrayscaleAlpha, BitDepth::Eight),
        ColorType::Rgb8 => (P::Rgb, BitDepth::Eight),
        ColorType::Rgba8 => (P::Rgba, BitDepth::Eight),
        ColorType::L16 => (P::Grayscale, BitDepth::Sixteen),
        ColorType::La16 => (P::GrayscaleAlpha, BitDepth::Sixteen),
        ColorType::Rgb16 => (P::Rgb, BitDepth::Sixteen),
        ColorType::Rgba16 => (P::Rgba, BitDepth::Sixteen),
        other => return Err(encode_err("png", img, format!("colour type {other:?}"))),
    };
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, img.width(), img.height());
    enc.set_color(color);
    enc.set_depth(depth);
    enc.set_compression(png::Compression::Balanced);
    let mut w = enc.write_header().map_err(|e| encode_err("png", img, e))?;
    let r = if depth == BitDepth::Sixteen {
        let be: Vec<u8> = sixteen(img).iter().flat_map(|v| v.to_be_bytes()).collect();
        w.write_image_data(&be)
    } else {
        w.write_image_data(img.as_bytes())
    };
    r.map_err(|e| encode_err("png", img, e))?;
    w.finish().map_err(|e| encode_err("png", img, e))?;
    Ok(out)
}

/// The samples of a 16-bit image.
fn sixteen(img: &DynamicImage) -> &[u16] {
    match img {
        DynamicImage::ImageLuma16(b) => b.as_raw(),
        DynamicImage::ImageLumaA16(b) => b.as_raw(),
        DynamicImage::ImageRgb16(b) => b.as_raw(),
        DynamicImage::ImageRgba16(b) => b.as_raw(),
        _ => &[],
    }
}

fn encode_raw(img: &DynamicImage) -> Vec<u8> {
    let c = img.color().channel_count();
    let shape = [img.height() as usize, img.width() as usize, usize::from(c)];
    if img.color().bytes_per_pixel() / c == 2 {
        let le: Vec<u8> = sixteen(img).iter().flat_map(|v| v.to_le_bytes()).collect();
        npy::encode("<u2", shape, &le)
    } else {
        npy::encode("|u1", shape, img.as_bytes())
    }
}

fn encode_other(img: &DynamicImage, format: ImageFormat) -> Result<Vec<u8>, ImageError> {
    let mut out = Cursor::new(Vec::new());
    let rgba;
    // The GIF encoder takes RGB(A) only.
    let img = if format == ImageFormat::Gif && !matches!(img, DynamicImage::ImageRgba8(_)) {
        rgba = DynamicImage::ImageRgba8(img.to_rgba8());
        &rgba
    } else {
        img
    };
    img.write_to(&mut out, format)
        .map_err(|e| encode_err(format.extensions_str()[0], img, e))?;
    Ok(out.into_inner())
}

/// Transforms one image member: `bytes` decoded as the format `ext` names.
///
/// Steps: the header is read and the pixel count checked against
/// `max_pixels` before any pixel is decoded; the image is decoded (the first
/// frame of a GIF), turned upright by its EXIF orientation, converted to the
/// colour layout of `mode`, resized with Lanczos3 if `resize` asks for it,
/// and encoded as `format`. With `keep`, an image whose pixels would not
/// change (no resize, upright, colours already as `mode` wants) keeps its
/// original bytes.
///
/// # Errors
/// [`ImageError::Unsupported`] when `ext` names no format bale decodes;
/// [`ImageError::TooLarge`] for an image over the pixel limit;
/// [`ImageError::Decode`] for corrupt, truncated or mislabelled bytes;
/// [`ImageError::Encode`] when the output cannot hold the image (a JPEG
/// side over 65535).
pub fn transform(
    opts: &ImageOptions,
    ext: &str,
    bytes: Vec<u8>,
) -> Result<Transformed, ImageError> {
    let source = format_of(ext).ok_or_else(|| ImageError::Unsupported {
        ext: ext.to_owned(),
    })?;
    crate::policy::check_format(ext, source, &bytes)?;
    let reader = crate::policy::reader(source, &bytes);
    let mut decoder = reader.into_decoder().map_err(|e| decode_err(ext, e))?;
    let (w, h) = decoder.dimensions();
    crate::policy::check_pixels(ext, w, h, opts.max_pixels)?;
    crate::policy::check_extent(ext, source, &bytes, opts.max_pixels)?;
    // A damaged EXIF block does not make the image unusable: it is upright.
    let orientation = decoder.orientation().unwrap_or(Orientation::NoTransforms);
    let (dw, dh) = if swaps_sides(orientation) {
        (h, w)
    } else {
        (w, h)
    };
    let target = opts.resize.and_then(|r| r.target(dw, dh, opts.upscale));
    let out_ext = output_ext(ext, source, opts.format);
    if opts.format == OutputFormat::Keep
        && target.is_none()
        && orientation == Orientation::NoTransforms
        && (opts.mode == ColorMode::Keep
            || (decoder.original_color_type() == ExtendedColorType::Rgb8
                && !(source == ImageFormat::Jpeg && crate::jpeg::components(&bytes) == Some(4))))
    {
        drop(decoder);
        return Ok(Transformed {
            ext: out_ext,
            data: bytes,
            width: dw,
            height: dh,
            out_width: dw,
            out_height: dh,
            kept: true,
            oriented: false,
        });
    }
    let mut img = DynamicImage::from_decoder(decoder).map_err(|e| decode_err(ext, e))?;
    img.apply_orientation(orientation);
    // The encoder that will write the result.
    let keep_as = match opts.format {
        OutputFormat::Keep => Some(source),
        _ => None,
    };
    let jpeg_out =
        matches!(opts.format, OutputFormat::Jpeg { .. }) || keep_as == Some(ImageFormat::Jpeg);
    let other_out = keep_as.is_some_and(|f| f != ImageFormat::Jpeg && f != ImageFormat::Png);
    let img = convert(img, opts.mode, jpeg_out, other_out);
    let img = match target {
        Some((tw, th)) => resize(&img, tw, th)?,
        None => img,
    };
    let data = match (opts.format, keep_as) {
        (OutputFormat::Jpeg { quality }, _) => encode_jpeg(&img, quality)?,
        (OutputFormat::Png, _) | (_, Some(ImageFormat::Png)) => encode_png(&img)?,
        (OutputFormat::Raw, _) => encode_raw(&img),
        (_, Some(ImageFormat::Jpeg)) => encode_jpeg(&img, DEFAULT_JPEG_QUALITY)?,
        (_, Some(other)) => encode_other(&img, other)?,
        (OutputFormat::Keep, None) => unreachable!("keep_as is set for keep"),
    };
    Ok(Transformed {
        ext: out_ext,
        data,
        width: dw,
        height: dh,
        out_width: img.width(),
        out_height: img.height(),
        kept: false,
        oriented: orientation != Orientation::NoTransforms,
    })
}
