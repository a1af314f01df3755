//! A sample's geometry ([`SampleParams`]) and what it does to each target:
//! the output pixel of a mask each source pixel becomes (torch's nearest
//! rule, as torchvision v2 resizes a `tv_tensors.Mask`), the box of the
//! source image the image is resized from, and boxes moved, clipped and
//! sanitized as torchvision v2 moves `tv_tensors.BoundingBoxes`.
//!
//! The geometry has three stages, per axis: the source (`src` pixels) is
//! scaled to `scaled` pixels; a window of `len` pixels starting at `start`
//! (which may lie partly outside the scaled image: that part is padding) is
//! cut out and resized to `out` pixels (the window is the output size for
//! the padding crops, so only the random-resized and resize crops resize
//! it); the result may be flipped.

use bale_image::region::CropBox;

/// What was decided for one sample: the geometry its image and every
/// target follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleParams {
    /// The source image's width and height.
    pub image: (u32, u32),
    /// Width and height after the scale stage (the source's when there is
    /// none).
    pub scaled: (u32, u32),
    /// The crop in the scaled image's pixels; where it extends past the
    /// scaled image, the output is padding.
    pub crop: Window,
    /// The output's width and height: the crop is resized to it.
    pub out: (u32, u32),
    /// Whether the output is flipped left-right.
    pub flip: bool,
    /// Whether the output is flipped upside down.
    pub vflip: bool,
    /// Whether the flips apply to the scaled image before it is padded and
    /// cropped (torchvision's segmentation reference: `RandomResize`,
    /// `RandomHorizontalFlip`, then `RandomCrop` padded on the right and
    /// bottom), so `crop` is in the flipped image's pixels and the padding
    /// stays on the right and bottom; otherwise the output is flipped.
    pub flip_first: bool,
}

/// A window of the scaled image, in its pixels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Left edge (negative: padding on the left).
    pub left: i64,
    /// Top edge (negative: padding on the top).
    pub top: i64,
    /// Width.
    pub width: u32,
    /// Height.
    pub height: u32,
}

/// Padding of the scaled image a crop takes, in pixels per side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Padding {
    /// Columns added on the left.
    pub left: u32,
    /// Rows added on the top.
    pub top: u32,
    /// Columns added on the right.
    pub right: u32,
    /// Rows added on the bottom.
    pub bottom: u32,
}

impl Padding {
    /// Whether nothing is padded.
    pub fn is_empty(&self) -> bool {
        *self == Padding::default()
    }
}

impl SampleParams {
    /// The padding the crop takes: the part of the window outside the scaled image.
    pub fn padding(&self) -> Padding {
        let (sw, sh) = (i64::from(self.scaled.0), i64::from(self.scaled.1));
        let c = self.crop;
        let side = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        Padding {
            left: side(-c.left),
            top: side(-c.top),
            right: side(c.left + i64::from(c.width) - sw),
            bottom: side(c.top + i64::from(c.height) - sh),
        }
    }

    /// The crop in the source image's pixels (fractions where the scale
    /// stage resized it; past the image's edges where it is padded).
    pub fn source_box(&self) -> CropBox {
        let (x, width) = self.axes().0.source_span_of_window();
        let (y, height) = self.axes().1.source_span_of_window();
        CropBox {
            x,
            y,
            width,
            height,
        }
    }

    /// The horizontal and vertical axes, their windows in the unflipped
    /// scaled image's pixels.
    pub(crate) fn axes(&self) -> (Axis, Axis) {
        // A window of the flipped image is the mirrored window of the
        // unflipped one, whose output is flipped.
        let unflip = |flip: bool, start: i64, len: u32, scaled: u32| {
            if self.flip_first && flip {
                i64::from(scaled) - start - i64::from(len)
            } else {
                start
            }
        };
        (
            Axis {
                src: self.image.0,
                scaled: self.scaled.0,
                start: unflip(self.flip, self.crop.left, self.crop.width, self.scaled.0),
                len: self.crop.width,
                out: self.out.0,
                flip: self.flip,
            },
            Axis {
                src: self.image.1,
                scaled: self.scaled.1,
                start: unflip(self.vflip, self.crop.top, self.crop.height, self.scaled.1),
                len: self.crop.height,
                out: self.out.1,
                flip: self.vflip,
            },
        )
    }

    /// Whether torchvision clamps boxes to the crop: whenever it crops or
    /// pads (a window other than the whole scaled image), and after every
    /// random-resized crop.
    pub(crate) fn clamps_boxes(&self, always: bool) -> bool {
        always
            || self.crop
                != Window {
                    left: 0,
                    top: 0,
                    width: self.scaled.0,
                    height: self.scaled.1,
                }
    }
}

/// torch's `interpolate(mode="nearest")` source index: one rule for the
/// loader's masks and for the pack's, defined beside the pack's mask resize.
pub use bale_image::mask::nearest;

/// One axis of a sample's geometry (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Axis {
    pub src: u32,
    pub scaled: u32,
    pub start: i64,
    pub len: u32,
    pub out: u32,
    pub flip: bool,
}

impl Axis {
    /// The source pixel output pixel `o` shows; `None` where it is padding.
    pub fn source(&self, o: u32) -> Option<u32> {
        let o = if self.flip { self.out - 1 - o } else { o };
        let c = nearest(o, self.len, self.out);
        let s = self.start + i64::from(c);
        if s < 0 || s >= i64::from(self.scaled) {
            return None;
        }
        Some(nearest(s as u32, self.src, self.scaled))
    }

