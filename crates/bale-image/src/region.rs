//! Decoding only what a crop needs, then resizing it: the loader's per-sample
//! image work ([`RegionDecoder::crop_resize_into`]).
//!
//! A JPEG is decoded by the system libjpeg-turbo when the feature `libjpeg`
//! is on: only the crop's rows are transformed (rows above it are skipped
//! after their entropy decoding, rows below it are never read, columns are
//! cropped to the iMCU), and when the crop is at least twice the output in
//! both directions it is decoded at 1/2, 1/4 or 1/8 scale in the DCT domain.
//! Without the feature, and for PNG, WebP and the rest, the whole image is
//! decoded by the `image` crate. `.npy` members (uint8, H x W x 3 or 1) need
//! no decoding. The resize is a Pillow-style bilinear convolution
//! (`fast_image_resize`), antialiased when shrinking, as torchvision's
//! `resized_crop` on a PIL image.

use std::cell::RefCell;

use fast_image_resize::images::{Image, ImageRef};
use fast_image_resize::{FilterType, PixelType, ResizeAlg, ResizeOptions, Resizer};
use image::{ImageDecoder, ImageFormat};

use crate::policy::{check_format, check_pixels};
use crate::{ImageError, format_of};

/// A crop box in an image's pixels: left, top, width, height (fractions allowed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CropBox {
    /// Left edge.
    pub x: f64,
    /// Top edge.
    pub y: f64,
    /// Width.
    pub width: f64,
    /// Height.
    pub height: f64,
}

impl CropBox {
    /// The whole of a `width` x `height` image.
    pub fn whole(width: u32, height: u32) -> Self {
        CropBox {
            x: 0.0,
            y: 0.0,
            width: f64::from(width),
            height: f64::from(height),
        }
    }
}

/// How a sample's image was decoded, for statistics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The DCT scale the JPEG was decoded at, as eighths (8: full size; 4, 2, 1).
    pub scale_eighths: u8,
    /// Pixels decoded (the region's width times height, at that scale).
    pub pixels: u64,
}

/// Decodes and resizes image regions, keeping its scratch buffers between
/// calls: one per thread. An image over the pixel limit
/// ([`RegionDecoder::set_max_pixels`], default
/// [`DEFAULT_MAX_PIXELS`](crate::DEFAULT_MAX_PIXELS), Pillow's bomb limit) is
/// refused from its header, before anything is allocated for its pixels.
#[derive(Debug)]
pub struct RegionDecoder {
    /// Scratch for decoded pixels; its first `valid` bytes are the last decode.
    pixels: Vec<u8>,
    valid: usize,
    /// Scratch for an image in its own colour type, before it becomes RGB.
    native: Vec<u8>,
    resizer: Resizer,
    max_pixels: u64,
}

impl Default for RegionDecoder {
    fn default() -> Self {
        RegionDecoder {
            pixels: Vec::new(),
            valid: 0,
            native: Vec::new(),
            resizer: Resizer::default(),
            max_pixels: crate::DEFAULT_MAX_PIXELS,
        }
    }
}

/// Grows `v` to at least `n` bytes without aborting the process when the
/// memory is not there (an image near a raised pixel limit).
fn grow(ext: &str, v: &mut Vec<u8>, n: usize) -> Result<(), ImageError> {
    if v.len() < n {
        v.try_reserve(n - v.len()).map_err(|_| {
            decode_err(
                ext,
                format!("no memory for the {n} bytes of its decoded pixels"),
            )
        })?;
        v.resize(n, 0);
    }
    Ok(())
}

