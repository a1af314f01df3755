//! `cargo xtask gen-tree`: a deterministic generator of ImageNet-like trees.
//!
//! Writes `OUT/<class>/<class>_<index>.<ext>` for `--files` images spread round-robin
//! over `--classes` directories. Every file is a pure function of `(seed, index)`, so
//! the same parameters give a byte-identical tree whatever the thread count.
//!
//! - `jpeg` (default): RGB JPEGs of about 400..600 x 300..600 pixels (mostly 4:3,
//!   centred on 500x375), quality 90, 4:2:0, made of gradients, waves, ellipses and
//!   noise of varying strength, so sizes vary like photos' do (about 110 KB on
//!   average). Class directories are named like ImageNet's WordNet ids (`n01440764`).
//! - `png`: 32x32 RGB PNGs of about 2 KB, like CIFAR; classes `class_000`, ...
//! - `seg`: Cityscapes-like samples in one directory, `OUT/frame_<index>.jpg`
//!   (2048x1024) with its label map `OUT/frame_<index>.mask.png` (8-bit grey,
//!   classes 0-18 and 255): see [`segmentation`].
//! - `det`: COCO-like samples in one directory, `OUT/<index, 12 digits>.jpg`
//!   (640x480 and COCO's other usual sizes) with `OUT/<index>.json` holding 1-50
//!   boxes and their labels: see [`detection`].
//!
//! With `--json-every K`, every K-th sample of `jpeg` or `png` also gets a sidecar
//! `<stem>.json`, so the tree has multi-member samples.
//!
//! A stamp file (`.bale-gen-tree`) is written into OUT last; a rerun with the same
//! parameters finds it and does nothing. A tree left incomplete, or made with other
//! parameters, is removed and made again; a directory gen-tree did not make is never
//! touched.

use std::fmt::Write as _;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::util::{self, Args};

mod detection;
mod segmentation;

/// Name of the stamp written into OUT once the tree is complete.
pub(crate) const STAMP: &str = ".bale-gen-tree";
/// Marker present while a tree is being written (removed when the stamp lands).
const PARTIAL: &str = ".bale-gen-tree.partial";
/// Bump when the bytes generated for given parameters change, so old trees are redone.
const GENERATOR_VERSION: u32 = 1;

pub const USAGE: &str = "\
usage: cargo xtask gen-tree OUT --files N --classes C [--kind jpeg|png|seg|det] [--seed S] [--json-every K]

Writes a deterministic ImageNet-like tree OUT/<class>/<class>_<index>.<ext>, or a
Cityscapes-like or COCO-like one (seg, det) with its targets.
  --files N        number of images
  --classes C      number of class directories (images are spread round-robin);
                   seg: classes in the masks (default 19), det: box labels 1..=C (default 80)
  --kind K         jpeg (default): ~110 KB photos-like JPEGs, classes n01440764-style
                   png: ~2 KB 32x32 PNGs, classes class_000-style
                   seg: OUT/frame_<i>.jpg, 2048x1024 street scenes, with
                        OUT/frame_<i>.mask.png, 8-bit grey label maps (0-18, 255 ignored)
                   det: OUT/<i, 12 digits>.jpg, COCO's sizes (~640x480), with
                        OUT/<i>.json: {\"boxes\": [[x1, y1, x2, y2], ...], \"labels\": [...]}, 1-50 boxes
  --seed S         seed (default 0); the same seed gives a byte-identical tree
  --json-every K   also write a <stem>.json sidecar for every K-th image (default 0: none)
Does nothing when OUT already holds a complete tree made with the same parameters.";

/// What kind of images to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Photo-like JPEGs, about 110 KB each.
    Jpeg,
    /// 32x32 PNGs, about 2 KB each.
    Png,
    /// Cityscapes-like 2048x1024 JPEGs with 8-bit label-map PNGs.
    Segmentation,
    /// COCO-like JPEGs with a JSON member of boxes and labels.
    Detection,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Jpeg => "jpeg",
            Kind::Png => "png",
            Kind::Segmentation => "seg",
            Kind::Detection => "det",
        }
    }

    fn ext(self) -> &'static str {
        match self {
            Kind::Jpeg | Kind::Segmentation | Kind::Detection => "jpg",
            Kind::Png => "png",
        }
    }

    /// What the sidecars of this kind are, for messages.
    fn sidecar_name(self) -> &'static str {
        match self {
            Kind::Jpeg | Kind::Png => "JSON sidecars",
            Kind::Segmentation => "masks",
            Kind::Detection => "JSON box files",
        }
    }

    /// True for the kinds whose images sit in class directories.
    fn has_class_dirs(self) -> bool {
        matches!(self, Kind::Jpeg | Kind::Png)
    }

    /// The classes when `--classes` is not given, for the kinds that have a default.
    fn default_classes(self) -> Option<usize> {
        match self {
            Kind::Jpeg | Kind::Png => None,
            Kind::Segmentation => Some(19),
            Kind::Detection => Some(80),
        }
    }
}

