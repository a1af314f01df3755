//! Read benchmark of `bale-reader`, each figure against its baseline in the same run.
//!
//! ```text
//! BALE_BENCH_TREE=target/bench/imagenet-like cargo bench -p bale-reader --bench read
//! ```
//!
//! - Packs the tree (class directory -> label) into `target/bench/read-dataset`
//!   with the format crate's shard writer, unless a dataset of the same files is there.
//! - **Random, warm**: `Dataset::get` in a random order vs reading the same
//!   files from the tree by path (open, read, close) in the same order, after
//!   both were read once. Every byte is checksummed (xxh3) on both sides.
//! - **Random, cold**: the same, after `posix_fadvise(DONTNEED)` on every
//!   shard and every loose file (residency checked with `mincore`), one thread.
//! - **Random, caches dropped**: the same cold reads after
//!   `sync; echo 3 > /proc/sys/vm/drop_caches` before every measurement, so
//!   the loose files' inodes and directory entries must be read from storage
//!   too (as in a real first epoch); and the reader's own prefetch over a
//!   shuffled epoch on 8, 16 and 32 threads against the loose files on as
//!   many threads and on one. Each measurement is repeated
//!   (`BALE_BENCH_RUNS`, default 3, sides interleaved) and the median shown.
//!   Skipped, with the reason printed, when `drop_caches` cannot be written
//!   (not root, or a read-only `/proc`).
//! - **Sequential**: a sequential epoch, checksumming every field, vs reading
//!   the shard files raw with the same buffer size (4 MiB), checksumming every
//!   buffer. MB/s are shard bytes per second on both sides.
//! - **Open cost**: a generated index-only dataset of 1,000,000 samples in
//!   1,000 shards (real indexes, sparse shard files), in
//!   `target/bench/open-dataset`: open time, and heap held after open
//!   (counted by this binary's global allocator).
//!
//! Environment: `BALE_BENCH_TREE` (the tree; default
//! `target/bench/imagenet-like`), `BALE_BENCH_COLD_SAMPLES` (samples per cold
//! measurement; default all), `BALE_BENCH_ONLY` (a comma-separated subset of
//! `warm,cold,dropped,seq,open`; default all), `BALE_BENCH_RUNS` (repeats of
//! each caches-dropped measurement; default 3). Relative paths are taken from the workspace root.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::fs::File;
use std::hint::black_box;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use bale_format::hex64;
use bale_format::{
    Compression, CreatedBy, FieldStats, IndexBuilder, Manifest, Member, ShardEntry,
    ShardFileWriter, checksum, index_file_name, shard_file_name,
};
use bale_reader::{Backing, Dataset, EpochPlan, Partition};