/// Turns `native` pixels of colour type `color` into RGB in `rgb`, as
/// Pillow's `Image.open(f).convert("RGB")` does: alpha dropped (not
/// composited); 16-bit grey (Pillow's `I;16`) clipped to 255; 16-bit grey
/// with alpha, RGB and RGBA (Pillow's `LA`, `RGB`, `RGBA`, read from the
/// `;16B` raw modes) their high byte; floats (0 to 1) scaled to 0-255.
fn pillow_rgb(
    ext: &str,
    color: image::ColorType,
    native: &[u8],
    pixels: usize,
    rgb: &mut Vec<u8>,
) -> Result<(), ImageError> {
    use image::ColorType as C;
    grow(ext, rgb, pixels * 3)?;
    let out = &mut rgb[..pixels * 3];
    let u16s = |b: &[u8]| u16::from_ne_bytes([b[0], b[1]]);
    let f32s = |b: &[u8]| {
        let v = f32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
        (v.clamp(0.0, 1.0) * 255.0).round() as u8
    };
    let mut each = |size: usize, f: &dyn Fn(&[u8]) -> [u8; 3]| {
        for (o, i) in out.chunks_exact_mut(3).zip(native.chunks_exact(size)) {
            o.copy_from_slice(&f(i));
        }
    };
    match color {
        C::Rgb8 => out.copy_from_slice(&native[..pixels * 3]),
        C::L8 => each(1, &|p| [p[0]; 3]),
        C::La8 => each(2, &|p| [p[0]; 3]),
        C::Rgba8 => each(4, &|p| [p[0], p[1], p[2]]),
        C::L16 => each(2, &|p| [u16s(p).min(255) as u8; 3]),
        C::La16 => each(4, &|p| [(u16s(p) >> 8) as u8; 3]),
        C::Rgb16 => each(6, &|p| {
            [
                (u16s(p) >> 8) as u8,
                (u16s(&p[2..]) >> 8) as u8,
                (u16s(&p[4..]) >> 8) as u8,
            ]
        }),
        C::Rgba16 => each(8, &|p| {
            [
                (u16s(p) >> 8) as u8,
                (u16s(&p[2..]) >> 8) as u8,
                (u16s(&p[4..]) >> 8) as u8,
            ]
        }),
        C::Rgb32F => each(12, &|p| [f32s(p), f32s(&p[4..]), f32s(&p[8..])]),
        C::Rgba32F => each(16, &|p| [f32s(p), f32s(&p[4..]), f32s(&p[8..])]),
        other => {
            return Err(decode_err(
                ext,
                format!("unsupported colour type {other:?}"),
            ));
        }
    }
    Ok(())
}

/// Width and height of the image `bytes` of format `ext` (`jpg`, `png`,
/// `npy`, ...), from its header.
///
/// # Errors
/// [`ImageError::Unsupported`] for an extension that names no image;
/// [`ImageError::Decode`] for a header that does not parse.
pub fn dimensions(ext: &str, bytes: &[u8]) -> Result<(u32, u32), ImageError> {
    if is_npy(ext) {
        let (h, w, _) = npy_hwc(ext, bytes)?;
        return Ok((w, h));
    }
    let format = image_format(ext)?;
    #[cfg(feature = "libjpeg")]
    if format == ImageFormat::Jpeg {
        return libjpeg::info(bytes)
            .map(|i| (i.width, i.height))
            .map_err(|m| policy_or(ext, format, bytes, m));
    }
    let decoder = crate::policy::reader(format, bytes)
        .into_decoder()
        .map_err(|e| policy_or(ext, format, bytes, e))?;
    Ok(decoder.dimensions())
}

/// The decoder policy's verdict on `bytes` when it refuses them, else
/// `e`: a header a decoder refuses is reported as every path reports it.
fn policy_or(
    ext: &str,
    format: ImageFormat,
    bytes: &[u8],
    e: impl std::fmt::Display,
) -> ImageError {
    check_format(ext, format, bytes)
        .err()
        .unwrap_or_else(|| decode_err(ext, e))
}

fn is_npy(ext: &str) -> bool {
    ext == "npy" || ext.ends_with(".npy")
}

fn image_format(ext: &str) -> Result<ImageFormat, ImageError> {
    format_of(ext).ok_or_else(|| ImageError::Unsupported {
        ext: ext.to_owned(),
    })
}

