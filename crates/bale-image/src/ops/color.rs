//! torchvision v2's colour adjustments of `_color.py` on `uint8` RGB:
//! brightness, contrast, saturation (blends in float32, truncated back), hue
//! (through float32 HSV) and the grey conversion.

use super::{apply_lut, to_u8};

/// `a * b + c` rounded once to float32, as torch's vectorised CPU kernels
/// compute `x.add_(y, alpha)` (a fused multiply-add). The product of two
/// float32 values is exact in float64, so only a float32 tie after the
/// float64 sum could round differently from a true fused operation.
#[inline]
pub(crate) fn fma32(a: f32, b: f32, c: f32) -> f32 {
    (f64::from(a) * f64::from(b) + f64::from(c)) as f32
}

/// The float32 grey of torchvision's `_rgb_to_grayscale_image`:
/// `r * 0.2989 + g * 0.587 + b * 0.114`, accumulated as torch does.
#[inline]
fn grey(r: u8, g: u8, b: u8) -> f32 {
    let l = f32::from(r) * 0.2989f32;
    let l = fma32(f32::from(g), 0.587f32, l);
    fma32(f32::from(b), 0.114f32, l)
}

/// `adjust_brightness(factor)`: `x * factor`, clamped, truncated (a table).
pub fn adjust_brightness(px: &mut [u8], factor: f64) {
    let f = factor as f32;
    let lut: [u8; 256] = std::array::from_fn(|x| to_u8(x as f32 * f));
    apply_lut(px, &lut);
}

/// `_blend(x, other, ratio)` of one value: `x * ratio + other * (1 - ratio)`.
#[inline]
fn blend(x: u8, other: f32, ratio: f32, rest: f32) -> u8 {
    to_u8(fma32(other, rest, f32::from(x) * ratio))
}

/// `adjust_contrast(factor)`: a blend with the mean of the image's grey
/// (each grey value floored first, as torchvision floors it for `uint8`).
pub fn adjust_contrast(px: &mut [u8], factor: f64) {
    let n = px.len() / 3;
    if n == 0 {
        return;
    }
    let sum: u64 = px
        .chunks_exact(3)
        .map(|p| grey(p[0], p[1], p[2]).floor() as u64)
        .sum();
    // torch.mean in float32: the float32 sum (exact below 2**24) over the count.
    let mean = sum as f32 / n as f32;
    let ratio = factor as f32;
    let rest = (1.0 - factor) as f32;
    let lut: [u8; 256] = std::array::from_fn(|x| blend(x as u8, mean, ratio, rest));
    apply_lut(px, &lut);
}