// ---------------------------------------------------------------- heap counting

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note_alloc(size: usize) {
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            note_alloc(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ---------------------------------------------------------------- the tree

fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn env_path(name: &str, default: &str) -> PathBuf {
    let p = std::env::var_os(name).map_or_else(|| PathBuf::from(default), PathBuf::from);
    if p.is_absolute() {
        p
    } else {
        workspace_root().join(p)
    }
}

struct LooseFile {
    path: PathBuf,
    key: String,
    ext: String,
    class: usize,
    len: u64,
}

/// The tree's files, sorted: class directories (sorted) -> label, files sorted within.
fn list_tree(tree: &Path) -> Result<(Vec<String>, Vec<LooseFile>)> {
    let mut classes: Vec<String> = std::fs::read_dir(tree)
        .with_context(|| format!("reading the tree {}", tree.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    classes.sort();
    let mut files = Vec::new();
    for (c, class) in classes.iter().enumerate() {
        let mut names: Vec<(String, u64)> = std::fs::read_dir(tree.join(class))?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| {
                Ok((
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata()?.len(),
                ))
            })
            .collect::<Result<_>>()?;
        names.sort();
        for (name, len) in names {
            let Some((stem, ext)) = name.split_once('.') else {
                continue;
            };
            files.push(LooseFile {
                path: tree.join(class).join(&name),
                key: format!("{class}/{stem}"),
                ext: ext.to_owned(),
                class: c,
                len,
            });
        }
    }
    ensure!(!files.is_empty(), "no files in {}", tree.display());
    Ok((classes, files))
}

/// Shards of about this many bytes.
const SHARD_BYTES: u64 = 128 << 20;

/// Packs the tree into `out` unless a dataset of the same keys is there.
fn ensure_dataset(out: &Path, classes: &[String], files: &[LooseFile]) -> Result<()> {
    if let Ok(ds) = Dataset::open(out)
        && ds.len() == files.len() as u64
        && files
            .iter()
            .enumerate()
            .step_by(97)
            .all(|(i, f)| ds.key(i as u64).is_ok_and(|k| k == f.key))
    {
        return Ok(());
    }
    eprintln!("packing {} files into {} ...", files.len(), out.display());
    let t = Instant::now();
    if out.exists() {
        std::fs::remove_dir_all(out)?;
    }
    std::fs::create_dir_all(out)?;
    let mut entries = Vec::new();
    let mut writer: Option<ShardFileWriter> = None;
    let mut data = Vec::new();
    for f in files {
        if writer
            .as_mut()
            .is_some_and(|w| w.writer().bytes_written() >= SHARD_BYTES)
        {
            entries.push(
                writer
                    .take()
                    .map(|w| w.finish())
                    .transpose()?
                    .context("no shard")?,
            );
        }
        let w = match writer.as_mut() {
            Some(w) => w,
            None => writer.insert(ShardFileWriter::create(
                out,
                &shard_file_name("shard", entries.len() as u64, Compression::None),
                Compression::None,
                0,
            )?),
        };
        data.clear();
        File::open(&f.path)?.read_to_end(&mut data)?;
        let cls = f.class.to_string();
        w.writer().write_sample(
            &f.key,
            &[
                Member {
                    ext: &f.ext,
                    data: &data,
                },
                Member {
                    ext: "cls",
                    data: cls.as_bytes(),
                },
            ],
        )?;
    }
    if let Some(w) = writer {
        entries.push(w.finish()?);
    }
    let created_by = CreatedBy {
        tool: "bale-reader-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: "bench".into(),
        options: Default::default(),
    };
    Manifest::new(entries, Some(classes.to_vec()), created_by).write(out)?;
    eprintln!("packed in {:.1} s", t.elapsed().as_secs_f64());
    Ok(())
}

// ---------------------------------------------------------------- page cache

/// Drops the file's pages from the page cache (after writing back any dirty ones).
fn evict(path: &Path) -> Result<()> {
    let f = File::open(path)?;
    f.sync_data().ok();
    // SAFETY: a plain syscall on an open descriptor.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    ensure!(rc == 0, "posix_fadvise on {}: error {rc}", path.display());
    Ok(())
}

/// Fraction of the file's pages in the page cache (`mincore`).
fn resident(path: &Path) -> Result<f64> {
    let f = File::open(path)?;
    let len = f.metadata()?.len() as usize;
    if len == 0 {
        return Ok(0.0);
    }
    // SAFETY: a read-only shared map of an open file, unmapped below; only its residency is queried.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        ensure!(p != libc::MAP_FAILED, "mmap {}", path.display());
        let pages = len.div_ceil(4096);
        let mut v = vec![0u8; pages];
        let rc = libc::mincore(p, len, v.as_mut_ptr());
        libc::munmap(p, len);
        ensure!(rc == 0, "mincore {}", path.display());
        Ok(v.iter().filter(|&&b| b & 1 != 0).count() as f64 / pages as f64)
    }
}

/// Bytes this process has read from storage (`read_bytes` of `/proc/self/io`).
fn storage_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("read_bytes:").map(|v| v.trim().parse().ok()))
                .flatten()
        })
        .unwrap_or(0)
}

/// A measurement on cold pages.
struct Cold {
    t: Timed,
    /// Bytes read from storage during the measurement.
    io: u64,
    /// Fraction of the files' pages still cached after eviction.
    left: f64,
}

impl Cold {
    fn describe(&self, n: usize) -> String {
        format!(
            "{}/s, {:.0} KB from storage per sample, {:.1}% cached after evict",
            fmt_rate(n as f64 / self.t.secs),
            self.io as f64 / n as f64 / 1e3,
            self.left * 100.0
        )
    }
}

/// Evicts `paths`, then times `f`.
fn cold_run(paths: &[&Path], f: impl FnOnce() -> Result<u64>) -> Result<Cold> {
    let left = evict_all(paths)?;
    let before = storage_read_bytes();
    let t = timed(f)?;
    Ok(Cold {
        t,
        io: storage_read_bytes() - before,
        left,
    })
}

