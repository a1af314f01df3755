//! torchvision v2's colour adjustments of `_color.py` on `uint8` RGB:
//! brightness, contrast, saturation (blends in float32, truncated back), hue
//! (through float32 HSV) and the grey conversion.
//!
//! Saturation, hue and the fused `ColorJitter` run on chunks of pixels laid
//! out as three float32 planes, every per-pixel branch a select, so the
//! compiler vectorises them (with AVX2 where the CPU has it). They do
//! torchvision's float32 operations in torchvision's order, each rounded as
//! the scalar definitions in the tests round it, so the results are the
//! same to the bit: the tests compare them on every 24-bit colour.

use super::{apply_lut, to_u8};

/// `a * b + c` rounded once to float32, as torch's vectorised CPU kernels
/// compute `x.add_(y, alpha)` (a fused multiply-add). The product of two
/// float32 values is exact in float64, so only a float32 tie after the
/// float64 sum could round differently from a true fused operation.
#[inline(always)]
pub(crate) fn fma32(a: f32, b: f32, c: f32) -> f32 {
    (f64::from(a) * f64::from(b) + f64::from(c)) as f32
}

/// The float32 grey of torchvision's `_rgb_to_grayscale_image`:
/// `r * 0.2989 + g * 0.587 + b * 0.114`, accumulated as torch does.
#[inline(always)]
fn grey_f32(r: f32, g: f32, b: f32) -> f32 {
    let l = r * 0.2989f32;
    let l = fma32(g, 0.587f32, l);
    fma32(b, 0.114f32, l)
}

/// [`grey_f32`] of one `uint8` pixel.
#[inline]
fn grey(r: u8, g: u8, b: u8) -> f32 {
    grey_f32(f32::from(r), f32::from(g), f32::from(b))
}

/// `adjust_brightness(factor)`: `x * factor`, clamped, truncated (a table).
pub fn adjust_brightness(px: &mut [u8], factor: f64) {
    let f = factor as f32;
    let lut: [u8; 256] = std::array::from_fn(|x| to_u8(x as f32 * f));
    apply_lut(px, &lut);
}

/// `adjust_contrast(factor)`: a blend with the mean of the image's grey
/// (each grey value floored first, as torchvision floors it for `uint8`;
/// `torch.mean` in float32: the sum, exact below `2**24`, over the count).
pub fn adjust_contrast(px: &mut [u8], factor: f64) {
    color_jitter(px, &[Jitter::Contrast(factor)]);
}

/// `adjust_saturation(factor)`: a blend of each pixel with its floored grey.
pub fn adjust_saturation(px: &mut [u8], factor: f64) {
    color_jitter(px, &[Jitter::Saturation(factor)]);
}

/// `rgb_to_grayscale(num_output_channels=3)`: each pixel's grey, truncated,
/// in all three channels.
pub fn rgb_to_grayscale(px: &mut [u8]) {
    for p in px.chunks_exact_mut(3) {
        let g = to_u8(grey(p[0], p[1], p[2]));
        p.fill(g);
    }
}

/// `adjust_hue(factor)`, `factor` in `[-0.5, 0.5]`: each pixel to float32
/// HSV (`_rgb_to_hsv`), the hue shifted, back (`_hsv_to_rgb`), then to
/// `uint8` as `to_dtype_image` scales (`x * 255.999`, truncated).
pub fn adjust_hue(px: &mut [u8], factor: f64) {
    color_jitter(px, &[Jitter::Hue(factor)]);
}

/// One step of a `ColorJitter` sample, with its drawn factor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// `adjust_brightness(factor)`.
    Brightness(f64),
    /// `adjust_contrast(factor)`.
    Contrast(f64),
    /// `adjust_saturation(factor)`.
    Saturation(f64),
    /// `adjust_hue(factor)`.
    Hue(f64),
}

impl Jitter {
    /// Whether the step leaves every image as it is: a blend with ratio 1
    /// (`x * 1 + other * 0`). (A hue shift of 0 does the float32 HSV round
    /// trip, which torchvision runs too.)
    fn is_identity(self) -> bool {
        match self {
            Jitter::Brightness(f) | Jitter::Contrast(f) | Jitter::Saturation(f) => f == 1.0,
            Jitter::Hue(_) => false,
        }
    }
}

