//! `--kind det`: COCO-like samples, a photo-like JPEG of one of COCO's usual sizes
//! (640x480 most often, 640x427, 480x640, ...) and a JSON member with its boxes.
//!
//! A sample has 1 to 50 objects (few most often: the count is skewed low, as
//! COCO's is). Each box's area is drawn log-uniformly between 0.01% and 60% of the
//! image and its aspect ratio log-uniformly in [1/3, 3], so about 40% are small
//! (under 32x32 pixels, as in COCO) and the smallest vanish when an image is
//! scaled down, which is what `SanitizeBoundingBoxes` drops. Each object is
//! painted into the photo (an ellipse or a rectangle filling its box, shifting
//! the colours under it), large ones first. The JSON is
//! `{"boxes": [[x1, y1, x2, y2], ...], "labels": [c, ...]}`, xyxy in pixels of the
//! image (two decimals, as COCO's), labels in 1..=`--classes` (80 by default).

use std::fmt::Write as _;

use anyhow::Result;

use super::{Rng, picture};

/// COCO's most common image sizes (width, height), repeated by how often they occur.
const SIZES: [(usize, usize); 10] = [
    (640, 480),
    (640, 480),
    (640, 480),
    (640, 480),
    (640, 427),
    (640, 427),
    (480, 640),
    (640, 360),
    (427, 640),
    (500, 375),
];

/// Most boxes in a sample.
const MAX_BOXES: usize = 50;

/// A sample's two members: the JPEG and its JSON.
pub struct Sample {
    pub jpeg: Vec<u8>,
    pub json: String,
}

struct Object {
    x1: f64,
    y1: f64,
    x2: f64,
    y2: f64,
    label: usize,
}

/// One sample, from its own generator; labels are in `1..=classes`.
pub(super) fn sample(rng: &mut Rng, classes: usize) -> Result<Sample> {
    let (width, height) = SIZES[rng.below(SIZES.len() as u64) as usize];
    let noise = 9.0 + 60.0 * rng.unit();
    let mut pixels = picture(rng, width, height, noise);

    // 1..=50, skewed low: 1 + 49 u^4 has a mean of about 11 and a median of 4.
    let count = 1 + ((MAX_BOXES - 1) as f64 * rng.unit().powi(4)).round() as usize;
    let area = (width * height) as f64;
    let mut objects: Vec<Object> = (0..count)
        .map(|_| {
            let frac = 1e-4 * 6000f64.powf(rng.unit());
            let aspect = 3f64.powf(rng.signed(1.0));
            let bw = (area * frac * aspect).sqrt().clamp(1.0, width as f64);
            let bh = (area * frac / aspect).sqrt().clamp(1.0, height as f64);
            let x1 = rng.unit() * (width as f64 - bw);
            let y1 = rng.unit() * (height as f64 - bh);
            Object {
                x1: round2(x1),
                y1: round2(y1),
                x2: round2(x1 + bw),
                y2: round2(y1 + bh),
                label: 1 + rng.below(classes as u64) as usize,
            }
        })
        .collect();
    // Large objects first, so small ones stay visible on top of them.
    objects.sort_by(|a, b| {
        let area = |o: &Object| (o.x2 - o.x1) * (o.y2 - o.y1);
        area(b).total_cmp(&area(a))
    });
    for o in &objects {
        paint(rng, &mut pixels, width, o);
    }

    let jpeg = super::encode_jpeg(&pixels, width, height)?;

    let mut json = String::from("{\"boxes\": [");
    for (i, o) in objects.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        write!(
            json,
            "{sep}[{:.2}, {:.2}, {:.2}, {:.2}]",
            o.x1, o.y1, o.x2, o.y2
        )?;
    }
    json.push_str("], \"labels\": [");
    for (i, o) in objects.iter().enumerate() {
        let sep = if i == 0 { "" } else { ", " };
        write!(json, "{sep}{}", o.label)?;
    }
    json.push_str("]}\n");
    Ok(Sample { jpeg, json })
}

fn round2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