fn evict_all(paths: &[&Path]) -> Result<f64> {
    for p in paths {
        evict(p)?;
    }
    // Residency of a sample of the files, to show the eviction worked.
    let step = (paths.len() / 200).max(1);
    let checked: Vec<f64> = paths
        .iter()
        .step_by(step)
        .map(|p| resident(p))
        .collect::<Result<_>>()?;
    Ok(checked.iter().sum::<f64>() / checked.len() as f64)
}

/// Writes back dirty pages and drops the page cache, dentries and inodes of
/// the whole machine (`sync; echo 3 > /proc/sys/vm/drop_caches`).
///
/// # Errors
/// Why it cannot (usually: not root); the caller skips what needs it.
fn drop_caches() -> std::result::Result<(), String> {
    // SAFETY: a plain syscall without arguments.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("cannot write /proc/sys/vm/drop_caches: {e}"))
}

/// A measurement after dropping every cache, repeated: the median and the range.
struct Dropped {
    /// Seconds of each run, sorted.
    secs: Vec<f64>,
    /// Bytes read from storage in each run, in run order.
    io: Vec<u64>,
    sum: u64,
}

impl Dropped {
    fn median(&self) -> f64 {
        self.secs[self.secs.len() / 2]
    }

    fn describe(&self, n: usize) -> String {
        let mut io = self.io.clone();
        io.sort_unstable();
        format!(
            "{}/s (runs {}-{}/s), {:.0} KB from storage per sample",
            fmt_rate(n as f64 / self.median()),
            fmt_rate(n as f64 / self.secs[self.secs.len() - 1]),
            fmt_rate(n as f64 / self.secs[0]),
            io[io.len() / 2] as f64 / n as f64 / 1e3,
        )
    }
}

/// Runs every measurement `runs` times, interleaved (all of round 1, then
/// all of round 2, ...), dropping the caches before each.
fn dropped_runs(
    runs: usize,
    measures: &[(&str, &dyn Fn() -> Result<u64>)],
) -> Result<Vec<Dropped>> {
    let mut out: Vec<Dropped> = measures
        .iter()
        .map(|_| Dropped {
            secs: Vec::new(),
            io: Vec::new(),
            sum: 0,
        })
        .collect();
    for round in 0..runs {
        for ((name, f), d) in measures.iter().zip(&mut out) {
            drop_caches().map_err(anyhow::Error::msg)?;
            let before = storage_read_bytes();
            let t = timed(f)?;
            let io = storage_read_bytes() - before;
            eprintln!(
                "  caches dropped, round {}: {name}: {:.2} s, {:.0} MB from storage",
                round + 1,
                t.secs,
                io as f64 / 1e6
            );
            ensure!(
                round == 0 || t.sum == d.sum,
                "{name}: another checksum than in round 1"
            );
            d.sum = t.sum;
            d.secs.push(t.secs);
            d.io.push(io);
        }
    }
    for d in &mut out {
        d.secs.sort_by(f64::total_cmp);
    }
    Ok(out)
}

// ---------------------------------------------------------------- measurements

/// Seconds, and a checksum of everything read (so no read can be skipped).
struct Timed {
    secs: f64,
    sum: u64,
}

fn timed(f: impl FnOnce() -> Result<u64>) -> Result<Timed> {
    let t = Instant::now();
    let sum = f()?;
    Ok(Timed {
        secs: t.elapsed().as_secs_f64(),
        sum,
    })
}

fn loose_random(files: &[LooseFile], order: &[u64]) -> Result<u64> {
    let mut sum = 0u64;
    let mut buf = Vec::new();
    for &i in order {
        let f = &files[i as usize];
        buf.clear();
        let mut file = File::open(&f.path)?;
        file.read_to_end(&mut buf)?;
        drop(file);
        sum = sum.wrapping_add(checksum(&buf));
    }
    Ok(black_box(sum))
}

/// `loose_random` on `threads` threads, thread `t` taking every `threads`-th file from the `t`-th.
fn loose_parallel(files: &[LooseFile], order: &[u64], threads: usize) -> Result<u64> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let mine: Vec<u64> = order.iter().skip(t).step_by(threads).copied().collect();
                scope.spawn(move || loose_random(files, &mine))
            })
            .collect();
        let mut sum = 0u64;
        for h in handles {
            sum = sum.wrapping_add(
                h.join()
                    .map_err(|_| anyhow::anyhow!("reader thread panicked"))??,
            );
        }
        Ok(sum)
    })
}

