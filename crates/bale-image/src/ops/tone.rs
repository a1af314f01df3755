//! torchvision v2's tone operations of `_color.py` on `uint8` RGB:
//! posterize, solarize, autocontrast, equalize and invert, each a lookup
//! table (per channel where the statistics are per channel). All exact.

use super::{apply_lut, apply_luts, to_u8};

/// `posterize(bits)`: the `bits` high bits of each value kept.
pub fn posterize(px: &mut [u8], bits: u8) {
    if bits >= 8 {
        return;
    }
    let mask = (((1u32 << bits) - 1) << (8 - bits)) as u8;
    for v in px {
        *v &= mask;
    }
}

/// `solarize(threshold)`: values at or above `threshold` inverted (the
/// comparison in float32, as torch promotes it).
pub fn solarize(px: &mut [u8], threshold: f64) {
    let t = threshold as f32;
    let lut: [u8; 256] = std::array::from_fn(|x| {
        let x = x as u8;
        if f32::from(x) >= t { 255 - x } else { x }
    });
    apply_lut(px, &lut);
}

/// `invert`: `255 - x`.
pub fn invert(px: &mut [u8]) {
    for v in px {
        *v = !*v;
    }
}

/// `autocontrast`: each channel stretched from its minimum and maximum to
/// `0..=255` (`(x - min) / ((max - min) / 255)` in float32, truncated); a
/// flat channel is left as it is.
pub fn autocontrast(px: &mut [u8]) {
    let mut lo = [255u8; 3];
    let mut hi = [0u8; 3];
    for p in px.chunks_exact(3) {
        for c in 0..3 {
            lo[c] = lo[c].min(p[c]);
            hi[c] = hi[c].max(p[c]);
        }
    }
    let inv255 = (1.0f64 / 255.0) as f32;
    let luts: [[u8; 256]; 3] = std::array::from_fn(|c| {
        let (min, scale) = if lo[c] == hi[c] {
            (0.0, 1.0)
        } else {
            (f32::from(lo[c]), f32::from(hi[c] - lo[c]) * inv255)
        };
        std::array::from_fn(|x| to_u8((x as f32 - min) / scale))
    });
    apply_luts(px, &luts);
}

/// `equalize`: each channel through PIL's histogram equalisation table, as
/// torchvision computes it (a channel whose non-maximal pixels are fewer
/// than 255 is left as it is).
pub fn equalize(px: &mut [u8]) {
    let mut hist = [[0u64; 256]; 3];
    for p in px.chunks_exact(3) {
        for c in 0..3 {
            hist[c][usize::from(p[c])] += 1;
        }
    }
    let n = (px.len() / 3) as u64;
    let luts: [[u8; 256]; 3] = std::array::from_fn(|c| {
        let h = &hist[c];
        // The last value present: the first where the cumulative count is n.
        let last = (0..256).rev().find(|&v| h[v] != 0).unwrap_or(0);
        let step = (n - h[last]) / 255;
        if step == 0 {
            return std::array::from_fn(|x| x as u8);
        }
        let mut lut = [0u8; 256];
        let mut cum = 0u64;
        for k in 1..256 {
            cum += h[k - 1];
            lut[k] = ((cum + step / 2) / step).min(255) as u8;
        }
        lut
    });
    apply_luts(px, &luts);
}
