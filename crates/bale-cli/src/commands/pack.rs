//! `bale pack`: builds a [`bale_pack::Packer`] from the arguments, draws
//! progress, handles Ctrl-C, prints the summary.

use std::cell::{Cell, RefCell};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bale_format::ShardEntry;
use bale_image::ImageOptions;
use bale_pack::{
    Destination, FileList, Ignored, PackOrder, PackProgress, PackSummary, Packer, Run, SkippedFile,
    is_remote,
};
use indicatif::ProgressBar;

use crate::args::pack::PackArgs;
use crate::progress;

/// Exit code after Ctrl-C (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// Sets `flag` on Ctrl-C (or SIGTERM), saying so at once: undoing a run can take a while (requests
/// in flight to a store that stopped answering end at their timeout); a second one exits at once.
pub fn install_ctrlc(flag: &Arc<AtomicBool>) {
    let f = flag.clone();
    let _ = ctrlc::set_handler(move || {
        if f.swap(true, Ordering::SeqCst) {
            eprintln!("\ninterrupted twice: exiting without cleaning up");
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
        eprintln!(
            "\ninterrupted: stopping at the next safe point, and removing what this run \
             wrote unless it had finished (interrupt again to exit at once, without cleaning up)"
        );
    });
}

/// The bars, and the upload of each finished shard to object storage.
struct Forward<'a> {
    bars: &'a Bars,
    dest: &'a Destination,
    /// Set to refuse a plan of no sample: the run is cancelled before it
    /// touches the output, and `empty` says why.
    refuse_empty: Option<&'a AtomicBool>,
    empty: AtomicBool,
}

impl PackProgress for Forward<'_> {
    fn discovering(&self, files: u64) {
        self.bars.discovering(files);
    }
    fn planned(&self, samples: u64, bytes: u64) {
        if samples == 0
            && let Some(cancel) = self.refuse_empty
        {
            // The packer checks the flag next, before it clears or writes
            // anything: an old dataset in the output stays as it was.
            self.empty.store(true, Ordering::SeqCst);
            cancel.store(true, Ordering::SeqCst);
        }
        self.bars.planned(samples, bytes);
    }
    fn sample_written(&self, samples: u64, bytes: u64) {
        self.bars.sample_written(samples, bytes);
    }
    fn shard_finished(&self, shard: &ShardEntry) {
        self.bars.shard_finished(shard);
        self.dest.shard_finished(shard);
    }
    fn skipped(&self, file: &SkippedFile) {
        self.bars.skipped(file);
    }
    fn warning(&self, message: &str) {
        self.bars.warning(message);
    }
}

/// Progress bars for a pack: a spinner while discovering, then a byte bar
/// whose message counts samples.
struct Bars {
    quiet: bool,
    bar: RefCell<Option<ProgressBar>>,
    total_samples: Cell<u64>,
    started: Cell<Option<Instant>>,
    last: Cell<Option<Instant>>,
}

impl Bars {
    fn new(quiet: bool) -> Self {
        Self {
            quiet,
            bar: RefCell::new(None),
            total_samples: Cell::new(0),
            started: Cell::new(None),
            last: Cell::new(None),
        }
    }