fn decode_err(ext: &str, e: impl std::fmt::Display) -> ImageError {
    ImageError::Decode {
        ext: ext.to_owned(),
        message: e.to_string(),
    }
}

/// Height, width and channels (1 or 3) of a uint8 `.npy` image: an array
/// of shape (H, W, 3), (H, W, 1) or (H, W) (grey, as (H, W, 1)).
fn npy_hwc(ext: &str, bytes: &[u8]) -> Result<(u32, u32, u8), ImageError> {
    let mut header = bale_format::npy::parse(bytes).map_err(|e| decode_err(ext, e))?;
    if let bale_format::npy::Header::Simple { shape, .. } = &mut header
        && shape.len() == 2
    {
        shape.push(1);
    }
    let ([h, w, c], _) = header
        .u8_hwc(bytes.len() as u64)
        .filter(|(s, _)| s[2] == 1 || s[2] == 3)
        .ok_or_else(|| {
            decode_err(
                ext,
                "not a uint8 array of shape (H, W, 3), (H, W, 1) or (H, W)",
            )
        })?;
    let fit = |v: usize| u32::try_from(v).map_err(|_| decode_err(ext, "array too large"));
    Ok((fit(h)?, fit(w)?, c as u8))
}

/// Pixels the bilinear resize of a span of `span` pixels to `out` reads past
/// each of its ends: its support (one pixel, times the reduction when
/// shrinking), and one more for rounding.
#[cfg_attr(not(feature = "libjpeg"), allow(dead_code))]
fn margin(span: f64, out: u32) -> f64 {
    (span / f64::from(out)).max(1.0) + 1.0
}

/// The largest DCT reduction (as eighths: 8, 4, 2 or 1) that keeps a crop of
/// `crop` source pixels at least `out` pixels in both directions.
pub fn dct_scale(crop: (f64, f64), out: (u32, u32)) -> u8 {
    let mut eighths = 8u8;
    while eighths > 1 {
        let next = eighths / 2;
        let s = f64::from(next) / 8.0;
        if crop.0 * s >= f64::from(out.0) && crop.1 * s >= f64::from(out.1) {
            eighths = next;
        } else {
            break;
        }
    }
    eighths
}

thread_local! {
    static DECODER: RefCell<RegionDecoder> = RefCell::new(RegionDecoder::default());
}

impl RegionDecoder {
    /// Sets the pixel limit: larger images are refused from their header
    /// ([`ImageError::TooLarge`]).
    pub fn set_max_pixels(&mut self, max: u64) {
        self.max_pixels = max;
    }

    /// Runs `f` with this thread's decoder.
    pub fn with<T>(f: impl FnOnce(&mut RegionDecoder) -> T) -> T {
        DECODER.with(|d| f(&mut d.borrow_mut()))
    }

    /// The pixels the last decode left in the buffer (RGB rows): the whole
    /// image after [`RegionDecoder::decode_rgb`].
    pub fn pixels(&self) -> &[u8] {
        &self.pixels[..self.valid]
    }

    /// Frees the pixel buffer when it holds more than `keep` bytes (what the
    /// last decode left goes with it): a thread that decoded one huge image
    /// does not keep its memory for the rest of its life.
    pub fn trim(&mut self, keep: usize) {
        if self.pixels.capacity() > keep {
            self.pixels = Vec::new();
            self.valid = 0;
        }
        if self.native.capacity() > keep {
            self.native = Vec::new();
        }
    }

    /// Bytes the pixel buffer holds on to.
    pub fn capacity(&self) -> usize {
        self.pixels.capacity()
    }

    /// Decodes the whole image `bytes` of format `ext` at full scale (RGB, 8
    /// bits, row after row) into this decoder's buffer and returns its width,
    /// height and pixels. A JPEG goes through libjpeg-turbo with the feature
    /// `libjpeg`, as the loader's crops do.
    ///
    /// # Errors
    /// As [`RegionDecoder::crop_resize_into`].
    pub fn decode_rgb(&mut self, ext: &str, bytes: &[u8]) -> Result<(u32, u32, &[u8]), ImageError> {
        let (w, h) = dimensions(ext, bytes)?;
        let (w, h, _, _) = self.decode(ext, bytes, CropBox::whole(w, h), (w, h), false)?;
        Ok((w, h, &self.pixels[..self.valid]))
    }