fn get_random(ds: &Dataset, order: &[u64]) -> Result<u64> {
    let mut sum = 0u64;
    for &i in order {
        let s = ds.get(i)?;
        for (ext, bytes) in s.fields() {
            if ext != "cls" {
                sum = sum.wrapping_add(checksum(bytes));
            }
        }
    }
    Ok(black_box(sum))
}

const RAW_BUFFER: usize = bale_format::STREAM_BUFFER;

fn raw_sequential(shards: &[PathBuf]) -> Result<u64> {
    let mut sum = 0u64;
    let mut buf = vec![0u8; RAW_BUFFER];
    for p in shards {
        let mut f = File::open(p)?;
        loop {
            let n = f.read(&mut buf)?;
            if n == 0 {
                break;
            }
            sum = sum.wrapping_add(checksum(&buf[..n]));
        }
    }
    Ok(black_box(sum))
}

fn iter_sequential(ds: &Dataset, prefetch: usize) -> Result<u64> {
    let mut sum = 0u64;
    let mut it = ds.iter(EpochPlan::Sequential, Partition::ALL)?;
    if prefetch > 0 {
        it = it.prefetch(prefetch, 256, 64 << 20);
    }
    for s in it {
        for (_, bytes) in s?.fields() {
            sum = sum.wrapping_add(checksum(bytes));
        }
    }
    Ok(black_box(sum))
}

/// Read-ahead budget of the prefetching iterator in this benchmark.
const PREFETCH_SAMPLES: usize = 256;
const PREFETCH_BYTES: u64 = 64 << 20;

fn iter_shuffled(ds: &Dataset, prefetch: usize, take: usize) -> Result<u64> {
    let mut sum = 0u64;
    let it = ds
        .iter(EpochPlan::shuffled(7, 0), Partition::ALL)?
        .prefetch(prefetch, PREFETCH_SAMPLES, PREFETCH_BYTES);
    for s in it.take(take) {
        for (ext, bytes) in s?.fields() {
            if ext != "cls" {
                sum = sum.wrapping_add(checksum(bytes));
            }
        }
    }
    Ok(black_box(sum))
}