/// A `ColorJitter` sample's steps in their drawn order, with the same
/// result as running `adjust_*` one after the other, in at most two passes:
/// every step works on one pixel (each truncated back to `uint8` as
/// torchvision does) except contrast, which needs the mean grey of the
/// image as it is when contrast runs. The steps before the first contrast
/// run in a pass that also sums that grey; contrast and the steps after it
/// run in a second pass. Later contrasts (not drawn by `ColorJitter`) split
/// again. Steps whose factor is the identity are skipped.
pub fn color_jitter(px: &mut [u8], steps: &[Jitter]) {
    let n = px.len() / 3;
    if n == 0 {
        return;
    }
    let steps: Vec<Jitter> = steps.iter().copied().filter(|j| !j.is_identity()).collect();
    let mut rest = &steps[..];
    let mut contrast: Option<Pass> = None;
    loop {
        let next = rest.iter().position(|s| matches!(s, Jitter::Contrast(_)));
        let upto = next.unwrap_or(rest.len());
        let mut passes: Vec<Pass> = contrast.into_iter().collect();
        passes.extend(rest[..upto].iter().filter_map(|&j| Pass::new(j)));
        let sum = run_pass(&mut px[..n * 3], &passes, next.is_some());
        let Some(at) = next else { return };
        let Jitter::Contrast(factor) = rest[at] else {
            unreachable!("position found a contrast")
        };
        let mean = sum as f32 / n as f32;
        let rest_ratio = (1.0 - factor) as f32;
        contrast = Some(Pass::Contrast {
            ratio: factor as f32,
            offset: f64::from(mean) * f64::from(rest_ratio),
        });
        rest = &rest[at + 1..];
    }
}

/// Pixels in a chunk of a pass, each channel a plane of float32 values.
const LANES: usize = 64;

type Planes = [[f32; LANES]; 3];

/// One step of a pass, its constants prepared.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// `x * factor`.
    Brightness(f32),
    /// `x * ratio + mean * (1 - ratio)`, the second product in float64.
    Contrast { ratio: f32, offset: f64 },
    /// `x * ratio + floor(grey) * rest`; `exact` when the float64 sum
    /// of that blend is exact, so a fused multiply-add gives it.
    Saturation { ratio: f32, rest: f32, exact: bool },
    /// The hue shift.
    Hue(f32),
}

impl Pass {
    /// The step of `j`; `None` for contrast, which needs the mean first.
    fn new(j: Jitter) -> Option<Pass> {
        Some(match j {
            Jitter::Brightness(f) => Pass::Brightness(f as f32),
            Jitter::Saturation(f) => {
                let (ratio, rest) = (f as f32, (1.0 - f) as f32);
                Pass::Saturation {
                    ratio,
                    rest,
                    exact: fits_fma(ratio) && fits_fma(rest),
                }
            }
            Jitter::Hue(f) => Pass::Hue(f as f32),
            Jitter::Contrast(_) => return None,
        })
    }

    /// Runs the step on a chunk; `FMA`: with the CPU's fused multiply-add.
    #[inline(always)]
    fn run<const FMA: bool>(self, pl: &mut Planes) {
        match self {
            Pass::Brightness(f) => {
                for plane in pl.iter_mut() {
                    for x in plane.iter_mut() {
                        *x = trunc_u8(*x * f);
                    }
                }
            }
            Pass::Contrast { ratio, offset } => {
                for plane in pl.iter_mut() {
                    for x in plane.iter_mut() {
                        *x = trunc_u8((f64::from(*x * ratio) + offset) as f32);
                    }
                }
            }
            Pass::Saturation { ratio, rest, exact } => {
                if FMA && exact {
                    saturation_fma(pl, ratio, rest);
                } else {
                    saturation(pl, ratio, rest);
                }
            }
            Pass::Hue(shift) => hue(pl, shift),
        }
    }
}

/// torch's `float32 -> uint8` cast after the clamp, kept as a float32.
/// (Rounding instructions, where `as` casts would not vectorise: their
/// saturation is done element by element.)
#[inline(always)]
fn trunc_u8(v: f32) -> f32 {
    v.clamp(0.0, 255.0).trunc()
}

/// A whole float32 in `0..2**23` as an integer: its low mantissa bits once
/// `2**23` is added (exact in that range).
#[inline(always)]
fn whole(x: f32) -> u32 {
    (x + 8_388_608.0).to_bits() & 0x7f_ffff
}

#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if a > b { a } else { b }
}

