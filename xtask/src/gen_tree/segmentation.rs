//! `--kind seg`: Cityscapes-like samples, a 2048x1024 street scene as a label map
//! and a photo painted from it.
//!
//! The label map is drawn first, the way a street looks from a car: sky above a
//! skyline of buildings and trees, a road narrowing to a vanishing point between
//! sidewalks and terrain, walls and fences along it, then cars, trucks, buses,
//! people, riders, bicycles, poles with signs and lights, far ones before near
//! ones, and the ego vehicle's bonnet at the bottom as 255 (Cityscapes' ignore
//! index, also used for a few unlabelled blobs). Classes are Cityscapes' 19 train
//! ids (0 road ... 18 bicycle), taken modulo `--classes` when it is smaller. The
//! regions are large and their edges irregular, so the PNG compresses like a real
//! label map (tens of KB).
//!
//! The photo gives each region a colour of its class (each object its own),
//! texture of the class's strength (foliage busy, sky smooth), windows on
//! buildings, lane marks on the road, and a light gradient over the whole, so the
//! JPEG (quality 90, 4:2:0) costs about what a street photo does.

use anyhow::{Context, Result};

use super::{Ellipse, Rng, wave};

/// Width of every image and mask.
pub(super) const WIDTH: usize = 2048;
/// Height of every image and mask.
pub(super) const HEIGHT: usize = 1024;
/// The ignore index of the masks.
pub(super) const IGNORE: u8 = 255;

// Cityscapes' train ids.
const ROAD: u8 = 0;
const SIDEWALK: u8 = 1;
const BUILDING: u8 = 2;
const WALL: u8 = 3;
const FENCE: u8 = 4;
const POLE: u8 = 5;
const LIGHT: u8 = 6;
const SIGN: u8 = 7;
const VEGETATION: u8 = 8;
const TERRAIN: u8 = 9;
const SKY: u8 = 10;
const PERSON: u8 = 11;
const RIDER: u8 = 12;
const CAR: u8 = 13;
const TRUCK: u8 = 14;
const BUS: u8 = 15;
const TRAIN: u8 = 16;
const MOTORCYCLE: u8 = 17;
const BICYCLE: u8 = 18;

/// A sample's two members: the JPEG and the mask's PNG.
pub struct Sample {
    pub jpeg: Vec<u8>,
    pub mask_png: Vec<u8>,
}

/// One sample, from its own generator; `classes` (1..=255) bounds the class ids.
pub(super) fn sample(rng: &mut Rng, classes: usize) -> Result<Sample> {
    let scene = Scene::draw(rng);
    let pixels = scene.photo(rng);
    let mut labels = scene.labels;
    if classes < 19 {
        for v in labels.iter_mut().filter(|v| **v != IGNORE) {
            *v %= classes as u8;
        }
    }
    let mut jpeg = Vec::with_capacity(WIDTH * HEIGHT / 3);
    let mut encoder = jpeg_encoder::Encoder::new(&mut jpeg, 90);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder
        .encode(
            &pixels,
            WIDTH as u16,
            HEIGHT as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .context("jpeg encoding failed")?;
    Ok(Sample {
        jpeg,
        mask_png: grey_png(&labels)?,
    })
}

fn grey_png(labels: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, WIDTH as u32, HEIGHT as u32);
    encoder.set_color(png::ColorType::Grayscale);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Balanced);
    encoder.set_filter(png::Filter::Adaptive);
    let mut writer = encoder.write_header().context("png header")?;
    writer.write_image_data(labels).context("png encoding")?;
    writer.finish().context("png encoding")?;
    Ok(out)
}

/// The drawn scene: a class and a base colour per pixel.
struct Scene {
    labels: Vec<u8>,
    colours: Vec<[u8; 3]>,
}

/// What fills a shape.
#[derive(Clone, Copy)]
enum Fill {
    /// A solid colour.
    Solid([u8; 3]),
    /// A building's facade: the colour with darker windows on a grid.
    Facade([u8; 3]),
}