/// The caches-dropped rows: random `get()` on one thread, and a shuffled
/// epoch with prefetch on 8, 16 and 32 threads, each against the loose files.
fn dropped_rows(out: &Path, files: &[LooseFile], order: &[u64], n: usize) -> Result<Vec<Row>> {
    let runs = std::env::var("BALE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3usize)
        .max(1);
    let epoch: Vec<u64> = Dataset::open(out)?
        .order(EpochPlan::shuffled(7, 0), Partition::ALL)?
        .iter()
        .take(n)
        .collect();
    let epoch = epoch.as_slice();
    let want = loose_random(files, order)?;
    let epoch_want = loose_random(files, epoch)?;
    let get = |backing: Backing| {
        move || {
            let ds = Dataset::options().backing(backing).open(out)?;
            get_random(&ds, order)
        }
    };
    let (get_mmap, get_pread) = (get(Backing::Mmap), get(Backing::Pread));
    let loose_1 = || loose_random(files, order);
    let loose_epoch_1 = || loose_random(files, epoch);
    const THREADS: [usize; 3] = [8, 16, 32];
    let loose_n: Vec<_> = THREADS
        .iter()
        .map(|&t| move || loose_parallel(files, epoch, t))
        .collect();
    let bale_n: Vec<_> = THREADS
        .iter()
        .map(|&t| {
            move || {
                let ds = Dataset::open(out)?;
                iter_shuffled(&ds, t, n)
            }
        })
        .collect();
    let inline = || {
        let ds = Dataset::open(out)?;
        iter_shuffled(&ds, 0, n)
    };
    let mut measures: Vec<(String, &dyn Fn() -> Result<u64>)> = vec![
        ("loose, 1 thread, get order".into(), &loose_1),
        ("get() mmap, 1 thread".into(), &get_mmap),
        ("get() pread, 1 thread".into(), &get_pread),
        ("loose, 1 thread, epoch order".into(), &loose_epoch_1),
        ("iterator, no prefetch threads".into(), &inline),
    ];
    for (i, &t) in THREADS.iter().enumerate() {
        measures.push((format!("loose, {t} threads"), &loose_n[i]));
        measures.push((format!("prefetch, {t} threads"), &bale_n[i]));
    }
    eprintln!(
        "caches dropped: {} measurements x {runs} runs of {n} samples",
        measures.len()
    );
    let named: Vec<(&str, &dyn Fn() -> Result<u64>)> =
        measures.iter().map(|(s, f)| (s.as_str(), *f)).collect();
    let d = dropped_runs(runs, &named)?;
    ensure!(d[0].sum == want && d[1].sum == want && d[2].sum == want);
    ensure!(d[3..].iter().all(|x| x.sum == epoch_want));
    let mut rows = Vec::new();
    let base = |x: &Dropped, what: &str| format!("loose{what} {}", x.describe(n));
    for (i, name) in [(1, "mmap"), (2, "pread")] {
        rows.push(Row {
            what: format!("random get(), caches dropped, 1 thread ({name})"),
            baseline: base(&d[0], ", 1 thread"),
            bale: d[i].describe(n),
            ratio: d[0].median() / d[i].median(),
            target: ">= 3x".into(),
        });
    }
    rows.push(Row {
        what: "shuffled epoch, caches dropped, no prefetch threads (the iterator hints each batch of 32 reads at once; mmap)".into(),
        baseline: base(&d[3], ", 1 thread"),
        bale: d[4].describe(n),
        ratio: d[3].median() / d[4].median(),
        target: "-".into(),
    });
    for (i, &t) in THREADS.iter().enumerate() {
        let (loose, bale) = (&d[5 + 2 * i], &d[6 + 2 * i]);
        let what = format!(
            "shuffled epoch, caches dropped, prefetch {t} threads, {PREFETCH_SAMPLES} samples / {} MiB ahead (mmap)",
            PREFETCH_BYTES >> 20
        );
        rows.push(Row {
            what: format!("{what} vs loose on {t} threads"),
            baseline: base(loose, &format!(", {t} threads")),
            bale: bale.describe(n),
            ratio: loose.median() / bale.median(),
            target: "-".into(),
        });
        rows.push(Row {
            what: format!("{what} vs loose on 1 thread"),
            baseline: base(&d[3], ", 1 thread"),
            bale: bale.describe(n),
            ratio: d[3].median() / bale.median(),
            target: "-".into(),
        });
    }
    Ok(rows)
}

// ---------------------------------------------------------------- open cost

const OPEN_SAMPLES_PER_SHARD: u64 = 1000;
const OPEN_SHARDS: u64 = 1000;

/// A dataset of 1,000 real indexes of 1,000 samples each (a 90-130 KB `.jpg`
/// and a `.cls` per sample, ImageNet-like keys) over sparse shard files.
fn ensure_open_dataset(dir: &Path) -> Result<()> {
    if Manifest::read(dir).is_ok_and(|m| m.samples == OPEN_SHARDS * OPEN_SAMPLES_PER_SHARD) {
        return Ok(());
    }
    eprintln!("generating the index-only dataset {} ...", dir.display());
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    let mut entries = Vec::new();
    let mut global = 0u64;
    for s in 0..OPEN_SHARDS {
        let mut b = IndexBuilder::new(Compression::None);
        let mut pos = 0u64;
        let (mut jpg, mut cls) = (FieldStats::default(), FieldStats::default());
        for _ in 0..OPEN_SAMPLES_PER_SHARD {
            let class = global % 1000;
            let key = format!(
                "n{:08}/n{:08}_{:06}",
                1_000_000 + class,
                1_000_000 + class,
                global
            );
            let size = 90_000 + (global * 7919) % 40_000;
            let jpg_at = pos + 512;
            let cls_at = jpg_at + size.div_ceil(512) * 512 + 512;
            let len = cls_at + 512 - pos;
            let members = [("jpg", jpg_at, size, global), ("cls", cls_at, 3, 7)];
            b.push_sample(&key, pos, len, pos, len, &members);
            jpg.add(FieldStats {
                count: 1,
                bytes: size,
            });
            cls.add(FieldStats { count: 1, bytes: 3 });
            pos += len;
            global += 1;
        }
        let shard_len = pos + 1024;
        let bytes = b.to_bytes(shard_len, shard_len);
        let file = shard_file_name("shard", s, Compression::None);
        let index = index_file_name(&file);
        std::fs::write(dir.join(&index), &bytes)?;
        File::create(dir.join(&file))?.set_len(shard_len)?;
        let footer: [u8; 8] = bytes[bytes.len() - 8..].try_into()?;
        entries.push(ShardEntry {
            file,
            index,
            samples: OPEN_SAMPLES_PER_SHARD,
            members: 2 * OPEN_SAMPLES_PER_SHARD,
            bytes: shard_len,
            tar_bytes: shard_len,
            compression: Compression::None,
            index_xxh3: hex64(u64::from_le_bytes(footer)),
            shard_xxh3: None,
            fields: BTreeMap::from([("jpg".to_string(), jpg), ("cls".to_string(), cls)]),
        });
    }
    let labels = (0..1000)
        .map(|c| format!("n{:08}", 1_000_000 + c))
        .collect();
    let created_by = CreatedBy {
        tool: "bale-reader-bench".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        command: "bench".into(),
        options: Default::default(),
    };
    Manifest::new(entries, Some(labels), created_by).write(dir)?;
    Ok(())
}

struct OpenCost {
    secs: Vec<f64>,
    heap: usize,
    peak: usize,
    index_bytes: u64,
}

fn open_cost(dir: &Path, threads: usize) -> Result<OpenCost> {
    let mut secs = Vec::new();
    let (mut heap, mut peak) = (0, 0);
    for _ in 0..5 {
        let before = CURRENT.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let t = Instant::now();
        let ds = Dataset::options().open_threads(threads).open(dir)?;
        secs.push(t.elapsed().as_secs_f64());
        heap = CURRENT.load(Ordering::Relaxed) - before;
        peak = PEAK.load(Ordering::Relaxed) - before;
        ensure!(ds.len() == OPEN_SHARDS * OPEN_SAMPLES_PER_SHARD);
        // Touch it, so the open is not optimised away.
        black_box(ds.key(999_999)?);
    }
    secs.sort_by(f64::total_cmp);
    let index_bytes = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".idx"))
        .map(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .sum();
    Ok(OpenCost {
        secs,
        heap,
        peak,
        index_bytes,
    })
}

