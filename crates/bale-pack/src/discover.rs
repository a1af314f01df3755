//! Discovery: walking the input roots (or a file list) into candidate files.
//!
//! Every file met ends in exactly one of: a candidate member ([`Found`]), an
//! ignored file (counted by reason in [`Ignored`]), or a bad input (an error
//! that `--on-error` decides on).

use std::ffi::OsStr;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use serde::Serialize;
use walkdir::WalkDir;

use crate::error::{PackError, Result};
pub(crate) use crate::spill::Found;
use crate::spill::Spill;

/// How many example paths [`IgnoredKind`] keeps.
pub const IGNORED_EXAMPLES: usize = 10;

/// Files of one kind that were ignored by rule (not errors).
///
/// Serialized as `{"count", "examples"}`, the examples as UTF-8 (lossy), and
/// when one of them is not UTF-8, `"examples_bytes"` beside them: every
/// example's bytes, in the same order, as a skipped file's `path_bytes`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoredKind {
    /// How many.
    pub count: u64,
    /// The first few of them (at most [`IGNORED_EXAMPLES`]).
    pub examples: Vec<PathBuf>,
}

impl IgnoredKind {
    pub(crate) fn add(&mut self, path: &Path) {
        self.count += 1;
        if self.examples.len() < IGNORED_EXAMPLES {
            self.examples.push(path.to_path_buf());
        }
    }
}

impl Serialize for IgnoredKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let raw = self.examples.iter().any(|p| p.to_str().is_none());
        let mut st = s.serialize_struct("IgnoredKind", 2 + usize::from(raw))?;
        st.serialize_field("count", &self.count)?;
        let lossy: Vec<_> = self.examples.iter().map(|p| p.to_string_lossy()).collect();
        st.serialize_field("examples", &lossy)?;
        if raw {
            let bytes: Vec<_> = self
                .examples
                .iter()
                .map(|p| crate::progress::path_bytes(p))
                .collect();
            st.serialize_field("examples_bytes", &bytes)?;
        }
        st.end()
    }
}

/// Input entries ignored by rule, by reason. None of them is an error.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Ignored {
    /// Files whose base name has no dot, or ends with one: they have no
    /// extension, so WebDataset's rule gives them no sample.
    pub no_extension: IgnoredKind,
    /// Dotfiles and dot-directories (a directory counts once; its contents are not walked).
    pub hidden: IgnoredKind,
    /// Symlinks met during the walk without `follow_links`.
    pub symlinks: IgnoredKind,
    /// Files and directories left out by the include / exclude globs.
    pub excluded: IgnoredKind,
    /// With directory labels: files directly under a root, in no class directory.
    pub outside_class: IgnoredKind,
}

impl Ignored {
    /// Adds what a later part of the walk ignored: the counts, and examples up to the cap.
    fn append(&mut self, later: Ignored) {
        let kinds = [
            (&mut self.no_extension, later.no_extension),
            (&mut self.hidden, later.hidden),
            (&mut self.symlinks, later.symlinks),
            (&mut self.excluded, later.excluded),
            (&mut self.outside_class, later.outside_class),
        ];
        for (into, from) in kinds {
            into.count += from.count;
            let room = IGNORED_EXAMPLES.saturating_sub(into.examples.len());
            into.examples.extend(from.examples.into_iter().take(room));
        }
    }

    /// Total ignored entries.
    pub fn total(&self) -> u64 {
        self.no_extension.count
            + self.hidden.count
            + self.symlinks.count
            + self.excluded.count
            + self.outside_class.count
    }
}

/// A bad input met during discovery, with the sample key it would have had (when known).
#[derive(Debug)]
pub(crate) struct BadFound {
    pub key: Option<String>,
    pub error: PackError,
}

/// The result of discovery.
#[derive(Debug, Default)]
pub(crate) struct Discovered {
    pub files: Vec<Found>,
    pub bad: Vec<BadFound>,
    pub ignored: Ignored,
    /// With [`Discover::list_ignored`]: the regular files ignored for having
    /// no extension or a hidden name.
    pub ignored_files: Vec<PathBuf>,
    /// Files handed to the spill.
    pub spilled: u64,
}

impl Discovered {
    /// Files found: those held and those spilled.
    pub fn found(&self) -> u64 {
        self.files.len() as u64 + self.spilled
    }

    /// Adds what a later part of the walk found.
    fn append(&mut self, mut later: Discovered) {
        self.spilled += later.spilled;
        self.files.append(&mut later.files);
        self.bad.append(&mut later.bad);
        self.ignored.append(later.ignored);
        self.ignored_files.append(&mut later.ignored_files);
    }
}

/// Where to read the list of files to pack from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileList {
    /// A file with one path per line.
    File(PathBuf),
    /// Standard input, one path per line.
    Stdin,
    /// These paths.
    Paths(Vec<PathBuf>),
}

/// Include / exclude globs. A glob without `/` matches a file's base name;
/// one with `/` matches the whole path relative to the root, where `*` does
/// not cross `/` and `**` does.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    include: Option<(GlobSet, GlobSet)>,
    exclude: Option<(GlobSet, GlobSet)>,
}

