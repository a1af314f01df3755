//! The pixel augmentations after the geometry, with torchvision v2's
//! semantics: `ColorJitter`, one of `TrivialAugmentWide`, `RandAugment` and
//! `AutoAugment(IMAGENET)`, `RandomGrayscale`, then `RandomErasing` on the
//! output tensor. Their options ([`Augment`]), their draws per sample
//! ([`PixelParams`], from the generator of `(seed, epoch, index)` and a
//! stream of its own, so the geometry's draws are those of a loader
//! without them), and what the draws do to a sample's `uint8` crop.
//!
//! The order is fixed: geometry (crop, flips), `ColorJitter`, the
//! auto-augment policy, `RandomGrayscale`, conversion (normalisation), then
//! `RandomErasing`. The draws come in that order too.
//!
//! The auto-augment policies move pixels (shears, translations, rotations):
//! as torchvision's `_AutoAugmentBase` refuses `Mask` and `BoundingBoxes`,
//! [`LoaderOptions::check`] refuses them with masks or boxes.

use bale_format::shuffle::{SplitMix64, derive_seed};
use bale_image::ops::{self, Op};

use crate::options::{AutoAugment, EraseValue, Erasing, LoaderOptions};

/// The `ColorJitter` drawn for a sample: the order of its four components
/// (0 brightness, 1 contrast, 2 saturation, 3 hue: `torch.randperm(4)`) and
/// each factor (`None` for a component left out).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterDraw {
    /// The order the components run in.
    pub order: [u8; 4],
    /// The brightness factor.
    pub brightness: Option<f64>,
    /// The contrast factor.
    pub contrast: Option<f64>,
    /// The saturation factor.
    pub saturation: Option<f64>,
    /// The hue shift.
    pub hue: Option<f64>,
}

/// A box of the output erased: top row, left column, height and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EraseBox {
    /// First row.
    pub top: u32,
    /// First column.
    pub left: u32,
    /// Rows.
    pub height: u32,
    /// Columns.
    pub width: u32,
}

/// Every pixel decision of one sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PixelParams {
    /// `ColorJitter`'s draw.
    pub jitter: Option<JitterDraw>,
    /// The auto-augment ops applied, in order, with their signed magnitudes.
    pub ops: Vec<Op>,
    /// Whether the sample is made grey.
    pub grayscale: bool,
    /// The erased box.
    pub erase: Option<EraseBox>,
}

/// The stream of the pixel draws within a sample's generator.
const PIXEL_STREAM: u64 = 0x7069_7865_6c73;

/// A uniform `float32` draw in `[0, 1)`, as `torch.rand` makes it.
fn rand(rng: &mut SplitMix64) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32
}

/// `float(torch.empty(1).uniform_(a, b))`: in float32.
fn uniform(rng: &mut SplitMix64, a: f64, b: f64) -> f64 {
    let (a, b) = (a as f32, b as f32);
    f64::from(a + (b - a) * rand(rng))
}

/// `torch.linspace(start, end, steps)` in float32, as torch computes it:
/// from the start for the first half, from the end for the second.
fn linspace(start: f64, end: f64, steps: u32, i: u32) -> f64 {
    let (s, e) = (start as f32, end as f32);
    let step = (e - s) / (steps - 1) as f32;
    let v = if i < steps / 2 {
        s + step * i as f32
    } else {
        e - step * (steps - i - 1) as f32
    };
    f64::from(v)
}

/// The op kinds of the policies' spaces, by torchvision's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Identity,
    ShearX,
    ShearY,
    TranslateX,
    TranslateY,
    Rotate,
    Brightness,
    Color,
    Contrast,
    Sharpness,
    Posterize,
    Solarize,
    AutoContrast,
    Equalize,
    Invert,
}

/// `TrivialAugmentWide` and `RandAugment`'s op list, in torchvision's order.
const SPACE: [Kind; 14] = [
    Kind::Identity,
    Kind::ShearX,
    Kind::ShearY,
    Kind::TranslateX,
    Kind::TranslateY,
    Kind::Rotate,
    Kind::Brightness,
    Kind::Color,
    Kind::Contrast,
    Kind::Sharpness,
    Kind::Posterize,
    Kind::Solarize,
    Kind::AutoContrast,
    Kind::Equalize,
];

