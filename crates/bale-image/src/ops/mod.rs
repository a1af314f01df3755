//! Photometric and affine operations on RGB pixels (`height x width x 3`
//! `uint8`, rows top to bottom), with torchvision v2's semantics on a
//! `uint8` tensor: the same float32 arithmetic where torchvision computes
//! in float32, the same truncation where it casts back to `uint8`.
//!
//! Per-channel ops whose result depends only on the pixel value
//! (brightness, contrast once its mean is known, posterize, solarize,
//! autocontrast and equalize once their statistics are known, invert) run
//! as 256-entry lookup tables. [`Op`] is one operation of torchvision's
//! `AutoAugment` family, with its magnitude as `_apply_image_or_video_transform`
//! takes it; [`Op::apply`] runs it.

mod affine;
mod color;
mod sharpness;
mod tone;

pub use affine::{affine, rotate};
pub use color::{
    Jitter, adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, color_jitter,
    rgb_to_grayscale,
};
pub use sharpness::adjust_sharpness;
pub use tone::{autocontrast, equalize, invert, posterize, solarize};

/// One operation of torchvision's `AutoAugment`, `RandAugment` and
/// `TrivialAugmentWide`, with its (signed) magnitude as torchvision's
/// `_AutoAugmentBase._apply_image_or_video_transform` receives it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// The image unchanged.
    Identity,
    /// `affine(shear=[degrees(atan(m)), 0], center=[0, 0])`.
    ShearX(f64),
    /// `affine(shear=[0, degrees(atan(m))], center=[0, 0])`.
    ShearY(f64),
    /// `affine(translate=[int(m), 0])`.
    TranslateX(f64),
    /// `affine(translate=[0, int(m)])`.
    TranslateY(f64),
    /// `rotate(angle=m)` (degrees, counter-clockwise).
    Rotate(f64),
    /// `adjust_brightness(1 + m)`.
    Brightness(f64),
    /// `adjust_saturation(1 + m)`.
    Color(f64),
    /// `adjust_contrast(1 + m)`.
    Contrast(f64),
    /// `adjust_sharpness(1 + m)`.
    Sharpness(f64),
    /// `posterize(bits)`.
    Posterize(u8),
    /// `solarize(255 * m)`.
    Solarize(f64),
    /// `autocontrast`.
    AutoContrast,
    /// `equalize`.
    Equalize,
    /// `invert`.
    Invert,
}

