//! Masks: one-channel label maps, read row by row with the values
//! torchvision gets through PIL (`tv_tensors.Mask(Image.open(f))`), so that
//! the loader can map each output pixel to its source pixel without
//! decoding (or keeping) more rows than the crop needs
//! ([`MaskDecoder::rows`]).
//!
//! - PNG, grey: 8 bits as stored; 16 bits as stored (PIL's `I;16`); 1, 2 and
//!   4 bits scaled to 0-255 as PIL's `L` (and `1`, through `pil_to_tensor`)
//!   scales them. Palette: the indices (PIL's `P`), whatever the colours.
//!   Any other colour type (grey with alpha, RGB) is refused: it is no
//!   one-channel mask. A transparency chunk is ignored, as PIL's `L` and
//!   `P` ignore it.
//! - `.npy`: a C-order `uint8` or `uint16` array of shape `(H, W)` or
//!   `(H, W, 1)`.

use std::io::Cursor;

use crate::ImageError;

/// One row of a mask's values.
#[derive(Debug, Clone, Copy)]
pub enum MaskRow<'a> {
    /// 8-bit values.
    U8(&'a [u8]),
    /// 16-bit values.
    U16(&'a [u16]),
}

/// What a mask's header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaskInfo {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Whether the values are 16-bit.
    pub sixteen_bit: bool,
}

fn err(ext: &str, message: impl std::fmt::Display) -> ImageError {
    ImageError::Decode {
        ext: ext.to_owned(),
        message: message.to_string(),
    }
}

fn is_npy(ext: &str) -> bool {
    ext.rsplit('.')
        .next()
        .is_some_and(|e| e.eq_ignore_ascii_case("npy"))
}

/// The `.npy` mask's header: shape, 16-bit or not, data offset.
fn npy_header(ext: &str, bytes: &[u8]) -> Result<(MaskInfo, usize), ImageError> {
    let header = bale_format::npy::parse(bytes).map_err(|e| err(ext, e))?;
    let Some(a) = header.into_array() else {
        return Err(err(
            ext,
            "a mask is a uint8 or uint16 array, not a structured one",
        ));
    };
    let sixteen_bit = match a.descr.as_str() {
        "|u1" | "u1" | "<u1" | ">u1" | "=u1" => false,
        "<u2" => true,
        other => {
            return Err(err(
                ext,
                format!("a mask is a uint8 or little-endian uint16 array, not {other}"),
            ));
        }
    };
    if a.fortran_order {
        return Err(err(ext, "a mask array must be in C order"));
    }
    let (h, w) = match a.shape[..] {
        [h, w] | [h, w, 1] => (h, w),
        _ => {
            return Err(err(
                ext,
                format!("a mask is of shape (H, W) or (H, W, 1), not {:?}", a.shape),
            ));
        }
    };
    let size = if sixteen_bit { 2 } else { 1 };
    let fit = |v: u64| u32::try_from(v).map_err(|_| err(ext, "mask too large"));
    let info = MaskInfo {
        width: fit(w)?,
        height: fit(h)?,
        sixteen_bit,
    };
    let need = h
        .checked_mul(w)
        .and_then(|n| n.checked_mul(size))
        .and_then(|n| n.checked_add(a.data_offset as u64));
    if need != Some(bytes.len() as u64) {
        return Err(err(
            ext,
            format!(
                "the array's {h}x{w} values do not fill the member's {} bytes",
                bytes.len()
            ),
        ));
    }
    Ok((info, a.data_offset))
}

/// The width, height and depth of the mask `bytes` of format `ext` (`png`,
/// `mask.png`, `seg.npy`), from its header.
///
/// # Errors
/// [`ImageError::Decode`] for a header that does not parse or a mask that is
/// not one channel; [`ImageError::Unsupported`] for another format.
pub fn mask_info(ext: &str, bytes: &[u8]) -> Result<MaskInfo, ImageError> {
    if is_npy(ext) {
        return npy_header(ext, bytes).map(|(i, _)| i);
    }
    let mut decoder = png_decoder(ext, bytes)?;
    let info = decoder.read_header_info().map_err(|e| err(ext, e))?;
    one_channel(ext, info)
}

