//! The pixel augmentations' options ([`Augment`] and its parts) and their
//! check, part of [`LoaderOptions::check`]. What the draws do is the
//! policy's (`crate::policy`).

use std::str::FromStr;

use super::{LoaderOptions, bad};
use crate::error::{LoaderError, Result};

/// torchvision v2's `ColorJitter`: each factor's range, `None` for a
/// component left out.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ColorJitter {
    /// Brightness factors.
    pub brightness: Option<(f64, f64)>,
    /// Contrast factors.
    pub contrast: Option<(f64, f64)>,
    /// Saturation factors.
    pub saturation: Option<(f64, f64)>,
    /// Hue shifts, within `[-0.5, 0.5]`.
    pub hue: Option<(f64, f64)>,
}

impl ColorJitter {
    /// `ColorJitter(brightness, contrast, saturation, hue)` given single
    /// values, as torchvision's `_check_input` turns them into ranges:
    /// `[max(0, 1 - v), 1 + v]` for the first three, `[-v, v]` for hue; 0
    /// leaves a component out.
    pub fn new(brightness: f64, contrast: f64, saturation: f64, hue: f64) -> ColorJitter {
        let factor = |v: f64| (v != 0.0).then(|| ((1.0 - v).max(0.0), 1.0 + v));
        ColorJitter {
            brightness: factor(brightness),
            contrast: factor(contrast),
            saturation: factor(saturation),
            hue: (hue != 0.0).then_some((-hue, hue)),
        }
    }
}

/// The auto-augment policy (torchvision's op lists and magnitude tables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoAugment {
    /// `TrivialAugmentWide(num_magnitude_bins)`: one op of 14, one bin.
    TrivialWide {
        /// `num_magnitude_bins` (torchvision's default 31).
        bins: u32,
    },
    /// `RandAugment(num_ops, magnitude, num_magnitude_bins)`.
    Rand {
        /// Ops applied in turn (default 2).
        num_ops: u32,
        /// The bin of every op's magnitude (default 9).
        magnitude: u32,
        /// `num_magnitude_bins` (default 31).
        bins: u32,
    },
    /// `AutoAugment(AutoAugmentPolicy.IMAGENET)`: one of 25 sub-policies of
    /// two ops, each applied with its probability.
    ImageNet,
}

impl AutoAugment {
    /// The words [`AutoAugment::from_str`] takes.
    pub const NAMES: &'static str = "\"trivial_wide\", \"rand\" or \"imagenet\"";
}

impl FromStr for AutoAugment {
    type Err = LoaderError;
    /// `"trivial_wide"`, `"rand"` (torchvision's defaults) or `"imagenet"`.
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "trivial_wide" => AutoAugment::TrivialWide { bins: 31 },
            "rand" => AutoAugment::Rand {
                num_ops: 2,
                magnitude: 9,
                bins: 31,
            },
            "imagenet" => AutoAugment::ImageNet,
            other => {
                return Err(LoaderError::Option {
                    name: "auto_augment",
                    what: format!("{other:?}: expected {}", AutoAugment::NAMES),
                });
            }
        })
    }
}

/// torchvision v2's `RandomErasing(p, scale, ratio, value)`, on the output
/// (after normalisation, as in torchvision's recipes): `value` is written
/// in the output's units (a float output's normalised values; a `uint8`
/// output takes it rounded); see [`EraseValue`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Erasing {
    /// The probability of erasing a box.
    pub p: f64,
    /// Bounds of the box's area, a fraction of the image's (default 0.02 to 0.33).
    pub scale: (f64, f64),
    /// Bounds of its height / width, drawn log-uniformly (default 0.3 to 3.3).
    pub ratio: (f64, f64),
    /// What the box is filled with (default 0 on every channel).
    pub value: EraseValue,
}

/// What `RandomErasing` fills its box with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum EraseValue {
    /// A value per channel, in the output's units.
    Fill([f32; 3]),
    /// torchvision's `value="random"`: a standard normal draw per element
    /// of the box (channel by channel, row by row: `torch.empty((3, h,
    /// w)).normal_()`), from a stream of the sample's own. A float output
    /// takes it as it is (its normalised units); a `uint8` output takes the
    /// pixel that normalising by the loader's `mean` and `std` turns into
    /// it, `round(255 * (mean + std * z))`, clamped to 0 to 255.
    Random,
}