/// Which magnitude table: `TrivialAugmentWide`'s or the original
/// `AutoAugment` / `RandAugment` one (whose translation depends on the size).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Wide,
    Original,
}

/// Magnitude bin `i` of `bins` of `kind` on a `width x height` image, and
/// whether its sign is drawn; `None` for the ops without a magnitude.
fn magnitude(
    t: Table,
    kind: Kind,
    bins: u32,
    i: u32,
    width: u32,
    height: u32,
) -> Option<(f64, bool)> {
    let wide = t == Table::Wide;
    let lin = |end: f64| linspace(0.0, end, bins, i);
    Some(match kind {
        Kind::ShearX | Kind::ShearY => (lin(if wide { 0.99 } else { 0.3 }), true),
        Kind::TranslateX => (
            lin(if wide {
                32.0
            } else {
                150.0 / 331.0 * f64::from(width)
            }),
            true,
        ),
        Kind::TranslateY => (
            lin(if wide {
                32.0
            } else {
                150.0 / 331.0 * f64::from(height)
            }),
            true,
        ),
        Kind::Rotate => (lin(if wide { 135.0 } else { 30.0 }), true),
        Kind::Brightness | Kind::Color | Kind::Contrast | Kind::Sharpness => {
            (lin(if wide { 0.99 } else { 0.9 }), true)
        }
        Kind::Posterize => {
            // (8 - (arange(bins) / ((bins - 1) / k))).round().int(), in float32.
            let k = if wide { 6.0 } else { 4.0 };
            let d = (f64::from(bins - 1) / k) as f32;
            ((8.0 - i as f32 / d).round_ties_even() as f64, false)
        }
        Kind::Solarize => (linspace(1.0, 0.0, bins, i), false),
        Kind::Identity | Kind::AutoContrast | Kind::Equalize | Kind::Invert => return None,
    })
}

fn op_of(kind: Kind, m: f64) -> Op {
    match kind {
        Kind::Identity => Op::Identity,
        Kind::ShearX => Op::ShearX(m),
        Kind::ShearY => Op::ShearY(m),
        Kind::TranslateX => Op::TranslateX(m),
        Kind::TranslateY => Op::TranslateY(m),
        Kind::Rotate => Op::Rotate(m),
        Kind::Brightness => Op::Brightness(m),
        Kind::Color => Op::Color(m),
        Kind::Contrast => Op::Contrast(m),
        Kind::Sharpness => Op::Sharpness(m),
        // `int(magnitude)` of a value that is already whole.
        Kind::Posterize => Op::Posterize(m.clamp(0.0, 8.0) as u8),
        Kind::Solarize => Op::Solarize(m),
        Kind::AutoContrast => Op::AutoContrast,
        Kind::Equalize => Op::Equalize,
        Kind::Invert => Op::Invert,
    }
}

/// One op with bin `i`: its magnitude, negated when a draw `<= 0.5` says
/// so (drawn only for a signed op), as torchvision's policies do.
fn draw_op(rng: &mut SplitMix64, t: Table, kind: Kind, bins: u32, i: u32, w: u32, h: u32) -> Op {
    match magnitude(t, kind, bins, i, w, h) {
        Some((m, signed)) => {
            let m = if signed && rand(rng) <= 0.5 { -m } else { m };
            op_of(kind, m)
        }
        None => op_of(kind, 0.0),
    }
}