impl std::str::FromStr for Kind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "jpeg" | "jpg" => Ok(Kind::Jpeg),
            "png" => Ok(Kind::Png),
            "seg" | "segmentation" => Ok(Kind::Segmentation),
            "det" | "detection" => Ok(Kind::Detection),
            _ => Err("expected jpeg, png, seg or det".into()),
        }
    }
}

/// Parameters of a tree; the tree is a pure function of them.
#[derive(Clone, Debug)]
pub struct Params {
    /// Number of images.
    pub files: usize,
    /// Number of class directories (`seg`: classes in the masks; `det`: box labels).
    pub classes: usize,
    /// Image kind.
    pub kind: Kind,
    /// Seed of every random choice.
    pub seed: u64,
    /// Write a JSON sidecar for every `json_every`-th image; 0 for none.
    pub json_every: usize,
}

impl Params {
    fn stamp(&self) -> String {
        format!(
            "bale gen-tree v{GENERATOR_VERSION}\nkind={}\nfiles={}\nclasses={}\nseed={}\njson-every={}\n",
            self.kind.name(),
            self.files,
            self.classes,
            self.seed,
            self.json_every
        )
    }

    /// The directory name of class `c`.
    pub fn class_name(&self, c: usize) -> String {
        match self.kind {
            // Increasing, so sorting the names keeps class order.
            Kind::Jpeg => format!("n{:08}", 1_440_764 + c * 9_973),
            Kind::Png | Kind::Segmentation | Kind::Detection => format!("class_{c:03}"),
        }
    }

    fn stem(&self, index: usize) -> String {
        match self.kind {
            Kind::Jpeg | Kind::Png => {
                let class = self.class_name(index % self.classes);
                format!("{class}/{class}_{index:06}")
            }
            Kind::Segmentation => format!("frame_{index:06}"),
            Kind::Detection => format!("{index:012}"),
        }
    }
}

/// What [`generate`] did.
#[derive(Debug)]
pub struct Summary {
    /// Image files in the tree.
    pub images: usize,
    /// Sidecar files in the tree (JSON files; `seg`'s masks).
    pub sidecars: usize,
    /// Total bytes of the image files.
    pub image_bytes: u64,
}

/// `cargo xtask gen-tree ...`
pub fn main(mut args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    let files = args.value("--files")?.context("--files N is required")?;
    let classes: Option<usize> = args.value("--classes")?;
    let kind = args.value("--kind")?.unwrap_or(Kind::Jpeg);
    let classes = classes
        .or(kind.default_classes())
        .context("--classes C is required")?;
    let seed = args.value("--seed")?.unwrap_or(0);
    let json_every = args.value("--json-every")?.unwrap_or(0);
    let out = args
        .positional()
        .context("missing OUT directory (try --help)")?;
    args.finish()?;
    let params = Params {
        files,
        classes,
        kind,
        seed,
        json_every,
    };
    generate(Path::new(&out), &params)?;
    Ok(())
}

