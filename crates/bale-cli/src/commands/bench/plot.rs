//! `--plot FILE.svg|png`: samples/s of each source side by side (loose files,
//! shards, staged, bucket), sequential and random, warm and cold, one panel per
//! thread count.
//!
//! Text is laid out with a subset of DejaVu Sans (printable ASCII, 10 kB,
//! `font/`, Bitstream Vera licence) embedded in the binary, so a PNG renders
//! the same on a machine without fonts. An SVG carries its text as `<text>`
//! elements, drawn by the viewer.

use std::path::{Path, PathBuf};
use std::sync::Once;

use anyhow::{Context, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::diagnose::{fmt_count, fmt_rate};
use super::report::{Report, label};

/// The embedded font (see the module docs and `font/LICENSE`).
static FONT: &[u8] = include_bytes!("font/DejaVuSans-ascii.ttf");
const FAMILY: &str = "sans-serif";
const SIZE: (u32, u32) = (1000, 560);

const COLORS: [RGBColor; 6] = [
    RGBColor(0xd6, 0x5f, 0x2a),
    RGBColor(0x2b, 0x6c, 0xb0),
    RGBColor(0x3a, 0x9a, 0x5b),
    RGBColor(0x8e, 0x5a, 0xb5),
    RGBColor(0x80, 0x80, 0x80),
    RGBColor(0xc4, 0xa0, 0x1c),
];

/// The figure groups: (order, cache, axis label).
const GROUPS: [(&str, &str, &str); 4] = [
    ("sequential", "warm", "seq. warm"),
    ("sequential", "cold", "seq. cold"),
    ("random", "warm", "random warm"),
    ("random", "cold", "random cold"),
];

fn register_font() -> anyhow::Result<()> {
    static ONCE: Once = Once::new();
    let mut ok = true;
    ONCE.call_once(|| ok = plotters::style::register_font(FAMILY, FontStyle::Normal, FONT).is_ok());
    anyhow::ensure!(ok, "the embedded font does not load");
    Ok(())
}

/// Writes the plot to `path`; the extension (`.svg` or `.png`) picks the format.
///
/// # Errors
/// Another extension, a file that cannot be written.
pub fn write_plot(path: &Path, report: &Report, force: bool) -> anyhow::Result<()> {
    let bytes = render(path, report)?;
    // A new file, or with --force one put in place of the old by a rename
    // (a symlink there is replaced, never written through); never a file
    // half-written under its name.
    let written = if force {
        bale_format::atomic::replace_atomic(path, &bytes)
    } else {
        bale_format::atomic::write_atomic(path, &bytes)
    };
    written.with_context(|| format!("--plot {}", bale_format::shown(path)))
}

/// Refuses a `--plot` path before anything is measured: an existing one
/// without `--force`, one that is not a regular file or a symlink (a
/// folder, a FIFO), and one inside a source being measured (a file of the
/// tree, or of the dataset: its inputs). Returns the path it resolves to
/// (its folder canonical), which tells one file named twice.
pub fn check_plot_path(path: &Path, sources: &[&Path], force: bool) -> anyhow::Result<PathBuf> {
    let shown = bale_format::shown(path);
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = std::fs::canonicalize(parent)
        .with_context(|| format!("--plot {shown}: its folder does not exist"))?;
    for src in sources {
        if let Ok(src) = std::fs::canonicalize(src)
            && dir.starts_with(&src)
        {
            bail!(
                "--plot {shown} is inside {}, which this run measures: write the plot elsewhere",
                bale_format::shown(&src)
            );
        }
    }
    match std::fs::symlink_metadata(path) {
        Err(_) => {}
        Ok(_) if !force => {
            bail!("--plot {shown} exists; pass --force to replace it, or choose another name")
        }
        Ok(m) if m.is_file() || m.file_type().is_symlink() => {}
        Ok(m) => bail!(
            "--plot {shown} is {}, not a file to replace",
            bale_format::files::kind_of(&m)
        ),
    }
    Ok(dir.join(path.file_name().unwrap_or_default()))
}

/// The plot's bytes, SVG or PNG by the path's extension.
fn render(path: &Path, report: &Report) -> anyhow::Result<Vec<u8>> {
    register_font()?;
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("svg") => {
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
                draw(&root, report)?;
                root.present()?;
            }
            Ok(svg.into_bytes())
        }
        Some("png") => {
            let (w, h) = SIZE;
            let mut buf = vec![0u8; (w * h * 3) as usize];
            {
                let root = BitMapBackend::with_buffer(&mut buf, SIZE).into_drawing_area();
                draw(&root, report)?;
                root.present()?;
            }
            encode_png(path, w, h, &buf)
        }
        _ => bail!(
            "--plot {}: give a file name ending in .svg or .png",
            path.display()
        ),
    }
}