/// `adjust_saturation(factor)`: a blend of each pixel with its floored grey.
pub fn adjust_saturation(px: &mut [u8], factor: f64) {
    let ratio = factor as f32;
    let rest = (1.0 - factor) as f32;
    let scaled: [f32; 256] = std::array::from_fn(|x| x as f32 * ratio);
    let red: [f32; 256] = std::array::from_fn(|x| x as f32 * 0.2989f32);
    for p in px.chunks_exact_mut(3) {
        let l = fma32(f32::from(p[1]), 0.587f32, red[usize::from(p[0])]);
        let g = fma32(f32::from(p[2]), 0.114f32, l).floor();
        for v in p.iter_mut() {
            *v = to_u8(fma32(g, rest, scaled[usize::from(*v)]));
        }
    }
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
    let shift = factor as f32;
    for p in px.chunks_exact_mut(3) {
        hue_pixel(p, shift);
    }
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

/// A per-pixel step, its tables and constants prepared once.
enum Step {
    Lut(Box<[u8; 256]>),
    Saturation { scaled: Box<[f32; 256]>, rest: f32 },
    Hue { shift: f32 },
}

impl Step {
    #[inline]
    fn run(&self, p: &mut [u8]) {
        match self {
            Step::Lut(lut) => {
                for v in p.iter_mut() {
                    *v = lut[usize::from(*v)];
                }
            }
            Step::Saturation { scaled, rest } => {
                let g = grey(p[0], p[1], p[2]).floor();
                for v in p.iter_mut() {
                    *v = to_u8(fma32(g, *rest, scaled[usize::from(*v)]));
                }
            }
            Step::Hue { shift } => hue_pixel(p, *shift),
        }
    }
}

fn step(j: Jitter) -> Step {
    match j {
        Jitter::Brightness(f) => {
            let f = f as f32;
            Step::Lut(Box::new(std::array::from_fn(|x| to_u8(x as f32 * f))))
        }
        Jitter::Saturation(f) => {
            let ratio = f as f32;
            Step::Saturation {
                scaled: Box::new(std::array::from_fn(|x| x as f32 * ratio)),
                rest: (1.0 - f) as f32,
            }
        }
        Jitter::Hue(f) => Step::Hue { shift: f as f32 },
        Jitter::Contrast(_) => unreachable!("contrast is split off by color_jitter"),
    }
}

/// A `ColorJitter` sample's steps in their drawn order, with the same
/// result as running `adjust_*` one after the other, in at most two passes:
/// every step works on one pixel (each truncated back to `uint8` as
/// torchvision does) except contrast, which needs the mean grey of the
/// image as it is when contrast runs. The steps before the first contrast
/// run in a pass that also sums that grey; contrast and the steps after it
/// run in a second pass. Later contrasts (not drawn by `ColorJitter`) split
/// again.
pub fn color_jitter(px: &mut [u8], steps: &[Jitter]) {
    let n = px.len() / 3;
    if n == 0 {
        return;
    }
    let split = steps.iter().position(|s| matches!(s, Jitter::Contrast(_)));
    let Some(at) = split else {
        run_steps(px, &steps.iter().map(|&j| step(j)).collect::<Vec<_>>());
        return;
    };
    let before: Vec<Step> = steps[..at].iter().map(|&j| step(j)).collect();
    let mut sum = 0u64;
    for p in px.chunks_exact_mut(3) {
        for s in &before {
            s.run(p);
        }
        sum += grey(p[0], p[1], p[2]).floor() as u64;
    }
    let Jitter::Contrast(factor) = steps[at] else {
        unreachable!()
    };
    let mean = sum as f32 / n as f32;
    let ratio = factor as f32;
    let rest = (1.0 - factor) as f32;
    let contrast = Step::Lut(Box::new(std::array::from_fn(|x| {
        blend(x as u8, mean, ratio, rest)
    })));
    let tail = &steps[at + 1..];
    let next = tail
        .iter()
        .position(|s| matches!(s, Jitter::Contrast(_)))
        .unwrap_or(tail.len());
    let mut after = vec![contrast];
    after.extend(tail[..next].iter().map(|&j| step(j)));
    run_steps(px, &after);
    if next < tail.len() {
        color_jitter(px, &tail[next..]);
    }
}

fn run_steps(px: &mut [u8], steps: &[Step]) {
    if steps.is_empty() {
        return;
    }
    for p in px.chunks_exact_mut(3) {
        for s in steps {
            s.run(p);
        }
    }
}

/// `adjust_hue` of one pixel.
#[inline]
fn hue_pixel(p: &mut [u8], shift: f32) {
    let inv = (1.0f64 / 255.0) as f32;
    let back = (255.0f64 + 1.0 - 1e-3) as f32;
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

/// torch's `remainder(x, 1.0)` of a float32: `fmod`, moved into `[0, 1)`.
#[inline]
fn remainder1(x: f32) -> f32 {
    let m = x % 1.0;
    if m != 0.0 && m < 0.0 { m + 1.0 } else { m }
}

/// torchvision's `_rgb_to_hsv` of one pixel, in float32.
#[inline]
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
#[inline]
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

#[cfg(test)]
mod tests {
    use super::*;

    fn step_by_step(px: &mut [u8], steps: &[Jitter]) {
        for s in steps {
            match *s {
                Jitter::Brightness(f) => adjust_brightness(px, f),
                Jitter::Contrast(f) => adjust_contrast(px, f),
                Jitter::Saturation(f) => adjust_saturation(px, f),
                Jitter::Hue(f) => adjust_hue(px, f),
            }
        }
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
            let n = 1 + (rng.next() % 200) as usize;
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
                steps.push(match c {
                    0 => Jitter::Brightness(rng.unit() * 2.0),
                    1 => Jitter::Contrast(rng.unit() * 2.0),
                    2 => Jitter::Saturation(rng.unit() * 2.0),
                    _ => Jitter::Hue(rng.unit() - 0.5),
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
}
