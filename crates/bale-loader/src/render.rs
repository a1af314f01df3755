//! One sample's work, the task of a loader thread: read the sample, pick
//! its image member, draw its geometry, decode the image's crop into its
//! slot of the batch (padding and flips included), run the pixel stages,
//! convert, and move every target with it (labels, masks, boxes).

use std::cell::RefCell;

use bale_image::ImageError;
use bale_image::region::{CropBox, RegionDecoder};
use bale_reader::Sample;
use half::f16;

use crate::augment::sample_params;
use crate::error::LoaderError;
use crate::geometry::SampleParams;
use crate::options::{Dtype, LabelSource, LoaderOptions, MaskDtype};
use crate::pipeline::Output;
use crate::targets::{self, BoxSlot, MaskSlot, TargetError};

/// Where sample `k` of a batch is written: the element pointers of the
/// batch's arrays (each task writes only its own slot of each).
#[derive(Debug, Clone)]
pub(crate) struct Slots {
    pub image: ImagePtr,
    pub labels: LabelPtr,
    pub masks: Vec<MaskPtr>,
    pub boxes: Option<(*mut f32, *mut i64, *mut i64)>,
}

/// The image array's elements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ImagePtr {
    U8(*mut u8),
    F32(*mut f32),
    F16(*mut f16),
}

/// The labels array's elements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LabelPtr {
    Class(*mut i64),
    Vector(*mut f32),
    None,
}

/// A mask array's elements.
#[derive(Debug, Clone, Copy)]
pub(crate) enum MaskPtr {
    U8(*mut u8),
    I64(*mut i64),
}

/// Slot `k` of `per` elements of the array at `base`.
///
/// # Safety
/// `base` points to an array of at least `(k + 1) * per` elements that no
/// one else reads or writes in that range for the lifetime `'a`.
unsafe fn slot<'a, T>(base: *mut T, k: usize, per: usize) -> &'a mut [T] {
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(base.add(k * per), per) }
}

/// What a task reports besides what it wrote into the batch.
#[derive(Debug)]
pub(crate) struct Done {
    pub key: String,
    pub fields: Vec<Option<Vec<u8>>>,
    pub error: Option<LoaderError>,
}

/// What every task of an epoch shares, besides the dataset.
#[derive(Debug)]
pub(crate) struct Work<'a> {
    pub opts: &'a LoaderOptions,
    /// The members an image may be in, in order of preference.
    pub image: &'a [String],
    /// Values per `.npy` label.
    pub classes: usize,
    pub output: Output,
    pub epoch: u64,
}

/// The member holding the image of `sample`: the first of `candidates` it
/// has, regardless of case.
pub(crate) fn image_member<'s>(
    sample: &'s Sample,
    candidates: &[String],
) -> Option<(&'s str, &'s [u8])> {
    candidates.iter().find_map(|c| targets::find(sample, c))
}

/// The error of a sample without any of the image members.
pub(crate) fn no_image(sample: &Sample, candidates: &[String]) -> LoaderError {
    LoaderError::MissingField {
        index: sample.index(),
        key: sample.key().to_owned(),
        ext: candidates.join(" or "),
        has: sample.extensions().collect::<Vec<_>>().join(", "),
    }
}

/// The geometry of `sample`, from its image's header.
pub(crate) fn params_of(w: &Work<'_>, sample: &Sample) -> Result<SampleParams, LoaderError> {
    let Some((ext, bytes)) = image_member(sample, w.image) else {
        return Err(no_image(sample, w.image));
    };
    let (width, height) =
        bale_image::region::dimensions(ext, bytes).map_err(|e| image_err(sample, e))?;
    Ok(sample_params(
        w.opts,
        w.epoch,
        sample.index(),
        width,
        height,
    ))
}

fn image_err(sample: &Sample, e: ImageError) -> LoaderError {
    LoaderError::Image {
        index: sample.index(),
        key: sample.key().to_owned(),
        source: e,
    }
}

fn target_err(sample: &Sample, (member, what): TargetError) -> LoaderError {
    LoaderError::Target {
        index: sample.index(),
        key: sample.key().to_owned(),
        member,
        what,
    }
}

