//! The random decisions of each sample, with torchvision's semantics, drawn
//! from a generator seeded by `(seed, epoch, sample index)` alone: the same
//! run gives the same crops and flips whatever the thread count, and a
//! resumed run gives what the uninterrupted one would have.

use bale_format::shuffle::{SplitMix64, derive_seed};
use bale_image::region::CropBox;

use crate::options::{Crop, LoaderOptions};

/// What was decided for one sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleParams {
    /// The box of the source image that becomes the output.
    pub crop: CropBox,
    /// Whether the output is flipped left-right.
    pub flip: bool,
}

/// A uniform draw in `[0, 1)` (53 bits).
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform draw in `[a, b)`.
fn uniform(rng: &mut SplitMix64, a: f64, b: f64) -> f64 {
    a + (b - a) * unit(rng)
}

/// Python's `round`: halves to even.
fn round_half_even(v: f64) -> f64 {
    v.round_ties_even()
}

/// The decisions for sample `index` of epoch `epoch`, on an image of
/// `width` x `height` pixels.
pub fn sample_params(
    opts: &LoaderOptions,
    epoch: u64,
    index: u64,
    width: u32,
    height: u32,
) -> SampleParams {
    let mut rng = SplitMix64::new(derive_seed(opts.seed, &[epoch, index]));
    let (w, h) = (f64::from(width), f64::from(height));
    let (out_h, out_w) = (f64::from(opts.size.0), f64::from(opts.size.1));
    let crop = match opts.crop {
        Crop::RandomResized { scale, ratio } => {
            random_resized(&mut rng, width, height, scale, ratio)
        }
        Crop::Resize => CropBox::whole(width, height),
        Crop::Center { resize } => {
            // torchvision's Resize(n): the shorter side to n, the longer one
            // truncated; then CenterCrop(size), offsets rounded half to even.
            let (rw, rh) = match resize {
                Some(n) => {
                    let n = f64::from(n);
                    if w <= h {
                        (n, (n * h / w).floor())
                    } else {
                        ((n * w / h).floor(), n)
                    }
                }
                None => (w, h),
            };
            let (sx, sy) = (rw / w, rh / h);
            let top = round_half_even((rh - out_h) / 2.0);
            let left = round_half_even((rw - out_w) / 2.0);
            // A crop larger than the image keeps what there is (torchvision
            // pads with zeros there; bale stretches the image instead).
            let (bx, bw) = if out_w <= rw {
                (left / sx, out_w / sx)
            } else {
                (0.0, w)
            };
            let (by, bh) = if out_h <= rh {
                (top / sy, out_h / sy)
            } else {
                (0.0, h)
            };
            CropBox {
                x: bx,
                y: by,
                width: bw,
                height: bh,
            }
        }
    };
    let flip = opts.flip && unit(&mut rng) < 0.5;
    SampleParams { crop, flip }
}

/// torchvision's `RandomResizedCrop.get_params`.
fn random_resized(
    rng: &mut SplitMix64,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> CropBox {
    let (wf, hf) = (f64::from(width), f64::from(height));
    let area = wf * hf;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * uniform(rng, scale.0, scale.1);
        let aspect = uniform(rng, lr0, lr1).exp();
        let w = round_half_even((target * aspect).sqrt());
        let h = round_half_even((target / aspect).sqrt());
        if w > 0.0 && w <= wf && h > 0.0 && h <= hf {
            let i = rng.below(height as u64 - h as u64 + 1) as f64;
            let j = rng.below(width as u64 - w as u64 + 1) as f64;
            return CropBox {
                x: j,
                y: i,
                width: w,
                height: h,
            };
        }
    }
    // The central fallback. A side is at least one pixel: with an extreme
    // `ratio` (1e300) torchvision's would round to none, and every image
    // would fail.
    let in_ratio = wf / hf;
    let (w, h) = if in_ratio < ratio.0 {
        (wf, round_half_even(wf / ratio.0).max(1.0))
    } else if in_ratio > ratio.1 {
        (round_half_even(hf * ratio.1).max(1.0), hf)
    } else {
        (wf, hf)
    };
    CropBox {
        x: ((wf - w) / 2.0).floor(),
        y: ((hf - h) / 2.0).floor(),
        width: w,
        height: h,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_extreme_ratio_still_crops_at_least_a_pixel() {
        let mut rng = SplitMix64::new(7);
        for ratio in [(1e300, 1e300), (1e-300, 1e-300), (1e6, 1e7)] {
            let c = random_resized(&mut rng, 100, 50, (0.08, 1.0), ratio);
            assert!(c.width >= 1.0 && c.height >= 1.0, "{ratio:?}: {c:?}");
            assert!(
                c.x + c.width <= 100.0 && c.y + c.height <= 50.0,
                "{ratio:?}: {c:?}"
            );
        }
    }

    #[test]
    fn random_crops_stay_inside_and_follow_scale_and_ratio() {
        let opts = LoaderOptions {
            flip: true,
            ..LoaderOptions::default()
        };
        let mut flips = 0;
        for i in 0..2000u64 {
            let p = sample_params(&opts, 3, i, 500, 375);
            let c = p.crop;
            assert!(c.x >= 0.0 && c.y >= 0.0 && c.x + c.width <= 500.0 && c.y + c.height <= 375.0);
            let frac = c.width * c.height / (500.0 * 375.0);
            assert!(frac <= 1.0);
            assert_eq!(
                c.x.fract() + c.y.fract() + c.width.fract() + c.height.fract(),
                0.0
            );
            flips += usize::from(p.flip);
            // Same (seed, epoch, index): same decisions.
            assert_eq!(p, sample_params(&opts, 3, i, 500, 375));
        }
        assert!((800..1200).contains(&flips), "{flips}");
        // Another epoch: other decisions.
        let differ = (0..100)
            .filter(|&i| {
                sample_params(&opts, 3, i, 500, 375) != sample_params(&opts, 4, i, 500, 375)
            })
            .count();
        assert!(differ > 90);
    }

    #[test]
    fn center_crop_rounds_as_torchvision() {
        let opts = LoaderOptions {
            crop: Crop::Center { resize: Some(256) },
            ..LoaderOptions::default()
        };
        // 500x375 -> Resize(256) -> 341x256 -> CenterCrop(224): left 58 (58.5 to even), top 16.
        let c = sample_params(&opts, 0, 0, 500, 375).crop;
        let sx = 341.0 / 500.0;
        assert!((c.x - 58.0 / sx).abs() < 1e-9, "{c:?}");
        assert!((c.y - 16.0 / (256.0 / 375.0)).abs() < 1e-9, "{c:?}");
        assert!((c.width - 224.0 / sx).abs() < 1e-9, "{c:?}");
    }
}