    /// Decodes the image `bytes` of format `ext`, crops `crop` (in the
    /// image's pixels) and resizes it to `out_width` x `out_height` RGB
    /// (8 bits, row after row) into `out`. With `dct_scaling`, a JPEG crop at
    /// least twice the output in both directions is decoded at a reduced
    /// scale (see the module docs).
    ///
    /// # Errors
    /// [`ImageError::Decode`] for damaged or truncated bytes (a truncated
    /// JPEG is refused, as Pillow refuses it); [`ImageError::Unsupported`].
    #[allow(clippy::too_many_arguments)]
    pub fn crop_resize_into(
        &mut self,
        ext: &str,
        bytes: &[u8],
        crop: CropBox,
        out_width: u32,
        out_height: u32,
        dct_scaling: bool,
        out: &mut [u8],
    ) -> Result<Decoded, ImageError> {
        let need = out_width as usize * out_height as usize * 3;
        if out.len() != need || out_width == 0 || out_height == 0 {
            return Err(ImageError::Option(format!(
                "an output of {out_width}x{out_height} RGB needs {need} bytes, the buffer has {}",
                out.len()
            )));
        }
        let (w, h, b, decoded) =
            self.decode(ext, bytes, crop, (out_width, out_height), dct_scaling)?;
        // Within the decoded pixels exactly (a box computed in floating
        // point may end a hair past them).
        let (x, y) = (b.x.clamp(0.0, f64::from(w)), b.y.clamp(0.0, f64::from(h)));
        let box_in_pixels = CropBox {
            x,
            y,
            width: b.width.min(f64::from(w) - x),
            height: b.height.min(f64::from(h) - y),
        };
        let src = ImageRef::new(w, h, &self.pixels[..self.valid], PixelType::U8x3)
            .map_err(|e| decode_err(ext, e))?;
        let mut dst = Image::from_slice_u8(out_width, out_height, out, PixelType::U8x3)
            .map_err(|e| decode_err(ext, e))?;
        let options = ResizeOptions::new()
            .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
            .crop(
                box_in_pixels.x,
                box_in_pixels.y,
                box_in_pixels.width,
                box_in_pixels.height,
            );
        self.resizer
            .resize(&src, &mut dst, &options)
            .map_err(|e| decode_err(ext, e))?;
        Ok(decoded)
    }

