//! `MixUp` and `CutMix`'s options ([`Mix`]) and their checks, part of
//! [`LoaderOptions::check`]. What they do to a batch is `crate::mix`'s.

use super::{LabelSource, LoaderOptions, bad};
use crate::error::Result;

/// `MixUp(alpha)` and `CutMix(alpha)` of the batches (an alpha of 0 leaves
/// that one out), with labels of `num_classes` classes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Mix {
    /// `MixUp`'s alpha (0: no `MixUp`).
    pub mixup_alpha: f64,
    /// `CutMix`'s alpha (0: no `CutMix`).
    pub cutmix_alpha: f64,
    /// The classes of the one-hot labels: every label in `0..num_classes`.
    pub num_classes: usize,
}

/// The check of [`LoaderOptions::mix`], part of [`LoaderOptions::check`].
pub(crate) fn check(opts: &LoaderOptions) -> Result<()> {
    let Some(m) = opts.mix else {
        return Ok(());
    };
    for (name, a) in [
        ("mixup_alpha", m.mixup_alpha),
        ("cutmix_alpha", m.cutmix_alpha),
    ] {
        if !(a.is_finite() && (0.0..=1e6).contains(&a)) {
            return bad(
                name,
                format!("{a}: the Beta distribution's alpha, above 0 (0 leaves it out)"),
            );
        }
    }
    let name = if m.mixup_alpha > 0.0 {
        "mixup_alpha"
    } else if m.cutmix_alpha > 0.0 {
        "cutmix_alpha"
    } else {
        return bad(
            "num_classes",
            "sets the soft labels of MixUp and CutMix: give mixup_alpha or cutmix_alpha too",
        );
    };
    let vectors = matches!(opts.label, LabelSource::Npy { .. });
    if (m.num_classes == 0 && !vectors) || m.num_classes > 1 << 20 {
        return bad(
            "num_classes",
            format!(
                "{}: {name} makes one-hot labels of num_classes classes (1 to 2**20); it may be left out only for label vectors (label=\"npy:...\")",
                m.num_classes
            ),
        );
    }
    if !opts.masks.is_empty() || opts.boxes.is_some() {
        return bad(
            name,
            "MixUp and CutMix mix images across the batch, and would leave masks and boxes wrong: they are refused with masks or boxes, as torchvision refuses them",
        );
    }
    if opts.label == LabelSource::None {
        return bad(
            name,
            "mixes the labels with the images: give labels (label=\"cls\", \"json:...\" or \"npy:...\")",
        );
    }
    Ok(())
}

/// Checks `num_classes` against the length of the label vectors, once it
/// is known (torchvision's check of 2-D labels).
pub(crate) fn check_vectors(opts: &LoaderOptions, classes: usize) -> Result<()> {
    match opts.mix {
        Some(m) if m.num_classes != 0 && m.num_classes != classes => bad(
            "num_classes",
            format!(
                "{}: the label vectors have {classes} values (num_classes may be left out for them)",
                m.num_classes
            ),
        ),
        _ => Ok(()),
    }
}
