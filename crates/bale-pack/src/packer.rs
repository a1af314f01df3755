//! [`Packer`] and its builder: the whole pack, phase by phase.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bale_format::{Compression, CreatedBy, Manifest};
use bale_image::ImageOptions;
use serde::Serialize;

use crate::append::{AppendBase, Base};
use crate::discover::{Discover, FileList, Filter, Ignored, dir_id};
use crate::error::{PackError, Result, SampleTransformError, TransformError};
use crate::hooks::{MemberData, SampleTransformFn};
use crate::options::{
    DEFAULT_IN_FLIGHT, DEFAULT_SHARD_SIZE, DEFAULT_ZSTD_LEVEL, LabelMode, OnError, PackOrder, Part,
    ShapingOptions,
};
use crate::output::{Inputs, Output};
use crate::pipeline::{WriteCtx, write_all};
use crate::plan::{LabelOutcome, ListingHash, PlannedSample, apply_labels, group, stat_all};
use crate::progress::{PackProgress, SkippedFile, lossy};
use crate::spill::Spill;
use crate::spilled::SpillPlan;

/// The default number of reader threads: 4 per core. Reads wait on the disk
/// more than on the CPU (measured: 8 threads on 2 cores read a cold tree
/// 1.6x faster than 2), and on a warm cache the extra threads cost nothing.
pub fn default_jobs() -> usize {
    4 * std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// What a pack did.
#[derive(Debug, Clone, Serialize)]
pub struct PackSummary {
    /// The output directory.
    #[serde(serialize_with = "lossy")]
    pub output: PathBuf,
    /// Samples written.
    pub samples: u64,
    /// Members written (`.cls` labels included).
    pub members: u64,
    /// Shards written.
    pub shards: u64,
    /// Bytes of input files packed.
    pub input_bytes: u64,
    /// Bytes of shard files written.
    pub bytes: u64,
    /// Wall-clock seconds of the whole run.
    pub seconds: f64,
    /// The label mode used: `dir`, `csv` or `none`.
    pub labels: String,
    /// Number of classes (0 without labels).
    pub classes: u64,
    /// The part packed, if any.
    pub part: Option<Part>,
    /// With `--append` onto a dataset: the samples it held before.
    pub appended_to: Option<u64>,
    /// Files skipped because of errors, each with its error.
    pub skipped: Vec<SkippedFile>,
    /// Files ignored by rule, by reason.
    pub ignored: Ignored,
    /// Warnings (also reported through [`PackProgress::warning`]).
    pub warnings: Vec<String>,
}

impl PackSummary {
    /// Input megabytes (10^6 bytes) per second.
    pub fn mb_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.input_bytes as f64 / 1e6 / self.seconds
        } else {
            0.0
        }
    }
}

/// Builds a [`Packer`]. Every option has a default, documented on its setter.
///
/// ```
/// let packer = bale_pack::Packer::builder()
///     .input("data/train")
///     .output("out/train")
///     .shard_size(512 << 20)
///     .build()
///     .unwrap();
/// # let _ = packer;
/// ```
#[derive(Clone)]
pub struct PackerBuilder {
    inputs: Vec<PathBuf>,
    files_from: Option<FileList>,
    output: Option<PathBuf>,
    include: Vec<String>,
    exclude: Vec<String>,
    follow_links: bool,
    labels: LabelMode,
    shard_size: u64,
    shard_samples: Option<u64>,
    order: PackOrder,
    compression: Compression,
    zstd_level: i32,
    jobs: usize,
    in_flight: u64,
    on_error: OnError,
    part: Option<Part>,
    force: bool,
    append: bool,
    onto: Option<AppendBase>,
    cancel: Option<Arc<AtomicBool>>,
    transform: Option<(String, Arc<SampleTransformFn>)>,
    image: Option<ImageOptions>,
}