    /// Decodes what the crop needs into `self.pixels` (RGB): its width and
    /// height, the crop box in those pixels, and how it was decoded.
    fn decode(
        &mut self,
        ext: &str,
        bytes: &[u8],
        crop: CropBox,
        out: (u32, u32),
        dct_scaling: bool,
    ) -> Result<(u32, u32, CropBox, Decoded), ImageError> {
        #[cfg(not(feature = "libjpeg"))]
        let _ = (out, dct_scaling);
        if is_npy(ext) {
            let (h, w, c) = npy_hwc(ext, bytes)?;
            let data = &bytes[bytes.len() - (h as usize * w as usize * c as usize)..];
            check_pixels(ext, w, h, self.max_pixels)?;
            check_crop(ext, crop, w, h)?;
            let n = h as usize * w as usize * 3;
            grow(ext, &mut self.pixels, n)?;
            if c == 3 {
                self.pixels[..n].copy_from_slice(data);
            } else {
                for (o, &g) in self.pixels[..n].chunks_exact_mut(3).zip(data) {
                    o.fill(g);
                }
            }
            self.valid = n;
            let pixels = u64::from(w) * u64::from(h);
            return Ok((
                w,
                h,
                crop,
                Decoded {
                    scale_eighths: 8,
                    pixels,
                },
            ));
        }
        let format = image_format(ext)?;
        #[cfg(feature = "libjpeg")]
        if format == ImageFormat::Jpeg {
            check_format(ext, format, bytes)?;
            let info = libjpeg::info(bytes).map_err(|m| decode_err(ext, m))?;
            check_pixels(ext, info.width, info.height, self.max_pixels)?;
            check_crop(ext, crop, info.width, info.height)?;
            let eighths = if dct_scaling {
                dct_scale((crop.width, crop.height), out)
            } else {
                8
            };
            // The scaled image is ceil(W * s) x ceil(H * s) (libjpeg's rule).
            let s = f64::from(eighths) / 8.0;
            let sw = (u64::from(info.width) * u64::from(eighths)).div_ceil(8) as u32;
            let sh = (u64::from(info.height) * u64::from(eighths)).div_ceil(8) as u32;
            // The resize filter reaches past the crop's edges (one pixel,
            // times the reduction when shrinking): those pixels are decoded
            // too, so that the crop resizes as the whole image would.
            let (mx, my) = (
                margin(crop.width * s, out.0),
                margin(crop.height * s, out.1),
            );
            let x0 = ((crop.x * s - mx).floor().max(0.0) as u32).min(sw - 1);
            let y0 = ((crop.y * s - my).floor().max(0.0) as u32).min(sh - 1);
            let x1 = (((crop.x + crop.width) * s + mx).ceil() as u32).clamp(x0 + 1, sw);
            let y1 = (((crop.y + crop.height) * s + my).ceil() as u32).clamp(y0 + 1, sh);
            let (rw, rh) = (x1 - x0, y1 - y0);
            let cap = (rw + 2 * libjpeg::SLACK).min(sw) as usize * rh as usize * 3;
            grow(ext, &mut self.pixels, cap)?;
            match libjpeg::decode_region(bytes, eighths, x0, y0, rw, rh, &mut self.pixels) {
                Ok((dx, dw)) => {
                    // The decoded columns start at `dx <= x0`, `dw` wide
                    // (libjpeg's crop starts on an iMCU boundary).
                    let (rw, x0) = (dw, dx);
                    self.valid = rw as usize * rh as usize * 3;
                    let x = (crop.x * s - f64::from(x0)).max(0.0);
                    let y = (crop.y * s - f64::from(y0)).max(0.0);
                    let in_region = CropBox {
                        x,
                        y,
                        width: (crop.width * s).min(f64::from(rw) - x),
                        height: (crop.height * s).min(f64::from(rh) - y),
                    };
                    let pixels = u64::from(rw) * u64::from(rh);
                    return Ok((
                        rw,
                        rh,
                        in_region,
                        Decoded {
                            scale_eighths: eighths,
                            pixels,
                        },
                    ));
                }
                Err(libjpeg::Failure::Unsupported) => {}
                Err(libjpeg::Failure::Error(m)) => return Err(decode_err(ext, m)),
            }
        }
        check_format(ext, format, bytes)?;
        let decoder = crate::policy::reader(format, bytes)
            .into_decoder()
            .map_err(|e| decode_err(ext, e))?;
        let (w, h) = decoder.dimensions();
        check_pixels(ext, w, h, self.max_pixels)?;
        crate::policy::check_extent(ext, format, bytes, self.max_pixels)?;
        check_crop(ext, crop, w, h)?;
        // Into buffers of this decoder's, grown without aborting, then to
        // RGB by Pillow's rules.
        let color = decoder.color_type();
        let total = usize::try_from(decoder.total_bytes())
            .map_err(|_| decode_err(ext, "image too large"))?;
        let mut native = std::mem::take(&mut self.native);
        let read = grow(ext, &mut native, total).and_then(|()| {
            decoder
                .read_image(&mut native[..total])
                .map_err(|e| decode_err(ext, e))
        });
        let pixels = w as usize * h as usize;
        let converted = read.and_then(|()| {
            if color == image::ColorType::Rgb8 {
                // Already RGB: the buffers trade places, no copy.
                std::mem::swap(&mut self.pixels, &mut native);
                Ok(())
            } else {
                pillow_rgb(ext, color, &native[..total], pixels, &mut self.pixels)
            }
        });
        self.native = native;
        converted?;
        self.valid = pixels * 3;
        let pixels = u64::from(w) * u64::from(h);
        Ok((
            w,
            h,
            crop,
            Decoded {
                scale_eighths: 8,
                pixels,
            },
        ))
    }
}

