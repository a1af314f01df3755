//! `cargo xtask bench image`: the image stage against Pillow, per core.
//!
//! On the first `--images N` JPEGs (default 1000) of the benchmark tree
//! (`BALE_BENCH_TREE`), one thread each side, every file in memory first:
//!
//! - images per second for decode + resize `shorter:256` (Lanczos3) + encode
//!   JPEG quality 90, bale-image against Pillow doing the same work on the
//!   same files (open, convert("RGB"), resize LANCZOS to the same size, save
//!   quality 90), with the ratio; and Pillow with `draft()` for reference;
//! - the loader-side saving: Pillow + numpy decode rate of the originals,
//!   of the pre-resized JPEGs bale wrote, and `numpy.load` of raw `.npy`.
//!
//! Pillow runs from the project venv (`BALE_TEST_PYTHON`, else `.venv/bin/python`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use bale_image::{ImageOptions, OutputFormat, Resize};

const SHORTER: u32 = 256;
const QUALITY: u8 = 90;

fn arg(args: &[String], name: &str, default: usize) -> Result<usize> {
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{name} takes a number")),
        None => Ok(default),
    }
}

/// The first `n` JPEGs of the tree, in sorted order (class by class).
fn jpegs(tree: &Path, n: usize) -> Result<Vec<PathBuf>> {
    let mut classes: Vec<PathBuf> = std::fs::read_dir(tree)
        .with_context(|| format!("reading {}", tree.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    classes.sort();
    // Round-robin over classes, so a small N still sees varied images.
    let mut lists: Vec<Vec<PathBuf>> = Vec::new();
    for c in &classes {
        let mut files: Vec<PathBuf> = std::fs::read_dir(c)?
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "jpg"))
            .collect();
        files.sort();
        lists.push(files);
    }
    let mut out = Vec::new();
    for i in 0.. {
        let before = out.len();
        for l in &lists {
            if out.len() < n
                && let Some(p) = l.get(i)
            {
                out.push(p.clone());
            }
        }
        if out.len() == n || out.len() == before {
            break;
        }
    }
    if out.is_empty() {
        bail!("no .jpg files under {}", tree.display());
    }
    Ok(out)
}

fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("BALE_TEST_PYTHON") {
        return PathBuf::from(p);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin/python");
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// Best images-per-second over `repeat` runs of `f` over `items`.
fn rate<T>(items: &[T], repeat: usize, mut f: impl FnMut(&T)) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..repeat {
        let t = Instant::now();
        for x in items {
            f(x);
        }
        best = best.max(items.len() as f64 / t.elapsed().as_secs_f64());
    }
    best
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let n = arg(&args, "--images", 1000)?;
    let repeat = arg(&args, "--repeat", 3)?.max(1);
    let tree = PathBuf::from(
        std::env::var_os("BALE_BENCH_TREE")
            .context("BALE_BENCH_TREE is unset: run through `cargo xtask bench image`")?,
    );
    let paths = jpegs(&tree, n)?;
    let originals: Vec<Vec<u8>> = paths
        .iter()
        .map(std::fs::read)
        .collect::<std::io::Result<_>>()?;
    let total: usize = originals.iter().map(Vec::len).sum();
    let (mut pw, mut ph) = (0u64, 0u64);
    for o in &originals {
        let (w, h) = bale_image::decode_check("jpg", o)?;
        pw += u64::from(w);
        ph += u64::from(h);
    }
    let count = originals.len();

    let jpeg = ImageOptions {
        resize: Some(Resize::Shorter(SHORTER)),
        format: OutputFormat::Jpeg { quality: QUALITY },
        ..ImageOptions::default()
    };
    let raw = ImageOptions {
        format: OutputFormat::Raw,
        ..jpeg.clone()
    };
    // The outputs, once, for the loader-side figures.
    let work = tempfile::tempdir()?;
    let (resized_dir, raw_dir) = (work.path().join("resized"), work.path().join("raw"));
    std::fs::create_dir_all(&resized_dir)?;
    std::fs::create_dir_all(&raw_dir)?;
    let (mut resized_bytes, mut raw_bytes) = (0usize, 0usize);
    for (i, o) in originals.iter().enumerate() {
        let t = bale_image::transform(&jpeg, "jpg", o.clone())?;
        resized_bytes += t.data.len();
        std::fs::write(resized_dir.join(format!("{i:06}.jpg")), &t.data)?;
        let t = bale_image::transform(&raw, "jpg", o.clone())?;
        raw_bytes += t.data.len();
        std::fs::write(raw_dir.join(format!("{i:06}.npy")), &t.data)?;
    }

    let bale_transform = rate(&originals, repeat, |o| {
        bale_image::transform(&jpeg, "jpg", o.clone()).expect("transform");
    });
    let bale_decode = rate(&originals, repeat, |o| {
        bale_image::decode_check("jpg", o).expect("decode");
    });

    let list = work.path().join("list.txt");
    let mut text = String::new();
    for p in &paths {
        text.push_str(p.to_str().context("non-UTF-8 path")?);
        text.push('\n');
    }
    std::fs::write(&list, text)?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/pillow_image.py");
    let py = python();
    let out = Command::new(&py)
        .arg(&script)
        .arg(&list)
        .arg(&resized_dir)
        .arg(&raw_dir)
        .arg(SHORTER.to_string())
        .arg(QUALITY.to_string())
        .arg(repeat.to_string())
        .output()
        .with_context(|| format!("running {}", py.display()))?;
    if !out.status.success() {
        bail!(
            "the Pillow side failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let p: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let f = |k: &str| p[k].as_f64().unwrap_or(f64::NAN);

    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "image stage: {count} JPEGs of {} (avg {:.0} KB, avg {}x{}), one thread per side, best of {repeat}; {cpus} CPUs, Pillow {}",
        tree.display(),
        total as f64 / count as f64 / 1e3,
        pw / count as u64,
        ph / count as u64,
        p["pillow"].as_str().unwrap_or("?"),
    );
    println!();
    println!(
        "{:<52} {:>12} {:>12} {:>8}",
        "per core", "bale img/s", "Pillow img/s", "ratio"
    );
    let row = |what: &str, b: f64, pil: f64| {
        println!("{what:<52} {b:>12.0} {pil:>12.0} {:>7.2}x", b / pil);
    };
    row(
        &format!("decode + resize shorter:{SHORTER} + encode jpeg:{QUALITY}"),
        bale_transform,
        f("transform"),
    );
    row(
        "  the same, Pillow with draft() (DCT downscale)",
        bale_transform,
        f("transform_draft"),
    );
    row("decode only (full size)", bale_decode, f("decode_original"));
    println!();
    println!(
        "loader side: Pillow + numpy in one thread, per image (what the stage buys a Python loader)"
    );
    println!(
        "{:<52} {:>12} {:>12} {:>8} {:>10}",
        "stored as", "us/img", "img/s", "speedup", "avg bytes"
    );
    let base = f("decode_original");
    let line = |what: &str, r: f64, bytes: usize| {
        println!(
            "{what:<52} {:>12.0} {r:>12.0} {:>7.2}x {:>10}",
            1e6 / r,
            r / base,
            bytes / count
        );
    };
    line("original JPEGs (decode + convert RGB)", base, total);
    line(
        &format!("pre-resized shorter:{SHORTER} jpeg:{QUALITY} (decode)"),
        f("decode_resized"),
        resized_bytes,
    );
    line(
        &format!("raw .npy shorter:{SHORTER} (numpy.load)"),
        f("load_npy"),
        raw_bytes,
    );
    Ok(())
}