    /// The output pixels the image covers, `o0..o1` before any flip (the
    /// rest is padding), and the span of the source image they are resized
    /// from (start, length, in source pixels); `None` when the window holds
    /// none of the image.
    pub fn image_span(&self) -> Option<(u32, u32, f64, f64)> {
        let (scaled, start, len) = (i64::from(self.scaled), self.start, i64::from(self.len));
        let c0 = (-start).clamp(0, len);
        let c1 = (scaled - start).clamp(0, len);
        if c1 <= c0 {
            return None;
        }
        // A window that is resized (random-resized, resize) lies inside the
        // scaled image: c0 = 0, c1 = len; a padded one is the output size.
        let to_out = |c: i64| (c as u64 * u64::from(self.out) / len as u64) as u32;
        let (o0, o1) = (to_out(c0), to_out(c1));
        let k = f64::from(self.src) / f64::from(self.scaled);
        let s0 = (start + c0) as f64 * k;
        let s1 = (start + c1) as f64 * k;
        Some((o0, o1, s0, s1 - s0))
    }

    /// The window in source pixels (start, length).
    fn source_span_of_window(&self) -> (f64, f64) {
        let k = f64::from(self.src) / f64::from(self.scaled);
        (self.start as f64 * k, f64::from(self.len) * k)
    }

    /// A box's edges `(a, b)` (`a <= b`, source pixels) in the output, as
    /// torchvision v2 moves them (in `float32`): scaled by the scale
    /// stage's ratio (when it resizes), moved by the window and clamped to
    /// it (`clamp`), scaled by the window's resize (when it resizes), then
    /// flipped.
    pub fn edges(&self, a: f32, b: f32, clamp: bool) -> (f32, f32) {
        let (mut a, mut b) = (a, b);
        if self.scaled != self.src {
            let r = (f64::from(self.scaled) / f64::from(self.src)) as f32;
            a *= r;
            b *= r;
        }
        let start = self.start as f32;
        a -= start;
        b -= start;
        if clamp {
            let hi = self.len as f32;
            a = a.clamp(0.0, hi);
            b = b.clamp(0.0, hi);
        }
        if self.len != self.out {
            let r = (f64::from(self.out) / f64::from(self.len)) as f32;
            a *= r;
            b *= r;
        }
        if self.flip {
            let w = self.out as f32;
            (w - b, w - a)
        } else {
            (a, b)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_follows_torch() {
        // torch.nn.functional.interpolate(arange(n_in), size=n_out, mode="nearest").
        let cases: [(u32, u32, &[u32]); 4] = [
            (4, 4, &[0, 1, 2, 3]),
            (3, 6, &[0, 0, 1, 1, 2, 2]),
            (5, 3, &[0, 1, 3]),
            (3, 7, &[0, 0, 0, 1, 1, 2, 2]),
        ];
        for (n_in, n_out, want) in cases {
            let got: Vec<u32> = (0..n_out).map(|o| nearest(o, n_in, n_out)).collect();
            assert_eq!(got, want, "{n_in} -> {n_out}");
        }
    }

    fn params(crop: Window, flip: bool) -> SampleParams {
        SampleParams {
            image: (100, 50),
            scaled: (200, 100),
            crop,
            out: (crop.width, crop.height),
            flip,
            vflip: false,
            flip_first: false,
        }
    }

    #[test]
    fn a_padded_window_shows_padding_past_the_scaled_image() {
        // Scaled 200x100, a 64x128 window at (180, 0): 20 columns of image, then padding.
        let p = params(
            Window {
                left: 180,
                top: 0,
                width: 64,
                height: 128,
            },
            false,
        );
        assert_eq!(
            p.padding(),
            Padding {
                left: 0,
                top: 0,
                right: 44,
                bottom: 28
            }
        );
        let (x, y) = p.axes();
        assert_eq!(x.source(0), Some(90));
        assert_eq!(x.source(19), Some(99));
        assert_eq!(x.source(20), None);
        assert_eq!(y.source(99), Some(49));
        assert_eq!(y.source(100), None);
        assert_eq!(x.image_span(), Some((0, 20, 90.0, 10.0)));
        // Flipped, the padding is on the left.
        let (xf, _) = params(p.crop, true).axes();
        assert_eq!(xf.source(63), Some(90));
        assert_eq!(xf.source(0), None);
        assert_eq!(xf.edges(95.0, 100.0, true), (44.0, 54.0));
        assert_eq!(x.edges(95.0, 100.0, true), (10.0, 20.0));
        // Flipped first (the segmentation order): the window is in the
        // flipped image, so the padding stays on the right.
        let first = SampleParams {
            flip_first: true,
            ..params(p.crop, true)
        };
        assert_eq!(first.padding(), p.padding());
        let (xf, _) = first.axes();
        // Column 180 of the flipped scaled image is its column 19.
        assert_eq!(xf.source(0), Some(9));
        assert_eq!(xf.source(19), Some(0));
        assert_eq!(xf.source(20), None);
        assert_eq!(xf.source(63), None);
        assert_eq!(xf.image_span(), Some((44, 64, 0.0, 10.0)));
        // x 0..5 of the source is 0..10 scaled, 190..200 flipped: 10..20.
        assert_eq!(xf.edges(0.0, 5.0, true), (10.0, 20.0));
        assert!((first.source_box().x + 22.0).abs() < 1e-9);
    }
}