/// Shifts the colours under the object's shape (an ellipse or its whole box).
fn paint(rng: &mut Rng, pixels: &mut [u8], width: usize, o: &Object) {
    let delta = [
        rng.signed(100.0) as i32,
        rng.signed(100.0) as i32,
        rng.signed(100.0) as i32,
    ];
    let round = rng.below(2) == 0;
    let (cx, cy) = ((o.x1 + o.x2) / 2.0, (o.y1 + o.y2) / 2.0);
    let (rx, ry) = ((o.x2 - o.x1) / 2.0, (o.y2 - o.y1) / 2.0);
    for y in o.y1 as usize..(o.y2.ceil() as usize).min(pixels.len() / (width * 3)) {
        let (x0, x1) = if round {
            let dy = (y as f64 + 0.5 - cy) / ry;
            if dy.abs() >= 1.0 {
                continue;
            }
            let half = rx * (1.0 - dy * dy).sqrt();
            (
                (cx - half).max(0.0) as usize,
                ((cx + half) as usize).min(width),
            )
        } else {
            (o.x1 as usize, (o.x2.ceil() as usize).min(width))
        };
        let row = &mut pixels[y * width * 3..(y + 1) * width * 3];
        for px in row[x0 * 3..x1 * 3].chunks_exact_mut(3) {
            for (v, d) in px.iter_mut().zip(delta) {
                *v = (*v as i32 + d).clamp(0, 255) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The numbers of the JSON's two lists, parsed by hand (xtask has no JSON crate).
    fn parse(json: &str) -> (Vec<[f64; 4]>, Vec<usize>) {
        let (boxes, labels) = json
            .trim()
            .strip_prefix("{\"boxes\": [")
            .and_then(|s| s.strip_suffix("]}"))
            .and_then(|s| s.split_once("], \"labels\": ["))
            .expect("the JSON's shape");
        let boxes = boxes
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split("], [")
            .map(|b| {
                let v: Vec<f64> = b.split(", ").map(|x| x.parse().unwrap()).collect();
                [v[0], v[1], v[2], v[3]]
            })
            .collect();
        let labels = labels.split(", ").map(|x| x.parse().unwrap()).collect();
        (boxes, labels)
    }

    #[test]
    fn boxes_lie_in_the_image_with_a_label_each() {
        let mut counts = Vec::new();
        for i in 0..40 {
            let s = sample(&mut Rng::new(1, i), 80).unwrap();
            let (w, h) = jpeg_size(&s.jpeg);
            assert!(SIZES.contains(&(w, h)), "{w}x{h}");
            let (boxes, labels) = parse(&s.json);
            assert_eq!(boxes.len(), labels.len());
            assert!((1..=MAX_BOXES).contains(&boxes.len()));
            for [x1, y1, x2, y2] in boxes {
                assert!(0.0 <= x1 && x1 < x2 && x2 <= w as f64, "{x1} {x2} in {w}");
                assert!(0.0 <= y1 && y1 < y2 && y2 <= h as f64, "{y1} {y2} in {h}");
            }
            assert!(labels.iter().all(|l| (1..=80).contains(l)));
            counts.push(labels.len());
        }
        // Skewed low, as COCO's counts are, but not all alike.
        counts.sort();
        assert!(counts[counts.len() / 2] <= 10, "{counts:?}");
        assert!(counts[0] < counts[counts.len() - 1], "{counts:?}");
    }

    #[test]
    fn a_sample_is_a_function_of_its_seed_and_index() {
        let a = sample(&mut Rng::new(5, 9), 80).unwrap();
        let b = sample(&mut Rng::new(5, 9), 80).unwrap();
        let c = sample(&mut Rng::new(5, 10), 80).unwrap();
        assert_eq!((&a.jpeg, &a.json), (&b.jpeg, &b.json));
        assert_ne!(a.json, c.json);
    }

    /// Width and height from a baseline JPEG's SOF0 segment.
    fn jpeg_size(jpeg: &[u8]) -> (usize, usize) {
        let at = jpeg
            .windows(2)
            .position(|w| w == [0xFF, 0xC0])
            .expect("an SOF0 marker");
        let h = u16::from_be_bytes([jpeg[at + 5], jpeg[at + 6]]) as usize;
        let w = u16::from_be_bytes([jpeg[at + 7], jpeg[at + 8]]) as usize;
        (w, h)
    }
}