fn build_globs(globs: &[String], what: &str) -> Result<Option<(GlobSet, GlobSet)>> {
    if globs.is_empty() {
        return Ok(None);
    }
    let mut full = GlobSetBuilder::new();
    let mut base = GlobSetBuilder::new();
    for g in globs {
        let glob: Glob = GlobBuilder::new(g.trim_start_matches("./"))
            .literal_separator(true)
            .build()
            .map_err(|e| PackError::Option(format!("--{what} {g:?}: {e}")))?;
        if g.contains('/') {
            full.add(glob);
        } else {
            base.add(glob);
        }
    }
    let built = |b: GlobSetBuilder| {
        b.build()
            .map_err(|e| PackError::Option(format!("--{what}: {e}")))
    };
    Ok(Some((built(full)?, built(base)?)))
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Self> {
        Ok(Self {
            include: build_globs(include, "include")?,
            exclude: build_globs(exclude, "exclude")?,
        })
    }

    fn matches(set: &(GlobSet, GlobSet), rel: &Path) -> bool {
        set.0.is_match(rel) || rel.file_name().is_some_and(|b| set.1.is_match(b))
    }

    fn excluded(&self, rel: &Path) -> bool {
        self.exclude.as_ref().is_some_and(|s| Self::matches(s, rel))
    }

    fn included(&self, rel: &Path) -> bool {
        self.include.as_ref().is_none_or(|s| Self::matches(s, rel))
    }
}

/// One walk: files under `start`, named relative to `base`.
#[derive(Debug)]
struct Start {
    root: usize,
    base: PathBuf,
    start: PathBuf,
}

/// Everything discovery needs.
pub(crate) struct Discover<'a> {
    pub roots: &'a [PathBuf],
    pub files_from: Option<&'a FileList>,
    pub filter: &'a Filter,
    pub follow_links: bool,
    /// `(dev, ino)` of a directory never to enter (the output directory).
    pub skip_dir: Option<(u64, u64)>,
    pub cancel: &'a AtomicBool,
    pub progress: &'a dyn Fn(u64),
    /// Keep the paths of regular files ignored for having no extension or a hidden name.
    pub list_ignored: bool,
    /// Threads that walk folders side by side (1: one walk).
    pub threads: usize,
    /// Where found files go when given, a few thousand at a time (then
    /// [`Discovered::files`] holds only what was found since, in no order).
    pub spill: Option<&'a Mutex<Spill>>,
}

/// Files a walk holds before it hands them to its [`Discover::spill`].
const DRAIN_FILES: usize = 4096;

fn lexical_normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

fn read_list(list: &FileList, cancel: &AtomicBool) -> Result<Vec<PathBuf>> {
    let bytes = match list {
        FileList::Paths(p) => return Ok(p.clone()),
        FileList::File(path) => read_user_list(Some(path), "a list of paths", cancel)?,
        FileList::Stdin => read_user_list(None, "a list of paths", cancel)?,
    };
    let mut out = Vec::new();
    for line in bytes.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            continue;
        }
        out.push(path_from_bytes(line));
    }
    Ok(out)
}

/// Opens and reads a list the user gives (`path`, or stdin when `None`) as
/// [`read_lines_capped`] does, on a thread of its own while this one watches
/// `cancel`: a FIFO or pipe nobody writes to (`--labels csv:<(slow)`, a
/// terminal on stdin) blocks in `open` or `read`, where no flag is looked
/// at, and Ctrl-C or SIGTERM must still stop the pack at once. On cancel the
/// reading thread stays blocked until a writer comes or the process ends.
pub(crate) fn read_user_list(
    path: Option<&Path>,
    what: &'static str,
    cancel: &AtomicBool,
) -> Result<Vec<u8>> {
    let read = |path: Option<&Path>| match path {
        Some(path) => {
            let f = std::fs::File::open(path).map_err(|e| PackError::read(path, e))?;
            read_lines_capped(f, path, what)
        }
        None => read_lines_capped(std::io::stdin().lock(), Path::new("<stdin>"), what),
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.map(Path::to_path_buf);
    let spawned = std::thread::Builder::new()
        .name("bale-list".into())
        .spawn(move || {
            let _ = tx.send(read(owned.as_deref()));
        });
    if spawned.is_err() {
        // No thread to spare: read here (a blocked read then waits for
        // a second signal, which exits).
        return read(path);
    }
    loop {
        match rx.recv_timeout(std::time::Duration::from_millis(20)) {
            Ok(result) => return result,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                if cancel.load(Ordering::Relaxed) {
                    return Err(PackError::Cancelled);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let shown = path.unwrap_or(Path::new("<stdin>"));
                return Err(PackError::bad(shown, format!("reading {what} failed")));
            }
        }
    }
}

/// The longest line [`read_lines_capped`] takes: far longer than any path
/// (`PATH_MAX` is 4096) or label row.
pub(crate) const MAX_LIST_LINE: usize = 64 << 10;

/// Reads a list the user gives (`--files-from`, a label CSV) whole, from a
/// file, a pipe or stdin, refusing a line longer than [`MAX_LIST_LINE`]:
/// `/dev/zero` or a binary file given by mistake fails at once, naming
/// `path` and the line, instead of filling memory. `what` says what the
/// list should be.
pub(crate) fn read_lines_capped(r: impl Read, path: &Path, what: &str) -> Result<Vec<u8>> {
    use std::io::BufRead;
    let mut r = std::io::BufReader::new(r);
    let mut out = Vec::new();
    let mut line = 1u64;
    loop {
        let start = out.len();
        let n = (&mut r)
            .take(MAX_LIST_LINE as u64 + 1)
            .read_until(b'\n', &mut out)
            .map_err(|e| PackError::read(path, e))?;
        if n == 0 {
            return Ok(out);
        }
        let body = out[start..].strip_suffix(b"\n").unwrap_or(&out[start..]);
        if body.len() > MAX_LIST_LINE {
            return Err(PackError::bad(
                path,
                format!(
                    "line {line} is longer than {} KiB: this is not {what} (at offset {start})",
                    MAX_LIST_LINE >> 10
                ),
            ));
        }
        line += 1;
    }
}

#[cfg(unix)]
fn path_from_bytes(b: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    PathBuf::from(OsStr::from_bytes(b))
}

#[cfg(not(unix))]
fn path_from_bytes(b: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(b).into_owned())
}