fn png_decoder<'a>(
    ext: &str,
    bytes: &'a [u8],
) -> Result<png::Decoder<Cursor<&'a [u8]>>, ImageError> {
    let last = ext.rsplit('.').next().unwrap_or(ext);
    if !last.eq_ignore_ascii_case("png") {
        return Err(ImageError::Unsupported {
            ext: ext.to_owned(),
        });
    }
    let mut d = png::Decoder::new(Cursor::new(bytes));
    d.set_transformations(png::Transformations::IDENTITY);
    d.set_ignore_text_chunk(true);
    d.set_ignore_iccp_chunk(true);
    Ok(d)
}

fn one_channel(ext: &str, info: &png::Info<'_>) -> Result<MaskInfo, ImageError> {
    match info.color_type {
        png::ColorType::Grayscale | png::ColorType::Indexed => {}
        other => {
            return Err(err(
                ext,
                format!("a mask is one channel (grey or palette), this PNG is {other:?}"),
            ));
        }
    }
    Ok(MaskInfo {
        width: info.width,
        height: info.height,
        sixteen_bit: info.bit_depth == png::BitDepth::Sixteen,
    })
}

/// Buffers kept between masks: one per thread.
#[derive(Debug, Default)]
pub struct MaskDecoder {
    raw: Vec<u8>,
    row8: Vec<u8>,
    row16: Vec<u16>,
    frame: Vec<u8>,
}

/// Grows `v` to `n` elements without aborting on a failed allocation.
fn grow<T: Clone + Default>(ext: &str, v: &mut Vec<T>, n: usize) -> Result<(), ImageError> {
    if v.len() < n {
        v.try_reserve(n - v.len())
            .map_err(|_| err(ext, format!("no memory for {n} mask values")))?;
        v.resize(n, T::default());
    }
    Ok(())
}

impl MaskDecoder {
    /// Decodes the first `rows` rows of the mask `bytes` of format `ext`,
    /// calling `row(y, values)` for each in order; rows below them are not
    /// decoded (a PNG's data past them is not even inflated). A mask over
    /// `max_pixels` is refused from its header.
    ///
    /// # Errors
    /// [`ImageError::Decode`] for damaged bytes, a mask that is not one
    /// channel, or over the pixel limit ([`ImageError::TooLarge`]); what
    /// `row` returns.
    pub fn rows(
        &mut self,
        ext: &str,
        bytes: &[u8],
        max_pixels: u64,
        rows: u32,
        mut row: impl FnMut(u32, MaskRow<'_>) -> Result<(), ImageError>,
    ) -> Result<MaskInfo, ImageError> {
        if is_npy(ext) {
            let (info, at) = npy_header(ext, bytes)?;
            check_pixels(ext, info, max_pixels)?;
            let w = info.width as usize;
            let data = &bytes[at..];
            for y in 0..rows.min(info.height) {
                let y_ = y as usize;
                if info.sixteen_bit {
                    grow(ext, &mut self.row16, w)?;
                    let src = &data[y_ * w * 2..(y_ + 1) * w * 2];
                    for (v, b) in self.row16[..w].iter_mut().zip(src.chunks_exact(2)) {
                        *v = u16::from_le_bytes([b[0], b[1]]);
                    }
                    row(y, MaskRow::U16(&self.row16[..w]))?;
                } else {
                    row(y, MaskRow::U8(&data[y_ * w..(y_ + 1) * w]))?;
                }
            }
            return Ok(info);
        }
        let decoder = png_decoder(ext, bytes)?;
        let mut reader = decoder.read_info().map_err(|e| err(ext, e))?;
        let info = one_channel(ext, reader.info())?;
        check_pixels(ext, info, max_pixels)?;
        let depth = reader.info().bit_depth as u8;
        let grey = reader.info().color_type == png::ColorType::Grayscale;
        let line = reader
            .output_line_size(info.width)
            .ok_or_else(|| err(ext, "mask too large"))?;
        let rows = rows.min(info.height);
        let w = info.width as usize;
        if reader.info().interlaced {
            // Adam7 spreads every row over the whole stream: decode it all.
            let total = reader
                .output_buffer_size()
                .ok_or_else(|| err(ext, "mask too large"))?;
            let mut frame = std::mem::take(&mut self.frame);
            grow(ext, &mut frame, total)?;
            let r = reader
                .next_frame(&mut frame[..total])
                .map_err(|e| err(ext, e));
            let out = r.and_then(|_| {
                for y in 0..rows {
                    let raw = &frame[y as usize * line..(y as usize + 1) * line];
                    self.emit(y, raw, w, depth, grey, &mut row)?;
                }
                Ok(())
            });
            self.frame = frame;
            out?;
            return Ok(info);
        }
        let mut raw = std::mem::take(&mut self.raw);
        grow(ext, &mut raw, line)?;
        let mut out = Ok(());
        for y in 0..rows {
            match reader.read_row(&mut raw[..line]) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    out = Err(err(ext, "the mask ends before its last row"));
                    break;
                }
                Err(e) => {
                    out = Err(err(ext, e));
                    break;
                }
            }
            if let Err(e) = self.emit(y, &raw[..line], w, depth, grey, &mut row) {
                out = Err(e);
                break;
            }
        }
        self.raw = raw;
        out.map(|()| info)
    }

    /// Unpacks one raw PNG row and hands it to `row`.
    fn emit(
        &mut self,
        y: u32,
        raw: &[u8],
        w: usize,
        depth: u8,
        grey: bool,
        row: &mut impl FnMut(u32, MaskRow<'_>) -> Result<(), ImageError>,
    ) -> Result<(), ImageError> {
        match depth {
            8 => row(y, MaskRow::U8(&raw[..w])),
            16 => {
                grow("png", &mut self.row16, w)?;
                for (v, b) in self.row16[..w].iter_mut().zip(raw.chunks_exact(2)) {
                    *v = u16::from_be_bytes([b[0], b[1]]);
                }
                row(y, MaskRow::U16(&self.row16[..w]))
            }
            d => {
                grow("png", &mut self.row8, w)?;
                let per = 8 / usize::from(d);
                let mask = (1u8 << d) - 1;
                // Grey below 8 bits is scaled to 0-255 (1 bit: x255, 2: x85, 4: x17).
                let scale = if grey { 255 / mask } else { 1 };
                for (x, v) in self.row8[..w].iter_mut().enumerate() {
                    let byte = raw[x / per];
                    let shift = 8 - usize::from(d) * (x % per + 1);
                    *v = ((byte >> shift) & mask) * scale;
                }
                row(y, MaskRow::U8(&self.row8[..w]))
            }
        }
    }
}

