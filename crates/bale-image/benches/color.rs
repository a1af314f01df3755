//! `cargo bench -p bale-image --bench color`: `ColorJitter`'s pixel cost.
//!
//! On a 224 x 224 synthetic photo (smooth gradients with noise, so the
//! pixels vary as a real crop's do), the median time of each of
//! brightness, contrast, saturation and hue alone through `color_jitter`,
//! of the four together in two orders (contrast first and last), and of
//! the step-by-step `adjust_*` reference for the four, in ns per pixel and
//! ms per image. `--reps N` (default 200) runs per figure.

use std::hint::black_box;
use std::time::Instant;

use bale_image::ops::{
    Jitter, adjust_brightness, adjust_contrast, adjust_hue, adjust_saturation, color_jitter,
};

const SIDE: usize = 224;

fn photo() -> Vec<u8> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut noise = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % 41) as i32 - 20
    };
    let mut px = Vec::with_capacity(SIDE * SIDE * 3);
    for y in 0..SIDE {
        for x in 0..SIDE {
            let base = [
                (x * 255 / SIDE) as i32,
                (y * 255 / SIDE) as i32,
                ((x + y) * 255 / (2 * SIDE)) as i32,
            ];
            for b in base {
                px.push((b + noise()).clamp(0, 255) as u8);
            }
        }
    }
    px
}

fn median_ns(src: &[u8], reps: usize, mut run: impl FnMut(&mut [u8])) -> f64 {
    let mut buf = src.to_vec();
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        buf.copy_from_slice(src);
        let t = Instant::now();
        run(black_box(&mut buf));
        times.push(t.elapsed().as_nanos() as f64);
    }
    times.sort_by(f64::total_cmp);
    times[reps / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(200usize);
    let src = photo();
    let pixels = (SIDE * SIDE) as f64;
    let (b, c, s, h) = (
        Jitter::Brightness(1.23),
        Jitter::Contrast(0.81),
        Jitter::Saturation(1.31),
        Jitter::Hue(0.07),
    );
    let cases: Vec<(&str, Vec<Jitter>)> = vec![
        ("brightness", vec![b]),
        ("contrast", vec![c]),
        ("saturation", vec![s]),
        ("hue", vec![h]),
        ("all four, contrast first", vec![c, b, s, h]),
        ("all four, contrast last", vec![h, s, b, c]),
    ];
    println!("{SIDE}x{SIDE} RGB, median of {reps} runs");
    println!("{:<32} {:>9} {:>9}", "color_jitter", "ns/px", "ms/image");
    for (name, steps) in &cases {
        let ns = median_ns(&src, reps, |px| color_jitter(px, steps));
        println!("{name:<32} {:>9.2} {:>9.3}", ns / pixels, ns / 1e6);
    }
    let ns = median_ns(&src, reps, |px| {
        adjust_contrast(px, 0.81);
        adjust_brightness(px, 1.23);
        adjust_saturation(px, 1.31);
        adjust_hue(px, 0.07);
    });
    let name = "adjust_* one by one (four)";
    println!("{name:<32} {:>9.2} {:>9.3}", ns / pixels, ns / 1e6);
}