fn encode_png(path: &Path, w: u32, h: u32, rgb: &[u8]) -> anyhow::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::High);
    let mut writer = enc
        .write_header()
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .write_image_data(rgb)
        .with_context(|| format!("cannot write {}", path.display()))?;
    writer
        .finish()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(out)
}

/// The axis label of group `g`: the four read figures, then (with
/// `--decode`) read + decode, random order, warm cache.
fn group_label(g: usize) -> &'static str {
    GROUPS.get(g).map_or("+decode", |x| x.2)
}

/// samples/s of source `s` for group `g` at `threads`.
fn value(r: &Report, s: usize, g: usize, threads: usize) -> f64 {
    let src = &r.sources[s];
    let Some(&(order, cache, _)) = GROUPS.get(g) else {
        return src.decode.as_ref().map_or(0.0, |d| {
            d.runs
                .iter()
                .find(|x| x.threads == threads)
                .map_or(0.0, |x| x.samples_per_sec)
        });
    };
    src.runs
        .iter()
        .find(|x| x.order == order && x.cache == cache && x.threads == threads)
        .map_or(0.0, |x| x.samples_per_sec)
}

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, r: &Report) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("drawing the plot: {e}");
    root.fill(&WHITE).map_err(err)?;
    let title = root
        .titled(
            "bale bench: samples/s (higher is better)",
            (FAMILY, 22).into_font(),
        )
        .map_err(err)?;
    let foot_height = 26 + 14 * r.sources.len() as u32;
    let (body, foot) = title.split_vertically(SIZE.1 - 30 - foot_height);
    let mut threads = vec![1];
    if r.threads > 1 {
        threads.push(r.threads);
    }
    let panels = body.split_evenly((1, threads.len()));
    let labels: Vec<String> = r.sources.iter().map(label).collect();
    let ns = r.sources.len().max(1);
    let groups = GROUPS.len() + usize::from(r.decode);
    for (panel, &t) in panels.iter().zip(&threads) {
        let max = (0..r.sources.len())
            .flat_map(|s| (0..groups).map(move |g| (s, g)))
            .map(|(s, g)| value(r, s, g, t))
            .fold(0.0f64, f64::max);
        let ymax = if max > 0.0 { max * 1.3 } else { 1.0 };
        let caption = if t == 1 {
            "1 thread".to_owned()
        } else {
            format!("{t} threads")
        };
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, (FAMILY, 17))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(groups as f64 - 0.5), 0f64..ymax)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(groups * 2 + 1)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < groups {
                    group_label(i as usize).to_owned()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y| {
                if ymax >= 10.0 {
                    fmt_count(y.round().max(0.0) as u64)
                } else {
                    format!("{y:.1}")
                }
            })
            .y_desc("samples/s")
            .label_style((FAMILY, 11))
            .draw()
            .map_err(err)?;
        let width = 0.8 / ns as f64;
        for (s, name) in labels.iter().enumerate() {
            let color = COLORS[s % COLORS.len()];
            let bars = (0..groups).map(|g| {
                let x0 = g as f64 - 0.4 + s as f64 * width;
                Rectangle::new(
                    [(x0 + 0.01, 0.0), (x0 + width - 0.01, value(r, s, g, t))],
                    color.filled(),
                )
            });
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled())
                });
            let texts = (0..groups).map(|g| {
                let x = g as f64 - 0.4 + (s as f64 + 0.5) * width;
                let v = value(r, s, g, t);
                Text::new(
                    fmt_rate(v),
                    (x, v + ymax * 0.01),
                    (FAMILY, 10)
                        .into_font()
                        .color(&BLACK)
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            });
            chart.draw_series(texts).map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .label_font((FAMILY, 12))
            .draw()
            .map_err(err)?;
    }
    let note = format!(
        "{} s budget per pass; cold = after posix_fadvise(DONTNEED) on every file read; every byte counted is read and checksummed (xxh3)",
        r.budget_secs
    );
    foot.draw(&Text::new(
        note,
        (14, 8),
        (FAMILY, 12).into_font().color(&BLACK.mix(0.7)),
    ))
    .map_err(err)?;
    for (i, s) in r.sources.iter().enumerate() {
        let d = &s.diagnosis;
        let mut line = format!("{}: bound by {}", labels[i], d.bound.describe());
        if !d.remedy.is_empty() {
            line.push_str(&format!("; relieve it with {}", d.remedy));
        }
        if line.chars().count() > 160 {
            line = line.chars().take(157).chain("...".chars()).collect();
        }
        foot.draw(&Text::new(
            line,
            (14, 24 + 14 * i as i32),
            (FAMILY, 11).into_font().color(&BLACK.mix(0.75)),
        ))
        .map_err(err)?;
    }
    Ok(())
}