#[inline(always)]
fn min(a: f32, b: f32) -> f32 {
    if a < b { a } else { b }
}

/// Whether a blend factor keeps [`fma32`]'s float64 sum exact: 0, or of
/// magnitude in `[2**-16, 16]`. Then `x * ratio` (an integer `x` below 256)
/// and `grey * rest` are multiples of `2**-39` below `2**12`, their sum
/// takes at most 52 bits, and float64 rounds nothing before float32 does:
/// the fused multiply-add of the CPU gives the same float32.
fn fits_fma(f: f32) -> bool {
    f == 0.0 || (2f32.powi(-16)..=16.0).contains(&f.abs())
}

/// [`grey_f32`] of integer channels with the CPU's fused multiply-add. The
/// same float32: `g * 0.587` is a multiple of `2**-24` and `r * 0.2989` of
/// `2**-25` (or 0), their sum below `2**8` takes 33 bits; `b * 0.114` is a
/// multiple of `2**-27`, that sum below `2**8` takes 35: both are exact in
/// float64, so [`fma32`]'s two roundings are the one of a fused operation.
#[inline(always)]
fn grey_fma(r: f32, g: f32, b: f32) -> f32 {
    let l = r * 0.2989f32;
    let l = g.mul_add(0.587f32, l);
    b.mul_add(0.114f32, l)
}

#[inline(always)]
fn saturation(pl: &mut Planes, ratio: f32, rest: f32) {
    let rest = f64::from(rest);
    let [r, g, b] = pl;
    for k in 0..LANES {
        // The floored grey of a pixel is non-negative: truncation floors it.
        let l = f64::from(grey_f32(r[k], g[k], b[k]).floor()) * rest;
        r[k] = trunc_u8((f64::from(r[k] * ratio) + l) as f32);
        g[k] = trunc_u8((f64::from(g[k] * ratio) + l) as f32);
        b[k] = trunc_u8((f64::from(b[k] * ratio) + l) as f32);
    }
}

/// [`saturation`] with the CPU's fused multiply-add, for factors that
/// [`fits_fma`].
#[inline(always)]
fn saturation_fma(pl: &mut Planes, ratio: f32, rest: f32) {
    let [r, g, b] = pl;
    for k in 0..LANES {
        let l = grey_fma(r[k], g[k], b[k]).floor();
        r[k] = trunc_u8(l.mul_add(rest, r[k] * ratio));
        g[k] = trunc_u8(l.mul_add(rest, g[k] * ratio));
        b[k] = trunc_u8(l.mul_add(rest, b[k] * ratio));
    }
}

/// torchvision's `_rgb_to_hsv`, hue shift and `_hsv_to_rgb` of each pixel,
/// operation for operation: of the three quotients `(max - c) / range` the
/// hue needs two (the two channels that are not the maximum), and its sum of
/// three terms has two zeros, so both are dropped; `fmod` becomes a
/// subtraction, exact in the range it sees.
#[inline(always)]
fn hue(pl: &mut Planes, shift: f32) {
    let inv = (1.0f64 / 255.0) as f32;
    let sixth = (1.0f64 / 6.0) as f32;
    let back = (255.0f64 + 1.0 - 1e-3) as f32;
    let [pr, pg, pb] = pl;
    for k in 0..LANES {
        let (r, g, b) = (pr[k] * inv, pg[k] * inv, pb[k] * inv);
        let maxc = max(max(r, g), b);
        let minc = min(min(r, g), b);
        let eqc = maxc == minc;
        let range = maxc - minc;
        let s = range / if eqc { 1.0 } else { maxc };
        let div = if eqc { 1.0 } else { range };
        // Maximum red: bc - gc; green: (rc + 2) - bc; blue: (gc + 4) - rc.
        let is_r = maxc == r;
        let is_g = !is_r && maxc == g;
        let (a, off, c) = if is_r {
            (b, 0.0, g)
        } else if is_g {
            (r, 2.0, b)
        } else {
            (g, 4.0, r)
        };
        let h = ((maxc - a) / div + off) - (maxc - c) / div;
        let h = h * sixth + 1.0;
        // `% 1.0` of a value in [5/6, 11/6].
        let h = if h >= 1.0 { h - 1.0 } else { h };
        // torch's `remainder(h + shift, 1.0)`.
        let x = h + shift;
        let h = x - x.floor();
        // `_hsv_to_rgb`, the sector `floor(h * 6) % 6` chosen by selects.
        let h6 = h * 6.0;
        let i = h6.floor();
        let f = h6 - i;
        let sxf = s * f;
        let one_minus_s = 1.0 - s;
        let v = maxc;
        let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
        let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
        let p = (one_minus_s * v).clamp(0.0, 1.0);
        // i is 0..=6, and 6 is sector 0.
        let (r, g, b) = if i == 1.0 {
            (q, v, p)
        } else if i == 2.0 {
            (p, v, t)
        } else if i == 3.0 {
            (p, q, v)
        } else if i == 4.0 {
            (t, p, v)
        } else if i == 5.0 {
            (v, p, q)
        } else {
            (v, t, p)
        };
        pr[k] = (r * back).trunc();
        pg[k] = (g * back).trunc();
        pb[k] = (b * back).trunc();
    }
}