impl fmt::Debug for PackerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PackerBuilder")
            .field("inputs", &self.inputs)
            .field("files_from", &self.files_from)
            .field("output", &self.output)
            .field("include", &self.include)
            .field("exclude", &self.exclude)
            .field("follow_links", &self.follow_links)
            .field("labels", &self.labels)
            .field("shard_size", &self.shard_size)
            .field("shard_samples", &self.shard_samples)
            .field("order", &self.order)
            .field("compression", &self.compression)
            .field("zstd_level", &self.zstd_level)
            .field("jobs", &self.jobs)
            .field("in_flight", &self.in_flight)
            .field("on_error", &self.on_error)
            .field("part", &self.part)
            .field("force", &self.force)
            .field("append", &self.append)
            .field("transform", &self.transform.as_ref().map(|t| &t.0))
            .field("image", &self.image)
            .finish_non_exhaustive()
    }
}

impl Default for PackerBuilder {
    fn default() -> Self {
        Self {
            inputs: Vec::new(),
            files_from: None,
            output: None,
            include: Vec::new(),
            exclude: Vec::new(),
            follow_links: false,
            labels: LabelMode::Auto,
            shard_size: DEFAULT_SHARD_SIZE,
            shard_samples: None,
            order: PackOrder::Sorted,
            compression: Compression::None,
            zstd_level: DEFAULT_ZSTD_LEVEL,
            jobs: 0,
            in_flight: DEFAULT_IN_FLIGHT,
            on_error: OnError::Fail,
            part: None,
            force: false,
            append: false,
            onto: None,
            cancel: None,
            transform: None,
            image: None,
        }
    }
}

impl PackerBuilder {
    /// Adds an input directory (a root: keys are relative to it). At least one
    /// input or a file list is needed. With several roots, samples are grouped
    /// across them.
    pub fn input(mut self, dir: impl Into<PathBuf>) -> Self {
        self.inputs.push(dir.into());
        self
    }

    /// Adds several input directories.
    pub fn inputs<I: IntoIterator<Item = P>, P: Into<PathBuf>>(mut self, dirs: I) -> Self {
        self.inputs.extend(dirs.into_iter().map(Into::into));
        self
    }

    /// Packs the files of a list instead of walking the inputs (default: none).
    /// Listed paths are relative to the single input directory, or to the
    /// current directory when none is given; keys are relative to it too. A
    /// listed directory is walked.
    pub fn files_from(mut self, list: FileList) -> Self {
        self.files_from = Some(list);
        self
    }

    /// The output directory (required). Created if missing.
    pub fn output(mut self, dir: impl Into<PathBuf>) -> Self {
        self.output = Some(dir.into());
        self
    }

    /// Adds an include glob (default: none, every file is included). A glob
    /// without `/` matches base names, one with `/` the path under the root.
    pub fn include(mut self, glob: impl Into<String>) -> Self {
        self.include.push(glob.into());
        self
    }

    /// Adds an exclude glob (default: none). Matching directories are not entered.
    pub fn exclude(mut self, glob: impl Into<String>) -> Self {
        self.exclude.push(glob.into());
        self
    }

    /// Follows symlinks met during the walk (default: `false`: they are ignored and counted).
    pub fn follow_links(mut self, yes: bool) -> Self {
        self.follow_links = yes;
        self
    }

    /// Where labels come from (default: [`LabelMode::Auto`]).
    pub fn labels(mut self, mode: LabelMode) -> Self {
        self.labels = mode;
        self
    }

    /// Shard size limit in bytes of tar stream (default: 1 GiB).
    pub fn shard_size(mut self, bytes: u64) -> Self {
        self.shard_size = bytes;
        self
    }

    /// Shard sample-count limit (default: none).
    pub fn shard_samples(mut self, n: Option<u64>) -> Self {
        self.shard_samples = n;
        self
    }

    /// PlannedSample order before sharding (default: [`PackOrder::Sorted`]).
    pub fn order(mut self, order: PackOrder) -> Self {
        self.order = order;
        self
    }

    /// Shard compression and zstd level (default: none; level 3 for zstd).
    pub fn compression(mut self, compression: Compression, zstd_level: i32) -> Self {
        self.compression = compression;
        self.zstd_level = zstd_level;
        self
    }

    /// Reader threads (default: 0, meaning [`default_jobs`]: 4 per core).
    pub fn jobs(mut self, n: usize) -> Self {
        self.jobs = n;
        self
    }