    fn finish(&self) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
    }

    fn say(&self, line: &str) {
        let line = crate::escape::message(line);
        match &*self.bar.borrow() {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

impl PackProgress for Bars {
    fn discovering(&self, files: u64) {
        if !progress::enabled(self.quiet) {
            return;
        }
        let mut bar = self.bar.borrow_mut();
        let b = bar.get_or_insert_with(|| {
            let b = ProgressBar::new_spinner();
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        b.set_message(format!(
            "discovering: {}",
            crate::units::count(files, "file")
        ));
    }

    fn planned(&self, samples: u64, bytes: u64) {
        if let Some(b) = self.bar.borrow_mut().take() {
            b.finish_and_clear();
        }
        self.total_samples.set(samples);
        self.started.set(Some(Instant::now()));
        let b = progress::byte_bar(bytes, self.quiet);
        b.set_message(format!("0/{samples} samples"));
        *self.bar.borrow_mut() = Some(b);
    }

    fn sample_written(&self, samples: u64, bytes: u64) {
        let bar = self.bar.borrow();
        let Some(b) = bar.as_ref() else { return };
        b.set_position(bytes);
        let now = Instant::now();
        if self
            .last
            .get()
            .is_some_and(|t| now - t < Duration::from_millis(100))
            && samples < self.total_samples.get()
        {
            return;
        }
        self.last.set(Some(now));
        let s = self.started.get().map_or(0.0, |t| (now - t).as_secs_f64());
        let rate = if s > 0.0 { samples as f64 / s } else { 0.0 };
        b.set_message(format!(
            "{samples}/{} samples, {rate:.0} samples/s",
            self.total_samples.get()
        ));
    }

    fn shard_finished(&self, _shard: &ShardEntry) {}

    fn skipped(&self, _file: &SkippedFile) {}

    fn warning(&self, message: &str) {
        if !self.quiet {
            self.say(&format!("warning: {message}"));
        }
    }
}

/// Skipped files the text summary names; `--json` lists all of them.
const SKIPPED_SHOWN: usize = 20;

fn ignored_line(ig: &Ignored) -> Option<String> {
    let mut parts = Vec::new();
    // Each kind with its first path: a name the user did not expect to be left out is seen at once.
    let mut add = |k: &bale_pack::IgnoredKind, one: &str, many: &str| {
        if k.count > 0 {
            let first = k
                .examples
                .first()
                .map(|e| match e.to_str() {
                    Some(e) => format!(", e.g. {}", crate::escape::quoted(e)),
                    // Bytes that are not UTF-8 as `\xNN`, not all one `\u{fffd}`.
                    None => format!(", e.g. \"{}\"", bale_format::shown(e)),
                })
                .unwrap_or_default();
            let what = crate::units::count_irregular(k.count, one, many);
            parts.push(format!("{what}{first}"));
        }
    };
    let same = |what| (what, what);
    for (kind, (one, many)) in [
        (&ig.no_extension, same("without an extension")),
        (&ig.hidden, same("hidden")),
        (
            &ig.symlinks,
            (
                "symlink (not followed; see --follow-links)",
                "symlinks (not followed; see --follow-links)",
            ),
        ),
        (&ig.excluded, same("excluded by globs")),
        (&ig.outside_class, same("outside a class directory")),
    ] {
        add(kind, one, many);
    }
    (!parts.is_empty()).then(|| format!("ignored: {}", parts.join(", ")))
}

/// The one-line summary.
pub fn summary_line(s: &PackSummary) -> String {
    let labels = match s.labels.as_str() {
        "none" => String::new(),
        mode => format!(
            ", labels: {mode} ({})",
            crate::units::count_irregular(s.classes, "class", "classes")
        ),
    };
    let part = s.part.map(|p| format!(" (part {p})")).unwrap_or_default();
    format!(
        "packed {} into {}{part}: {} in {:.2} s, {}, {} written to {}{labels}",
        crate::units::count(s.samples, "sample"),
        crate::units::count(s.shards, "shard"),
        crate::units::size(s.input_bytes),
        s.seconds,
        crate::units::mib_per_sec(s.mb_per_second() * 1e6),
        crate::units::size(s.bytes),
        bale_format::shown(&s.output),
    )
}

/// The image options from the arguments; refuses image flags that would do
/// nothing without --resize or a --image-format other than `keep`.
fn image_options(args: &PackArgs) -> anyhow::Result<ImageOptions> {
    let mut o = ImageOptions {
        resize: args.resize,
        upscale: args.upscale,
        format: args.image_format,
        ..ImageOptions::default()
    };
    if !o.is_active() {
        let given: Vec<&str> = [
            (args.mode.is_some(), "--mode"),
            (args.image_exts.is_some(), "--image-exts"),
            (args.max_pixels.is_some(), "--max-pixels"),
        ]
        .into_iter()
        .filter_map(|(on, flag)| on.then_some(flag))
        .collect();
        if !given.is_empty() {
            anyhow::bail!(
                "{} only apply to the image stage, which is off\nhint: add --resize RULE or --image-format jpeg|png|raw",
                given.join(", ")
            );
        }
    }
    if let Some(m) = args.mode {
        o.mode = m;
    }
    if let Some(exts) = &args.image_exts {
        o.exts = exts
            .iter()
            .map(|e| e.trim().trim_start_matches('.').to_owned())
            .collect();
    }
    if let Some(n) = args.max_pixels {
        o.max_pixels = n;
    }
    o.validate()?;
    Ok(o)
}

/// Runs `bale pack`.
pub fn run(args: PackArgs) -> anyhow::Result<ExitCode> {
    super::notices(args.out.quiet);
    let (compression, level) = shard_compression(&args)?;
    if args.dali_index.is_some() && compression != bale_format::Compression::None {
        anyhow::bail!(
            "--dali-index: DALI's webdataset reader reads plain tar shards only (drop --compress / --format h5)"
        );
    }
    super::export_index::precheck(args.dali_index.as_deref(), &args.output)?;
    let image = image_options(&args)?;
    let cancel = Arc::new(AtomicBool::new(false));
    install_ctrlc(&cancel);
    anyhow::ensure!(
        args.dali_index.is_none() || !is_remote(&args.output),
        "--dali-index writes DALI's index files from local shards; with an output in object storage, pack to a local directory for DALI"
    );
    let storage = || args.storage.options();
    let mut dest = match if args.append {
        Destination::open_appending(&args.output, Run::Pack, &cancel, &storage)
    } else {
        Destination::open(
            &args.output,
            Run::Pack,
            args.force,
            &cancel,
            &storage,
            Vec::new(),
        )
    } {
        Ok(d) => d,
        Err(f) => return super::failed(f),
    };
    let mut b = Packer::builder()
        .inputs(&args.inputs)
        .output(dest.dir())
        .follow_links(args.follow_links)
        .labels(args.labels.clone())
        .shard_size(args.shard_size)
        .shard_samples(args.shard_samples)
        .order(if args.shuffle {
            PackOrder::Shuffle(args.seed)
        } else {
            PackOrder::Sorted
        })
        .compression(compression, level)
        .jobs(args.jobs.unwrap_or(0))
        .in_flight_bytes(args.in_flight)
        .on_error(args.on_error)
        .part(args.part)
        .force(dest.engine_force())
        .append(args.append)
        .append_onto(dest.take_base())
        .image(image)
        .cancel_flag(cancel.clone());
    for g in &args.include {
        b = b.include(g);
    }
    for g in &args.exclude {
        b = b.exclude(g);
    }
    if let Some(list) = &args.files_from {
        b = b.files_from(if list.as_os_str() == "-" {
            FileList::Stdin
        } else {
            FileList::File(list.clone())
        });
    } else if args.inputs.is_empty() {
        anyhow::bail!("give an input directory, or --files-from FILE");
    }
    let packer = b.build()?;
    let bars = Bars::new(args.out.quiet);
    let forward = Forward {
        bars: &bars,
        dest: &dest,
        refuse_empty: (!args.allow_empty && args.part.is_none()).then_some(&*cancel),
        empty: AtomicBool::new(false),
    };
    let result = packer.run(&forward);
    bars.finish();
    let empty = forward.empty.load(Ordering::SeqCst);
    if empty && result.is_err() {
        dest.discard();
        anyhow::bail!(
            "no sample to pack: {} holds no file that makes one\n\
             hint: files need an extension (`KEY.EXT`); hidden files, symlinks and files that \
             --include/--exclude leave out are ignored; `bale stat DIR` shows what a directory \
             holds; --allow-empty writes a dataset of 0 samples",
            inputs_shown(&args)
        );
    }
    let summary = match dest.finish(result) {
        Ok(s) => s,
        Err(f) => return super::failed(f),
    };

    let mut err = std::io::stderr().lock();
    if !args.out.quiet
        && let Some(line) = ignored_line(&summary.ignored)
    {
        let _ = writeln!(err, "{line}");
    }
    if !summary.skipped.is_empty() {
        let _ = writeln!(
            err,
            "skipped {} (--on-error skip):",
            crate::units::count(summary.skipped.len(), "file")
        );
        for f in summary.skipped.iter().take(SKIPPED_SHOWN) {
            let _ = writeln!(
                err,
                "  {}: {}",
                bale_format::shown(&f.path),
                crate::escape::message(&f.error)
            );
        }
        if let Some(more) = summary.skipped.len().checked_sub(SKIPPED_SHOWN)
            && more > 0
        {
            let _ = writeln!(
                err,
                "  ... and {more} more (`--json` lists every one, with its error)"
            );
        }
    }
    if summary.samples == 0 {
        // Legitimate for an empty part of `--part I/N`; more often a typo in a path or a glob.
        let inputs = inputs_shown(&args);
        let _ = writeln!(
            err,
            "warning: no sample was packed: {inputs} holds no file that makes one (check the input, --include and --exclude); the dataset has 0 samples"
        );
    }
    drop(err);
    args.out.summary(&summary, || summary_line(&summary))?;
    super::export_index::after_write(
        args.dali_index.as_deref(),
        &args.output,
        args.force,
        &args.out,
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The inputs, for a message: the directories given, or the `--files-from` list.
fn inputs_shown(args: &PackArgs) -> String {
    if args.inputs.is_empty() {
        "the list given with --files-from".to_owned()
    } else {
        args.inputs
            .iter()
            .map(|p| bale_format::shown(p).to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The shard compression from `--format` and `--compress`.
fn shard_compression(args: &PackArgs) -> anyhow::Result<(bale_format::Compression, i32)> {
    use crate::args::pack::PackFormat;
    match args.format {
        PackFormat::Tar => Ok((args.compress.compression, args.compress.level)),
        PackFormat::H5 if args.compress.compression != bale_format::Compression::None => {
            anyhow::bail!(
                "--format h5 takes no --compress: HDF5 shards store members uncompressed so the index can point at them"
            )
        }
        PackFormat::H5 if cfg!(not(feature = "hdf5")) => {
            anyhow::bail!("--format h5: {}", bale_format::h5::NO_HDF5)
        }
        PackFormat::H5 => Ok((bale_format::Compression::H5, 0)),
    }
}