/// The sum of the floored grey of the first `n` pixels of the chunk.
#[inline(always)]
fn grey_sum<const FMA: bool>(pl: &Planes, n: usize) -> u64 {
    let [r, g, b] = pl;
    let mut grey = [0u32; LANES];
    for k in 0..LANES {
        let l = if FMA {
            grey_fma(r[k], g[k], b[k])
        } else {
            grey_f32(r[k], g[k], b[k])
        };
        grey[k] = whole(l.floor());
    }
    grey[..n].iter().map(|&v| u64::from(v)).sum()
}

/// Runs `steps` over every pixel of `px`, a chunk at a time; when `sum` is
/// set, returns the sum of the floored grey of the result.
fn run_pass(px: &mut [u8], steps: &[Pass], sum: bool) -> u64 {
    if steps.is_empty() && !sum {
        return 0;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA, the features `run_pass_avx2`
        // enables.
        return unsafe { run_pass_avx2(px, steps, sum) };
    }
    run_pass_body::<false>(px, steps, sum)
}

/// [`run_pass_body`] compiled for AVX2 and FMA: eight float32 lanes a
/// vector, and fused multiply-adds where they give [`fma32`]'s result.
/// (Rust contracts no other multiply and add into one.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_pass_avx2(px: &mut [u8], steps: &[Pass], sum: bool) -> u64 {
    run_pass_body::<true>(px, steps, sum)
}

