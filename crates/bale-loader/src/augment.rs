//! The random decisions of each sample, with torchvision's semantics, drawn
//! from a generator seeded by `(seed, epoch, sample index)` alone: the same
//! run gives the same scales, crops and flips whatever the thread count, and
//! a resumed run gives what the uninterrupted one would have.
//!
//! `crop="random"` flips before it pads and crops, as torchvision's
//! segmentation reference does (its window is then in the flipped image's
//! pixels); the other crops flip their output, as the classification and
//! detection references do.
//!
//! The draws come in a fixed order: the scale stage's, the crop's, the
//! flip's, the vertical flip's (a draw is made only where the stage is
//! asked for, so the random-resized crops of a loader without a scale stage
//! are those of earlier versions).

use bale_format::shuffle::{SplitMix64, derive_seed};

use crate::geometry::{SampleParams, Window};
use crate::options::{Crop, LoaderOptions, Resize};

/// A uniform draw in `[0, 1)` (53 bits).
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A uniform draw in `[0, 1)` as `float32`, as `torch.rand` makes it (24 bits).
fn unit_f32(rng: &mut SplitMix64) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32
}

/// A uniform draw in `[a, b)`.
fn uniform(rng: &mut SplitMix64, a: f64, b: f64) -> f64 {
    a + (b - a) * unit(rng)
}

/// Python's `round`: halves to even.
fn round_half_even(v: f64) -> f64 {
    v.round_ties_even()
}

/// torchvision's `Resize(n)` of a `w` x `h` image: the shorter side to `n`,
/// the longer to `int(n * long / short)` (at least one pixel).
fn shorter_to(n: u32, w: u32, h: u32) -> (u32, u32) {
    let long = |l: u32, s: u32| {
        ((f64::from(n) * f64::from(l) / f64::from(s)) as u64).clamp(1, u64::from(u32::MAX)) as u32
    };
    if w <= h {
        (n, long(h, w))
    } else {
        (long(w, h), n)
    }
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
    let scaled = match (opts.resize, opts.scale_jitter) {
        (Resize::Shorter(n), _) => shorter_to(n, width, height),
        (Resize::Random { min, max }, _) => {
            let n = min + rng.below(u64::from(max - min)) as u32;
            shorter_to(n, width, height)
        }
        (Resize::None, Some(j)) => {
            // torchvision: scale = lo + torch.rand(1) * (hi - lo), and
            // r = min(target[1] / h, target[0] / w) * scale, in float32.
            let (lo, hi) = (j.range.0 as f32, j.range.1 as f32);
            let s = lo + unit_f32(&mut rng) * (hi - lo);
            let base = (f64::from(j.target.1) / f64::from(height))
                .min(f64::from(j.target.0) / f64::from(width)) as f32;
            let r = base * s;
            let side = |v: u32| ((v as f32 * r) as u64).clamp(1, u64::from(u32::MAX)) as u32;
            (side(width), side(height))
        }
        (Resize::None, None) => (width, height),
    };
    let (sw, sh) = scaled;
    let (out_h, out_w) = opts.size;
    let crop = match opts.crop {
        Crop::RandomResized => random_resized(&mut rng, sw, sh, opts.scale, opts.ratio),
        Crop::Resize => Window {
            left: 0,
            top: 0,
            width: sw,
            height: sh,
        },
        Crop::Center => Window {
            left: center_start(sw, out_w),
            top: center_start(sh, out_h),
            width: out_w,
            height: out_h,
        },
        Crop::Random => {
            // PadIfSmaller(size) then RandomCrop(size): the top is drawn
            // before the left, each only where there is a choice.
            let mut pick = |n: u32, c: u32| {
                if n > c {
                    rng.below(u64::from(n - c) + 1) as i64
                } else {
                    0
                }
            };
            let top = pick(sh, out_h);
            let left = pick(sw, out_w);
            Window {
                left,
                top,
                width: out_w,
                height: out_h,
            }
        }
        Crop::FixedSize => {
            // FixedSizeCrop: one draw r for both offsets, made only when the
            // image is larger than the crop in some direction.
            let (mut top, mut left) = (0, 0);
            if sh > out_h || sw > out_w {
                let r = unit_f32(&mut rng);
                top = (sh.saturating_sub(out_h) as f32 * r) as i64;
                left = (sw.saturating_sub(out_w) as f32 * r) as i64;
            }
            Window {
                left,
                top,
                width: out_w,
                height: out_h,
            }
        }
    };
    let flip = opts.flip && unit(&mut rng) < 0.5;
    let vflip = opts.vflip && unit(&mut rng) < 0.5;
    SampleParams {
        image: (width, height),
        scaled,
        crop,
        out: (out_w, out_h),
        flip,
        vflip,
        flip_first: opts.crop == Crop::Random,
    }
}

/// The start of torchvision's `CenterCrop(c)` on an axis of `n` pixels: the
/// offset `round((n - c) / 2)` (halves to even), or, where the crop is
/// larger, minus the padding torchvision puts before the image, `(c - n) // 2`.
fn center_start(n: u32, c: u32) -> i64 {
    if c > n {
        -i64::from((c - n) / 2)
    } else {
        round_half_even((f64::from(n) - f64::from(c)) / 2.0) as i64
    }
}