/// A shape of one class.
struct Shape {
    class: u8,
    fill: Fill,
    form: Form,
}

enum Form {
    Ellipse(Ellipse),
    /// `[x0, x1) x [y0, y1)`.
    Rect {
        x0: f64,
        x1: f64,
        y0: f64,
        y1: f64,
    },
}

impl Form {
    /// The columns `[x0, x1)` the form covers on row `y`, if any.
    fn span(&self, y: usize) -> Option<(usize, usize)> {
        match self {
            Form::Ellipse(e) => e.span(y as f64, WIDTH),
            Form::Rect { x0, x1, y0, y1 } => {
                let yf = y as f64;
                if yf < *y0 || yf >= *y1 {
                    return None;
                }
                let a = x0.max(0.0) as usize;
                let b = (x1.max(0.0) as usize).min(WIDTH);
                (a < b).then_some((a, b))
            }
        }
    }
}

fn jitter(rng: &mut Rng, base: [u8; 3], by: f64) -> [u8; 3] {
    base.map(|c| (c as f64 + rng.signed(by)).clamp(0.0, 255.0) as u8)
}

impl Scene {
    fn draw(rng: &mut Rng) -> Scene {
        let (w, h) = (WIDTH, HEIGHT);
        let mut labels = vec![SKY; w * h];
        let mut colours = vec![[0u8; 3]; w * h];
        let sky = jitter(rng, [150, 185, 225], 30.0);
        colours.fill(sky);

        // Horizon and vanishing point.
        let horizon = h as f64 * (0.40 + 0.08 * rng.unit());
        let vx = w as f64 * (0.35 + 0.3 * rng.unit());

        // Skyline: segments of buildings, trees or open sky, from the horizon up.
        let mut shapes: Vec<Shape> = Vec::new();
        let mut x = 0.0;
        while x < w as f64 {
            let width = 60.0 + rng.unit() * 380.0;
            let top = horizon * (0.05 + 0.85 * rng.unit());
            match rng.below(10) {
                0..=5 => shapes.push(Shape {
                    class: BUILDING,
                    fill: Fill::Facade(jitter(rng, [125, 110, 100], 45.0)),
                    form: Form::Rect {
                        x0: x,
                        x1: x + width,
                        y0: top,
                        y1: horizon + 2.0,
                    },
                }),
                6..=8 => {
                    // A tree: a crown of a few overlapping ellipses on a trunk.
                    let green = jitter(rng, [70, 105, 50], 25.0);
                    for _ in 0..3 + rng.below(4) {
                        shapes.push(Shape {
                            class: VEGETATION,
                            fill: Fill::Solid(green),
                            form: Form::Ellipse(Ellipse {
                                cx: x + rng.unit() * width,
                                cy: top + rng.unit() * (horizon - top) * 0.6,
                                rx: width * (0.25 + 0.35 * rng.unit()),
                                ry: (horizon - top) * (0.2 + 0.3 * rng.unit()) + 8.0,
                                delta: [0; 3],
                            }),
                        });
                    }
                }
                _ => {}
            }
            x += width;
        }

        // Ground: road between two lines from the vanishing point, sidewalks
        // and terrain beside it.
        let bottom_left = -(w as f64) * 0.3 * rng.unit();
        let bottom_right = w as f64 * (1.0 + 0.3 * rng.unit());
        let walk = 0.12 + 0.12 * rng.unit();
        let road = jitter(rng, [85, 85, 90], 12.0);
        let sidewalk = jitter(rng, [150, 142, 135], 20.0);
        let terrain = jitter(rng, [120, 125, 70], 25.0);
        let first_ground = horizon.ceil() as usize;
        for y in first_ground..h {
            let t = (y as f64 - horizon) / (h as f64 - horizon);
            let left = vx + (bottom_left - vx) * t;
            let right = vx + (bottom_right - vx) * t;
            let reach = (right - left) * walk;
            let row = y * w;
            for x in 0..w {
                let xf = x as f64;
                let (class, colour) = if xf >= left && xf < right {
                    (ROAD, road)
                } else if xf >= left - reach && xf < right + reach {
                    (SIDEWALK, sidewalk)
                } else {
                    (TERRAIN, terrain)
                };
                labels[row + x] = class;
                colours[row + x] = colour;
            }
        }

        // Things along the road, far (near the horizon, small) to near (large).
        let mut things: Vec<(f64, Shape)> = Vec::new();
        for _ in 0..rng.below(3) {
            // A wall or fence along a side.
            let class = if rng.below(2) == 0 { WALL } else { FENCE };
            let x0 = rng.unit() * w as f64;
            let tall = 20.0 + rng.unit() * 80.0;
            let base = horizon + 10.0 + rng.unit() * 80.0;
            things.push((
                base,
                Shape {
                    class,
                    fill: Fill::Solid(jitter(rng, [140, 130, 120], 35.0)),
                    form: Form::Rect {
                        x0,
                        x1: x0 + 100.0 + rng.unit() * 500.0,
                        y0: base - tall,
                        y1: base,
                    },
                },
            ));
        }
        for _ in 0..4 + rng.below(10) {
            // A pole, with a sign or a light on top.
            let xp = rng.unit() * w as f64;
            let base = horizon + 20.0 + rng.unit() * (h as f64 - horizon) * 0.5;
            let scale = (base - horizon) / (h as f64 - horizon) + 0.1;
            let tall = 200.0 + 500.0 * scale;
            let thick = 3.0 + 14.0 * scale;
            let grey = jitter(rng, [110, 110, 115], 20.0);
            things.push((
                base,
                Shape {
                    class: POLE,
                    fill: Fill::Solid(grey),
                    form: Form::Rect {
                        x0: xp,
                        x1: xp + thick,
                        y0: base - tall,
                        y1: base,
                    },
                },
            ));
            let (class, colour) = if rng.below(2) == 0 {
                (SIGN, jitter(rng, [200, 190, 60], 50.0))
            } else {
                (LIGHT, jitter(rng, [40, 40, 40], 15.0))
            };
            let side = thick * (2.0 + 3.0 * rng.unit());
            things.push((
                base + 0.5,
                Shape {
                    class,
                    fill: Fill::Solid(colour),
                    form: Form::Rect {
                        x0: xp - side / 2.0,
                        x1: xp + side / 2.0 + thick,
                        y0: base - tall - side,
                        y1: base - tall + side,
                    },
                },
            ));
        }
        for _ in 0..3 + rng.below(16) {
            // A road user.
            let base = horizon + 5.0 + rng.unit() * (h as f64 - horizon) * 0.85;
            let scale = (base - horizon) / (h as f64 - horizon) + 0.05;
            let cx = rng.unit() * w as f64;
            let (class, wide, tall, colour, round) = match rng.below(20) {
                0..=9 => (
                    CAR,
                    500.0,
                    230.0,
                    jitter(rng, [120, 120, 120], 110.0),
                    false,
                ),
                10 => (
                    TRUCK,
                    700.0,
                    450.0,
                    jitter(rng, [150, 150, 150], 90.0),
                    false,
                ),
                11 => (BUS, 900.0, 500.0, jitter(rng, [160, 140, 60], 90.0), false),
                12 if rng.below(4) == 0 => (
                    TRAIN,
                    1600.0,
                    500.0,
                    jitter(rng, [170, 170, 170], 40.0),
                    false,
                ),
                13..=15 => (PERSON, 70.0, 280.0, jitter(rng, [90, 70, 60], 60.0), true),
                16 => (RIDER, 80.0, 300.0, jitter(rng, [80, 60, 90], 60.0), true),
                17 => (
                    MOTORCYCLE,
                    180.0,
                    150.0,
                    jitter(rng, [60, 60, 70], 40.0),
                    true,
                ),
                _ => (BICYCLE, 170.0, 120.0, jitter(rng, [70, 70, 70], 40.0), true),
            };
            let (wide, tall) = (wide * scale, tall * scale);
            let form = if round {
                Form::Ellipse(Ellipse {
                    cx,
                    cy: base - tall / 2.0,
                    rx: wide / 2.0,
                    ry: tall / 2.0,
                    delta: [0; 3],
                })
            } else {
                Form::Rect {
                    x0: cx - wide / 2.0,
                    x1: cx + wide / 2.0,
                    y0: base - tall,
                    y1: base,
                }
            };
            things.push((
                base,
                Shape {
                    class,
                    fill: Fill::Solid(colour),
                    form,
                },
            ));
            if !round {
                // Wheels and windows make a vehicle's region less of a box.
                let body = Form::Ellipse(Ellipse {
                    cx,
                    cy: base - tall,
                    rx: wide * 0.38,
                    ry: tall * 0.35,
                    delta: [0; 3],
                });
                things.push((
                    base + 0.25,
                    Shape {
                        class,
                        fill: Fill::Solid(jitter(rng, [60, 70, 80], 20.0)),
                        form: body,
                    },
                ));
            }
        }
        for _ in 0..rng.below(4) {
            // An unlabelled blob (void classes become the ignore index).
            let base = horizon + rng.unit() * (h as f64 - horizon);
            things.push((
                base,
                Shape {
                    class: IGNORE,
                    fill: Fill::Solid(jitter(rng, [100, 100, 100], 60.0)),
                    form: Form::Ellipse(Ellipse {
                        cx: rng.unit() * w as f64,
                        cy: base,
                        rx: 10.0 + rng.unit() * 120.0,
                        ry: 8.0 + rng.unit() * 50.0,
                        delta: [0; 3],
                    }),
                },
            ));
        }
        things.sort_by(|a, b| a.0.total_cmp(&b.0));
        shapes.extend(things.into_iter().map(|(_, s)| s));

        for s in &shapes {
            for y in 0..h {
                let Some((x0, x1)) = s.form.span(y) else {
                    continue;
                };
                let row = y * w;
                labels[row + x0..row + x1].fill(s.class);
                match s.fill {
                    Fill::Solid(c) => colours[row + x0..row + x1].fill(c),
                    Fill::Facade(c) => {
                        let dark = c.map(|v| v / 2);
                        let window_row = y % 48 < 26;
                        for (x, px) in colours[row + x0..row + x1].iter_mut().enumerate() {
                            let window = window_row && (x0 + x) % 36 < 18;
                            *px = if window { dark } else { c };
                        }
                    }
                }
            }
        }

        // The ego vehicle's bonnet: a curve over the bottom rows, ignored.
        let bonnet = 50.0 + rng.unit() * 60.0;
        let bonnet_colour = jitter(rng, [40, 40, 45], 15.0);
        for x in 0..w {
            let u = (x as f64 - w as f64 / 2.0) / (w as f64 / 2.0);
            let rise = (bonnet * (1.0 - 0.6 * u * u)) as usize;
            for y in h - rise.min(h)..h {
                labels[y * w + x] = IGNORE;
                colours[y * w + x] = bonnet_colour;
            }
        }
        Scene { labels, colours }
    }