/// A pass over `px`, a chunk at a time; `FMA`: with the CPU's fused
/// multiply-add (which is a library call where the CPU has none).
#[inline(always)]
fn run_pass_body<const FMA: bool>(px: &mut [u8], steps: &[Pass], sum: bool) -> u64 {
    let mut pl: Planes = [[0.0; LANES]; 3];
    let mut total = 0u64;
    for chunk in px.chunks_mut(3 * LANES) {
        let n = chunk.len() / 3;
        if n < LANES {
            pl = [[0.0; LANES]; 3];
        }
        for (k, p) in chunk.chunks_exact(3).enumerate() {
            pl[0][k] = f32::from(p[0]);
            pl[1][k] = f32::from(p[1]);
            pl[2][k] = f32::from(p[2]);
        }
        for &s in steps {
            s.run::<FMA>(&mut pl);
        }
        if sum {
            total += grey_sum::<FMA>(&pl, n);
        }
        if !steps.is_empty() {
            for (k, p) in chunk.chunks_exact_mut(3).enumerate() {
                p[0] = whole(pl[0][k]) as u8;
                p[1] = whole(pl[1][k]) as u8;
                p[2] = whole(pl[2][k]) as u8;
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    // ---- the scalar definitions, pixel by pixel as torchvision v2 computes ----

    fn ref_contrast(px: &mut [u8], factor: f64) {
        let n = px.len() / 3;
        let sum: u64 = px
            .chunks_exact(3)
            .map(|p| grey(p[0], p[1], p[2]).floor() as u64)
            .sum();
        let mean = sum as f32 / n as f32;
        let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
        let lut: [u8; 256] = std::array::from_fn(|x| to_u8(fma32(mean, rest, x as f32 * ratio)));
        apply_lut(px, &lut);
    }

    fn ref_saturation(px: &mut [u8], factor: f64) {
        let (ratio, rest) = (factor as f32, (1.0 - factor) as f32);
        for p in px.chunks_exact_mut(3) {
            let g = grey(p[0], p[1], p[2]).floor();
            for v in p.iter_mut() {
                *v = to_u8(fma32(g, rest, f32::from(*v) * ratio));
            }
        }
    }

    fn ref_hue(px: &mut [u8], factor: f64) {
        let shift = factor as f32;
        let inv = (1.0f64 / 255.0) as f32;
        let back = (255.0f64 + 1.0 - 1e-3) as f32;
        for p in px.chunks_exact_mut(3) {
            let (r, g, b) = (
                f32::from(p[0]) * inv,
                f32::from(p[1]) * inv,
                f32::from(p[2]) * inv,
            );
            let (h, s, v) = rgb_to_hsv(r, g, b);
            let h = remainder1(h + shift);
            let (r, g, b) = hsv_to_rgb(h, s, v);
            p[0] = (r * back) as u8;
            p[1] = (g * back) as u8;
            p[2] = (b * back) as u8;
        }
    }

    /// torch's `remainder(x, 1.0)` of a float32: `fmod`, moved into `[0, 1)`.
    fn remainder1(x: f32) -> f32 {
        let m = x % 1.0;
        if m != 0.0 && m < 0.0 { m + 1.0 } else { m }
    }

    /// torchvision's `_rgb_to_hsv` of one pixel, in float32.
    fn rgb_to_hsv(r: f32, g: f32, b: f32) -> (f32, f32, f32) {
        let maxc = r.max(g).max(b);
        let minc = r.min(g).min(b);
        let eqc = maxc == minc;
        let range = maxc - minc;
        let s = range / if eqc { 1.0 } else { maxc };
        let div = if eqc { 1.0 } else { range };
        let rc = (maxc - r) / div;
        let gc = (maxc - g) / div;
        let bc = (maxc - b) / div;
        let neq_r = maxc != r;
        let eq_g = maxc == g;
        let hg = if eq_g && neq_r { (rc + 2.0) - bc } else { 0.0 };
        let hr = if neq_r { 0.0 } else { bc - gc };
        let hb = if neq_r && !eq_g { (gc + 4.0) - rc } else { 0.0 };
        let h = (hr + hg) + hb;
        let h = (h * (1.0f64 / 6.0) as f32 + 1.0) % 1.0;
        (h, s, maxc)
    }

    /// torchvision's `_hsv_to_rgb` of one pixel, in float32.
    fn hsv_to_rgb(h: f32, s: f32, v: f32) -> (f32, f32, f32) {
        let h6 = h * 6.0;
        let i = h6.floor();
        let f = h6 - i;
        let sxf = s * f;
        let one_minus_s = 1.0 - s;
        let q = ((1.0 - sxf) * v).clamp(0.0, 1.0);
        let t = ((sxf + one_minus_s) * v).clamp(0.0, 1.0);
        let p = (one_minus_s * v).clamp(0.0, 1.0);
        match (i as i32).rem_euclid(6) {
            0 => (v, t, p),
            1 => (q, v, p),
            2 => (p, v, t),
            3 => (p, q, v),
            4 => (t, p, v),
            _ => (v, p, q),
        }
    }

    fn step_by_step(px: &mut [u8], steps: &[Jitter]) {
        for s in steps {
            match *s {
                Jitter::Brightness(f) => adjust_brightness(px, f),
                Jitter::Contrast(f) => ref_contrast(px, f),
                Jitter::Saturation(f) => ref_saturation(px, f),
                Jitter::Hue(f) => ref_hue(px, f),
            }
        }
    }

    /// 2**21 colours as one image: every red and green pair with 32 blues,
    /// 8 apart and offset by `(red + green) % 8`, so every blue value meets
    /// every red. (The checks below passed on all 2**24 colours too; the
    /// grid keeps the unoptimised test build within seconds.)
    fn colour_grid() -> Vec<u8> {
        let mut img = Vec::with_capacity(3 << 21);
        for r in 0..=255u8 {
            for g in 0..=255u8 {
                let offset = r.wrapping_add(g) & 7;
                for j in 0..32u8 {
                    img.extend_from_slice(&[r, g, (j << 3) | offset]);
                }
            }
        }
        img
    }

    /// Runs the pass of `step(f)` and `reference` on the colour grid, a
    /// block of 2**13 colours to each factor of `factors` in turn, through
    /// both the dispatched pass and the portable one; all must agree to the
    /// bit.
    fn check_colour_grid(factors: &[f64], step: fn(f64) -> Jitter, reference: fn(&mut [u8], f64)) {
        let img = colour_grid();
        for (i, src) in img.chunks(3 << 13).enumerate() {
            let f = factors[i % factors.len()];
            let mut want = src.to_vec();
            reference(&mut want, f);
            let mut got = src.to_vec();
            color_jitter(&mut got, &[step(f)]);
            let mut portable = src.to_vec();
            let pass = Pass::new(step(f)).expect("a one-pixel step");
            run_pass_body::<false>(&mut portable, &[pass], false);
            for (what, out) in [("dispatched", &got), ("portable", &portable)] {
                if let Some(k) =
                    (0..src.len() / 3).find(|&k| out[3 * k..3 * k + 3] != want[3 * k..3 * k + 3])
                {
                    panic!(
                        "{what} {:?} of {:?}: {:?}, not {:?}",
                        step(f),
                        &src[3 * k..3 * k + 3],
                        &out[3 * k..3 * k + 3],
                        &want[3 * k..3 * k + 3]
                    );
                }
            }
        }
    }

    #[test]
    fn hue_equals_the_float32_definition_on_a_colour_grid() {
        let shifts = [-0.5, -0.31, -0.1, -1e-7, 0.013, 0.07, 0.25, 1.0 / 3.0, 0.5];
        check_colour_grid(&shifts, Jitter::Hue, ref_hue);
    }

    #[test]
    fn saturation_equals_the_float32_definition_on_a_colour_grid() {
        // 1e-7 and 1 - 1e-9: a ratio and a rest too small for the fused
        // multiply-add, which take the float64 sum.
        let factors = [0.0, 0.01, 0.6, 0.93, 1.31, 1.4, 1.99, 1e-7, 1.0 - 1e-9];
        check_colour_grid(&factors, Jitter::Saturation, ref_saturation);
    }

    /// A small xorshift generator, so the test needs no dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn unit(&mut self) -> f64 {
            (self.next() >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn fused_jitter_equals_step_by_step() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..300 {
            let n = 1 + (rng.next() % 300) as usize;
            let img: Vec<u8> = (0..n * 3).map(|_| rng.next() as u8).collect();
            let mut order = [0u8, 1, 2, 3];
            for i in (1..4).rev() {
                order.swap(i, (rng.next() % (i as u64 + 1)) as usize);
            }
            let mut steps = Vec::new();
            for &c in &order {
                if rng.next().is_multiple_of(4) {
                    continue;
                }
                // Now and then the identity (a blend of ratio 1 is skipped).
                let identity = rng.next().is_multiple_of(8);
                steps.push(match c {
                    0 => Jitter::Brightness(if identity { 1.0 } else { rng.unit() * 2.0 }),
                    1 => Jitter::Contrast(if identity { 1.0 } else { rng.unit() * 2.0 }),
                    2 => Jitter::Saturation(if identity { 1.0 } else { rng.unit() * 2.0 }),
                    _ => Jitter::Hue(if identity { 0.0 } else { rng.unit() - 0.5 }),
                });
            }
            let mut want = img.clone();
            step_by_step(&mut want, &steps);
            let mut got = img.clone();
            color_jitter(&mut got, &steps);
            assert_eq!(got, want, "case {case}: {steps:?}");
        }
    }

    #[test]
    fn fused_jitter_handles_repeated_contrast() {
        let img: Vec<u8> = (0..90u32).map(|i| (i * 37 % 256) as u8).collect();
        let steps = [
            Jitter::Contrast(1.7),
            Jitter::Hue(0.2),
            Jitter::Contrast(0.4),
            Jitter::Saturation(1.3),
        ];
        let mut want = img.clone();
        step_by_step(&mut want, &steps);
        let mut got = img;
        color_jitter(&mut got, &steps);
        assert_eq!(got, want);
    }

    #[test]
    fn contrast_takes_the_mean_of_the_whole_image() {
        // 1000 pixels: 15 full chunks and a partial one, whose padding must
        // not count in the mean.
        let img: Vec<u8> = (0..3000u32).map(|i| (i * 91 % 251) as u8).collect();
        for f in [0.0, 0.37, 1.5] {
            let mut want = img.clone();
            ref_contrast(&mut want, f);
            let mut got = img.clone();
            adjust_contrast(&mut got, f);
            assert_eq!(got, want, "contrast {f}");
        }
    }
}