/// Makes sure `out` holds the tree for `params`, generating it on all cores if needed.
pub fn generate(out: &Path, params: &Params) -> Result<Summary> {
    if params.files == 0 || params.classes == 0 {
        bail!("--files and --classes must be at least 1");
    }
    if params.kind == Kind::Segmentation && params.classes > 255 {
        bail!("--kind seg holds at most 255 classes (255 is the ignore index)");
    }
    if !params.kind.has_class_dirs() && params.json_every > 0 {
        bail!("--json-every is for --kind jpeg or png (seg and det samples have their targets)");
    }
    let stamp = params.stamp();
    if fs::read_to_string(out.join(STAMP)).is_ok_and(|s| s == stamp) {
        let summary = measure(out, params)?;
        eprintln!(
            "gen-tree: {} already holds this tree ({} images, {}), nothing to do",
            util::shown(out),
            summary.images,
            util::bytes(summary.image_bytes)
        );
        return Ok(summary);
    }
    prepare(out)?;

    let start = Instant::now();
    fs::write(out.join(PARTIAL), &stamp)
        .with_context(|| format!("cannot write into {}", out.display()))?;
    let class_dirs = if params.kind.has_class_dirs() {
        params.classes.min(params.files)
    } else {
        0
    };
    for c in 0..class_dirs {
        let dir = out.join(params.class_name(c));
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }

    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!(
        "gen-tree: writing {} {} images in {} classes to {} on {threads} threads",
        params.files,
        params.kind.name(),
        params.classes,
        util::shown(out)
    );
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let bytes = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);

    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                while !failed.load(Ordering::Relaxed) {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= params.files {
                        break;
                    }
                    match write_sample(out, params, index) {
                        Ok(n) => {
                            bytes.fetch_add(n, Ordering::Relaxed);
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            first_error.lock().unwrap().get_or_insert(e);
                        }
                    }
                }
            });
        }
        // Progress, from this thread, every two seconds.
        let mut last = Instant::now();
        while done.load(Ordering::Relaxed) < params.files && !failed.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            if last.elapsed() >= Duration::from_secs(2) {
                last = Instant::now();
                let n = done.load(Ordering::Relaxed);
                eprintln!(
                    "gen-tree: {n}/{} images ({}%), {}, {}",
                    params.files,
                    n * 100 / params.files,
                    util::bytes(bytes.load(Ordering::Relaxed)),
                    util::secs(start.elapsed())
                );
            }
        }
    });
    if let Some(e) = first_error.into_inner().unwrap() {
        return Err(e.context(format!("generating the tree in {}", out.display())));
    }

    // The stamp goes in last, atomically; then the partial marker goes.
    let tmp = out.join(format!("{STAMP}.tmp"));
    fs::write(&tmp, &stamp).with_context(|| format!("cannot write {}", tmp.display()))?;
    fs::rename(&tmp, out.join(STAMP)).context("cannot rename the stamp into place")?;
    fs::remove_file(out.join(PARTIAL)).context("cannot remove the partial marker")?;

    let image_bytes = bytes.into_inner();
    let summary = Summary {
        images: params.files,
        sidecars: sidecar_count(params),
        image_bytes,
    };
    eprintln!(
        "gen-tree: wrote {} images ({}, average {}){} to {} in {}",
        summary.images,
        util::bytes(image_bytes),
        util::bytes(image_bytes / params.files as u64),
        if summary.sidecars > 0 {
            format!(" and {} {}", summary.sidecars, params.kind.sidecar_name())
        } else {
            String::new()
        },
        util::shown(out),
        util::secs(start.elapsed())
    );
    Ok(summary)
}

/// Empties the way for a new tree: OUT must be absent, empty, or a tree of ours.
fn prepare(out: &Path) -> Result<()> {
    match fs::read_dir(out) {
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", out.display())),
        Ok(mut entries) => {
            let ours = out.join(STAMP).exists() || out.join(PARTIAL).exists();
            if ours {
                eprintln!(
                    "gen-tree: {} holds an incomplete tree or one made with other parameters; removing it",
                    util::shown(out)
                );
                fs::remove_dir_all(out)
                    .with_context(|| format!("cannot remove {}", out.display()))?;
            } else if entries.next().is_some() {
                bail!(
                    "{} exists, is not empty and was not made by gen-tree; remove it or choose another directory",
                    out.display()
                );
            }
        }
    }
    fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))
}

/// Sizes of an existing complete tree, for the summary.
fn measure(out: &Path, params: &Params) -> Result<Summary> {
    let mut image_bytes = 0;
    for index in 0..params.files {
        let path = image_path(out, params, index);
        image_bytes += fs::metadata(&path)
            .with_context(|| format!("{} is missing; delete {STAMP} to redo", path.display()))?
            .len();
    }
    Ok(Summary {
        images: params.files,
        sidecars: sidecar_count(params),
        image_bytes,
    })
}