/// Does sample `sample`'s work into slot `k` of `slots`.
///
/// # Safety
/// `slots` point to the arrays of a batch of more than `k` samples, whose
/// slot `k` only this task touches while it runs.
pub(crate) unsafe fn render_sample(
    w: &Work<'_>,
    sample: &Sample,
    slots: &Slots,
    k: usize,
) -> Result<(), LoaderError> {
    let opts = w.opts;
    let (out_h, out_w) = (opts.size.0 as usize, opts.size.1 as usize);
    let plane = out_h * out_w;
    // The label first: it costs least, and is what `.cls` datasets need.
    match (slots.labels, &opts.label) {
        (LabelPtr::Class(base), LabelSource::Cls) => {
            // SAFETY: slot k of the (batch,) labels; see the contract.
            let out = unsafe { slot(base, k, 1) };
            out[0] = sample.label().unwrap_or(-1);
        }
        (LabelPtr::Class(base), source @ LabelSource::Json { .. }) => {
            let v = targets::json_label(source, sample).map_err(|e| target_err(sample, e))?;
            // SAFETY: as above.
            let out = unsafe { slot(base, k, 1) };
            out[0] = v;
        }
        (LabelPtr::Vector(base), LabelSource::Npy { member }) => {
            // SAFETY: slot k of the (batch, classes) labels.
            let out = unsafe { slot(base, k, w.classes) };
            targets::npy_label(member, sample, out).map_err(|e| target_err(sample, e))?;
        }
        _ => {}
    }
    let Some((ext, bytes)) = image_member(sample, w.image) else {
        return Err(no_image(sample, w.image));
    };
    let (width, height) =
        bale_image::region::dimensions(ext, bytes).map_err(|e| image_err(sample, e))?;
    let p = sample_params(opts, w.epoch, sample.index(), width, height);
    let pixel = crate::policy::pixel_params(opts, w.epoch, sample.index());
    let per = plane * 3;
    let render = |hwc: &mut [u8]| {
        render_image(opts, ext, bytes, &p, hwc)?;
        crate::policy::apply(&pixel, hwc, out_w, out_h, opts.fill);
        Ok::<(), ImageError>(())
    };
    match (w.output, slots.image) {
        (Output::InPlace, ImagePtr::U8(base)) => {
            // SAFETY: slot k of the images; see the contract.
            let hwc = unsafe { slot(base, k, per) };
            render(hwc).map_err(|e| image_err(sample, e))?;
        }
        (output, image) => TEMP
            .with(|t| {
                let mut tmp = t.borrow_mut();
                grow(&mut tmp, per)?;
                let hwc = &mut tmp[..per];
                render(hwc)?;
                // SAFETY: slot k of the images; see the contract.
                unsafe { convert(opts, output, image, k, per, plane, hwc) };
                Ok(())
            })
            .map_err(|e| image_err(sample, e))?,
    }
    if let (Some(b), Some(e)) = (pixel.erase, opts.augment.erasing) {
        let values = crate::policy::erase_values(opts, w.epoch, sample.index(), e.value);
        // SAFETY: slot k of the images; see the contract.
        unsafe { erase(opts, slots.image, k, per, plane, b, values) };
    }
    if !slots.masks.is_empty() {
        let masks = slots
            .masks
            .iter()
            .map(|m| match *m {
                // SAFETY: slot k of each (batch, height, width) mask array.
                MaskPtr::U8(base) => MaskSlot::U8(unsafe { slot(base, k, plane) }),
                // SAFETY: as above.
                MaskPtr::I64(base) => MaskSlot::I64(unsafe { slot(base, k, plane) }),
            })
            .collect();
        debug_assert_eq!(
            slots.masks.len(),
            opts.masks.len(),
            "one mask array per member"
        );
        debug_assert!(matches!(
            (opts.mask_dtype, slots.masks[0]),
            (MaskDtype::U8, MaskPtr::U8(_)) | (MaskDtype::I64, MaskPtr::I64(_))
        ));
        targets::render_masks(opts, sample, &p, masks).map_err(|e| target_err(sample, e))?;
    }
    if let Some((coords, labels, counts)) = slots.boxes {
        let max = opts.max_boxes;
        // SAFETY: slot k of the (batch, max_boxes, 4), (batch, max_boxes)
        // and (batch,) box arrays.
        let box_slot = unsafe {
            BoxSlot {
                coords: slot(coords, k, max * 4),
                labels: slot(labels, k, max),
                count: &mut slot(counts, k, 1)[0],
            }
        };
        targets::render_boxes(opts, sample, &p, box_slot).map_err(|e| target_err(sample, e))?;
    }
    Ok(())
}

