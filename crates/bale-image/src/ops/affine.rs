//! torchvision v2's `affine` and `rotate` of `_geometry.py` on `uint8` RGB,
//! with nearest interpolation and without expansion: the inverse matrix of
//! `_get_inverse_affine_matrix` (float64), the sampling grid of
//! `_affine_grid` and `grid_sample(mode="nearest", align_corners=False)`
//! in float32; uncovered pixels take `fill`.

use super::color::fma32;

/// `_get_inverse_affine_matrix(center, angle, translate, scale=1, shear)`.
fn inverse_matrix(
    center: (f64, f64),
    angle: f64,
    translate: (f64, f64),
    shear: (f64, f64),
) -> [f64; 6] {
    let rot = angle.to_radians();
    let sx = shear.0.to_radians();
    let sy = shear.1.to_radians();
    let (cx, cy) = center;
    let (tx, ty) = translate;
    let cos_sy = sy.cos();
    let tan_sx = sx.tan();
    let rot_minus_sy = rot - sy;
    let cx_plus_tx = cx + tx;
    let cy_plus_ty = cy + ty;
    let a = rot_minus_sy.cos() / cos_sy;
    let b = -(a * tan_sx + rot.sin());
    let c = rot_minus_sy.sin() / cos_sy;
    let d = rot.cos() - c * tan_sx;
    let mut m = [d, -b, 0.0, -c, a, 0.0];
    m[2] += cx - m[0] * cx_plus_tx - m[1] * cy_plus_ty;
    m[5] += cy - m[3] * cx_plus_tx - m[4] * cy_plus_ty;
    m
}

/// `affine(angle, translate, scale=1, shear, center)` (degrees; `center` in
/// pixels, `None` for the image's centre) with nearest interpolation.
#[allow(clippy::too_many_arguments)]
pub fn affine(
    px: &mut [u8],
    width: usize,
    height: usize,
    angle: f64,
    translate: (f64, f64),
    shear: (f64, f64),
    center: Option<(f64, f64)>,
    fill: [u8; 3],
    scratch: &mut Vec<u8>,
) {
    let (w, h) = (width as f64, height as f64);
    let center = center.map_or((0.0, 0.0), |(cx, cy)| (cx - w * 0.5, cy - h * 0.5));
    let m = inverse_matrix(center, angle, translate, shear);
    sample(px, width, height, &m, fill, scratch);
}

/// `rotate(angle)` (degrees, counter-clockwise, no expansion) with nearest
/// interpolation, and torchvision's exact paths for multiples of 90 degrees
/// (90 and 270 only on a square image).
pub fn rotate(
    px: &mut [u8],
    width: usize,
    height: usize,
    angle: f64,
    fill: [u8; 3],
    scratch: &mut Vec<u8>,
) {
    let a = angle.rem_euclid(360.0);
    if a == 0.0 {
        return;
    }
    if a == 180.0 {
        px.reverse();
        for p in px.chunks_exact_mut(3) {
            p.reverse();
        }
        return;
    }
    if width == height && (a == 90.0 || a == 270.0) {
        scratch.clear();
        scratch.extend_from_slice(px);
        let n = width;
        for i in 0..n {
            for j in 0..n {
                // torch.rot90(k=1): out[i][j] = in[j][n - 1 - i]; k=3: in[n - 1 - j][i].
                let (si, sj) = if a == 90.0 {
                    (j, n - 1 - i)
                } else {
                    (n - 1 - j, i)
                };
                let s = (si * n + sj) * 3;
                let o = (i * n + j) * 3;
                px[o..o + 3].copy_from_slice(&scratch[s..s + 3]);
            }
        }
        return;
    }
    let m = inverse_matrix((0.0, 0.0), -a, (0.0, 0.0), (0.0, 0.0));
    sample(px, width, height, &m, fill, scratch);
}

/// Nearest sampling of `px` through the inverse matrix `m` (centred
/// coordinates), as `_affine_grid` then `grid_sample` compute it in float32.
fn sample(
    px: &mut [u8],
    width: usize,
    height: usize,
    m: &[f64; 6],
    fill: [u8; 3],
    scratch: &mut Vec<u8>,
) {
    scratch.clear();
    scratch.extend_from_slice(px);
    let src = &scratch[..];
    let hw = (0.5 * width as f64) as f32;
    let hh = (0.5 * height as f64) as f32;
    let t: [f32; 6] = std::array::from_fn(|k| m[k] as f32);
    let (x0, x1, x2) = (t[0] / hw, t[1] / hw, t[2] / hw);
    let (y0, y1, y2) = (t[3] / hh, t[4] / hh, t[5] / hh);
    let (sw, sh) = (width as f32 * 0.5, height as f32 * 0.5);
    let start_x = ((1.0 - width as f64) * 0.5) as f32;
    let start_y = ((1.0 - height as f64) * 0.5) as f32;
    for i in 0..height {
        let by = start_y + i as f32;
        for j in 0..width {
            let bx = start_x + j as f32;
            let gx = fma32(1.0, x2, fma32(by, x1, bx * x0));
            let gy = fma32(1.0, y2, fma32(by, y1, bx * y0));
            let ix = ((gx + 1.0) * sw - 0.5).round_ties_even();
            let iy = ((gy + 1.0) * sh - 0.5).round_ties_even();
            let o = (i * width + j) * 3;
            if ix >= 0.0 && ix < width as f32 && iy >= 0.0 && iy < height as f32 {
                let s = (iy as usize * width + ix as usize) * 3;
                px[o..o + 3].copy_from_slice(&src[s..s + 3]);
            } else {
                px[o..o + 3].copy_from_slice(&fill);
            }
        }
    }
}