    /// In-flight byte budget: file bytes read but not yet written (default: 128 MiB).
    /// A sample larger than the budget is streamed from its files by the writer.
    pub fn in_flight_bytes(mut self, bytes: u64) -> Self {
        self.in_flight = bytes;
        self
    }

    /// What to do with an input that cannot be packed (default: [`OnError::Fail`]).
    pub fn on_error(mut self, on_error: OnError) -> Self {
        self.on_error = on_error;
        self
    }

    /// Packs only this part of the input (default: all of it).
    pub fn part(mut self, part: Option<Part>) -> Self {
        self.part = part;
        self
    }

    /// Writes into a non-empty output directory (default: `false`: refused).
    pub fn force(mut self, yes: bool) -> Self {
        self.force = yes;
        self
    }

    /// Adds the samples to the dataset in the output (default: `false`):
    /// new shards after its own, then a new manifest listing both; the old
    /// shards are never rewritten. A key the dataset holds, or an option
    /// that shapes shards unlike the dataset's, is refused before anything
    /// is written. An output with no manifest gets a fresh pack.
    pub fn append(mut self, yes: bool) -> Self {
        self.append = yes;
        self
    }

    /// With [`PackerBuilder::append`]: the dataset to add to, read where it
    /// is (a prefix in object storage, by [`crate::Destination`]), when the
    /// output directory is only where the run writes (default: the
    /// dataset in the output directory).
    pub fn append_onto(mut self, base: Option<AppendBase>) -> Self {
        self.onto = base;
        self
    }