fn check_crop(ext: &str, c: CropBox, w: u32, h: u32) -> Result<(), ImageError> {
    let ok = c.x >= 0.0
        && c.y >= 0.0
        && c.width > 0.0
        && c.height > 0.0
        && c.x + c.width <= f64::from(w) + 1e-6
        && c.y + c.height <= f64::from(h) + 1e-6;
    if ok {
        Ok(())
    } else {
        Err(decode_err(
            ext,
            format!("crop {c:?} does not lie inside the {w}x{h} image"),
        ))
    }
}

#[cfg(feature = "libjpeg")]
mod libjpeg {
    //! The calls into `csrc/jpeg_region.c`.

    use std::ffi::{c_char, c_int};

    #[repr(C)]
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Info {
        pub width: u32,
        pub height: u32,
        pub components: i32,
        pub color_space: i32,
    }

    unsafe extern "C" {
        fn bale_jpeg_info_of(
            data: *const u8,
            len: usize,
            info: *mut Info,
            msg: *mut c_char,
            msg_len: usize,
        ) -> c_int;
        #[allow(clippy::too_many_arguments)]
        fn bale_jpeg_decode_region(
            data: *const u8,
            len: usize,
            scale_num: c_int,
            x: u32,
            y: u32,
            w: u32,
            h: u32,
            out: *mut u8,
            out_cap: usize,
            out_x: *mut u32,
            out_w: *mut u32,
            msg: *mut c_char,
            msg_len: usize,
        ) -> c_int;
    }

    /// Columns libjpeg may decode beyond a region on each side (its crop
    /// starts on an iMCU boundary: at most 4 x 8 pixels wide).
    pub const SLACK: u32 = 32;

    pub enum Failure {
        Unsupported,
        Error(String),
    }

    fn message(buf: &[u8]) -> String {
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        String::from_utf8_lossy(&buf[..end]).into_owned()
    }

    pub fn info(bytes: &[u8]) -> Result<Info, String> {
        let mut info = Info::default();
        let mut msg = [0u8; 200];
        // SAFETY: the pointers and lengths describe live buffers for the
        // call's duration; the C side catches every libjpeg error.
        let r = unsafe {
            bale_jpeg_info_of(
                bytes.as_ptr(),
                bytes.len(),
                &mut info,
                msg.as_mut_ptr().cast(),
                msg.len(),
            )
        };
        if r == 0 { Ok(info) } else { Err(message(&msg)) }
    }

    /// Decodes rows `y..y + h`, columns `x..x + w` and up to [`SLACK`] more
    /// on each side into `out`; returns the first column and the width
    /// decoded (the row stride is that width).
    pub fn decode_region(
        bytes: &[u8],
        eighths: u8,
        x: u32,
        y: u32,
        w: u32,
        h: u32,
        out: &mut [u8],
    ) -> Result<(u32, u32), Failure> {
        let mut msg = [0u8; 200];
        let (mut out_x, mut out_w) = (0u32, 0u32);
        // SAFETY: as in `info`; the C side checks the region against the
        // image and `out.len()` before writing.
        let r = unsafe {
            bale_jpeg_decode_region(
                bytes.as_ptr(),
                bytes.len(),
                c_int::from(eighths),
                x,
                y,
                w,
                h,
                out.as_mut_ptr(),
                out.len(),
                &mut out_x,
                &mut out_w,
                msg.as_mut_ptr().cast(),
                msg.len(),
            )
        };
        match r {
            0 => Ok((out_x, out_w)),
            2 => Err(Failure::Unsupported),
            _ => Err(Failure::Error(message(&msg))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn dct_scale_keeps_the_crop_at_least_the_output() {
        assert_eq!(dct_scale((500.0, 375.0), (224, 224)), 8);
        assert_eq!(dct_scale((448.0, 448.0), (224, 224)), 4);
        assert_eq!(dct_scale((447.0, 900.0), (224, 224)), 8);
        assert_eq!(dct_scale((1800.0, 1800.0), (224, 224)), 1);
        assert_eq!(dct_scale((900.0, 900.0), (224, 224)), 2);
    }

    fn photo_jpeg(w: u32, h: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(w, h, |x, y| {
            let n = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)) % 23;
            image::Rgb([
                (x * 255 / w) as u8 ^ n as u8,
                (y * 255 / h) as u8,
                ((x + y) % 256) as u8,
            ])
        });
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Jpeg).unwrap();
        out.into_inner()
    }