#[cfg(unix)]
fn dev_ino(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn dev_ino(_meta: &std::fs::Metadata) -> (u64, u64) {
    (u64::MAX, u64::MAX)
}

/// `(dev, ino)` of a directory, for [`Discover::skip_dir`].
pub(crate) fn dir_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| dev_ino(&m))
}

/// Whether any component of a relative path starts with a dot.
fn is_hidden_path(rel: &Path) -> bool {
    let b = rel.as_os_str().as_encoded_bytes();
    b.first() == Some(&b'.')
        || b.windows(2)
            .any(|w| w[0] == std::path::MAIN_SEPARATOR as u8 && w[1] == b'.')
}

fn file_kind(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        }
        if ft.is_socket() {
            return "a socket";
        }
        if ft.is_block_device() || ft.is_char_device() {
            return "a device";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a regular file"
    }
}

impl Discover<'_> {
    fn starts(&self) -> Result<Vec<Start>> {
        let Some(list) = self.files_from else {
            let mut v = Vec::new();
            for (i, r) in self.roots.iter().enumerate() {
                let meta = std::fs::metadata(r).map_err(|e| PackError::read(r, e))?;
                if !meta.is_dir() {
                    return Err(PackError::Option(format!(
                        "input {} is not a directory (give the directory that holds it, or use --files-from)",
                        r.display()
                    )));
                }
                v.push(Start {
                    root: i,
                    base: r.clone(),
                    start: r.clone(),
                });
            }
            return Ok(v);
        };
        if self.roots.len() > 1 {
            return Err(PackError::Option(
                "with --files-from, give at most one input directory: the base the listed paths are relative to".into(),
            ));
        }
        let cwd = std::env::current_dir().map_err(|e| PackError::io(".", e))?;
        let base = lexical_normalize(
            &cwd.join(self.roots.first().map_or(Path::new("."), |p| p.as_path())),
        );
        let meta = std::fs::metadata(&base).map_err(|e| PackError::read(&base, e))?;
        if !meta.is_dir() {
            return Err(PackError::Option(format!(
                "input {} is not a directory",
                base.display()
            )));
        }
        let mut v = Vec::new();
        for p in read_list(list, self.cancel)? {
            let abs = lexical_normalize(&base.join(&p));
            v.push(Start {
                root: 0,
                base: base.clone(),
                start: abs,
            });
        }
        Ok(v)
    }

    /// Walks every start and sorts candidates and errors into a [`Discovered`].
    pub fn run(&self) -> Result<Discovered> {
        let rules = Rules {
            filter: self.filter,
            follow_links: self.follow_links,
            skip_dir: self.skip_dir,
            cancel: self.cancel,
            list_ignored: self.list_ignored,
            spill: self.spill,
        };
        // Folders walked side by side only without symlinks followed (a
        // loop is then found within one walk, as in a single one) and for
        // input directories (a list of files gives one walk per file).
        let threads = if self.follow_links || self.files_from.is_some() {
            1
        } else {
            self.threads.max(1)
        };
        let mut d = Discovered::default();
        for s in self.starts()? {
            if !s.start.starts_with(&s.base) {
                d.bad.push(BadFound {
                    key: None,
                    error: PackError::bad(
                        &s.start,
                        format!("is not under the base directory {}", s.base.display()),
                    ),
                });
                continue;
            }
            let before = d.found();
            let mut tick = |found: u64| {
                (self.progress)(before + found);
                rules.check_cancel()
            };
            let mut found = Discovered::default();
            if threads > 1 {
                rules.walk_parallel(&s, threads, &mut found, &mut tick)?;
            } else {
                rules.walk(&s, &s.start, 0, &mut found, &mut tick)?;
            }
            d.append(found);
            rules.drain(&mut d, DRAIN_FILES)?;
        }
        (self.progress)(d.found());
        // The walk follows directory order; the first error reported must not.
        d.bad
            .sort_by(|a, b| a.error.input_path().cmp(&b.error.input_path()));
        Ok(d)
    }
}

/// What a walk does after an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Next,
    /// Leave out the folder just met.
    SkipDir,
}

/// A part of a start's walk, in walk order: entries already sorted, or a
/// folder still to walk (its path, and its depth below the start).
#[expect(
    clippy::large_enum_variant,
    reason = "a few per folder split, moved rarely"
)]
enum Chunk {
    Done(Discovered),
    Dir(PathBuf, usize),
}

/// Marks the end of one folder's walk in [`Rules::walk_parallel`] when dropped.
struct Ended<'a> {
    finished: &'a AtomicUsize,
    stop: &'a AtomicBool,
    wake: &'a crossbeam_channel::Sender<()>,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.stop.store(true, Ordering::Relaxed);
        }
        self.finished.fetch_add(1, Ordering::Release);
        let _ = self.wake.send(());
    }
}

impl Chunk {
    /// The folders still to walk among `chunks`, in order, with their depths.
    fn dirs(chunks: &[Chunk]) -> Vec<(&Path, usize)> {
        chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Dir(p, offset) => Some((p.as_path(), *offset)),
                Chunk::Done(_) => None,
            })
            .collect()
    }
}