    /// The photo: region colours, texture by class, lane marks, a gradient.
    fn photo(&self, rng: &mut Rng) -> Vec<u8> {
        let (w, h) = (WIDTH, HEIGHT);
        // Texture amplitude per class (an object's is moderate).
        let amp = |class: u8| -> i32 {
            match class {
                VEGETATION => 44,
                TERRAIN => 30,
                BUILDING | WALL => 18,
                ROAD | SIDEWALK => 14,
                SKY => 3,
                _ => 10,
            }
        };
        let gx = rng.signed(30.0);
        let gy = rng.signed(30.0);
        let (ax, px, ox) = (
            4.0 + rng.unit() * 10.0,
            150.0 + rng.unit() * 600.0,
            rng.unit(),
        );
        let light_col: Vec<i32> = (0..w)
            .map(|x| {
                let t = x as f64;
                (gx * t / w as f64 + ax * wave(t / px + ox)) as i32
            })
            .collect();
        let lane = w as f64 * (0.45 + 0.1 * rng.unit());
        let mut pixels = vec![0u8; w * h * 3];
        for y in 0..h {
            let light_row = (gy * y as f64 / h as f64) as i32;
            let row = y * w;
            // A dashed lane mark, widening towards the bottom.
            let t = y as f64 / h as f64;
            let mark = (lane - 4.0 - 20.0 * t, lane + 4.0 + 20.0 * t);
            let dashed = (y / 40) % 2 == 0;
            for x in 0..w {
                let class = self.labels[row + x];
                let base = self.colours[row + x];
                let a = amp(class) * 256 / 255;
                let r = rng.next_u64().to_le_bytes();
                let marked = class == ROAD && dashed && (x as f64) >= mark.0 && (x as f64) < mark.1;
                let light = light_col[x] + light_row + if marked { 140 } else { 0 };
                let out = &mut pixels[(row + x) * 3..(row + x) * 3 + 3];
                for c in 0..3 {
                    let n = (r[2 * c] as i32 + r[2 * c + 1] as i32 - 255) * a / 256;
                    out[c] = (base[c] as i32 + light + n).clamp(0, 255) as u8;
                }
            }
        }
        pixels
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_grey(png_bytes: &[u8]) -> (png::OutputInfo, Vec<u8>) {
        let mut reader = png::Decoder::new(std::io::Cursor::new(png_bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    #[test]
    fn a_sample_is_a_2048x1024_jpeg_with_a_label_map_of_train_ids_and_ignore() {
        let s = sample(&mut Rng::new(0, 7), 19).unwrap();
        assert_eq!(&s.jpeg[..2], &[0xFF, 0xD8], "not a JPEG");
        let (info, labels) = decode_grey(&s.mask_png);
        assert_eq!((info.width, info.height), (WIDTH as u32, HEIGHT as u32));
        assert_eq!(info.color_type, png::ColorType::Grayscale);
        assert_eq!(info.bit_depth, png::BitDepth::Eight);
        let mut seen = [0usize; 256];
        for &v in &labels {
            seen[v as usize] += 1;
        }
        assert!(seen[19..255].iter().all(|&n| n == 0), "a value past 18");
        // Regions, not noise: sky, road and the ignored bonnet are always there,
        // and the PNG is small, as a real label map's is.
        for class in [SKY, ROAD, IGNORE] {
            assert!(seen[class as usize] > 10_000, "class {class} missing");
        }
        assert!(s.mask_png.len() < 100_000, "{} bytes", s.mask_png.len());
    }

    #[test]
    fn a_sample_is_a_function_of_its_seed_and_index() {
        let a = sample(&mut Rng::new(2, 4), 19).unwrap();
        let b = sample(&mut Rng::new(2, 4), 19).unwrap();
        let c = sample(&mut Rng::new(2, 5), 19).unwrap();
        assert_eq!((&a.jpeg, &a.mask_png), (&b.jpeg, &b.mask_png));
        assert_ne!(a.mask_png, c.mask_png);
    }

    #[test]
    fn fewer_classes_fold_the_ids_and_keep_the_ignore_index() {
        let s = sample(&mut Rng::new(0, 3), 5).unwrap();
        let (_, labels) = decode_grey(&s.mask_png);
        assert!(labels.iter().all(|&v| v < 5 || v == IGNORE));
        assert!(labels.contains(&IGNORE));
    }
}