impl Erasing {
    /// `RandomErasing(p)` with torchvision's other defaults.
    pub fn new(p: f64) -> Erasing {
        Erasing {
            p,
            scale: (0.02, 0.33),
            ratio: (0.3, 3.3),
            value: EraseValue::Fill([0.0; 3]),
        }
    }
}

/// The pixel augmentations of a loader (default: none).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Augment {
    /// `ColorJitter`, first after the geometry.
    pub color_jitter: Option<ColorJitter>,
    /// The auto-augment policy, after `ColorJitter` (nearest interpolation;
    /// uncovered pixels take the loader's `fill`).
    pub auto_augment: Option<AutoAugment>,
    /// `RandomGrayscale(p)`: the probability (0: none).
    pub grayscale: f64,
    /// `RandomErasing`, on the output.
    pub erasing: Option<Erasing>,
}

impl Augment {
    /// Whether any pixel augmentation is asked for.
    pub fn is_empty(&self) -> bool {
        *self == Augment::default()
    }
}

/// The check of [`LoaderOptions::augment`], part of [`LoaderOptions::check`].
pub(crate) fn check(opts: &LoaderOptions) -> Result<()> {
    let a = &opts.augment;
    let prob = |p: f64| p.is_finite() && (0.0..=1.0).contains(&p);
    if let Some(j) = a.color_jitter {
        let ranges = [
            ("brightness", j.brightness, (0.0, f64::INFINITY)),
            ("contrast", j.contrast, (0.0, f64::INFINITY)),
            ("saturation", j.saturation, (0.0, f64::INFINITY)),
            ("hue", j.hue, (-0.5, 0.5)),
        ];
        for (what, range, (lo, hi)) in ranges {
            if let Some((a, b)) = range
                && !(a.is_finite() && b.is_finite() && lo <= a && a <= b && b <= hi)
            {
                return bad(
                    "color_jitter",
                    format!("{what} ({a}, {b}): want {lo} <= min <= max <= {hi}"),
                );
            }
        }
    }
    match a.auto_augment {
        Some(AutoAugment::TrivialWide { bins }) if !(2..=1024).contains(&bins) => {
            return bad(
                "auto_augment",
                format!("{bins} magnitude bins: from 2 to 1024"),
            );
        }
        Some(AutoAugment::Rand {
            num_ops,
            magnitude,
            bins,
        }) if !(2..=1024).contains(&bins) || magnitude >= bins || num_ops > 16 => {
            return bad(
                "auto_augment",
                format!(
                    "RandAugment({num_ops} ops, magnitude {magnitude}, {bins} bins): want 2 to 1024 bins, a magnitude below them, at most 16 ops"
                ),
            );
        }
        Some(_) if !opts.masks.is_empty() || opts.boxes.is_some() => {
            return bad(
                "auto_augment",
                "shears, translates and rotates the image: it is refused with masks or boxes, as torchvision refuses them",
            );
        }
        _ => {}
    }
    if !prob(a.grayscale) {
        return bad(
            "random_grayscale",
            format!("{}: a probability, 0 to 1", a.grayscale),
        );
    }
    if let Some(e) = a.erasing {
        if !prob(e.p) {
            return bad("random_erasing", format!("{}: a probability, 0 to 1", e.p));
        }
        let (s0, s1) = e.scale;
        if !(s0.is_finite() && s1.is_finite() && 0.0 <= s0 && s0 <= s1 && s1 <= 1.0) {
            return bad(
                "erasing_scale",
                format!("{:?}: want 0 <= min <= max <= 1", e.scale),
            );
        }
        let (r0, r1) = e.ratio;
        if !(r0.is_finite() && r1.is_finite() && 0.0 < r0 && r0 <= r1) {
            return bad(
                "erasing_ratio",
                format!("{:?}: want 0 < min <= max", e.ratio),
            );
        }
        if let EraseValue::Fill(v) = e.value
            && v.iter().any(|v| !v.is_finite())
        {
            return bad("erasing_value", format!("{v:?}: finite values"));
        }
    }
    Ok(())
}