fn sidecar_count(params: &Params) -> usize {
    if !params.kind.has_class_dirs() {
        return params.files;
    }
    match params.json_every {
        0 => 0,
        k => params.files.div_ceil(k),
    }
}

fn image_path(out: &Path, params: &Params, index: usize) -> PathBuf {
    out.join(format!("{}.{}", params.stem(index), params.kind.ext()))
}

/// Writes image `index` (and its sidecar, if it has one); returns the image's size.
fn write_sample(out: &Path, params: &Params, index: usize) -> Result<u64> {
    let mut rng = Rng::new(params.seed, index as u64);
    let bytes = match params.kind {
        Kind::Jpeg => jpeg(&mut rng)?,
        Kind::Png => png(&mut rng)?,
        Kind::Segmentation => {
            let s = segmentation::sample(&mut rng, params.classes)?;
            let path = out.join(format!("{}.mask.png", params.stem(index)));
            fs::write(&path, &s.mask_png)
                .with_context(|| format!("cannot write {}", path.display()))?;
            s.jpeg
        }
        Kind::Detection => {
            let s = detection::sample(&mut rng, params.classes)?;
            let path = out.join(format!("{}.json", params.stem(index)));
            fs::write(&path, &s.json)
                .with_context(|| format!("cannot write {}", path.display()))?;
            s.jpeg
        }
    };
    let path = image_path(out, params, index);
    fs::write(&path, &bytes).with_context(|| format!("cannot write {}", path.display()))?;
    if params.json_every > 0 && index.is_multiple_of(params.json_every) {
        let class = index % params.classes;
        let mut json = String::new();
        writeln!(
            json,
            "{{\"index\": {index}, \"class\": {class}, \"class_name\": \"{}\", \"caption\": \"synthetic image {index} of class {class}\", \"bytes\": {}}}",
            params.class_name(class),
            bytes.len()
        )?;
        let path = out.join(format!("{}.json", params.stem(index)));
        fs::write(&path, json).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(bytes.len() as u64)
}

/// A photo-like JPEG: size, content and noise level drawn from `rng`.
fn jpeg(rng: &mut Rng) -> Result<Vec<u8>> {
    let width = 400 + rng.below(201) as usize;
    // Mostly landscape 4:3, like ImageNet; some 3:2, square, portrait and wide.
    let (num, den) = [
        (3, 4),
        (3, 4),
        (3, 4),
        (3, 4),
        (2, 3),
        (1, 1),
        (4, 3),
        (9, 16),
    ][rng.below(8) as usize];
    let height = (width * num / den).max(64);
    // Noise is what costs bytes; its strength sets the file size. Squaring a uniform
    // draw skews it low, as in photos: many smooth, a few very busy.
    let u = rng.unit();
    let noise = 9.0 + 84.0 * u;
    let pixels = picture(rng, width, height, noise);
    encode_jpeg(&pixels, width, height)
}

/// `pixels` (RGB, `width` x `height`) as a quality-90 JPEG with 4:2:0 chroma.
pub(crate) fn encode_jpeg(pixels: &[u8], width: usize, height: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(width * height);
    let mut encoder = jpeg_encoder::Encoder::new(&mut out, 90);
    encoder.set_sampling_factor(jpeg_encoder::SamplingFactor::F_2_2);
    encoder
        .encode(
            pixels,
            width as u16,
            height as u16,
            jpeg_encoder::ColorType::Rgb,
        )
        .context("jpeg encoding failed")?;
    Ok(out)
}

/// A 32x32 PNG, like a CIFAR image.
fn png(rng: &mut Rng) -> Result<Vec<u8>> {
    const SIDE: usize = 32;
    let noise = 3.0 + 12.0 * rng.unit();
    let pixels = picture(rng, SIDE, SIDE, noise);
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, SIDE as u32, SIDE as u32);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Balanced);
    encoder.set_filter(png::Filter::Adaptive);
    let mut writer = encoder.write_header().context("png header")?;
    writer.write_image_data(&pixels).context("png encoding")?;
    writer.finish().context("png encoding")?;
    Ok(out)
}