/// torchvision's `RandomResizedCrop.get_params` on a `width` x `height` image.
fn random_resized(
    rng: &mut SplitMix64,
    width: u32,
    height: u32,
    scale: (f64, f64),
    ratio: (f64, f64),
) -> Window {
    let (wf, hf) = (f64::from(width), f64::from(height));
    let area = wf * hf;
    let (lr0, lr1) = (ratio.0.ln(), ratio.1.ln());
    for _ in 0..10 {
        let target = area * uniform(rng, scale.0, scale.1);
        let aspect = uniform(rng, lr0, lr1).exp();
        let w = round_half_even((target * aspect).sqrt());
        let h = round_half_even((target / aspect).sqrt());
        if w > 0.0 && w <= wf && h > 0.0 && h <= hf {
            let i = rng.below(height as u64 - h as u64 + 1) as i64;
            let j = rng.below(width as u64 - w as u64 + 1) as i64;
            return Window {
                left: j,
                top: i,
                width: w as u32,
                height: h as u32,
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
    Window {
        left: ((wf - w) / 2.0).floor() as i64,
        top: ((hf - h) / 2.0).floor() as i64,
        width: w as u32,
        height: h as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::ScaleJitter;

    #[test]
    fn an_extreme_ratio_still_crops_at_least_a_pixel() {
        let mut rng = SplitMix64::new(7);
        for ratio in [(1e300, 1e300), (1e-300, 1e-300), (1e6, 1e7)] {
            let c = random_resized(&mut rng, 100, 50, (0.08, 1.0), ratio);
            assert!(c.width >= 1 && c.height >= 1, "{ratio:?}: {c:?}");
            assert!(
                c.left + i64::from(c.width) <= 100 && c.top + i64::from(c.height) <= 50,
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
            assert!(
                c.left >= 0
                    && c.top >= 0
                    && c.left + i64::from(c.width) <= 500
                    && c.top + i64::from(c.height) <= 375
            );
            assert!(p.padding().is_empty() && p.scaled == (500, 375));
            flips += usize::from(p.flip);
            assert!(!p.vflip);
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
    fn center_crop_rounds_and_pads_as_torchvision() {
        let opts = LoaderOptions {
            crop: Crop::Center,
            resize: Resize::Shorter(256),
            ..LoaderOptions::default()
        };
        // 500x375 -> Resize(256) -> 341x256 -> CenterCrop(224): left 58 (58.5 to even), top 16.
        let p = sample_params(&opts, 0, 0, 500, 375);
        assert_eq!(p.scaled, (341, 256));
        assert_eq!((p.crop.left, p.crop.top), (58, 16));
        let b = p.source_box();
        assert!((b.x - 58.0 * 500.0 / 341.0).abs() < 1e-9, "{b:?}");
        // A crop larger than the image: padded, (c - n) // 2 before it.
        let wide = LoaderOptions {
            crop: Crop::Center,
            size: (100, 300),
            ..LoaderOptions::default()
        };
        let p = sample_params(&wide, 0, 0, 195, 120);
        assert_eq!((p.crop.left, p.crop.top), (-52, 10));
        assert_eq!((p.padding().left, p.padding().right), (52, 53));
    }

    #[test]
    fn the_segmentation_recipe_scales_pads_and_crops() {
        let opts = LoaderOptions {
            crop: Crop::Random,
            resize: Resize::Random {
                min: 256,
                max: 2048,
            },
            size: (512, 1024),
            flip: true,
            ..LoaderOptions::default()
        };
        let mut sizes = std::collections::BTreeSet::new();
        let mut padded = 0;
        for i in 0..500 {
            let p = sample_params(&opts, 0, i, 2048, 1024);
            let (sw, sh) = p.scaled;
            assert!((256..2048).contains(&sh) && sw == 2 * sh, "{p:?}");
            sizes.insert(sh);
            let pad = p.padding();
            assert_eq!((pad.left, pad.top), (0, 0));
            assert_eq!(pad.right, 1024u32.saturating_sub(sw));
            assert_eq!(pad.bottom, 512u32.saturating_sub(sh));
            padded += usize::from(!pad.is_empty());
            let c = p.crop;
            assert!(c.left >= 0 && c.top >= 0);
            assert!(c.left + 1024 <= i64::from(sw.max(1024)));
            assert!(c.top + 512 <= i64::from(sh.max(512)));
        }
        assert!(sizes.len() > 300 && padded > 0, "{} {padded}", sizes.len());
    }

    #[test]
    fn scale_jitter_and_fixed_size_crop_follow_torchvision() {
        let opts = LoaderOptions {
            crop: Crop::FixedSize,
            scale_jitter: Some(ScaleJitter {
                target: (1024, 1024),
                range: (0.1, 2.0),
            }),
            size: (1024, 1024),
            ..LoaderOptions::default()
        };
        for i in 0..300 {
            let p = sample_params(&opts, 0, i, 640, 480);
            let (sw, sh) = p.scaled;
            // r = min(1024 / 480, 1024 / 640) * s: sides 1.6 * s times the source's.
            let s = sw as f64 / 640.0 / 1.6;
            assert!((0.099..2.0).contains(&s), "{p:?}");
            assert!((f64::from(sh) - 480.0 * 1.6 * s).abs() <= 1.0, "{p:?}");
            let c = p.crop;
            let (oh, ow) = (i64::from(sh) - 1024, i64::from(sw) - 1024);
            assert!((0..=oh.max(0)).contains(&c.top) && (0..=ow.max(0)).contains(&c.left));
            // One draw for both offsets: top / oh and left / ow agree.
            if oh > 100 && ow > 100 {
                let (rt, rl) = (c.top as f64 / oh as f64, c.left as f64 / ow as f64);
                assert!((rt - rl).abs() < 0.02, "{p:?}");
            }
        }
    }
}