thread_local! {
    /// Pixels rendered before they are converted (channels first, floats).
    static TEMP: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The image part of a padded output, before it is placed.
    static PART: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Grows `v` to `n` bytes without aborting on a failed allocation.
fn grow(v: &mut Vec<u8>, n: usize) -> Result<(), ImageError> {
    if v.len() < n {
        v.try_reserve(n - v.len())
            .map_err(|_| ImageError::Option(format!("no memory for {n} bytes of pixels")))?;
        v.resize(n, 0);
    }
    Ok(())
}

/// Decodes the image `bytes` (member `ext`) through the geometry `p` into
/// `hwc` (the output, RGB rows): the crop decoded and resized where it
/// shows the image, `fill` where it is padding, then flipped.
fn render_image(
    opts: &LoaderOptions,
    ext: &str,
    bytes: &[u8],
    p: &SampleParams,
    hwc: &mut [u8],
) -> Result<(), ImageError> {
    let (out_w, out_h) = p.out;
    let (ax, ay) = p.axes();
    let decode = |crop: CropBox, w: u32, h: u32, out: &mut [u8]| {
        RegionDecoder::with(|d| {
            d.set_max_pixels(opts.max_pixels);
            d.crop_resize_into(ext, bytes, crop, w, h, opts.dct_scaling, out)
        })
        .map(|_| ())
    };
    match (ax.image_span(), ay.image_span()) {
        (Some((x0, x1, sx, sw)), Some((y0, y1, sy, sh))) => {
            let crop = CropBox {
                x: sx,
                y: sy,
                width: sw,
                height: sh,
            };
            if (x0, x1, y0, y1) == (0, out_w, 0, out_h) {
                decode(crop, out_w, out_h, hwc)?;
            } else {
                // Padded: the image's part decoded aside, placed (flipped
                // as it is copied) in the fill, which covers the rest.
                let (pw, ph) = ((x1 - x0) as usize, (y1 - y0) as usize);
                let (ox, oy) = (
                    if p.flip { out_w - x1 } else { x0 } as usize,
                    if p.vflip { out_h - y1 } else { y0 } as usize,
                );
                PART.with(|part| {
                    let mut part = part.borrow_mut();
                    grow(&mut part, pw * ph * 3)?;
                    let part = &mut part[..pw * ph * 3];
                    decode(crop, x1 - x0, y1 - y0, part)?;
                    let row = out_w as usize * 3;
                    let (top, rest) = hwc.split_at_mut(oy * row);
                    let (middle, bottom) = rest.split_at_mut(ph * row);
                    fill_rgb(top, opts.fill);
                    fill_rgb(bottom, opts.fill);
                    for (r, dst) in middle.chunks_exact_mut(row).enumerate() {
                        let src = if p.vflip { ph - 1 - r } else { r };
                        let src = &part[src * pw * 3..(src + 1) * pw * 3];
                        let (left, rest) = dst.split_at_mut(ox * 3);
                        let (image, right) = rest.split_at_mut(pw * 3);
                        fill_rgb(left, opts.fill);
                        fill_rgb(right, opts.fill);
                        if p.flip {
                            copy_flipped(image, src);
                        } else {
                            image.copy_from_slice(src);
                        }
                    }
                    Ok::<(), ImageError>(())
                })?;
                return Ok(());
            }
        }
        // The window holds none of the image (a degenerate scale).
        _ => {
            // The header must still be checked as the decode would.
            bale_image::region::dimensions(ext, bytes)?;
            fill_rgb(hwc, opts.fill);
        }
    }
    if p.flip {
        flip_rows(hwc, out_w as usize);
    }
    if p.vflip {
        flip_vertical(hwc, out_w as usize * 3);
    }
    Ok(())
}

/// Fills RGB pixels with one colour.
fn fill_rgb(hwc: &mut [u8], rgb: [u8; 3]) {
    if rgb[0] == rgb[1] && rgb[1] == rgb[2] {
        hwc.fill(rgb[0]);
    } else {
        for px in hwc.chunks_exact_mut(3) {
            px.copy_from_slice(&rgb);
        }
    }
}

/// Writes the rendered `hwc` pixels into slot `k` of the image array.
///
/// # Safety
/// As [`render_sample`].
unsafe fn convert(
    opts: &LoaderOptions,
    output: Output,
    image: ImagePtr,
    k: usize,
    per: usize,
    plane: usize,
    hwc: &[u8],
) {
    let channels_first = matches!(
        output,
        Output::Convert {
            channels_first: true,
            ..
        }
    );
    let at = |p: usize, c: usize| {
        if channels_first {
            c * plane + p
        } else {
            p * 3 + c
        }
    };
    match image {
        ImagePtr::U8(base) => {
            // SAFETY: the caller's contract.
            let out = unsafe { slot(base, k, per) };
            for p in 0..plane {
                for c in 0..3 {
                    out[at(p, c)] = hwc[p * 3 + c];
                }
            }
        }
        ImagePtr::F32(base) => {
            // SAFETY: as above.
            let out = unsafe { slot(base, k, per) };
            let (scale, shift) = normalisation(opts);
            for p in 0..plane {
                for c in 0..3 {
                    out[at(p, c)] = f32::from(hwc[p * 3 + c]) * scale[c] + shift[c];
                }
            }
        }
        ImagePtr::F16(base) => {
            // SAFETY: as above.
            let out = unsafe { slot(base, k, per) };
            let (scale, shift) = normalisation(opts);
            for p in 0..plane {
                for c in 0..3 {
                    out[at(p, c)] = f16::from_f32(f32::from(hwc[p * 3 + c]) * scale[c] + shift[c]);
                }
            }
        }
    }
    debug_assert!(opts.dtype != Dtype::U8 || matches!(image, ImagePtr::U8(_)));
}

/// `RandomErasing`'s box written into slot `k` of the image array, in the
/// output's units (`uint8` takes the value rounded and clamped).
///
/// # Safety
/// As [`render_sample`].
unsafe fn erase(
    opts: &LoaderOptions,
    image: ImagePtr,
    k: usize,
    per: usize,
    plane: usize,
    b: crate::policy::EraseBox,
    mut value: impl FnMut(usize) -> f32,
) {
    let width = opts.size.1 as usize;
    let cf = opts.channels_first;
    match image {
        ImagePtr::U8(base) => {
            // SAFETY: the caller's contract.
            let out = unsafe { slot(base, k, per) };
            let random = matches!(
                opts.augment.erasing.map(|e| e.value),
                Some(crate::options::EraseValue::Random)
            );
            let pixel = |c: usize| {
                let v = value(c);
                // Noise is in normalised units: the pixel normalising makes it.
                let v = if random {
                    255.0 * (opts.mean[c] + opts.std[c] * v)
                } else {
                    v
                };
                v.round().clamp(0.0, 255.0) as u8
            };
            crate::policy::erase(out, b, width, plane, cf, pixel);
        }
        ImagePtr::F32(base) => {
            // SAFETY: as above.
            let out = unsafe { slot(base, k, per) };
            crate::policy::erase(out, b, width, plane, cf, value);
        }
        ImagePtr::F16(base) => {
            // SAFETY: as above.
            let out = unsafe { slot(base, k, per) };
            crate::policy::erase(out, b, width, plane, cf, |c| f16::from_f32(value(c)));
        }
    }
}

/// `(x / 255 - mean) / std` as `x * scale + shift`, per channel.
fn normalisation(opts: &LoaderOptions) -> ([f32; 3], [f32; 3]) {
    let mut scale = [0.0; 3];
    let mut shift = [0.0; 3];
    for c in 0..3 {
        scale[c] = 1.0 / (255.0 * opts.std[c]);
        shift[c] = -opts.mean[c] / opts.std[c];
    }
    (scale, shift)
}

/// Flips RGB rows of `width` pixels left-right, in place.
pub(crate) fn flip_rows(pixels: &mut [u8], width: usize) {
    let half = width / 2 * 3;
    for row in pixels.chunks_exact_mut(width * 3) {
        // The left half against the right half from its end; an odd
        // width's middle pixel stays.
        let (left, rest) = row.split_at_mut(half);
        let at = rest.len() - half;
        let right = &mut rest[at..];
        for (a, b) in left.chunks_exact_mut(3).zip(right.rchunks_exact_mut(3)) {
            let t = [a[0], a[1], a[2]];
            a.copy_from_slice(b);
            b.copy_from_slice(&t);
        }
    }
}

/// Copies the RGB row `src` into `dst` (of its length) flipped left-right.
fn copy_flipped(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(3).rev()) {
        d.copy_from_slice(s);
    }
}