    /// A flag that cancels the run when set (default: none). The run then
    /// removes what it wrote and returns [`PackError::Cancelled`].
    pub fn cancel_flag(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    /// A transform applied to every member's bytes, in the parallel stage
    /// (default: none): a [`PackerBuilder::sample_transform`] that keeps each
    /// member's name. `name` is recorded in the manifest.
    pub fn transform<F>(self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(&str, Vec<u8>) -> std::result::Result<Vec<u8>, TransformError>
            + Send
            + Sync
            + 'static,
    {
        self.sample_transform(name, move |_key: &str, members: Vec<MemberData>| {
            members
                .into_iter()
                .map(|m| match f(&m.ext, m.data) {
                    Ok(data) => Ok(MemberData { ext: m.ext, data }),
                    Err(source) => Err(SampleTransformError {
                        ext: Some(m.ext),
                        source,
                    }),
                })
                .collect()
        })
    }

    /// A transform applied to every sample, in the parallel stage (default:
    /// none). It gets the sample's key and members and returns the members
    /// to store: it may rename, drop or add members (a `.cls` label is added
    /// after it). The members returned are stored sorted by extension; they
    /// must have valid, distinct extensions. `name` is recorded in the
    /// manifest. Its errors are input errors (`--on-error skip` skips the
    /// sample), reported against the member whose extension the error names.
    /// With a transform, samples larger than the in-flight budget are still
    /// loaded whole (one at a time). It must be a function of its input for
    /// the output to stay deterministic.
    pub fn sample_transform<F>(mut self, name: impl Into<String>, f: F) -> Self
    where
        F: Fn(&str, Vec<MemberData>) -> std::result::Result<Vec<MemberData>, SampleTransformError>
            + Send
            + Sync
            + 'static,
    {
        self.transform = Some((name.into(), Arc::new(f)));
        self
    }

    /// The image stage: resize, re-encode or pre-decode image members
    /// (default: none). Inactive options (no resize, format `keep`) are
    /// ignored. Runs before any [`PackerBuilder::sample_transform`]; each
    /// sample holding an image gets an `orig.json` member with the original
    /// sizes ([`bale_format::ORIGINAL_SIZE_EXT`]); the options are recorded
    /// in the manifest ([`bale_format::ImageTransform`]).
    pub fn image(mut self, options: ImageOptions) -> Self {
        self.image = options.is_active().then_some(options);
        self
    }

    /// Checks the options and returns the packer.
    ///
    /// # Errors
    /// [`PackError::Option`] for a missing output or input, a zero shard
    /// size or sample limit, a bad zstd level, or an invalid glob.
    pub fn build(self) -> Result<Packer> {
        let output = self
            .output
            .clone()
            .ok_or_else(|| PackError::Option("no output directory".into()))?;
        if self.inputs.is_empty() && self.files_from.is_none() {
            return Err(PackError::Option(
                "no input: give a directory or a file list".into(),
            ));
        }
        if self.shard_size == 0 {
            return Err(PackError::Option(
                "the shard size must be more than 0 bytes".into(),
            ));
        }
        if self.shard_samples == Some(0) {
            return Err(PackError::Option(
                "the shard sample limit must be more than 0".into(),
            ));
        }
        if self.compression == Compression::Zstd && !(1..=22).contains(&self.zstd_level) {
            return Err(PackError::Option(format!(
                "zstd level {} is outside 1..=22",
                self.zstd_level
            )));
        }
        crate::options::check_jobs(self.jobs)?;
        if self.append && (self.force || self.part.is_some()) {
            return Err(PackError::Option(
                "--append adds to the dataset in the output: it takes neither --force nor --part"
                    .into(),
            ));
        }
        if let Some(img) = &self.image {
            img.validate()
                .map_err(|e| PackError::Option(e.to_string()))?;
        }
        let filter = Filter::new(&self.include, &self.exclude)?;
        Ok(Packer {
            output,
            filter,
            opts: self,
        })
    }
}

/// A configured pack, ready to [`Packer::run`].
pub struct Packer {
    opts: PackerBuilder,
    output: PathBuf,
    filter: Filter,
}

impl fmt::Debug for Packer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Packer")
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Packer {
    /// A builder with every option at its default.
    pub fn builder() -> PackerBuilder {
        PackerBuilder::default()
    }

    /// The output directory.
    pub fn output(&self) -> &Path {
        &self.output
    }

    /// Runs the pack: discover, group, label, plan, read in parallel, write
    /// in order, manifest last.
    ///
    /// # Errors
    /// Any [`PackError`]. On error or cancel, nothing this run wrote is
    /// left: no manifest, no shard, no temporary file.
    pub fn run(&self, progress: &dyn PackProgress) -> Result<PackSummary> {
        let start = Instant::now();
        let o = &self.opts;
        let never = AtomicBool::new(false);
        let cancel: &AtomicBool = o.cancel.as_deref().unwrap_or(&never);
        let (out, base) = if let Some(b) = o.onto.as_ref().filter(|_| o.append) {
            (Output::open(&self.output, false)?, Some(b.for_pack()?))
        } else if o.append {
            refuse_input_in_output(&o.inputs, &self.output)?;
            let (out, found) = Output::open_append(&self.output)?;
            let base = match found {
                Some((m, names)) => Some(Base::new(&self.output, m, &names)?),
                None => None,
            };
            (out, base)
        } else {
            (Output::open(&self.output, o.force)?, None)
        };
        let jobs = match crate::options::check_jobs(o.jobs)? {
            0 => default_jobs(),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(jobs)
            .thread_name(|i| format!("bale-pack-{i}"))
            .build()
            .map_err(|e| PackError::Option(format!("cannot start {jobs} reader threads: {e}")))?;

        // Discover. A sorted listing (directory labels or none, no append)
        // is handed to a spill as it is found: past a run of files, it goes
        // to disk in sorted runs and is planned as a stream; a smaller one
        // comes back and is planned in memory.
        let run_len = spill_run();
        let spill = (base.is_none()
            && matches!(o.order, PackOrder::Sorted)
            && !matches!(o.labels, LabelMode::Csv(_)))
        .then(|| Mutex::new(Spill::new(&self.output, run_len)));
        let report = |n: u64| progress.discovering(n);
        let mut discovered = Discover {
            roots: &o.inputs,
            files_from: o.files_from.as_ref(),
            filter: &self.filter,
            follow_links: o.follow_links,
            skip_dir: dir_id(&self.output),
            cancel,
            progress: &report,
            list_ignored: false,
            threads: jobs.min(std::thread::available_parallelism().map_or(1, usize::from)),
            spill: spill.as_ref(),
        }
        .run()?;
        let mut spill = spill.map(|m| m.into_inner().unwrap_or_else(PoisonError::into_inner));
        if let Some(s) = &mut spill {
            s.extend(std::mem::take(&mut discovered.files))?;
        }
        if let Some(mut s) = spill.take_if(|s| !s.has_runs()) {
            discovered.files = s.take_buffered();
        }
        // `--force` clears the old output, never an input: an input file in
        // the output directory, or (following symlinks) one reaching into it,
        // or a file an old shard's name is a hard link to (every input is
        // stat'ed for that only when one of those names has another link).
        let victims = if base.is_some() {
            Vec::new()
        } else {
            out.victims()?
        };
        let linked = {
            use std::os::unix::fs::MetadataExt;
            victims
                .iter()
                .any(|v| std::fs::symlink_metadata(v).is_ok_and(|m| m.nlink() > 1))
        };
        let mut inputs = Inputs::default();
        let mut watch = |f: &crate::discover::Found| {
            let bale_named = f
                .path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(bale_format::is_bale_file_name);
            if bale_named || o.follow_links || linked {
                inputs.add(&f.path);
            }
        };
        for f in discovered.files.iter().filter(|_| o.force) {
            watch(f);
        }
        let mut ignored = discovered.ignored;
        let mut bad = discovered.bad;
        if o.on_error == OnError::Fail
            && let Some(b) = bad.drain(..).next()
        {
            return Err(b.error);
        }

        if let Some(mut spill) = spill {
            let watch: Option<&mut dyn FnMut(&crate::discover::Found)> =
                o.force.then_some(&mut watch);
            // Without a part, the first pass stats the samples: their bytes
            // are known without a pass of their own.
            let stat_on = o.part.is_none().then_some(&pool);
            let (plan, orphans) =
                SpillPlan::new(&mut spill, &o.labels, bad, &mut ignored, watch, stat_on)?;
            let labels = LabelOutcome {
                mode: plan.mode,
                classes: plan.classes.clone(),
                csv_xxh3: None,
                unused_rows: 0,
                first_unused: None,
            };
            let shaping = self.shaping(&labels);
            let planned = Planned::Spilled(Box::new((spill, plan)));
            return self.finish(
                start,
                progress,
                cancel,
                &pool,
                jobs,
                out,
                victims,
                &inputs,
                None,
                orphans,
                labels,
                shaping,
                Vec::new(),
                ignored,
                planned,
            );
        }

        // Group, label.
        let mut samples = pool.install(|| group(discovered.files))?;
        // Bad files that belong to a sample doom it; the rest are reported by part 0.
        let mut orphans = Vec::new();
        for b in bad {
            let pos = b
                .key
                .as_deref()
                .and_then(|k| samples.binary_search_by(|s| s.key.as_str().cmp(k)).ok());
            match pos {
                Some(i) if samples[i].fail.is_none() => samples[i].fail = Some(b.error),
                Some(_) => {}
                None => orphans.push(b.error),
            }
        }
        let mode = base
            .as_ref()
            .map_or_else(|| o.labels.clone(), |b| b.labels(&o.labels));
        let mut labels = apply_labels(&mut samples, &mode, &mut ignored, cancel)?;
        let mut shaping = self.shaping(&labels);
        if let Some(b) = &base {
            b.check_options(&shaping)?;
            labels.classes = b.map_labels(labels.classes.take(), &mut samples)?;
        }
        let mut warnings = Vec::new();
        if let Some((line, key)) = &labels.first_unused {
            let msg = format!(
                "{} label rows name no input sample (the first, line {line}, names {key:?})",
                labels.unused_rows
            );
            progress.warning(&msg);
            warnings.push(msg);
        }

        // Plan: order, part, sizes.
        if let PackOrder::Shuffle(seed) = o.order {
            bale_format::shuffle::shuffle(&mut samples, seed);
        }
        if let Some(part) = o.part {
            shaping.listing = Some(crate::plan::listing(&samples));
            let range = part.range(samples.len());
            samples.truncate(range.end);
            samples.drain(..range.start);
        }
        self.finish(
            start,
            progress,
            cancel,
            &pool,
            jobs,
            out,
            victims,
            &inputs,
            base.as_ref(),
            orphans,
            labels,
            shaping,
            warnings,
            ignored,
            Planned::InMemory(samples),
        )
    }

    /// The shaping options recorded in the manifest; the listing is added
    /// for a part.
    fn shaping(&self, labels: &LabelOutcome) -> ShapingOptions {
        let o = &self.opts;
        ShapingOptions {
            shard_size: o.shard_size,
            shard_samples: o.shard_samples,
            order: match o.order {
                PackOrder::Sorted => "sorted".into(),
                PackOrder::Shuffle(_) => "shuffle".into(),
            },
            seed: match o.order {
                PackOrder::Sorted => None,
                PackOrder::Shuffle(s) => Some(s),
            },
            compression: o.compression,
            zstd_level: (o.compression == Compression::Zstd).then_some(o.zstd_level),
            labels: labels.mode.into(),
            labels_csv_xxh3: labels.csv_xxh3.clone(),
            include: o.include.clone(),
            exclude: o.exclude.clone(),
            follow_links: o.follow_links,
            on_error: o.on_error,
            transform: o.transform.as_ref().map(|t| t.0.clone()),
            image: o.image.as_ref().map(crate::image::record),
            part: o.part,
            listing: None,
        }
    }

    /// Plans sizes, clears the old output, reads and writes, then writes the manifest.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &self,
        start: Instant,
        progress: &dyn PackProgress,
        cancel: &AtomicBool,
        pool: &rayon::ThreadPool,
        jobs: usize,
        mut out: Output,
        victims: Vec<PathBuf>,
        inputs: &Inputs,
        base: Option<&Base>,
        orphans: Vec<PackError>,
        labels: LabelOutcome,
        mut shaping: ShapingOptions,
        mut warnings: Vec<String>,
        ignored: Ignored,
        planned: Planned,
    ) -> Result<PackSummary> {
        let o = &self.opts;
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let (mut samples, mut spilled) = match planned {
            Planned::InMemory(samples) => (samples, None),
            Planned::Spilled(both) => (Vec::new(), Some(*both)),
        };
        let (planned_samples, planned_bytes) = match &mut spilled {
            None => {
                pool.install(|| stat_all(&mut samples));
                let bytes: u64 = samples
                    .iter()
                    .flat_map(|s| &s.members)
                    .map(|m| m.size)
                    .sum();
                (samples.len() as u64, bytes)
            }
            Some((_, plan)) if let Some(bytes) = plan.bytes => (plan.count as u64, bytes),
            Some((spill, plan)) => {
                let range = o.part.map_or(0..plan.count, |p| p.range(plan.count));
                let mut bytes = 0u64;
                for s in plan.samples(spill, range.clone(), None, pool)? {
                    bytes += s?.members.iter().map(|m| m.size).sum::<u64>();
                    if cancel.load(Ordering::Relaxed) {
                        return Err(PackError::Cancelled);
                    }
                }
                (range.len() as u64, bytes)
            }
        };
        if let Some(b) = base {
            b.check_keys(&samples)?;
        }
        progress.planned(planned_samples, planned_bytes);
        // The old dataset goes only now, once the input has been walked,
        // checked, labelled and planned: a bad input found so far (a FIFO,
        // a label file that does not parse) or a cancel leaves it whole.
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        if base.is_none() {
            out.clear_victims(victims, inputs)?;
        }

        // Read and write.
        let chain = crate::image::chain(o.image.clone(), o.transform.as_ref().map(|t| t.1.clone()));
        let prefix = o
            .part
            .map_or_else(|| "shard".to_owned(), |p| p.shard_prefix());
        let ctx = WriteCtx {
            prefix,
            first_shard: base.as_ref().map_or(0, |b| b.first_shard),
            compression: o.compression,
            zstd_level: o.zstd_level,
            shard_size: o.shard_size,
            shard_samples: o.shard_samples,
            budget: o.in_flight,
            on_error: o.on_error,
            transform: chain.as_deref(),
            cancel,
            progress,
        };
        let mut written = match &mut spilled {
            None => write_all(&ctx, samples.into_iter().map(Ok), &mut out, jobs)?,
            Some((spill, plan)) => {
                let range = o.part.map_or(0..plan.count, |p| p.range(plan.count));
                let mut hash = o.part.map(|_| ListingHash::default());
                let stream = plan.samples(spill, range, hash.as_mut(), pool)?;
                // The runs are merged, labelled and stat'ed on a thread of
                // their own, ahead of the writer (a few chunks).
                let written = std::thread::scope(|scope| {
                    let (tx, rx) = crossbeam_channel::bounded(crate::spilled::AHEAD);
                    std::thread::Builder::new()
                        .name("bale-pack-plan".into())
                        .spawn_scoped(scope, move || {
                            for s in stream {
                                if tx.send(s).is_err() {
                                    return;
                                }
                            }
                        })
                        .map_err(|e| PackError::io(&self.output, e))?;
                    write_all(&ctx, rx.into_iter(), &mut out, jobs)
                })?;
                shaping.listing = hash.map(|h| h.finish());
                written
            }
        };
        // The runs go before the manifest lands.
        drop(spilled);
        if o.part.is_none_or(|p| p.index == 0) {
            for e in orphans {
                let f = crate::SkippedFile {
                    path: e.input_path().map(Path::to_path_buf).unwrap_or_default(),
                    error: e.to_string(),
                };
                progress.skipped(&f);
                written.skipped.push(f);
            }
        }
        warnings.append(&mut written.warnings);

        // Manifest, last.
        if cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        let created_by = CreatedBy {
            tool: "bale".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            command: "pack".into(),
            options: serde_json::to_value(&shaping).unwrap_or_default(),
        };
        let classes = labels.classes.as_ref().map_or(0, |c| c.len() as u64);
        let shards = written.shards.len() as u64;
        let bytes = written.shards.iter().map(|e| e.bytes).sum();
        let skipped = written.skipped.len() as u64;
        if let Some(b) = &base {
            let manifest = b.manifest(written.shards, labels.classes, skipped);
            bale_format::atomic::replace_atomic(
                Manifest::path_in(&self.output),
                &manifest.to_bytes(),
            )?;
        } else {
            let mut manifest = Manifest::new(written.shards, labels.classes, created_by);
            manifest.skipped = skipped;
            manifest.write(&self.output)?;
        }
        out.commit();
        Ok(PackSummary {
            output: self.output.clone(),
            samples: written.samples,
            members: written.members,
            shards,
            input_bytes: written.input_bytes,
            bytes,
            seconds: start.elapsed().as_secs_f64(),
            labels: labels.mode.into(),
            classes,
            part: o.part,
            appended_to: base.as_ref().map(|b| b.manifest.samples),
            skipped: written.skipped,
            ignored,
            warnings,
        })
    }
}

/// A plan: in memory, or spilled to disk and streamed.
enum Planned {
    InMemory(Vec<PlannedSample>),
    Spilled(Box<(Spill, SpillPlan)>),
}

/// Found files held in memory before they are spilled in sorted runs: a
/// pack of more files plans from disk ([`Spill`]). `BALE_PACK_RUN_FILES`
/// sets it (tests run tiny runs with it).
fn spill_run() -> usize {
    std::env::var("BALE_PACK_RUN_FILES")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(crate::spill::DEFAULT_RUN)
}

/// Refuses an append whose input is the output directory or lies inside it:
/// the walk would take the dataset's own shards and manifest for samples.
/// (An output inside an input is skipped by the walk, as for any pack.)
/// `bale convert --append` refuses such a source too.
pub(crate) fn refuse_input_in_output(inputs: &[PathBuf], output: &Path) -> Result<()> {
    let Some(out) = dir_id(output) else {
        return Ok(());
    };
    for input in inputs {
        let Ok(real) = std::fs::canonicalize(input) else {
            continue;
        };
        if real.ancestors().any(|a| dir_id(a) == Some(out)) {
            return Err(PackError::Option(format!(
                "--append: the input {} is the output directory {} or inside it; its shards \
                 and bale.json would be taken for new samples. Give the new files' own directory",
                bale_format::shown(input),
                bale_format::shown(output)
            )));
        }
    }
    Ok(())
}
