//! `MixUp` and `CutMix` per batch, with torchvision v2's semantics, the
//! last stage of the pipeline (after the batch is compacted past skipped
//! samples): `lambda ~ Beta(alpha, alpha)`; each sample's partner is the
//! one before it in the batch (the batch rolled by one: the first takes the
//! last); `CutMix` pastes the partner's box, drawn from `lambda`, and
//! corrects `lambda` by the box's area; labels become one-hot, then mixed
//! as the pixels: `(B, num_classes)` `float32`. With both, one of them is
//! chosen per batch with probability 1/2 (`RandomChoice([MixUp, CutMix])`).
//!
//! Every draw comes from a generator seeded by `(seed, epoch, batch)` and a
//! stream of its own: the same batches whatever the thread count, and the
//! samples' own draws are those of a loader without mixing.

use bale_format::shuffle::{SplitMix64, derive_seed};
use half::f16;

use crate::batch::{Array, Batch, BufferPool, Element, Elements};
use crate::error::{LoaderError, Result};
use crate::options::LoaderOptions;

/// Which of the two a batch got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MixKind {
    /// `MixUp`: every pixel `lam * x + (1 - lam) * partner`.
    MixUp,
    /// `CutMix`: the partner's box pasted.
    CutMix,
}

impl MixKind {
    /// torchvision's name of the transform.
    pub fn name(self) -> &'static str {
        match self {
            MixKind::MixUp => "MixUp",
            MixKind::CutMix => "CutMix",
        }
    }
}

/// The box `CutMix` pastes, in the output's pixels: columns `x1..x2`, rows
/// `y1..y2` (torchvision's `box`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CutBox {
    /// First column.
    pub x1: u32,
    /// First row.
    pub y1: u32,
    /// One past the last column.
    pub x2: u32,
    /// One past the last row.
    pub y2: u32,
}

/// The mixing decisions of one batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixParams {
    /// `MixUp` or `CutMix`.
    pub kind: MixKind,
    /// The `lambda` drawn from `Beta(alpha, alpha)` (a `float32` value, as
    /// torch draws it).
    pub lam: f64,
    /// The `lambda` the labels (and `MixUp`'s pixels) are mixed with:
    /// `lam`, or for `CutMix` `1 - box area / image area` (torchvision's
    /// `lam_adjusted`).
    pub label_lam: f64,
    /// `CutMix`'s centre `(x, y)`, as `torch.randint(W)`, `torch.randint(H)`.
    pub center: Option<(u32, u32)>,
    /// `CutMix`'s box.
    pub cut: Option<CutBox>,
}

impl MixParams {
    /// The partner of position `k` in a batch of `len` samples: the sample
    /// before it, the first's is the last (`roll(1, 0)`).
    pub fn partner(k: usize, len: usize) -> usize {
        (k + len - 1) % len
    }
}

/// The stream of the mixing draws within a batch's generator.
const MIX_STREAM: u64 = 0x006d_6978_7570;

fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box-Muller).
pub(crate) fn normal(rng: &mut SplitMix64) -> f64 {
    let u = 1.0 - unit(rng); // (0, 1]
    let v = unit(rng);
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A `Gamma(a, 1)` draw (Marsaglia and Tsang; `a < 1` boosted by `U^(1/a)`).
fn gamma(rng: &mut SplitMix64, a: f64) -> f64 {
    if a < 1.0 {
        let u = 1.0 - unit(rng);
        return gamma(rng, a + 1.0) * u.powf(1.0 / a);
    }
    let d = a - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - unit(rng);
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// A `Beta(a, a)` draw, as a `float32` value within `(0, 1)`.
fn beta(rng: &mut SplitMix64, a: f64) -> f64 {
    let x = gamma(rng, a);
    let y = gamma(rng, a);
    let b = if x + y > 0.0 { x / (x + y) } else { 0.5 };
    // torch's Dirichlet clamps to [tiny, 1 - eps] of float32.
    f64::from((b as f32).clamp(f32::MIN_POSITIVE, 1.0 - f32::EPSILON))
}

/// The mixing decisions for batch `batch` of epoch `epoch` (counted from
/// the epoch's start), `None` without mixing.
pub fn mix_params(opts: &LoaderOptions, epoch: u64, batch: u64) -> Option<MixParams> {
    let m = opts.mix?;
    let mut rng = SplitMix64::new(derive_seed(opts.seed, &[epoch, batch, MIX_STREAM]));
    let kind = match (m.mixup_alpha > 0.0, m.cutmix_alpha > 0.0) {
        (true, true) => {
            if unit(&mut rng) < 0.5 {
                MixKind::MixUp
            } else {
                MixKind::CutMix
            }
        }
        (true, false) => MixKind::MixUp,
        (false, true) => MixKind::CutMix,
        (false, false) => return None,
    };
    match kind {
        MixKind::MixUp => {
            let lam = beta(&mut rng, m.mixup_alpha);
            Some(MixParams {
                kind,
                lam,
                label_lam: lam,
                center: None,
                cut: None,
            })
        }
        MixKind::CutMix => {
            let lam = beta(&mut rng, m.cutmix_alpha);
            let (h, w) = opts.size;
            let rx = rng.below(u64::from(w)) as i64;
            let ry = rng.below(u64::from(h)) as i64;
            let r = 0.5 * (1.0 - lam).sqrt();
            let rw = (r * f64::from(w)) as i64;
            let rh = (r * f64::from(h)) as i64;
            let cut = CutBox {
                x1: (rx - rw).max(0) as u32,
                y1: (ry - rh).max(0) as u32,
                x2: (rx + rw).min(i64::from(w)) as u32,
                y2: (ry + rh).min(i64::from(h)) as u32,
            };
            let area = f64::from(cut.x2 - cut.x1) * f64::from(cut.y2 - cut.y1);
            let label_lam = 1.0 - area / (f64::from(w) * f64::from(h));
            Some(MixParams {
                kind,
                lam,
                label_lam,
                center: Some((rx as u32, ry as u32)),
                cut: Some(cut),
            })
        }
    }
}

/// Checks a sample's class label against `num_classes` (torch's `one_hot`
/// refuses a label outside them); the error is the sample's.
pub(crate) fn check_label(label: i64, num_classes: usize) -> std::result::Result<(), String> {
    if label < 0 || label as u64 >= num_classes as u64 {
        let what = if label == -1 {
            "the sample has no class label, and MixUp / CutMix need one".to_owned()
        } else {
            format!("class {label} is outside num_classes={num_classes}")
        };
        return Err(what);
    }
    Ok(())
}

/// How one element is mixed: `x * b + partner * a` with `a = 1 - lam`,
/// `b = lam`, as torchvision computes it on the type.
trait Pixel: Copy {
    fn mix(x: Self, partner: Self, a: f32, b: f32) -> Self;
}

impl Pixel for f32 {
    fn mix(x: f32, partner: f32, a: f32, b: f32) -> f32 {
        // rolled.mul_(1 - lam).add_(x.mul(lam)), each rounded to float32.
        partner * a + x * b
    }
}

impl Pixel for f16 {
    fn mix(x: f16, partner: f16, a: f32, b: f32) -> f16 {
        let p = f16::from_f32(partner.to_f32() * a);
        let x = f16::from_f32(x.to_f32() * b);
        f16::from_f32(p.to_f32() + x.to_f32())
    }
}

impl Pixel for u8 {
    fn mix(x: u8, partner: u8, a: f32, b: f32) -> u8 {
        (f32::from(partner) * a + f32::from(x) * b)
            .round()
            .clamp(0.0, 255.0) as u8
    }
}

/// Mixes the images of a batch of `n` samples of `per` elements each.
fn mix_images<T: Pixel>(
    v: &mut [T],
    n: usize,
    per: usize,
    p: &MixParams,
    (h, w): (usize, usize),
    channels_first: bool,
) {
    if n == 0 {
        return;
    }
    // The last sample, the first's partner, before it is mixed itself.
    let last = v[(n - 1) * per..n * per].to_vec();
    let a = (1.0 - p.label_lam) as f32;
    let b = p.label_lam as f32;
    for k in (0..n).rev() {
        let (before, rest) = v.split_at_mut(k * per);
        let x = &mut rest[..per];
        let partner: &[T] = if k == 0 {
            &last
        } else {
            &before[(k - 1) * per..]
        };
        match p.cut {
            None => {
                for (x, &q) in x.iter_mut().zip(partner) {
                    *x = T::mix(*x, q, a, b);
                }
            }
            Some(c) => {
                let (x1, x2) = (c.x1 as usize, c.x2 as usize);
                for y in c.y1 as usize..c.y2 as usize {
                    if channels_first {
                        for ch in 0..3 {
                            let row = ch * h * w + y * w;
                            x[row + x1..row + x2].copy_from_slice(&partner[row + x1..row + x2]);
                        }
                    } else {
                        let row = y * w * 3;
                        x[row + x1 * 3..row + x2 * 3]
                            .copy_from_slice(&partner[row + x1 * 3..row + x2 * 3]);
                    }
                }
            }
        }
    }
}

/// Mixes a finished batch: its images in place, its class labels replaced
/// by the soft labels `(B, num_classes)` `float32` (an array of `pool`).
pub(crate) fn apply(
    opts: &LoaderOptions,
    p: &MixParams,
    batch: &mut Batch,
    pool: &std::sync::Arc<BufferPool>,
) -> Result<()> {
    let Some(m) = opts.mix else {
        return Ok(());
    };
    let n = batch.len();
    let (h, w) = (opts.size.0 as usize, opts.size.1 as usize);
    let per = h * w * 3;
    let cf = opts.channels_first;
    match &mut batch.images.data {
        Elements::U8(v) => mix_images(v, n, per, p, (h, w), cf),
        Elements::F32(v) => mix_images(v, n, per, p, (h, w), cf),
        Elements::F16(v) => mix_images(v, n, per, p, (h, w), cf),
        // Images are never int64.
        Elements::I64(_) => {}
    }
    let a = (1.0 - p.label_lam) as f32;
    let b = p.label_lam as f32;
    if let Some(Elements::F32(v)) = batch.labels.as_mut().map(|l| &mut l.data) {
        // Label vectors (probabilities) are mixed as they are.
        let per = v.len().checked_div(n).unwrap_or(0);
        mix_images(v, n, per, &MixParams { cut: None, ..*p }, (0, 0), false);
        return Ok(());
    }
    let classes = m.num_classes;
    let mut soft: Array = pool.take(Element::F32, &[n, classes])?;
    let labels = batch
        .labels
        .as_ref()
        .and_then(Array::as_i64)
        .ok_or_else(|| LoaderError::Thread("mixing a batch without class labels".into()))?;
    if let Elements::F32(out) = &mut soft.data {
        out.fill(0.0);
        for k in 0..n {
            let row = &mut out[k * classes..(k + 1) * classes];
            let (own, partner) = (labels[k], labels[MixParams::partner(k, n)]);
            // one_hot(y).roll(1, 0).mul_(1 - lam).add_(one_hot(y).mul(lam)).
            row[partner as usize] = a;
            row[own as usize] += b;
        }
    }
    batch.labels = Some(soft);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{LabelSource, Mix, check_vectors};

    fn opts(mixup: f64, cutmix: f64) -> LoaderOptions {
        LoaderOptions {
            mix: Some(Mix {
                mixup_alpha: mixup,
                cutmix_alpha: cutmix,
                num_classes: 10,
            }),
            ..LoaderOptions::default()
        }
    }

    #[test]
    fn lambda_follows_beta_and_both_are_chosen_evenly() {
        // Beta(a, a): mean 1/2, variance 1 / (4 (2a + 1)).
        for alpha in [0.2, 1.0, 4.0] {
            let o = opts(alpha, 0.0);
            let lams: Vec<f64> = (0..20_000)
                .map(|b| mix_params(&o, 0, b).unwrap().lam)
                .collect();
            let mean = lams.iter().sum::<f64>() / lams.len() as f64;
            let var = lams.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / lams.len() as f64;
            let want = 1.0 / (4.0 * (2.0 * alpha + 1.0));
            assert!((mean - 0.5).abs() < 0.01, "{alpha}: mean {mean}");
            assert!(
                (var - want).abs() < 0.05 * want,
                "{alpha}: var {var} want {want}"
            );
            assert!(lams.iter().all(|l| *l > 0.0 && *l < 1.0));
        }
        let both = opts(0.8, 1.0);
        let cut = (0..10_000)
            .filter(|&b| mix_params(&both, 0, b).unwrap().kind == MixKind::CutMix)
            .count();
        assert!((4800..5200).contains(&cut), "{cut}");
        assert_eq!(mix_params(&both, 3, 9), mix_params(&both, 3, 9));
        assert_ne!(mix_params(&both, 3, 9), mix_params(&both, 4, 9));
    }

    #[test]
    fn cutmix_boxes_fit_and_correct_lambda() {
        let o = LoaderOptions {
            size: (160, 224),
            ..opts(0.0, 1.0)
        };
        for b in 0..2000 {
            let p = mix_params(&o, 0, b).unwrap();
            let c = p.cut.unwrap();
            assert!(
                c.x1 <= c.x2 && c.x2 <= 224 && c.y1 <= c.y2 && c.y2 <= 160,
                "{p:?}"
            );
            let area = f64::from((c.x2 - c.x1) * (c.y2 - c.y1));
            assert_eq!(p.label_lam, 1.0 - area / (224.0 * 160.0));
            // An uncut box is 2 r W by 2 r H: area (1 - lam) W H, less where clipped or truncated.
            assert!(area <= (1.0 - p.lam) * 224.0 * 160.0 + 1e-6, "{p:?}");
        }
    }

    #[test]
    fn the_checks_name_the_option() {
        let name = |o: &LoaderOptions| match o.check() {
            Err(LoaderError::Option { name, .. }) => name,
            other => panic!("{other:?}"),
        };
        assert!(opts(0.2, 1.0).check().is_ok());
        assert_eq!(name(&opts(-1.0, 0.0)), "mixup_alpha");
        assert_eq!(name(&opts(0.0, f64::NAN)), "cutmix_alpha");
        assert_eq!(name(&opts(0.0, 0.0)), "num_classes");
        let mut o = opts(0.0, 1.0);
        o.mix.as_mut().unwrap().num_classes = 0;
        assert_eq!(name(&o), "num_classes");
        let o = LoaderOptions {
            masks: vec!["seg.png".into()],
            ..opts(0.0, 1.0)
        };
        assert_eq!(name(&o), "cutmix_alpha");
        let o = LoaderOptions {
            boxes: Some("json".into()),
            ..opts(0.5, 0.0)
        };
        assert_eq!(name(&o), "mixup_alpha");
        let o = LoaderOptions {
            label: LabelSource::None,
            ..opts(0.5, 0.0)
        };
        assert_eq!(name(&o), "mixup_alpha");
        // Label vectors may leave num_classes out; if given, it is their length.
        let mut o = LoaderOptions {
            label: LabelSource::Npy {
                member: "tags.npy".into(),
            },
            ..opts(0.5, 0.0)
        };
        assert!(check_vectors(&o, 10).is_ok() && check_vectors(&o, 7).is_err());
        o.mix.as_mut().unwrap().num_classes = 0;
        assert!(o.check().is_ok() && check_vectors(&o, 7).is_ok());
    }

    #[test]
    fn a_batch_is_rolled_by_one() {
        // Three 1x2 samples (channels last): MixUp with lam 1/4, then CutMix of column 1.
        let p = MixParams {
            kind: MixKind::MixUp,
            lam: 0.25,
            label_lam: 0.25,
            center: None,
            cut: None,
        };
        let mut v: Vec<f32> = (0..18).map(|i| i as f32).collect();
        let orig = v.clone();
        mix_images(&mut v, 3, 6, &p, (1, 2), false);
        for k in 0..3 {
            let q = MixParams::partner(k, 3);
            for e in 0..6 {
                assert_eq!(
                    v[k * 6 + e],
                    orig[q * 6 + e] * 0.75 + orig[k * 6 + e] * 0.25
                );
            }
        }
        let cut = MixParams {
            kind: MixKind::CutMix,
            cut: Some(CutBox {
                x1: 1,
                y1: 0,
                x2: 2,
                y2: 1,
            }),
            ..p
        };
        let mut u: Vec<u8> = (0..18).collect();
        mix_images(&mut u, 3, 6, &cut, (1, 2), false);
        assert_eq!(
            u,
            [0, 1, 2, 15, 16, 17, 6, 7, 8, 3, 4, 5, 12, 13, 14, 9, 10, 11]
        );
    }
}