/// `chunks` with each `Dir` replaced, in order, by what `put` makes of the
/// result of its job ([`Rules::side_by_side`]); the first error in walk
/// order is returned as itself, a job that never ran as cancelled.
fn merge<R>(
    chunks: Vec<Chunk>,
    results: Vec<Option<Result<R>>>,
    mut put: impl FnMut(R, &mut Vec<Chunk>),
) -> Result<Vec<Chunk>> {
    let mut ok = Vec::with_capacity(results.len());
    for r in results {
        match r {
            Some(Err(e)) => return Err(e),
            Some(Ok(r)) => ok.push(Some(r)),
            None => ok.push(None),
        }
    }
    let mut ok = ok.into_iter();
    let mut out = Vec::with_capacity(chunks.len());
    for c in chunks {
        match c {
            done @ Chunk::Done(_) => out.push(done),
            Chunk::Dir(..) => match ok.next().flatten() {
                Some(r) => put(r, &mut out),
                // Never ran: another job was cancelled first.
                None => return Err(PackError::Cancelled),
            },
        }
    }
    Ok(out)
}

/// Entries between two progress reports and cancellation checks.
const TICK_ENTRIES: u64 = 1024;

/// The rules of a walk, shared by the threads of a parallel one.
struct Rules<'a> {
    filter: &'a Filter,
    follow_links: bool,
    skip_dir: Option<(u64, u64)>,
    cancel: &'a AtomicBool,
    list_ignored: bool,
    spill: Option<&'a Mutex<Spill>>,
}

