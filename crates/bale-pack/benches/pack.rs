//! Pack benchmark: `bale pack` (the library, all cores) against GNU `tar cf`
//! over the same tree, in the same run, with a warm and a cold page cache.
//!
//! ```text
//! BALE_BENCH_TREE=$PWD/target/bench/imagenet-like:$PWD/target/bench/png-100k \
//!     cargo bench -p bale-pack --bench pack
//! ```
//!
//! - `BALE_BENCH_TREE`: the input trees, `:`-separated (default
//!   `target/bench/imagenet-like`, made by
//!   `cargo xtask gen-tree target/bench/imagenet-like --files 20000 --classes 100`,
//!   and `target/bench/png-100k` when it exists, made by
//!   `cargo xtask gen-tree target/bench/png-100k --files 100000 --classes 100 --kind png`).
//! - `BALE_BENCH_OUT`: scratch directory for outputs, on the same disk
//!   (default `target/bench/pack-out`).
//! - `BALE_BENCH_RUNS`: runs per row (default 3); the median is printed.
//!
//! "Cold" evicts the pages of every input file and of the previous outputs
//! with `posix_fadvise(POSIX_FADV_DONTNEED)` before each run (directory and
//! inode caches stay warm). tar writes without fsync; bale fsyncs each shard
//! and index before renaming it, so a `tar cf + fsync` row is printed too.
//! bale reads every byte, checksums every member and the shard (xxh3), and
//! writes indexes and a manifest; the run checks that it packed every file.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use bale_pack::{NoProgress, Packer};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn env_path(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map_or_else(|| workspace_root().join(default), PathBuf::from)
}

fn all_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(e.path());
            } else if ft.is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// Drops the page cache of each file (after syncing it, so dirty pages go too).
fn evict(files: &[PathBuf]) {
    use std::os::fd::AsRawFd;
    for f in files {
        if let Ok(file) = File::open(f) {
            let _ = file.sync_all();
            // SAFETY: a valid open file descriptor; offset 0 and length 0 mean the whole file.
            unsafe {
                libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
            }
        }
    }
}

fn read_all(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| fs::read(f).map_or(0, |v| v.len() as u64))
        .sum()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn tar_once(tree: &Path, out: &Path, fsync: bool) -> f64 {
    let tar = out.join("tree.tar");
    let _ = fs::remove_file(&tar);
    let parent = tree.parent().unwrap_or(Path::new("."));
    let name = tree.file_name().expect("tree has a name");
    let t = Instant::now();
    let st = Command::new("tar")
        .arg("cf")
        .arg(&tar)
        .arg("-C")
        .arg(parent)
        .arg(name)
        .status()
        .expect("run GNU tar");
    assert!(st.success(), "tar cf failed: {st}");
    if fsync {
        File::open(&tar)
            .and_then(|f| f.sync_all())
            .expect("fsync the tar");
    }
    let secs = t.elapsed().as_secs_f64();
    let _ = fs::remove_file(&tar);
    secs
}

fn bale_once(tree: &Path, out: &Path, files: usize, bytes: u64) -> f64 {
    let dir = out.join("bale");
    let _ = fs::remove_dir_all(&dir);
    let t = Instant::now();
    let s = Packer::builder()
        .input(tree)
        .output(&dir)
        .build()
        .expect("options")
        .run(&NoProgress)
        .expect("bale pack");
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(s.samples as usize, files, "every file packed as one sample");
    assert_eq!(s.input_bytes, bytes, "every byte read");
    evict(&all_files(&dir));
    let _ = fs::remove_dir_all(&dir);
    secs
}

/// The trees to pack: `BALE_BENCH_TREE` (a `:`-separated list), else the
/// JPEG tree and, when it exists, the small-file tree. Symlinks are resolved,
/// so that `tar -C parent name` archives the tree and not a link to it.
fn trees() -> Vec<PathBuf> {
    let list: Vec<PathBuf> = match std::env::var_os("BALE_BENCH_TREE") {
        Some(v) => std::env::split_paths(&v).collect(),
        None => {
            let mut v = vec![workspace_root().join("target/bench/imagenet-like")];
            let small = workspace_root().join("target/bench/png-100k");
            if small.exists() {
                v.push(small);
            }
            v
        }
    };
    list.into_iter()
        .map(|t| fs::canonicalize(&t).unwrap_or(t))
        .collect()
}

/// Benchmarks one tree; returns `(tree name, cache, tar cf / bale)` rows.
fn bench_tree(tree: &Path, out: &Path, runs: usize) -> Vec<(String, &'static str, f64)> {
    let files = all_files(tree);
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| {
            !f.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
        })
        .collect();
    assert!(
        !files.is_empty(),
        "no files in {}: make the tree with `cargo xtask gen-tree {} --files 20000 --classes 100`",
        tree.display(),
        tree.display()
    );
    let bytes: u64 = files
        .iter()
        .map(|f| fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let name = tree
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    println!(
        "\npack: {} files, {:.2} GB in {}; {cores} cores; median of {runs} runs",
        files.len(),
        bytes as f64 / 1e9,
        tree.display()
    );
    println!(
        "{:<5} {:<40} {:>8} {:>9} {:>14}",
        "cache", "tool", "seconds", "MB/s", "tar cf / bale"
    );
    let mut ratios = Vec::new();
    for cold in [false, true] {
        let cache = if cold { "cold" } else { "warm" };
        if !cold {
            read_all(&files);
        }
        let mut tar = Vec::new();
        let mut tar_sync = Vec::new();
        let mut bale = Vec::new();
        for _ in 0..runs {
            if cold {
                evict(&files);
            }
            tar.push(tar_once(tree, out, false));
            if cold {
                evict(&files);
            }
            tar_sync.push(tar_once(tree, out, true));
            if cold {
                evict(&files);
            }
            bale.push(bale_once(tree, out, files.len(), bytes));
        }
        let (t, ts, b) = (median(tar), median(tar_sync), median(bale));
        let mbs = |s: f64| bytes as f64 / 1e6 / s;
        println!("{cache:<5} {:<40} {t:>8.2} {:>9.0}", "GNU tar cf", mbs(t));
        println!(
            "{cache:<5} {:<40} {ts:>8.2} {:>9.0} {:>13.2}x",
            "GNU tar cf + fsync",
            mbs(ts),
            t / ts
        );
        println!(
            "{cache:<5} {:<40} {b:>8.2} {:>9.0} {:>13.2}x",
            "bale pack (index, xxh3, fsync, manifest)",
            mbs(b),
            t / b
        );
        ratios.push((name.clone(), cache, t / b));
    }
    ratios
}

fn main() {
    // `cargo bench` passes --bench; nothing else is expected.
    let out = env_path("BALE_BENCH_OUT", "target/bench/pack-out");
    let runs: usize = std::env::var("BALE_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    fs::create_dir_all(&out).expect("create the output directory");
    let mut ratios = Vec::new();
    for tree in trees() {
        ratios.extend(bench_tree(&tree, &out, runs));
    }
    println!("\nsummary: tar cf time / bale pack time (above 1: bale is faster)");
    for (tree, cache, r) in ratios {
        println!("{tree:<20} {cache:<5} {r:>6.2}x");
    }
    let _ = fs::remove_dir(&out);
}