// ---------------------------------------------------------------- report

fn rate(n: usize, t: &Timed) -> f64 {
    n as f64 / t.secs
}

fn fmt_rate(r: f64) -> String {
    let s = format!("{:.0}", r);
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

struct Row {
    what: String,
    baseline: String,
    bale: String,
    ratio: f64,
    target: String,
}

fn best_of(runs: usize, mut f: impl FnMut() -> Result<Timed>) -> Result<Timed> {
    let mut best: Option<Timed> = None;
    for _ in 0..runs {
        let t = f()?;
        if best.as_ref().is_none_or(|b| t.secs < b.secs) {
            best = Some(t);
        }
    }
    best.context("no run")
}

fn main() -> Result<()> {
    // `cargo bench` passes `--bench`; nothing else is accepted.
    if std::env::args().skip(1).any(|a| a != "--bench") {
        bail!(
            "usage: cargo bench -p bale-reader --bench read (settings come from the environment)"
        );
    }
    let start = Instant::now();
    let tree = env_path("BALE_BENCH_TREE", "target/bench/imagenet-like");
    let out = workspace_root().join("target/bench/read-dataset");
    let (classes, files) = list_tree(&tree)?;
    ensure_dataset(&out, &classes, &files)?;
    let n = files.len();
    let manifest = Manifest::read(&out)?;
    let shards: Vec<PathBuf> = manifest
        .shards
        .iter()
        .map(|s| Manifest::resolve(&out, &s.file))
        .collect();
    let shard_bytes: u64 = manifest.shards.iter().map(|s| s.bytes).sum();
    let loose_bytes: u64 = files.iter().map(|f| f.len).sum();
    {
        let ds = Dataset::open(&out)?;
        for (i, f) in files.iter().enumerate() {
            ensure!(
                ds.key(i as u64)? == f.key,
                "sample {i} is not {}",
                f.path.display()
            );
        }
    }
    let order = bale_format::shuffle::permutation(n as u64, 0xBA1E);
    let cold_n = std::env::var("BALE_BENCH_COLD_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(n)
        .min(n);
    let cold_order = &order[..cold_n];
    println!(
        "bale-reader read benchmark: {n} samples, {:.2} GB in {} shards ({}), tree {}",
        shard_bytes as f64 / 1e9,
        shards.len(),
        out.display(),
        tree.display()
    );
    let mut rows = Vec::new();
    let only = std::env::var("BALE_BENCH_ONLY").unwrap_or_default();
    let run = |part: &str| only.is_empty() || only.split(',').any(|p| p == part);

    // Random reads, warm page cache: read everything once first.
    if run("warm") {
        let mmap = Dataset::options().backing(Backing::Mmap).open(&out)?;
        let pread = Dataset::options().backing(Backing::Pread).open(&out)?;
        let want = loose_random(&files, &order)?;
        raw_sequential(&shards)?;
        ensure!(
            get_random(&mmap, &order)? == want,
            "mmap get read other bytes than the tree holds"
        );
        ensure!(
            get_random(&pread, &order)? == want,
            "pread get read other bytes than the tree holds"
        );
        let loose = best_of(2, || timed(|| loose_random(&files, &order)))?;
        let got_mmap = best_of(2, || timed(|| get_random(&mmap, &order)))?;
        let got_pread = best_of(2, || timed(|| get_random(&pread, &order)))?;
        ensure!(loose.sum == want && got_mmap.sum == want && got_pread.sum == want);
        for (name, t) in [("mmap", &got_mmap), ("pread", &got_pread)] {
            rows.push(Row {
                what: format!("random get(), warm, 1 thread ({name})"),
                baseline: format!("loose open/read/close {}/s", fmt_rate(rate(n, &loose))),
                bale: format!("{}/s", fmt_rate(rate(n, t))),
                ratio: loose.secs / t.secs,
                target: ">= 10x".into(),
            });
        }
        // The consumer's own cost: checksumming the same bytes, the samples fetched beforehand.
        let fetched: Vec<bale_reader::Sample> = order
            .iter()
            .map(|&i| mmap.get(i))
            .collect::<Result<_, _>>()?;
        let floor = best_of(2, || {
            timed(|| {
                let mut sum = 0u64;
                for s in &fetched {
                    for (ext, bytes) in s.fields() {
                        if ext != "cls" {
                            sum = sum.wrapping_add(checksum(bytes));
                        }
                    }
                }
                Ok(black_box(sum))
            })
        })?;
        drop(fetched);
        ensure!(floor.sum == want);
        rows.push(Row {
            what: "floor: the checksum alone, samples fetched beforehand (mmap)".into(),
            baseline: format!("loose open/read/close {}/s", fmt_rate(rate(n, &loose))),
            bale: format!("{}/s", fmt_rate(rate(n, &floor))),
            ratio: loose.secs / floor.secs,
            target: "ceiling of the rows above".into(),
        });
        let shuffled = best_of(2, || timed(|| iter_shuffled(&mmap, 2, n)))?;
        ensure!(shuffled.sum == want);
        rows.push(Row {
            what: "shuffled epoch, prefetch 2 threads (mmap)".into(),
            baseline: format!("loose open/read/close {}/s", fmt_rate(rate(n, &loose))),
            bale: format!("{}/s", fmt_rate(rate(n, &shuffled))),
            ratio: loose.secs / shuffled.secs,
            target: "-".into(),
        });
        drop((mmap, pread));
    }

    // Random reads, cold pages: one thread (the target), then prefetch
    // threads against as many threads reading loose files.
    if run("cold") {
        let loose_paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
        let shard_paths: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
        let cold_want = loose_random(&files, cold_order)?;
        let loose = cold_run(&loose_paths, || loose_random(&files, cold_order))?;
        ensure!(loose.t.sum == cold_want);
        for backing in [Backing::Mmap, Backing::Pread] {
            let c = cold_run(&shard_paths, || {
                let ds = Dataset::options().backing(backing).open(&out)?;
                get_random(&ds, cold_order)
            })?;
            ensure!(c.t.sum == cold_want, "cold get read other bytes");
            rows.push(Row {
                what: format!("random get(), cold, 1 thread ({backing:?})").to_lowercase(),
                baseline: format!("loose {}", loose.describe(cold_n)),
                bale: c.describe(cold_n),
                ratio: loose.t.secs / c.t.secs,
                target: ">= 3x".into(),
            });
        }
        let threads = 4;
        let plan = EpochPlan::shuffled(7, 0);
        let epoch: Vec<u64> = {
            let ds = Dataset::open(&out)?;
            ds.order(plan, Partition::ALL)?
                .iter()
                .take(cold_n)
                .collect()
        };
        let par_want = loose_random(&files, &epoch)?;
        let loose_par = cold_run(&loose_paths, || loose_parallel(&files, &epoch, threads))?;
        ensure!(loose_par.t.sum == par_want);
        for backing in [Backing::Mmap, Backing::Pread] {
            let bale_par = cold_run(&shard_paths, || {
                let ds = Dataset::options().backing(backing).open(&out)?;
                iter_shuffled(&ds, threads, cold_n)
            })?;
            ensure!(bale_par.t.sum == par_want);
            rows.push(Row {
                what: format!("shuffled epoch, cold, prefetch {threads} threads ({backing:?})")
                    .to_lowercase(),
                baseline: format!("loose, {threads} threads {}", loose_par.describe(cold_n)),
                bale: bale_par.describe(cold_n),
                ratio: loose_par.t.secs / bale_par.t.secs,
                target: "-".into(),
            });
        }
    }

    // Random reads with every cache dropped (page cache, dentries, inodes):
    // what a first epoch over files not read since boot pays.
    if run("dropped") {
        match drop_caches() {
            Err(why) => println!("skipping the caches-dropped measurements: {why}"),
            Ok(()) => rows.extend(dropped_rows(&out, &files, cold_order, cold_n)?),
        }
    }

    // Sequential, warm.
    if run("seq") {
        let mmap = Dataset::options().backing(Backing::Mmap).open(&out)?;
        let pread = Dataset::options().backing(Backing::Pread).open(&out)?;
        raw_sequential(&shards)?;
        let raw = best_of(3, || timed(|| raw_sequential(&shards)))?;
        let mb = |t: &Timed| shard_bytes as f64 / 1e6 / t.secs;
        let seq_want = iter_sequential(&pread, 0)?;
        for (name, ds, threads) in [
            ("mmap", &mmap, 0),
            ("pread", &pread, 0),
            ("pread, prefetch 2 threads", &pread, 2),
        ] {
            let t = best_of(3, || timed(|| iter_sequential(ds, threads)))?;
            ensure!(t.sum == seq_want, "sequential {name} read other bytes");
            rows.push(Row {
                what: format!("sequential epoch, warm ({name})"),
                baseline: format!("raw read, 4 MiB buffer {:.0} MB/s", mb(&raw)),
                bale: format!("{:.0} MB/s ({}/s)", mb(&t), fmt_rate(rate(n, &t))),
                ratio: raw.secs / t.secs,
                target: ">= 0.8x".into(),
            });
        }
        drop((mmap, pread));
        let shard_paths: Vec<&Path> = shards.iter().map(PathBuf::as_path).collect();
        let raw_cold = cold_run(&shard_paths, || raw_sequential(&shards))?;
        for backing in [Backing::Mmap, Backing::Pread] {
            let c = cold_run(&shard_paths, || {
                let ds = Dataset::options().backing(backing).open(&out)?;
                iter_sequential(&ds, 0)
            })?;
            ensure!(
                c.t.sum == seq_want,
                "cold sequential {backing:?} read other bytes"
            );
            rows.push(Row {
                what: format!("sequential epoch, cold ({backing:?})").to_lowercase(),
                baseline: format!("raw read, 4 MiB buffer {:.0} MB/s", mb(&raw_cold.t)),
                bale: format!("{:.0} MB/s", mb(&c.t)),
                ratio: raw_cold.t.secs / c.t.secs,
                target: "-".into(),
            });
        }
    }

    // Open cost.
    if run("open") {
        let open_dir = workspace_root().join("target/bench/open-dataset");
        ensure_open_dataset(&open_dir)?;
        for threads in [0, 1] {
            let c = open_cost(&open_dir, threads)?;
            let label = if threads == 0 {
                "all cores"
            } else {
                "1 thread"
            };
            rows.push(Row {
            what: format!("open 1,000,000 samples / 1,000 shards ({label})"),
            baseline: "target < 200 ms, < 100 MiB heap".into(),
            bale: format!(
                "median {:.0} ms (min {:.0}, max {:.0}); heap held {:.2} MiB, peak {:.2} MiB; indexes mapped {:.0} MiB",
                c.secs[c.secs.len() / 2] * 1e3,
                c.secs[0] * 1e3,
                c.secs[c.secs.len() - 1] * 1e3,
                c.heap as f64 / (1 << 20) as f64,
                c.peak as f64 / (1 << 20) as f64,
                c.index_bytes as f64 / (1 << 20) as f64,
            ),
            ratio: 0.2 / c.secs[c.secs.len() / 2],
            target: "time ratio >= 1x".into(),
        });
        }
    }

    println!();
    println!("| measurement | baseline | bale | ratio | target |");
    println!("| --- | --- | --- | --- | --- |");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.2}x | {} |",
            r.what, r.baseline, r.bale, r.ratio, r.target
        );
    }
    println!();
    println!(
        "loose files: {n} files, {:.2} GB; cold measurements over {cold_n} samples; total run {:.0} s",
        loose_bytes as f64 / 1e9,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}