    fn psnr(a: &[u8], b: &[u8]) -> f64 {
        let mse: f64 = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| (f64::from(x) - f64::from(y)).powi(2))
            .sum::<f64>()
            / a.len() as f64;
        10.0 * (255.0f64.powi(2) / mse.max(1e-12)).log10()
    }

    #[test]
    fn trim_frees_only_a_buffer_over_the_bound() {
        let jpg = photo_jpeg(200, 100);
        let mut d = RegionDecoder::default();
        d.decode_rgb("jpg", &jpg).unwrap();
        assert!(d.capacity() >= 200 * 100 * 3);
        d.trim(200 * 100 * 3 * 2);
        assert_eq!(d.pixels().len(), 200 * 100 * 3, "under the bound: kept");
        d.trim(1000);
        assert_eq!((d.capacity(), d.pixels().len()), (0, 0));
        // The next decode grows it again.
        assert_eq!(d.decode_rgb("jpg", &jpg).unwrap().2.len(), 200 * 100 * 3);
    }

    #[test]
    fn a_region_matches_the_same_region_of_the_whole_image() {
        let jpg = photo_jpeg(320, 240);
        assert_eq!(dimensions("jpg", &jpg).unwrap(), (320, 240));
        let mut d = RegionDecoder::default();
        let mut whole = vec![0u8; 320 * 240 * 3];
        d.crop_resize_into(
            "jpg",
            &jpg,
            CropBox::whole(320, 240),
            320,
            240,
            false,
            &mut whole,
        )
        .unwrap();
        let reference = image::load_from_memory(&jpg).unwrap().into_rgb8();
        assert!(psnr(&whole, reference.as_raw()) > 35.0);
        // A crop decoded on its own equals that crop of the whole image.
        let (x, y, w, h) = (37u32, 51u32, 150u32, 101u32);
        let mut part = vec![0u8; (w * h * 3) as usize];
        let c = CropBox {
            x: f64::from(x),
            y: f64::from(y),
            width: f64::from(w),
            height: f64::from(h),
        };
        d.crop_resize_into("jpg", &jpg, c, w, h, false, &mut part)
            .unwrap();
        let mut expected = Vec::new();
        for r in y..y + h {
            let at = ((r * 320 + x) * 3) as usize;
            expected.extend_from_slice(&whole[at..at + (w * 3) as usize]);
        }
        assert_eq!(part, expected);
        // Truncated: refused.
        let err = d
            .crop_resize_into("jpg", &jpg[..jpg.len() / 2], c, w, h, false, &mut part)
            .unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
    }

    #[test]
    fn a_crop_resizes_as_the_same_box_of_the_whole_image() {
        // The filter reads past the box's edges: a region decoded without
        // those pixels would differ from the whole image's resize there.
        let jpg = photo_jpeg(320, 240);
        let mut d = RegionDecoder::default();
        let (w, h, whole) = d.decode_rgb("jpg", &jpg).unwrap();
        let whole = whole.to_vec();
        for (c, out) in [
            ((37.3, 51.7, 150.4, 101.2), (75, 50)),
            ((0.0, 0.0, 320.0, 240.0), (100, 90)),
            ((200.5, 10.25, 30.0, 20.0), (90, 61)),
        ] {
            let c = CropBox {
                x: c.0,
                y: c.1,
                width: c.2,
                height: c.3,
            };
            let mut want = vec![0u8; out.0 as usize * out.1 as usize * 3];
            let src = ImageRef::new(w, h, &whole, PixelType::U8x3).unwrap();
            let mut dst = Image::from_slice_u8(out.0, out.1, &mut want, PixelType::U8x3).unwrap();
            let options = ResizeOptions::new()
                .resize_alg(ResizeAlg::Convolution(FilterType::Bilinear))
                .crop(c.x, c.y, c.width, c.height);
            Resizer::default().resize(&src, &mut dst, &options).unwrap();
            let mut got = vec![0u8; want.len()];
            d.crop_resize_into("jpg", &jpg, c, out.0, out.1, false, &mut got)
                .unwrap();
            assert_eq!(got, want, "{c:?} to {out:?}");
        }
    }

    /// A 16-bit PNG of one row holding `values` in every channel.
    fn png16(color: png::ColorType, values: &[u16]) -> Vec<u8> {
        let channels = color.samples();
        let data: Vec<u8> = values
            .iter()
            .flat_map(|v| std::iter::repeat_n(v.to_be_bytes(), channels).flatten())
            .collect();
        let mut out = Vec::new();
        let mut e = png::Encoder::new(&mut out, values.len() as u32, 1);
        e.set_color(color);
        e.set_depth(png::BitDepth::Sixteen);
        e.write_header().unwrap().write_image_data(&data).unwrap();
        out
    }

    #[test]
    fn sixteen_bit_pngs_become_rgb_as_pillow_makes_them() {
        // Pillow 13's Image.open(f).convert("RGB"): grey (I;16) is clipped,
        // the other colour types keep their high byte.
        let values = [0u16, 255, 256, 13650, 0x80ff, 0xff00, 0xffff];
        let clipped = [0u8, 255, 255, 255, 255, 255, 255];
        let high = [0u8, 0, 1, 53, 128, 255, 255];
        let mut d = RegionDecoder::default();
        for (color, want) in [
            (png::ColorType::Grayscale, clipped),
            (png::ColorType::GrayscaleAlpha, high),
            (png::ColorType::Rgb, high),
            (png::ColorType::Rgba, high),
        ] {
            let (w, h, px) = d.decode_rgb("png", &png16(color, &values)).unwrap();
            assert_eq!((w, h), (values.len() as u32, 1));
            let got: Vec<u8> = px.chunks_exact(3).map(|p| p[0]).collect();
            assert_eq!(got, want, "{color:?}");
            assert!(px.chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]));
        }
    }

    /// The DCT-domain scaling is libjpeg-turbo's (the `image` crate decodes
    /// at full scale); CI tests with `--all-features`.
    #[cfg(feature = "libjpeg")]
    #[test]
    fn a_large_crop_is_decoded_at_a_reduced_scale() {
        let jpg = photo_jpeg(960, 720);
        let mut d = RegionDecoder::default();
        let mut small = vec![0u8; 224 * 224 * 3];
        let c = CropBox::whole(960, 720);
        let scaled = d
            .crop_resize_into("jpg", &jpg, c, 224, 224, true, &mut small)
            .unwrap();
        assert_eq!(scaled.scale_eighths, 4);
        let mut full = vec![0u8; 224 * 224 * 3];
        let exact = d
            .crop_resize_into("jpg", &jpg, c, 224, 224, false, &mut full)
            .unwrap();
        assert_eq!(exact.scale_eighths, 8);
        assert_eq!(scaled.pixels * 4, exact.pixels);
        assert!(psnr(&small, &full) > 30.0, "{}", psnr(&small, &full));
    }
}