impl Op {
    /// torchvision's name of the operation (`"ShearX"`, `"Color"`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Identity => "Identity",
            Op::ShearX(_) => "ShearX",
            Op::ShearY(_) => "ShearY",
            Op::TranslateX(_) => "TranslateX",
            Op::TranslateY(_) => "TranslateY",
            Op::Rotate(_) => "Rotate",
            Op::Brightness(_) => "Brightness",
            Op::Color(_) => "Color",
            Op::Contrast(_) => "Contrast",
            Op::Sharpness(_) => "Sharpness",
            Op::Posterize(_) => "Posterize",
            Op::Solarize(_) => "Solarize",
            Op::AutoContrast => "AutoContrast",
            Op::Equalize => "Equalize",
            Op::Invert => "Invert",
        }
    }

    /// The magnitude as torchvision passes it (`0.0` for the ops without one).
    pub fn magnitude(&self) -> f64 {
        match *self {
            Op::ShearX(m)
            | Op::ShearY(m)
            | Op::TranslateX(m)
            | Op::TranslateY(m)
            | Op::Rotate(m)
            | Op::Brightness(m)
            | Op::Color(m)
            | Op::Contrast(m)
            | Op::Sharpness(m)
            | Op::Solarize(m) => m,
            Op::Posterize(b) => f64::from(b),
            Op::Identity | Op::AutoContrast | Op::Equalize | Op::Invert => 0.0,
        }
    }

    /// The operation `name` with magnitude `m` (torchvision's names), if
    /// there is one.
    pub fn from_name(name: &str, m: f64) -> Option<Op> {
        Some(match name {
            "Identity" => Op::Identity,
            "ShearX" => Op::ShearX(m),
            "ShearY" => Op::ShearY(m),
            "TranslateX" => Op::TranslateX(m),
            "TranslateY" => Op::TranslateY(m),
            "Rotate" => Op::Rotate(m),
            "Brightness" => Op::Brightness(m),
            "Color" => Op::Color(m),
            "Contrast" => Op::Contrast(m),
            "Sharpness" => Op::Sharpness(m),
            "Posterize" => Op::Posterize(m.clamp(0.0, 8.0) as u8),
            "Solarize" => Op::Solarize(m),
            "AutoContrast" => Op::AutoContrast,
            "Equalize" => Op::Equalize,
            "Invert" => Op::Invert,
            _ => return None,
        })
    }

    /// Whether the operation moves pixels (and so would have to move masks
    /// and boxes with them).
    pub fn is_geometric(&self) -> bool {
        matches!(
            self,
            Op::ShearX(_) | Op::ShearY(_) | Op::TranslateX(_) | Op::TranslateY(_) | Op::Rotate(_)
        )
    }

    /// Applies the operation to `px` (`width x height` RGB pixels), with
    /// `fill` where an affine op uncovers pixels; `scratch` is reused for a
    /// copy of the pixels.
    pub fn apply(
        &self,
        px: &mut [u8],
        width: usize,
        height: usize,
        fill: [u8; 3],
        scratch: &mut Vec<u8>,
    ) {
        debug_assert_eq!(px.len(), width * height * 3);
        let shear = |m: f64| m.atan().to_degrees();
        match *self {
            Op::Identity => {}
            Op::ShearX(m) => affine(
                px,
                width,
                height,
                0.0,
                (0.0, 0.0),
                (shear(m), 0.0),
                Some((0.0, 0.0)),
                fill,
                scratch,
            ),
            Op::ShearY(m) => affine(
                px,
                width,
                height,
                0.0,
                (0.0, 0.0),
                (0.0, shear(m)),
                Some((0.0, 0.0)),
                fill,
                scratch,
            ),
            // Python's int(): towards zero.
            Op::TranslateX(m) => affine(
                px,
                width,
                height,
                0.0,
                (m.trunc(), 0.0),
                (0.0, 0.0),
                None,
                fill,
                scratch,
            ),
            Op::TranslateY(m) => affine(
                px,
                width,
                height,
                0.0,
                (0.0, m.trunc()),
                (0.0, 0.0),
                None,
                fill,
                scratch,
            ),
            Op::Rotate(m) => rotate(px, width, height, m, fill, scratch),
            Op::Brightness(m) => adjust_brightness(px, 1.0 + m),
            Op::Color(m) => adjust_saturation(px, 1.0 + m),
            Op::Contrast(m) => adjust_contrast(px, 1.0 + m),
            Op::Sharpness(m) => adjust_sharpness(px, width, height, 1.0 + m, scratch),
            Op::Posterize(bits) => posterize(px, bits),
            Op::Solarize(m) => solarize(px, 255.0 * m),
            Op::AutoContrast => autocontrast(px),
            Op::Equalize => equalize(px),
            Op::Invert => invert(px),
        }
    }
}

/// Runs a 256-entry table over every byte.
pub(crate) fn apply_lut(px: &mut [u8], lut: &[u8; 256]) {
    for v in px {
        *v = lut[usize::from(*v)];
    }
}

/// Runs one 256-entry table per channel over RGB pixels.
pub(crate) fn apply_luts(px: &mut [u8], luts: &[[u8; 256]; 3]) {
    for p in px.chunks_exact_mut(3) {
        p[0] = luts[0][usize::from(p[0])];
        p[1] = luts[1][usize::from(p[1])];
        p[2] = luts[2][usize::from(p[2])];
    }
}

/// torch's `float32 -> uint8` cast of a value already clamped to `[0, 255]`:
/// towards zero.
#[inline]
pub(crate) fn to_u8(v: f32) -> u8 {
    v.clamp(0.0, 255.0) as u8
}
