//! `bale bench`: how fast samples can be read (and decoded) from a tree or a
//! dataset on this machine, and what bounds it.
//!
//! `measure` runs the passes, `decode` is what `--decode` pays per member,
//! `diagnose` turns figures into a verdict (a pure function), `report` is the
//! JSON schema and the table, `plot` draws `--plot`. The engine lives in the
//! CLI rather than a library: it is a user-facing tool over the reader, and
//! no other front needs it (see ARCHITECTURE.md).

mod decode;
mod diagnose;
mod measure;
mod plot;
mod report;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::args::bench::BenchArgs;

/// The longest `--budget`, in seconds.
const MAX_BUDGET_SECS: f64 = 86_400.0;

/// Runs `bale bench`.
pub fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let start = Instant::now();
    let threads = match bale_pack::check_jobs(args.threads.map_or(0, usize::from))? {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    decode::set_resize(args.resize);
    // A day at most: a pass's deadline is `now + budget`, which a budget of
    // 1e30 seconds would overflow.
    anyhow::ensure!(
        args.budget <= MAX_BUDGET_SECS,
        "--budget {}: at most {MAX_BUDGET_SECS} seconds (a day) per measured pass",
        args.budget
    );
    let settings = measure::Settings {
        budget: Duration::from_secs_f64(args.budget),
        threads,
        seed: args.seed,
        decode: args.decode,
    };
    let sources: Vec<&std::path::Path> = std::iter::once(&args.path)
        .chain(&args.compare)
        .filter(|s| !bale_storage::is_url(s))
        .map(std::path::PathBuf::as_path)
        .collect();
    // One file named twice (`a.svg`, `./a.svg`) would be refused only after
    // measuring, when the second plot found the first.
    let mut seen = std::collections::HashSet::new();
    for p in &args.plot {
        let ext = p
            .extension()
            .map(|e| e.to_string_lossy().to_ascii_lowercase());
        anyhow::ensure!(
            matches!(ext.as_deref(), Some("svg" | "png")),
            "--plot {}: give a file name ending in .svg or .png",
            p.display()
        );
        let at = plot::check_plot_path(p, &sources, args.force)?;
        anyhow::ensure!(
            seen.insert(at),
            "--plot {} is given twice",
            bale_format::shown(p)
        );
    }
    let show = !args.quiet && std::io::stderr().is_terminal();
    // Open every path first: a typo fails before minutes of measuring.
    let storage = args.storage.options()?;
    let mut opened = Vec::new();
    for p in std::iter::once(&args.path).chain(&args.compare) {
        opened.push(measure::Opened::open(p, &storage)?);
    }
    let mut sources = Vec::new();
    for src in &mut opened {
        let name = src.path.display().to_string();
        let say = |what: &str| {
            if show {
                eprintln!("bench {name}: {what}");
            }
        };
        let m = src.measure(&settings, &say)?;
        sources.push(report::source_report(src, &m, &settings, args.target));
    }
    let r = report::Report {
        schema: report::SCHEMA,
        budget_secs: args.budget,
        threads,
        seed: args.seed,
        decode: args.decode,
        target: args.target,
        elapsed_secs: start.elapsed().as_secs_f64(),
        sources,
    };
    // The report first: a plot that cannot be written loses no figure.
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        report::print_text(&mut out, &r)?;
    }
    out.flush()?;
    for p in &args.plot {
        plot::write_plot(p, &r, args.force)?;
    }
    Ok(ExitCode::SUCCESS)
}