/// `AutoAugmentPolicy.IMAGENET`'s 25 sub-policies: (op, probability, bin).
const IMAGENET: [[(Kind, f32, u32); 2]; 25] = {
    use Kind::*;
    [
        [(Posterize, 0.4, 8), (Rotate, 0.6, 9)],
        [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
        [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
        [(Posterize, 0.6, 7), (Posterize, 0.6, 6)],
        [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
        [(Equalize, 0.4, 0), (Rotate, 0.8, 8)],
        [(Solarize, 0.6, 3), (Equalize, 0.6, 0)],
        [(Posterize, 0.8, 5), (Equalize, 1.0, 0)],
        [(Rotate, 0.2, 3), (Solarize, 0.6, 8)],
        [(Equalize, 0.6, 0), (Posterize, 0.4, 6)],
        [(Rotate, 0.8, 8), (Color, 0.4, 0)],
        [(Rotate, 0.4, 9), (Equalize, 0.6, 0)],
        [(Equalize, 0.0, 0), (Equalize, 0.8, 0)],
        [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
        [(Color, 0.6, 4), (Contrast, 1.0, 8)],
        [(Rotate, 0.8, 8), (Color, 1.0, 2)],
        [(Color, 0.8, 8), (Solarize, 0.8, 7)],
        [(Sharpness, 0.4, 7), (Invert, 0.6, 0)],
        [(ShearX, 0.6, 5), (Equalize, 1.0, 0)],
        [(Color, 0.4, 0), (Equalize, 0.6, 0)],
        [(Equalize, 0.4, 0), (Solarize, 0.2, 4)],
        [(Solarize, 0.6, 5), (AutoContrast, 0.6, 0)],
        [(Invert, 0.6, 0), (Equalize, 1.0, 0)],
        [(Color, 0.6, 4), (Contrast, 1.0, 8)],
        [(Equalize, 0.8, 0), (Equalize, 0.6, 0)],
    ]
};

/// The pixel decisions for sample `index` of epoch `epoch` (an output of
/// `width x height`).
pub fn pixel_params(opts: &LoaderOptions, epoch: u64, index: u64) -> PixelParams {
    let a = &opts.augment;
    let mut p = PixelParams::default();
    if a.is_empty() {
        return p;
    }
    let (height, width) = opts.size;
    let mut rng = SplitMix64::new(derive_seed(opts.seed, &[epoch, index, PIXEL_STREAM]));
    if let Some(j) = a.color_jitter {
        // torch.randperm(4), then the factors in the order b, c, s, h.
        let mut order = [0u8, 1, 2, 3];
        for k in (1..4).rev() {
            order.swap(k, rng.below(k as u64 + 1) as usize);
        }
        let mut draw = |r: Option<(f64, f64)>| r.map(|(lo, hi)| uniform(&mut rng, lo, hi));
        p.jitter = Some(JitterDraw {
            order,
            brightness: draw(j.brightness),
            contrast: draw(j.contrast),
            saturation: draw(j.saturation),
            hue: draw(j.hue),
        });
    }
    match a.auto_augment {
        None => {}
        Some(AutoAugment::TrivialWide { bins }) => {
            let kind = SPACE[rng.below(SPACE.len() as u64) as usize];
            let i = if magnitude(Table::Wide, kind, bins, 0, width, height).is_some() {
                rng.below(u64::from(bins)) as u32
            } else {
                0
            };
            p.ops
                .push(draw_op(&mut rng, Table::Wide, kind, bins, i, width, height));
        }
        Some(AutoAugment::Rand {
            num_ops,
            magnitude: i,
            bins,
        }) => {
            for _ in 0..num_ops {
                let kind = SPACE[rng.below(SPACE.len() as u64) as usize];
                p.ops.push(draw_op(
                    &mut rng,
                    Table::Original,
                    kind,
                    bins,
                    i,
                    width,
                    height,
                ));
            }
        }
        Some(AutoAugment::ImageNet) => {
            let policy = IMAGENET[rng.below(IMAGENET.len() as u64) as usize];
            for (kind, prob, i) in policy {
                if rand(&mut rng) <= prob {
                    p.ops.push(draw_op(
                        &mut rng,
                        Table::Original,
                        kind,
                        10,
                        i,
                        width,
                        height,
                    ));
                }
            }
        }
    }
    if a.grayscale > 0.0 {
        // RandomGrayscale: skipped when torch.rand(1) >= p.
        p.grayscale = f64::from(rand(&mut rng)) < a.grayscale;
    }
    if let Some(e) = a.erasing
        && f64::from(rand(&mut rng)) < e.p
    {
        p.erase = erase_box(&mut rng, &e, width, height);
    }
    p
}

/// `RandomErasing.make_params`: ten tries of an area and an aspect ratio,
/// then the position; `None` (nothing erased) when none fits.
fn erase_box(rng: &mut SplitMix64, e: &Erasing, width: u32, height: u32) -> Option<EraseBox> {
    let area = f64::from(width) * f64::from(height);
    let (l0, l1) = ((e.ratio.0 as f32).ln(), (e.ratio.1 as f32).ln());
    for _ in 0..10 {
        let erase_area = area * uniform(rng, e.scale.0, e.scale.1);
        let aspect = f64::from((uniform(rng, f64::from(l0), f64::from(l1)) as f32).exp());
        let h = (erase_area * aspect).sqrt().round_ties_even();
        let w = (erase_area / aspect).sqrt().round_ties_even();
        if !(h < f64::from(height) && w < f64::from(width)) {
            continue;
        }
        let (h, w) = (h as u32, w as u32);
        let top = rng.below(u64::from(height - h) + 1) as u32;
        let left = rng.below(u64::from(width - w) + 1) as u32;
        return Some(EraseBox {
            top,
            left,
            height: h,
            width: w,
        });
    }
    None
}

thread_local! {
    /// A copy of the pixels for the ops that read them while writing.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs the drawn `ColorJitter`, auto-augment ops and grey conversion on a
/// sample's `uint8` RGB crop (`width x height`), in place.
pub(crate) fn apply(p: &PixelParams, px: &mut [u8], width: usize, height: usize, fill: [u8; 3]) {
    if let Some(j) = &p.jitter {
        let steps: Vec<ops::Jitter> = j
            .order
            .iter()
            .filter_map(|c| match c {
                0 => j.brightness.map(ops::Jitter::Brightness),
                1 => j.contrast.map(ops::Jitter::Contrast),
                2 => j.saturation.map(ops::Jitter::Saturation),
                _ => j.hue.map(ops::Jitter::Hue),
            })
            .collect();
        ops::color_jitter(px, &steps);
    }
    if !p.ops.is_empty() {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            for op in &p.ops {
                op.apply(px, width, height, fill, &mut s);
            }
        });
    }
    if p.grayscale {
        ops::rgb_to_grayscale(px);
    }
}

/// The stream of `RandomErasing`'s noise within a sample's generator.
const NOISE_STREAM: u64 = 0x006e_6f69_7365;

/// `F.erase` of box `b` in an image of `width` columns, laid out channels
/// first or last: the box's elements, channel by channel and row by row,
/// take the values `value` gives in that order.
pub(crate) fn erase<T>(
    out: &mut [T],
    b: EraseBox,
    width: usize,
    plane: usize,
    channels_first: bool,
    mut value: impl FnMut(usize) -> T,
) {
    for c in 0..3 {
        for y in b.top as usize..(b.top + b.height) as usize {
            for x in b.left as usize..(b.left + b.width) as usize {
                let p = y * width + x;
                let at = if channels_first {
                    c * plane + p
                } else {
                    p * 3 + c
                };
                out[at] = value(c);
            }
        }
    }
}

/// The values `RandomErasing` writes for sample `index` of `epoch`, per
/// channel in [`erase`]'s order, in normalised units (a constant, or the
/// normal noise of the sample's stream).
pub(crate) fn erase_values(
    opts: &LoaderOptions,
    epoch: u64,
    index: u64,
    value: EraseValue,
) -> impl FnMut(usize) -> f32 {
    let mut rng = SplitMix64::new(derive_seed(opts.seed, &[epoch, index, NOISE_STREAM]));
    move |c| match value {
        EraseValue::Fill(v) => v[c],
        EraseValue::Random => crate::mix::normal(&mut rng) as f32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Augment, ColorJitter};

    fn with(augment: Augment) -> LoaderOptions {
        LoaderOptions {
            augment,
            ..LoaderOptions::default()
        }
    }

    #[test]
    fn draws_depend_on_seed_epoch_and_index_only() {
        let opts = with(Augment {
            color_jitter: Some(ColorJitter::new(0.4, 0.4, 0.4, 0.1)),
            auto_augment: Some(AutoAugment::TrivialWide { bins: 31 }),
            grayscale: 0.2,
            erasing: Some(Erasing::new(0.5)),
        });
        let a = pixel_params(&opts, 1, 7);
        assert_eq!(a, pixel_params(&opts, 1, 7));
        let differ = (0..100)
            .filter(|&i| pixel_params(&opts, 1, i) != pixel_params(&opts, 2, i))
            .count();
        assert!(differ > 90, "{differ}");
        // The geometry's draws are those of a loader without augmentations.
        let plain = LoaderOptions {
            flip: true,
            ..LoaderOptions::default()
        };
        let aug = LoaderOptions {
            flip: true,
            ..opts.clone()
        };
        for i in 0..50 {
            assert_eq!(
                crate::augment::sample_params(&plain, 0, i, 500, 375),
                crate::augment::sample_params(&aug, 0, i, 500, 375)
            );
        }
    }

    #[test]
    fn trivial_augment_picks_ops_and_bins_uniformly() {
        let opts = with(Augment {
            auto_augment: Some(AutoAugment::TrivialWide { bins: 31 }),
            ..Augment::default()
        });
        let mut ops = std::collections::BTreeMap::new();
        let mut negative = 0;
        let mut signed = 0;
        for i in 0..14_000 {
            let p = pixel_params(&opts, 0, i);
            assert_eq!(p.ops.len(), 1);
            let op = p.ops[0];
            *ops.entry(op.name()).or_insert(0) += 1;
            if matches!(op, Op::Rotate(_) | Op::ShearX(_)) && op.magnitude() != 0.0 {
                signed += 1;
                negative += usize::from(op.magnitude() < 0.0);
            }
        }
        assert_eq!(ops.len(), 14);
        for (name, n) in &ops {
            assert!((850..1150).contains(n), "{name}: {n}");
        }
        let share = negative as f64 / signed as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
    }

    #[test]
    fn magnitude_tables_are_torchvisions() {
        // torchvision: linspace(0, 135, 31)[20] == 90, Posterize bins of 31 from 8 to 2.
        assert_eq!(
            magnitude(Table::Wide, Kind::Rotate, 31, 20, 224, 224),
            Some((90.0, true))
        );
        assert_eq!(
            magnitude(Table::Wide, Kind::Posterize, 31, 0, 224, 224),
            Some((8.0, false))
        );
        assert_eq!(
            magnitude(Table::Wide, Kind::Posterize, 31, 30, 224, 224),
            Some((2.0, false))
        );
        assert_eq!(
            magnitude(Table::Original, Kind::Posterize, 31, 30, 224, 224),
            Some((4.0, false))
        );
        assert_eq!(
            magnitude(Table::Wide, Kind::Solarize, 31, 30, 224, 224),
            Some((0.0, false))
        );
        assert_eq!(
            magnitude(Table::Wide, Kind::Equalize, 31, 3, 224, 224),
            None
        );
        let (t, _) = magnitude(Table::Original, Kind::TranslateX, 10, 9, 331, 224).unwrap();
        assert!((t - 150.0).abs() < 1e-4, "{t}");
    }

    #[test]
    fn auto_augment_with_masks_or_boxes_is_refused() {
        let mut opts = with(Augment {
            auto_augment: Some(AutoAugment::ImageNet),
            ..Augment::default()
        });
        assert!(opts.check().is_ok());
        opts.masks = vec!["seg.png".into()];
        let e = opts.check().unwrap_err().to_string();
        assert!(e.contains("auto_augment") && e.contains("masks"), "{e}");
        opts.masks.clear();
        opts.boxes = Some("json".into());
        assert!(opts.check().is_err());
        // ColorJitter is photometric: masks are fine.
        let mut opts = with(Augment {
            color_jitter: Some(ColorJitter::new(0.4, 0.0, 0.0, 0.6)),
            ..Augment::default()
        });
        opts.masks = vec!["seg.png".into()];
        let e = opts.check().unwrap_err().to_string();
        assert!(e.contains("hue"), "{e}");
    }

    #[test]
    fn erased_boxes_fit_and_follow_scale() {
        let opts = with(Augment {
            erasing: Some(Erasing::new(1.0)),
            ..Augment::default()
        });
        let mut n = 0;
        for i in 0..2000 {
            if let Some(b) = pixel_params(&opts, 0, i).erase {
                n += 1;
                assert!(b.top + b.height <= 224 && b.left + b.width <= 224, "{b:?}");
                let share = f64::from(b.height * b.width) / (224.0 * 224.0);
                assert!((0.015..0.36).contains(&share), "{b:?}");
            }
        }
        assert!(n > 1800, "{n}");
    }
}