/// An RGB picture: gradients and waves per channel, a few solid ellipses, and noise
/// of amplitude about `noise`.
fn picture(rng: &mut Rng, width: usize, height: usize, noise: f64) -> Vec<u8> {
    // Separable background: value(x, y) = col[x] + row[y], per channel.
    let mut col = vec![[0i32; 3]; width];
    let mut row = vec![[0i32; 3]; height];
    for c in 0..3 {
        let base = 30.0 + 190.0 * rng.unit();
        let gx = rng.signed(90.0);
        let gy = rng.signed(90.0);
        let (ax, px, ox) = (rng.unit() * 35.0, 30.0 + rng.unit() * 300.0, rng.unit());
        let (ay, py, oy) = (rng.unit() * 35.0, 30.0 + rng.unit() * 300.0, rng.unit());
        for (x, v) in col.iter_mut().enumerate() {
            let t = x as f64;
            v[c] = (base + gx * t / width as f64 + ax * wave(t / px + ox)) as i32;
        }
        for (y, v) in row.iter_mut().enumerate() {
            let t = y as f64;
            v[c] = (gy * t / height as f64 + ay * wave(t / py + oy)) as i32;
        }
    }
    // Solid ellipses: edges, like objects.
    let shapes: Vec<Ellipse> = (0..2 + rng.below(7))
        .map(|_| Ellipse {
            cx: rng.unit() * width as f64,
            cy: rng.unit() * height as f64,
            rx: 4.0 + rng.unit() * width as f64 / 3.0,
            ry: 4.0 + rng.unit() * height as f64 / 3.0,
            delta: [
                rng.signed(90.0) as i32,
                rng.signed(90.0) as i32,
                rng.signed(90.0) as i32,
            ],
        })
        .collect();
    let amp = (noise * 256.0 / 255.0) as i32;

    let mut pixels = vec![0u8; width * height * 3];
    let mut offsets = vec![[0i32; 3]; width];
    for (y, line) in pixels.chunks_exact_mut(width * 3).enumerate() {
        offsets.fill([0; 3]);
        for s in &shapes {
            if let Some((x0, x1)) = s.span(y as f64, width) {
                for o in &mut offsets[x0..x1] {
                    for (v, d) in o.iter_mut().zip(s.delta) {
                        *v += d;
                    }
                }
            }
        }
        for (x, px) in line.chunks_exact_mut(3).enumerate() {
            // Triangular noise per channel from two random bytes each.
            let r = rng.next_u64().to_le_bytes();
            for c in 0..3 {
                let n = (r[2 * c] as i32 + r[2 * c + 1] as i32 - 255) * amp / 256;
                px[c] = (col[x][c] + row[y][c] + offsets[x][c] + n).clamp(0, 255) as u8;
            }
        }
    }
    pixels
}

/// A sine-like wave of period 1 in `[-1, 1]`, from parabolas: only exact IEEE
/// operations, so the bytes do not depend on the platform's `sin`.
fn wave(phase: f64) -> f64 {
    let f = phase - phase.floor();
    if f < 0.5 {
        16.0 * f * (0.5 - f)
    } else {
        -16.0 * (f - 0.5) * (1.0 - f)
    }
}

struct Ellipse {
    cx: f64,
    cy: f64,
    rx: f64,
    ry: f64,
    delta: [i32; 3],
}

impl Ellipse {
    /// The columns `[x0, x1)` the ellipse covers on row `y`, if any.
    fn span(&self, y: f64, width: usize) -> Option<(usize, usize)> {
        let dy = (y - self.cy) / self.ry;
        if dy.abs() >= 1.0 {
            return None;
        }
        let half = self.rx * (1.0 - dy * dy).sqrt();
        let x0 = (self.cx - half).max(0.0) as usize;
        let x1 = ((self.cx + half).max(0.0) as usize).min(width);
        (x0 < x1).then_some((x0, x1))
    }
}

/// A small, fast, seedable generator (wyrand), seeded from `(seed, stream)` with
/// splitmix64 so every file has its own independent stream.
struct Rng(u64);

impl Rng {
    fn new(seed: u64, stream: u64) -> Self {
        let mut z = seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2 {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
        }
        Rng(z)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        ((t >> 64) ^ t) as u64
    }

    /// Uniform in `[0, n)` (the bias is negligible for the small `n` used here).
    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `[-max, max)`.
    fn signed(&mut self, max: f64) -> f64 {
        (self.unit() * 2.0 - 1.0) * max
    }
}