/// torch's `interpolate(mode="nearest")` source index of output index `o`
/// for a resize of `n_in` to `n_out` pixels: `min(floor(o * (n_in /
/// n_out)), n_in - 1)` with the scale and the product in `float32`, and its
/// two special cases (the same size, and twice it). This is the rule of
/// torchvision v2's `Resize` of a `Mask` and of `bale.Loader`.
pub fn nearest(o: u32, n_in: u32, n_out: u32) -> u32 {
    if n_in == n_out {
        o
    } else if u64::from(n_out) == 2 * u64::from(n_in) {
        o >> 1
    } else {
        let scale = n_in as f32 / n_out as f32;
        ((o as f32 * scale).floor() as u32).min(n_in - 1)
    }
}

/// The mask `bytes` of format `ext` resized to `width` x `height`, each
/// output pixel the value of its source pixel by [`nearest`]: it holds no
/// value the source does not. The result is of the source's format: a
/// `.npy` keeps its dtype and its shape's rank; a palette PNG becomes an
/// 8-bit palette PNG with the same palette (and transparency chunk); a
/// grey PNG an 8- or 16-bit grey PNG of the values [`MaskDecoder::rows`]
/// reads (grey below 8 bits is stored scaled, as it reads).
///
/// # Errors
/// Those of [`MaskDecoder::rows`], and [`ImageError::Encode`] for a zero
/// size.
pub fn resize_nearest(
    ext: &str,
    bytes: &[u8],
    max_pixels: u64,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ImageError> {
    let encode_err = |message: &str| ImageError::Encode {
        format: "mask".into(),
        width,
        height,
        message: message.to_owned(),
    };
    if width == 0 || height == 0 {
        return Err(encode_err("a mask has at least one pixel"));
    }
    let info = mask_info(ext, bytes)?;
    check_pixels(ext, info, max_pixels)?;
    let (ow, oh) = (width as usize, height as usize);
    let xs: Vec<usize> = (0..width)
        .map(|o| nearest(o, info.width, width) as usize)
        .collect();
    let mut out8: Vec<u8> = Vec::new();
    let mut out16: Vec<u16> = Vec::new();
    if info.sixteen_bit {
        grow(ext, &mut out16, ow * oh)?;
    } else {
        grow(ext, &mut out8, ow * oh)?;
    }
    let last = nearest(height - 1, info.height, height);
    let mut next = 0usize;
    MaskDecoder::default().rows(ext, bytes, max_pixels, last + 1, |y, row| {
        while next < oh && nearest(next as u32, info.height, height) == y {
            let at = next * ow;
            match row {
                MaskRow::U8(v) => {
                    for (d, &x) in out8[at..at + ow].iter_mut().zip(&xs) {
                        *d = v[x];
                    }
                }
                MaskRow::U16(v) => {
                    for (d, &x) in out16[at..at + ow].iter_mut().zip(&xs) {
                        *d = v[x];
                    }
                }
            }
            next += 1;
        }
        Ok(())
    })?;
    if next < oh {
        return Err(err(ext, "the mask ends before its last row"));
    }
    if is_npy(ext) {
        let Ok(bale_format::npy::Header::Simple { descr, shape, .. }) =
            bale_format::npy::parse(bytes)
        else {
            unreachable!("mask_info parsed the header")
        };
        let mut dims = vec![u64::from(height), u64::from(width)];
        dims.extend(shape.get(2).copied());
        let data: Vec<u8> = if info.sixteen_bit {
            out16.iter().flat_map(|v| v.to_le_bytes()).collect()
        } else {
            out8
        };
        return Ok(bale_format::npy::encode_shape(&descr, &dims, &data));
    }
    let reader = png_decoder(ext, bytes)?
        .read_info()
        .map_err(|e| err(ext, e))?;
    let src = reader.info();
    let mut png_out = Vec::new();
    let mut enc = png::Encoder::new(&mut png_out, width, height);
    let data: Vec<u8> = if info.sixteen_bit {
        enc.set_color(png::ColorType::Grayscale);
        enc.set_depth(png::BitDepth::Sixteen);
        out16.iter().flat_map(|v| v.to_be_bytes()).collect()
    } else {
        if src.color_type == png::ColorType::Indexed {
            enc.set_color(png::ColorType::Indexed);
            if let Some(p) = &src.palette {
                enc.set_palette(p.to_vec());
            }
            if let Some(t) = &src.trns {
                enc.set_trns(t.to_vec());
            }
        } else {
            enc.set_color(png::ColorType::Grayscale);
        }
        enc.set_depth(png::BitDepth::Eight);
        out8
    };
    enc.set_compression(png::Compression::Balanced);
    let mut w = enc.write_header().map_err(|e| encode_err(&e.to_string()))?;
    w.write_image_data(&data)
        .map_err(|e| encode_err(&e.to_string()))?;
    w.finish().map_err(|e| encode_err(&e.to_string()))?;
    Ok(png_out)
}

fn check_pixels(ext: &str, info: MaskInfo, max: u64) -> Result<(), ImageError> {
    let pixels = u64::from(info.width) * u64::from(info.height);
    if pixels > max {
        return Err(ImageError::TooLarge {
            ext: ext.to_owned(),
            width: info.width,
            height: info.height,
            pixels,
            max,
        });
    }
    if pixels == 0 {
        return Err(err(ext, "the mask has no pixels"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png_of(w: u32, h: u32, color: png::ColorType, depth: png::BitDepth, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        {
            let mut e = png::Encoder::new(&mut out, w, h);
            e.set_color(color);
            e.set_depth(depth);
            if color == png::ColorType::Indexed {
                e.set_palette(vec![9u8; 3 * 16]);
            }
            let mut wr = e.write_header().unwrap();
            wr.write_image_data(data).unwrap();
        }
        out
    }

    fn all_rows(ext: &str, bytes: &[u8], rows: u32) -> (MaskInfo, Vec<Vec<u16>>) {
        let mut got = Vec::new();
        let info = MaskDecoder::default()
            .rows(ext, bytes, u64::MAX, rows, |y, r| {
                assert_eq!(y as usize, got.len());
                got.push(match r {
                    MaskRow::U8(v) => v.iter().map(|&x| u16::from(x)).collect(),
                    MaskRow::U16(v) => v.to_vec(),
                });
                Ok(())
            })
            .unwrap();
        (info, got)
    }

    #[test]
    fn values_are_those_pil_gives() {
        // 2-bit grey: 0, 1, 2, 3 scaled to 0, 85, 170, 255.
        let p = png_of(
            4,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Two,
            &[0b0001_1011],
        );
        assert_eq!(all_rows("png", &p, 9).1, vec![vec![0, 85, 170, 255]]);
        // 4-bit palette: the indices.
        let p = png_of(
            3,
            1,
            png::ColorType::Indexed,
            png::BitDepth::Four,
            &[0x3f, 0x70],
        );
        assert_eq!(all_rows("png", &p, 9).1, vec![vec![3, 15, 7]]);
        // 16-bit grey: as stored.
        let p = png_of(
            2,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Sixteen,
            &[0x35, 0x52, 0, 7],
        );
        let (info, rows) = all_rows("mask.png", &p, 1);
        assert!(info.sixteen_bit);
        assert_eq!(rows, vec![vec![13650, 7]]);
        // RGB is no mask.
        let p = png_of(1, 1, png::ColorType::Rgb, png::BitDepth::Eight, &[1, 2, 3]);
        let e = mask_info("png", &p).unwrap_err().to_string();
        assert!(e.contains("one channel"), "{e}");
    }

    #[test]
    fn only_the_rows_asked_for_are_decoded() {
        let data: Vec<u8> = (0..40u8).collect();
        let p = png_of(
            4,
            10,
            png::ColorType::Grayscale,
            png::BitDepth::Eight,
            &data,
        );
        let (info, rows) = all_rows("png", &p, 3);
        assert_eq!((info.width, info.height), (4, 10));
        assert_eq!(
            rows,
            vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9, 10, 11]]
        );
        // The rows past them may be damaged: never read.
        let mut cut = p.clone();
        cut.truncate(cut.len() - 30);
        assert!(
            MaskDecoder::default()
                .rows("png", &cut, u64::MAX, 10, |_, _| Ok(()))
                .is_err()
        );
        // .npy, 16 bits.
        let vals: Vec<u8> = [1u16, 2, 300, 4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let npy = bale_format::npy::encode_shape("<u2", &[2, 2], &vals);
        assert_eq!(
            all_rows("seg.npy", &npy, 2).1,
            vec![vec![1, 2], vec![300, 4]]
        );
        let short = bale_format::npy::encode_shape("<u2", &[2, 3], &vals);
        assert!(mask_info("npy", &short).is_err());
    }

    #[test]
    fn a_resized_mask_holds_only_its_values_in_its_format() {
        // 5x3 4-bit palette indices 0..15, resized to 3x7 by torch's rule.
        let vals: Vec<u8> = (0..15u8).collect();
        let packed: Vec<u8> = vals
            .chunks(5)
            .flat_map(|r| {
                let mut r = r.to_vec();
                r.push(0);
                r.chunks(2).map(|p| p[0] << 4 | p[1]).collect::<Vec<_>>()
            })
            .collect();
        let p = png_of(5, 3, png::ColorType::Indexed, png::BitDepth::Four, &packed);
        let out = resize_nearest("mask.png", &p, u64::MAX, 3, 7).unwrap();
        let (info, rows) = all_rows("png", &out, 99);
        assert_eq!((info.width, info.height), (3, 7));
        let want: Vec<Vec<u16>> = (0..7)
            .map(|y| {
                (0..3)
                    .map(|x| {
                        u16::from(vals[nearest(y, 3, 7) as usize * 5 + nearest(x, 5, 3) as usize])
                    })
                    .collect()
            })
            .collect();
        assert_eq!(rows, want);
        let mut d = png::Decoder::new(Cursor::new(&out[..]))
            .read_info()
            .unwrap();
        assert_eq!(d.info().color_type, png::ColorType::Indexed);
        assert_eq!(d.info().palette.as_deref(), Some(&[9u8; 48][..]));
        let mut frame = vec![0; d.output_buffer_size().unwrap()];
        d.next_frame(&mut frame).unwrap();
        // .npy, 16 bits, (H, W, 1): dtype and rank kept.
        let v16: Vec<u8> = [7u16, 300, 65535, 1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let npy = bale_format::npy::encode_shape("<u2", &[2, 2, 1], &v16);
        let out = resize_nearest("seg.npy", &npy, u64::MAX, 3, 1).unwrap();
        let want: Vec<u8> = [7u16, 7, 300]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            out,
            bale_format::npy::encode_shape("<u2", &[1, 3, 1], &want)
        );
        assert!(
            resize_nearest("seg.npy", &npy, 3, 3, 1).is_err(),
            "pixel limit"
        );
        assert!(resize_nearest("seg.npy", &npy, u64::MAX, 0, 1).is_err());
    }
}