impl Rules<'_> {
    /// Hands the files of `d` to the spill, if any, once it holds `at_least`.
    fn drain(&self, d: &mut Discovered, at_least: usize) -> Result<()> {
        if let Some(spill) = self.spill
            && d.files.len() >= at_least
        {
            let n = d.files.len() as u64;
            spill
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .extend(d.files.drain(..))?;
            d.spilled += n;
        }
        Ok(())
    }

    fn check_cancel(&self) -> Result<()> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(PackError::Cancelled);
        }
        Ok(())
    }

    /// Walks `root`, `offset` levels below the start `s` (its own entry,
    /// met already one level up, is left out when `offset` > 0), into `d`.
    /// `tick` gets the number of files found so far every [`TICK_ENTRIES`]
    /// entries (not at the end: with `--files-from`, a walk per listed
    /// file); its error stops the walk.
    fn walk(
        &self,
        s: &Start,
        root: &Path,
        offset: usize,
        d: &mut Discovered,
        tick: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let mut it = WalkDir::new(root)
            .follow_links(self.follow_links)
            .follow_root_links(true)
            .into_iter();
        let mut seen: u64 = 0;
        while let Some(entry) = it.next() {
            seen += 1;
            if seen.is_multiple_of(TICK_ENTRIES) {
                tick(d.found())?;
            }
            if offset > 0 && entry.as_ref().is_ok_and(|e| e.depth() == 0) {
                continue;
            }
            if self.entry(s, entry, offset, d) == Step::SkipDir {
                it.skip_current_dir();
            }
            self.drain(d, DRAIN_FILES)?;
        }
        Ok(())
    }

    /// One level of `dir` (`offset` levels below the start): its files
    /// sorted into `Done` chunks, its folders left as `Dir` chunks, in walk
    /// order. `found` counts the files found so far, for `tick`.
    fn split(
        &self,
        s: &Start,
        dir: &Path,
        offset: usize,
        found: &mut u64,
        tick: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Vec<Chunk>> {
        let mut chunks = Vec::new();
        let mut cur = Discovered::default();
        let level = WalkDir::new(dir)
            .follow_links(self.follow_links)
            .follow_root_links(true)
            .max_depth(1);
        let mut seen: u64 = 0;
        // One level: a folder left out (`Step::SkipDir`) is not entered anyway.
        for entry in level {
            seen += 1;
            if seen.is_multiple_of(TICK_ENTRIES) {
                tick(*found + cur.found())?;
            }
            let sub = match &entry {
                Ok(e) if e.depth() == 0 && offset > 0 => continue,
                Ok(e) if e.depth() == 1 && e.file_type().is_dir() => Some(e.path().to_path_buf()),
                _ => None,
            };
            if self.entry(s, entry, offset, &mut cur) == Step::Next
                && let Some(sub) = sub
            {
                *found += cur.found();
                chunks.push(Chunk::Done(std::mem::take(&mut cur)));
                chunks.push(Chunk::Dir(sub, offset + 1));
            }
            self.drain(&mut cur, DRAIN_FILES)?;
        }
        *found += cur.found();
        chunks.push(Chunk::Done(cur));
        tick(*found)?;
        Ok(chunks)
    }

    /// Runs `job(k, tick)` for every `k` in `0..n` on up to `threads`
    /// threads, the calling one included, each taking the next `k` until
    /// none is left or a job failed; a job returns its result and the files
    /// it found. Only the calling thread calls `tick`, with `base` plus the
    /// files the ended jobs found (and, in its own job, those found so far):
    /// also while it waits for the other threads. The result of job `k` is
    /// at `k`, None for a job that never ran (another failed first).
    fn side_by_side<R: Send>(
        &self,
        threads: usize,
        n: usize,
        base: u64,
        tick: &mut dyn FnMut(u64) -> Result<()>,
        job: impl Fn(usize, &mut dyn FnMut(u64) -> Result<()>) -> Result<(R, u64)> + Sync,
    ) -> Result<Vec<Option<Result<R>>>> {
        let results: Vec<std::sync::Mutex<Option<Result<R>>>> =
            (0..n).map(|_| std::sync::Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let finished = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        // Files found by the jobs that ended.
        let found = AtomicU64::new(0);
        // A job's end wakes the calling thread, which reports progress.
        let (ended, wake) = crossbeam_channel::unbounded::<()>();
        let work = |tick: &mut dyn FnMut(u64) -> Result<()>| {
            while !stop.load(Ordering::Relaxed) {
                let k = next.fetch_add(1, Ordering::Relaxed);
                if k >= n {
                    return;
                }
                // Counted as ended even when it panics (the panic then
                // stops the others and reaches the caller), so that the
                // calling thread never waits for it.
                let _ended = Ended {
                    finished: &finished,
                    stop: &stop,
                    wake: &ended,
                };
                let r = job(k, tick).map(|(r, here)| {
                    found.fetch_add(here, Ordering::Relaxed);
                    r
                });
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                *results[k]
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(r);
            }
        };
        std::thread::scope(|scope| -> Result<()> {
            for _ in 1..threads.min(n) {
                // Without another thread (the system refuses one), this one runs them all.
                let spawned = std::thread::Builder::new()
                    .name("bale-walk".into())
                    .spawn_scoped(scope, || work(&mut |_| self.check_cancel()));
                if spawned.is_err() {
                    break;
                }
            }
            work(&mut |here| tick(base + found.load(Ordering::Relaxed) + here));
            // Report while the other threads end their jobs.
            while !stop.load(Ordering::Relaxed) && finished.load(Ordering::Acquire) < n {
                let _ = wake.recv_timeout(std::time::Duration::from_millis(100));
                if let Err(e) = tick(base + found.load(Ordering::Relaxed)) {
                    stop.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
            Ok(())
        })?;
        Ok(results
            .into_iter()
            .map(|m| {
                m.into_inner()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            })
            .collect())
    }

    /// Splits every folder among `chunks` one level further down
    /// ([`Rules::split`]), on up to `threads` threads, one folder each at a
    /// time; the result is in walk order. `found` counts the files found;
    /// `tick` gets it as [`Rules::side_by_side`] says.
    fn split_all(
        &self,
        s: &Start,
        chunks: Vec<Chunk>,
        threads: usize,
        found: &mut u64,
        tick: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<Vec<Chunk>> {
        let dirs = Chunk::dirs(&chunks);
        let split = self.side_by_side(threads, dirs.len(), *found, tick, |k, tick| {
            let (dir, offset) = dirs[k];
            let mut here = 0;
            let parts = self.split(s, dir, offset, &mut here, tick)?;
            Ok(((parts, here), here))
        })?;
        drop(dirs);
        merge(chunks, split, |(parts, here), out: &mut Vec<Chunk>| {
            *found += here;
            out.extend(parts);
        })
    }

    /// Walks the start `s` on `threads` threads, one folder each at a
    /// time, into `d` in the order of a walk on one thread. Only the
    /// calling thread calls `tick`: with the files found on all of them.
    fn walk_parallel(
        &self,
        s: &Start,
        threads: usize,
        d: &mut Discovered,
        tick: &mut dyn FnMut(u64) -> Result<()>,
    ) -> Result<()> {
        let mut early: u64 = 0;
        let mut chunks = self.split(s, &s.start, 0, &mut early, tick)?;
        // A tree of one folder (`train/`), or of a few, is split one level
        // further down, its folders listed side by side.
        for _ in 0..2 {
            let dirs = chunks
                .iter()
                .filter(|c| matches!(c, Chunk::Dir(..)))
                .count();
            if dirs == 0 || dirs >= 4 * threads {
                break;
            }
            chunks = self.split_all(s, chunks, threads, &mut early, tick)?;
            tick(early)?;
        }
        let dirs = Chunk::dirs(&chunks);
        let walked = self.side_by_side(threads, dirs.len(), early, tick, |k, tick| {
            let (dir, offset) = dirs[k];
            let mut part = Discovered::default();
            self.walk(s, dir, offset, &mut part, tick)?;
            // Held until the folders before it are merged: spilled now.
            self.drain(&mut part, 1)?;
            let here = part.found();
            Ok((part, here))
        })?;
        drop(dirs);
        for c in merge(chunks, walked, |part, out: &mut Vec<Chunk>| {
            out.push(Chunk::Done(part));
        })? {
            if let Chunk::Done(part) = c {
                d.append(part);
            }
        }
        Ok(())
    }

    /// Sorts one entry of a walk into `d`: a candidate, an ignored entry or
    /// a bad input; `offset` is the depth of the walk's root below the start.
    fn entry(
        &self,
        s: &Start,
        entry: walkdir::Result<walkdir::DirEntry>,
        offset: usize,
        d: &mut Discovered,
    ) -> Step {
        let ent = match entry {
            Ok(e) => e,
            Err(e) => {
                let path = e.path().unwrap_or(&s.start).to_path_buf();
                let key = key_of(&path, &s.base);
                let error = if let Some(anc) = e.loop_ancestor() {
                    PackError::bad(&path, format!("symlink loop back to {}", anc.display()))
                } else {
                    let io = e
                        .into_io_error()
                        .unwrap_or_else(|| std::io::Error::other("walk error"));
                    PackError::read(&path, io)
                };
                d.bad.push(BadFound { key, error });
                return Step::Next;
            }
        };
        let path = ent.path();
        let rel = path.strip_prefix(&s.base).unwrap_or(path);
        let depth = ent.depth() + offset;
        let ft = ent.file_type();
        if ft.is_dir() {
            if depth == 0 && path == s.base {
                return Step::Next;
            }
            if let Some(skip) = self.skip_dir
                && ent.metadata().is_ok_and(|m| dev_ino(&m) == skip)
            {
                return Step::SkipDir;
            }
            if ent.file_name().as_encoded_bytes().first() == Some(&b'.') {
                d.ignored.hidden.add(path);
                return Step::SkipDir;
            }
            if self.filter.excluded(rel) {
                d.ignored.excluded.add(path);
                return Step::SkipDir;
            }
            return Step::Next;
        }
        if self.filter.excluded(rel) {
            d.ignored.excluded.add(path);
            return Step::Next;
        }
        if is_hidden_path(rel) {
            d.ignored.hidden.add(path);
            if self.list_ignored && ft.is_file() {
                d.ignored_files.push(path.to_path_buf());
            }
            return Step::Next;
        }
        if ft.is_symlink() {
            // Only reached without follow_links (with it, file_type is the target's).
            d.ignored.symlinks.add(path);
            return Step::Next;
        }
        if !self.filter.included(rel) {
            d.ignored.excluded.add(path);
            return Step::Next;
        }
        // A name with no extension is ignored whatever its bytes (a
        // replacement character adds no dot); one with an extension would
        // be a sample, whose key must be UTF-8.
        let lossy = rel.to_string_lossy();
        let rel_str = if std::path::MAIN_SEPARATOR == '/' {
            lossy.into_owned()
        } else {
            lossy.replace(std::path::MAIN_SEPARATOR, "/")
        };
        let split = bale_format::split_member_name(&rel_str).filter(|(_, ext)| !ext.is_empty());
        let Some((key, ext)) = split else {
            d.ignored.no_extension.add(path);
            if self.list_ignored && ft.is_file() {
                d.ignored_files.push(path.to_path_buf());
            }
            return Step::Next;
        };
        if rel.to_str().is_none() {
            d.bad.push(BadFound {
                key: None,
                error: PackError::bad(path, "the file name is not valid UTF-8"),
            });
            return Step::Next;
        }
        if !ft.is_file() {
            d.bad.push(BadFound {
                key: Some(key.to_owned()),
                error: PackError::bad(path, format!("{}, not a regular file", file_kind(&ft))),
            });
            return Step::Next;
        }
        let why = match (
            bale_format::validate_key(key),
            bale_format::validate_written_ext(ext),
        ) {
            (Err(e), _) => Some(format!(
                "its sample key {key:?} is not valid: {}",
                reason(&e)
            )),
            (_, Err(e)) => Some(format!(
                "its extension {ext:?} (everything after the first dot of the file name) is not valid: {}",
                reason(&e)
            )),
            _ if ext == "cls" => bad_label(path),
            _ => None,
        };
        if let Some(why) = why {
            d.bad.push(BadFound {
                key: None,
                error: PackError::bad(path, why),
            });
            return Step::Next;
        }
        let dot = key.len();
        d.files.push(Found {
            root: s.root,
            path: ent.into_path(),
            rel: rel_str,
            dot,
        });
        Step::Next
    }
}

/// Why the `.cls` file `path` holds no label a reader can parse
/// ([`bale_format::parse_label`]), or `None` when it holds one.
fn bad_label(path: &Path) -> Option<String> {
    let max = bale_format::MAX_LABEL_BYTES;
    let mut data = Vec::new();
    let read = bale_format::files::open_regular(path)
        .map_err(|e| e.to_string())
        .and_then(|f| {
            f.take(max + 1)
                .read_to_end(&mut data)
                .map_err(|e| e.to_string())
        });
    match read {
        // Read errors are the reader threads' to report, with the others.
        Err(_) => None,
        Ok(_) if data.len() as u64 > max => Some(format!(
            "it is a .cls file of more than {max} bytes, not a decimal integer label"
        )),
        Ok(_) if bale_format::parse_label(&data).is_none() => Some(format!(
            "it is a .cls file that holds {:?}, not a decimal integer label (such as 3)",
            String::from_utf8_lossy(&data)
        )),
        Ok(_) => None,
    }
}

/// Why a name check failed, without the name (the caller says it).
fn reason(e: &bale_format::FormatError) -> String {
    match e {
        bale_format::FormatError::InvalidName { reason, .. } => (*reason).to_owned(),
        other => other.to_string(),
    }
}

fn key_of(path: &Path, base: &Path) -> Option<String> {
    let rel = path.strip_prefix(base).ok()?.to_str()?;
    let (key, ext) = bale_format::split_member_name(rel)?;
    (!ext.is_empty() && bale_format::validate_key(key).is_ok()).then(|| key.to_owned())
}

/// A file of a tree, as `bale pack` takes it with its default rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeFile {
    /// The path to open.
    pub path: PathBuf,
    /// Its sample's key (the path relative to the root, up to the first dot of the base name).
    pub key: String,
    /// Its extension.
    pub ext: String,
    /// Its size in bytes when walked.
    pub size: u64,
}

/// A file tree as `bale pack` sees it with its default rules: hidden files
/// and directories skipped, symlinks not followed, files without an
/// extension belonging to no sample. `bale stat DIR` and `bale bench DIR`
/// use it, so they count the samples a pack would write.
#[derive(Debug, Clone, Default)]
pub struct Tree {
    /// The files that would be packed, sorted by key then extension: the
    /// files of one sample are adjacent.
    pub files: Vec<TreeFile>,
    /// Entries ignored by rule.
    pub ignored: Ignored,
    /// Entries a pack would refuse: not regular files (FIFOs, sockets,
    /// devices), names that are not valid keys, unreadable entries.
    pub refused: u64,
    /// Regular files ignored for having no extension or a hidden name, with
    /// their sizes (files in hidden directories are not walked).
    pub ignored_files: Vec<(PathBuf, u64)>,
}

impl Tree {
    /// Index in [`Tree::files`] of each sample's first file, then `files.len()`.
    pub fn sample_starts(&self) -> Vec<usize> {
        let mut starts = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            if i == 0 || self.files[i - 1].key != f.key {
                starts.push(i);
            }
        }
        starts.push(self.files.len());
        starts
    }
}

/// Walks `root` as `bale pack root` would (default rules) and stats each
/// file it would pack.
///
/// # Errors
/// `root` is not a directory or cannot be read; a file vanishing between
/// the walk and its stat.
pub fn walk_tree(root: &Path) -> Result<Tree> {
    let never = AtomicBool::new(false);
    let filter = Filter::default();
    let roots = [root.to_path_buf()];
    let found = Discover {
        roots: &roots,
        files_from: None,
        filter: &filter,
        follow_links: false,
        skip_dir: None,
        cancel: &never,
        progress: &|_| {},
        list_ignored: true,
        threads: std::thread::available_parallelism().map_or(1, usize::from),
        spill: None,
    }
    .run()?;
    let mut files = found
        .files
        .into_iter()
        .map(|f| {
            let size = std::fs::symlink_metadata(&f.path)
                .map_err(|e| PackError::read(&f.path, e))?
                .len();
            Ok(TreeFile {
                key: f.key().to_owned(),
                ext: f.ext().to_owned(),
                path: f.path,
                size,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    files.sort_by(|a, b| (&a.key, &a.ext).cmp(&(&b.key, &b.ext)));
    let ignored_files = found
        .ignored_files
        .into_iter()
        .filter_map(|p| {
            let size = std::fs::symlink_metadata(&p).ok()?.len();
            Some((p, size))
        })
        .collect();
    Ok(Tree {
        files,
        ignored: found.ignored,
        refused: found.bad.len() as u64,
        ignored_files,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(p: &Path) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"x").unwrap();
    }

    /// A tree with one of everything a walk sorts: candidates at every
    /// depth, files at the root, hidden, excluded and skipped folders,
    /// symlinks, a FIFO, bad and non-UTF-8 names, more files without an
    /// extension than [`IGNORED_EXAMPLES`] keeps, and a folder of one folder.
    fn tricky_tree(root: &Path) {
        touch(&root.join("z.txt"));
        touch(&root.join(".hidden.txt"));
        touch(&root.join(".hdir/a.txt"));
        touch(&root.join("excl/a.txt"));
        touch(&root.join("out/shard.tar"));
        std::fs::create_dir_all(root.join("empty")).unwrap();
        for c in 0..12 {
            for f in 0..7 {
                touch(&root.join(format!("c{c:02}/f{f}.png")));
            }
            touch(&root.join(format!("c{c:02}/noext{c}")));
        }
        touch(&root.join("c03/sub/deeper/x.png"));
        touch(&root.join("c03/sub/deeper/x.json"));
        touch(&root.join("one/two/three/a.jpg"));
        touch(&root.join("one/two/b.jpg"));
        touch(&root.join("c05/bad\u{1}name.png"));
        std::os::unix::fs::symlink(root.join("c00/f0.png"), root.join("c04/link.png")).unwrap();
        std::os::unix::fs::symlink(root.join("c00"), root.join("c04/dirlink")).unwrap();
        let fifo =
            std::ffi::CString::new(root.join("c02/fifo.png").into_os_string().into_vec()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        use std::os::unix::ffi::OsStringExt;
        let bad = std::ffi::OsString::from_vec(b"c06/\xff.png".to_vec());
        touch(&root.join(bad));
    }

    fn discover(root: &Path, threads: usize, exclude: &[String]) -> String {
        let filter = Filter::new(&[], exclude).unwrap();
        let never = AtomicBool::new(false);
        let roots = [root.to_path_buf()];
        let d = Discover {
            roots: &roots,
            files_from: None,
            filter: &filter,
            follow_links: false,
            skip_dir: dir_id(&root.join("out")),
            cancel: &never,
            progress: &|_| {},
            list_ignored: true,
            threads,
            spill: None,
        }
        .run()
        .unwrap();
        format!(
            "{:#?}\n{:#?}\n{:#?}\n{:#?}",
            d.files, d.bad, d.ignored, d.ignored_files
        )
    }

    /// Folders walked side by side give what one walk gives, in its order.
    #[test]
    fn a_parallel_walk_finds_what_one_walk_finds_in_its_order() {
        let tmp = tempfile::tempdir().unwrap();
        tricky_tree(tmp.path());
        let exclude = ["excl".to_owned()];
        let one = discover(tmp.path(), 1, &exclude);
        assert!(one.contains("c03/sub/deeper/x"), "{one}");
        assert!(one.contains("a FIFO"), "{one}");
        assert!(one.contains("not valid UTF-8"), "{one}");
        assert!(one.contains("count: 12"), "the no-extension files: {one}");
        assert!(!one.contains("shard.tar"), "the skipped folder: {one}");
        for threads in [2, 3, 8] {
            assert_eq!(
                discover(tmp.path(), threads, &exclude),
                one,
                "{threads} threads"
            );
        }
        // A tree of one folder is split further down.
        let nested = tmp.path().join("nested");
        for c in 0..5 {
            touch(&nested.join(format!("train/c{c}/a.png")));
        }
        touch(&nested.join("train/readme.md"));
        let one = discover(&nested, 1, &[]);
        assert_eq!(discover(&nested, 2, &[]), one);
    }

    /// A cancel asked mid-walk (here by the progress callback) stops every
    /// thread: nine folders are walked side by side (not split further),
    /// each past the entries between two progress reports.
    /// A walk that hands its files to a spill finds the files a walk
    /// that keeps them finds, on one thread or several.
    #[test]
    fn a_spilled_walk_finds_what_a_kept_one_finds() {
        let tmp = tempfile::tempdir().unwrap();
        // Folders three deep: split twice, then walked side by side.
        for c in 0..6 {
            for i in 0..(3 + c * 2) {
                touch(&tmp.path().join(format!("c{c}/s{}/t/{i}.jpg", i % 2)));
            }
            touch(&tmp.path().join(format!("c{c}/{c}.png")));
        }
        touch(&tmp.path().join("top.jpg"));
        let filter = Filter::default();
        let never = AtomicBool::new(false);
        let roots = [tmp.path().to_path_buf()];
        for threads in [1, 4] {
            let walk = |spill: Option<&Mutex<Spill>>| {
                Discover {
                    roots: &roots,
                    files_from: None,
                    filter: &filter,
                    follow_links: false,
                    skip_dir: None,
                    cancel: &never,
                    progress: &|_| {},
                    list_ignored: false,
                    threads,
                    spill,
                }
                .run()
                .unwrap()
            };
            let mut kept: Vec<String> = walk(None).files.into_iter().map(|f| f.rel).collect();
            kept.sort();
            let out = tempfile::tempdir().unwrap();
            let spill = Mutex::new(Spill::new(out.path(), 5));
            let d = walk(Some(&spill));
            assert_eq!(d.found(), kept.len() as u64);
            // Each folder walked side by side hands its files over at its end.
            assert_eq!(d.spilled > 0, threads > 1);
            let mut spill = spill.into_inner().unwrap();
            spill.extend(d.files).unwrap();
            let mut got: Vec<String> = spill.merged().unwrap().map(|f| f.unwrap().rel).collect();
            got.sort();
            assert_eq!(got, kept, "{threads} threads");
        }
    }

    #[test]
    fn a_parallel_walk_stops_when_cancelled() {
        let tmp = tempfile::tempdir().unwrap();
        for c in 0..9 {
            for f in 0..(TICK_ENTRIES + 100) {
                touch(&tmp.path().join(format!("c{c}/{f}.png")));
            }
        }
        let filter = Filter::default();
        let cancel = AtomicBool::new(false);
        let calls = AtomicU64::new(0);
        let roots = [tmp.path().to_path_buf()];
        for threads in [1, 2] {
            cancel.store(false, Ordering::Relaxed);
            let progress = |_: u64| {
                calls.fetch_add(1, Ordering::Relaxed);
                cancel.store(true, Ordering::Relaxed);
            };
            let r = Discover {
                roots: &roots,
                files_from: None,
                filter: &filter,
                follow_links: false,
                skip_dir: None,
                cancel: &cancel,
                progress: &progress,
                list_ignored: false,
                threads,
                spill: None,
            }
            .run();
            assert!(matches!(r, Err(PackError::Cancelled)), "{threads} threads");
        }
        assert!(calls.load(Ordering::Relaxed) >= 2);
    }

    #[test]
    fn folders_split_on_threads_come_back_in_walk_order_or_cancelled() {
        let tmp = tempfile::tempdir().unwrap();
        for c in 0..5 {
            for f in 0..(TICK_ENTRIES + 10) {
                touch(&tmp.path().join(format!("c{c}/{f:05}.png")));
            }
            touch(&tmp.path().join(format!("c{c}/sub/deep.png")));
        }
        touch(&tmp.path().join("top.png"));
        let filter = Filter::default();
        let cancel = AtomicBool::new(false);
        let rules = Rules {
            filter: &filter,
            follow_links: false,
            skip_dir: None,
            cancel: &cancel,
            list_ignored: false,
            spill: None,
        };
        let s = Start {
            root: 0,
            base: tmp.path().to_path_buf(),
            start: tmp.path().to_path_buf(),
        };
        let top = |early: &mut u64| rules.split(&s, &s.start, 0, early, &mut |_| Ok(()));
        let files = |chunks: &[Chunk]| -> Vec<String> {
            chunks
                .iter()
                .flat_map(|c| match c {
                    Chunk::Done(d) => d.files.iter().map(|f| f.rel.clone()).collect(),
                    Chunk::Dir(p, offset) => vec![format!("dir {} {offset}", p.display())],
                })
                .collect()
        };
        let mut early = 0;
        let mut serial = Vec::new();
        for c in top(&mut early).unwrap() {
            match c {
                Chunk::Dir(p, offset) => serial.extend(
                    rules
                        .split(&s, &p, offset, &mut early, &mut |_| Ok(()))
                        .unwrap(),
                ),
                done => serial.push(done),
            }
        }
        let want = (files(&serial), early);
        assert_eq!(want.1, 5 * (TICK_ENTRIES + 10) + 1);
        for threads in [1, 2, 3, 8] {
            let mut found = 0;
            let chunks = top(&mut found).unwrap();
            // Progress reported while the folders are listed, not only after.
            let mut reports = Vec::new();
            let got = rules
                .split_all(&s, chunks, threads, &mut found, &mut |n| {
                    reports.push(n);
                    Ok(())
                })
                .unwrap();
            assert_eq!((files(&got), found), want, "{threads} threads");
            assert!(
                reports.iter().any(|&n| n > TICK_ENTRIES),
                "{threads} threads: {reports:?}"
            );
            assert!(reports.iter().all(|&n| n <= want.1));
            if threads == 1 {
                assert_eq!(reports.last(), Some(&want.1));
            }
        }
        // A failing progress report stops the listing with its error.
        let mut found = 0;
        let chunks = top(&mut found).unwrap();
        let r = rules.split_all(&s, chunks, 2, &mut found, &mut |_| {
            Err(PackError::Cancelled)
        });
        assert!(matches!(r, Err(PackError::Cancelled)));
        cancel.store(true, Ordering::Relaxed);
        for threads in [1, 2] {
            let mut found = 0;
            let chunks = top(&mut found).unwrap();
            let r = rules.split_all(&s, chunks, threads, &mut found, &mut |_| {
                rules.check_cancel()
            });
            assert!(matches!(r, Err(PackError::Cancelled)), "{threads} threads");
        }
    }
}