/// Flips rows of `row` bytes upside down, in place.
fn flip_vertical(pixels: &mut [u8], row: usize) {
    let rows = pixels.len() / row;
    for r in 0..rows / 2 {
        let (top, bottom) = pixels.split_at_mut((rows - 1 - r) * row);
        top[r * row..(r + 1) * row].swap_with_slice(&mut bottom[..row]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_flip_left_right_and_upside_down() {
        let mut px: Vec<u8> = (0..18).collect();
        flip_rows(&mut px, 3);
        assert_eq!(
            px,
            [6, 7, 8, 3, 4, 5, 0, 1, 2, 15, 16, 17, 12, 13, 14, 9, 10, 11]
        );
        let mut px: Vec<u8> = (0..9).collect();
        flip_vertical(&mut px, 3);
        assert_eq!(px, [6, 7, 8, 3, 4, 5, 0, 1, 2]);
        // Even widths, and a row copied flipped.
        let mut px: Vec<u8> = (0..12).collect();
        flip_rows(&mut px, 4);
        assert_eq!(px, [9, 10, 11, 6, 7, 8, 3, 4, 5, 0, 1, 2]);
        let mut out = [0; 12];
        copy_flipped(&mut out, &px);
        assert_eq!(out.to_vec(), (0..12).collect::<Vec<u8>>());
    }
}
