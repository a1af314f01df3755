//! torchvision v2's `adjust_sharpness` on `uint8` RGB.

use super::color::fma32;
use super::to_u8;

/// `adjust_sharpness(factor)`: the interior blended with its 3x3 smoothing
/// (1 around, 5 in the middle, over 13, rounded), the border rows and
/// columns left as they are.
///
/// torchvision convolves in float32 and rounds; the exact sum `n + 5c` over
/// 13 is never within 1/26 of a half, so the integer rounding here gives the
/// same value. The blend `x + (blur - x) * (1 - factor)` is float32, as there.
pub fn adjust_sharpness(
    px: &mut [u8],
    width: usize,
    height: usize,
    factor: f64,
    scratch: &mut Vec<u8>,
) {
    if width <= 2 || height <= 2 {
        return;
    }
    scratch.clear();
    scratch.extend_from_slice(px);
    let src = &scratch[..];
    let alpha = (1.0 - factor) as f32;
    let row = width * 3;
    for y in 1..height - 1 {
        let (up, mid, down) = (
            &src[(y - 1) * row..y * row],
            &src[y * row..(y + 1) * row],
            &src[(y + 1) * row..(y + 2) * row],
        );
        let out = &mut px[y * row..(y + 1) * row];
        for i in 3..row - 3 {
            let n = u32::from(up[i - 3])
                + u32::from(up[i])
                + u32::from(up[i + 3])
                + u32::from(mid[i - 3])
                + u32::from(mid[i + 3])
                + u32::from(down[i - 3])
                + u32::from(down[i])
                + u32::from(down[i + 3]);
            let c = u32::from(mid[i]);
            let blur = (2 * (n + 5 * c) + 13) / 26;
            let x = c as f32;
            out[i] = to_u8(fma32(blur as f32 - x, alpha, x));
        }
    }
}
