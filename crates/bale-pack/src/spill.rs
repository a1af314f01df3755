//! The listing of a large walk on disk: found files in sorted runs, merged
//! k-way back into one sorted stream.
//!
//! Memory holds one run being filled and, while merging, one record per
//! run; the runs live in a temporary folder (in the output directory,
//! under bale's temporary prefix) that is removed when the [`Spill`] is
//! dropped, on every exit path. Records are compact: the root's number, the
//! dot's position, then the name and the path, each behind its length.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{PackError, Result};

/// A candidate member: a regular file with a valid key and extension.
#[derive(Debug, Clone)]
pub(crate) struct Found {
    /// Index of the root (input directory) it was found under.
    pub root: usize,
    /// The path to open.
    pub path: PathBuf,
    /// The name relative to the root, `/`-separated: `key.ext`.
    pub rel: String,
    /// Byte position of the dot that starts the extension in `rel`.
    pub dot: usize,
}

impl Found {
    /// A file named `rel` under root `root` (at `r<root>/<rel>`), for tests.
    #[cfg(test)]
    pub(crate) fn named(root: usize, rel: &str) -> Found {
        let (key, _) = bale_format::split_member_name(rel).unwrap();
        Found {
            root,
            path: PathBuf::from(format!("r{root}/{rel}")),
            rel: rel.to_owned(),
            dot: key.len(),
        }
    }

    pub fn key(&self) -> &str {
        &self.rel[..self.dot]
    }
    pub fn ext(&self) -> &str {
        &self.rel[self.dot + 1..]
    }
}

/// Found files held in memory before a run is sorted and written.
pub(crate) const DEFAULT_RUN: usize = 1 << 18;

/// The order of the listing: by key, extension, root, then path.
pub(crate) fn order(a: &Found, b: &Found) -> Ordering {
    (a.key(), a.ext(), a.root, &a.path).cmp(&(b.key(), b.ext(), b.root, &b.path))
}

/// Sorted runs of found files in a temporary folder (made with the first
/// run), removed when dropped.
pub(crate) struct Spill {
    parent: PathBuf,
    dir: Option<tempfile::TempDir>,
    runs: Vec<PathBuf>,
    buf: Vec<Found>,
    run_len: usize,
    count: u64,
}

impl std::fmt::Debug for Spill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spill")
            .field("dir", &self.dir.as_ref().map(tempfile::TempDir::path))
            .field("runs", &self.runs.len())
            .field("count", &self.count)
            .finish_non_exhaustive()
    }
}

impl Spill {
    /// A spill into a temporary folder in `parent`, writing a run every
    /// `run_len` files (at least 1).
    pub fn new(parent: &Path, run_len: usize) -> Self {
        Spill {
            parent: parent.to_path_buf(),
            dir: None,
            runs: Vec::new(),
            buf: Vec::new(),
            run_len: run_len.max(1),
            count: 0,
        }
    }

    /// The temporary folder, once a run is written.
    #[cfg(test)]
    pub fn path(&self) -> Option<&Path> {
        self.dir.as_ref().map(tempfile::TempDir::path)
    }

    /// Whether a run was written: the files are on disk.
    pub fn has_runs(&self) -> bool {
        !self.runs.is_empty()
    }

    /// The files pushed, when no run was written (else none).
    pub fn take_buffered(&mut self) -> Vec<Found> {
        if self.has_runs() {
            return Vec::new();
        }
        self.count = 0;
        std::mem::take(&mut self.buf)
    }

    /// Files pushed so far.
    #[cfg(test)]
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Adds a file; a full buffer is sorted and written as a run.
    pub fn push(&mut self, f: Found) -> Result<()> {
        self.buf.push(f);
        self.count += 1;
        if self.buf.len() >= self.run_len {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds many files.
    pub fn extend(&mut self, files: impl IntoIterator<Item = Found>) -> Result<()> {
        for f in files {
            self.push(f)?;
        }
        Ok(())
    }

    /// Sorts the buffer and writes it as a run (on the calling thread: a
    /// walker's, one of several).
    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.buf.sort_unstable_by(order);
        let dir = match &self.dir {
            Some(d) => d.path(),
            None => {
                let prefix = format!(
                    "{}{}-spill",
                    bale_format::atomic::TEMP_PREFIX,
                    std::process::id()
                );
                let made = tempfile::Builder::new()
                    .prefix(&prefix)
                    .tempdir_in(&self.parent)
                    .map_err(|e| PackError::io(&self.parent, e))?;
                self.dir.insert(made).path()
            }
        };
        let path = dir.join(format!("run-{:06}", self.runs.len()));
        let file = File::create(&path).map_err(|e| PackError::io(&path, e))?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        for f in self.buf.drain(..) {
            write_record(&mut w, &f).map_err(|e| PackError::io(&path, e))?;
        }
        w.flush().map_err(|e| PackError::io(&path, e))?;
        self.runs.push(path);
        Ok(())
    }

    /// Writes what is buffered, then merges every run: the files in
    /// [`order`]. May be called again for another pass.
    pub fn merged(&mut self) -> Result<Merged> {
        self.flush()?;
        let mut readers = Vec::with_capacity(self.runs.len());
        let mut heap = BinaryHeap::with_capacity(self.runs.len());
        for (i, path) in self.runs.iter().enumerate() {
            let file = File::open(path).map_err(|e| PackError::io(path, e))?;
            let mut r = BufReader::with_capacity(1 << 16, file);
            if let Some(f) = read_record(&mut r, path)? {
                heap.push(Reverse(Head { f, run: i }));
            }
            readers.push((r, path.clone()));
        }
        Ok(Merged { readers, heap })
    }
}

/// The next file of one run.
struct Head {
    f: Found,
    run: usize,
}

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        order(&self.f, &other.f).then(self.run.cmp(&other.run))
    }
}

/// The runs of a [`Spill`] merged: every file, in [`order`].
pub(crate) struct Merged {
    readers: Vec<(BufReader<File>, PathBuf)>,
    heap: BinaryHeap<Reverse<Head>>,
}

impl Iterator for Merged {
    type Item = Result<Found>;

    fn next(&mut self) -> Option<Result<Found>> {
        let Reverse(Head { f, run }) = self.heap.pop()?;
        let (r, path) = &mut self.readers[run];
        match read_record(r, path) {
            Ok(Some(next)) => self.heap.push(Reverse(Head { f: next, run })),
            Ok(None) => {}
            Err(e) => {
                self.heap.clear();
                return Some(Err(e));
            }
        }
        Some(Ok(f))
    }
}

fn put_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    w.write_all(&(b.len() as u32).to_le_bytes())?;
    w.write_all(b)
}

fn write_record(w: &mut impl Write, f: &Found) -> std::io::Result<()> {
    w.write_all(&(f.root as u32).to_le_bytes())?;
    w.write_all(&(f.dot as u32).to_le_bytes())?;
    put_bytes(w, f.rel.as_bytes())?;
    put_bytes(w, f.path.as_os_str().as_encoded_bytes())
}

/// Reads the next record of a run, `None` at its end.
fn read_record(r: &mut impl Read, path: &Path) -> Result<Option<Found>> {
    let bad = |what: &str| {
        PackError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned()),
        )
    };
    let mut head = [0u8; 8];
    match r.read(&mut head[..1]).map_err(|e| PackError::io(path, e))? {
        0 => return Ok(None),
        _ => r
            .read_exact(&mut head[1..])
            .map_err(|e| PackError::io(path, e))?,
    }
    let root = u32::from_le_bytes(head[..4].try_into().unwrap_or_default()) as usize;
    let dot = u32::from_le_bytes(head[4..].try_into().unwrap_or_default()) as usize;
    let mut get = || -> Result<Vec<u8>> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).map_err(|e| PackError::io(path, e))?;
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        r.read_exact(&mut b).map_err(|e| PackError::io(path, e))?;
        Ok(b)
    };
    let rel = String::from_utf8(get()?).map_err(|_| bad("a name that is not UTF-8"))?;
    let raw = get()?;
    if dot >= rel.len() || !rel.is_char_boundary(dot) {
        return Err(bad("a record whose extension is not in its name"));
    }
    #[cfg(unix)]
    let p = {
        use std::os::unix::ffi::OsStringExt;
        PathBuf::from(std::ffi::OsString::from_vec(raw))
    };
    #[cfg(not(unix))]
    let p = PathBuf::from(String::from_utf8(raw).map_err(|_| bad("a path that is not UTF-8"))?);
    Ok(Some(Found {
        root,
        path: p,
        rel,
        dot,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn found(root: usize, rel: &str) -> Found {
        Found::named(root, rel)
    }

    fn names(files: &[Found]) -> Vec<(usize, String, PathBuf)> {
        files
            .iter()
            .map(|f| (f.root, f.rel.clone(), f.path.clone()))
            .collect()
    }

    fn sorted(mut files: Vec<Found>) -> Vec<Found> {
        files.sort_by(order);
        files
    }

    fn spilled(files: &[Found], run: usize) -> (Vec<Found>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), run);
        s.extend(files.iter().cloned()).unwrap();
        assert_eq!(s.count(), files.len() as u64);
        let out: Vec<Found> = s.merged().unwrap().map(Result::unwrap).collect();
        // A second pass gives the same files.
        let again: Vec<Found> = s.merged().unwrap().map(Result::unwrap).collect();
        assert_eq!(names(&out), names(&again));
        (out, s.runs.len())
    }

    /// Names that sort unlike their bytes' order when cut at the dot: a
    /// key that is a prefix of another, several members, several roots.
    fn file() -> impl Strategy<Value = Found> {
        (
            0usize..3,
            prop::sample::select(vec!["a", "a/b", "a.b", "ab", "a/b/c", "é", "b"]),
            0u8..4,
            prop::sample::select(vec!["jpg", "json", "cls", "seg.png", "jp"]),
        )
            .prop_map(|(root, dir, n, ext)| found(root, &format!("{dir}/{n}.{ext}")))
    }

    proptest! {
        #[test]
        fn merged_runs_give_the_sorted_listing(
            files in prop::collection::vec(file(), 0..120),
            run in 1usize..40,
        ) {
            let (out, runs) = spilled(&files, run);
            prop_assert_eq!(names(&out), names(&sorted(files.clone())));
            prop_assert_eq!(runs, files.len().div_ceil(run));
        }
    }

    /// A sample as compared: its key and members, or the error grouping gave.
    fn shown(
        r: Result<Vec<crate::plan::PlannedSample>>,
    ) -> std::result::Result<Vec<String>, String> {
        r.map(|v| {
            v.iter()
                .map(|s| {
                    let m: Vec<String> = s
                        .members
                        .iter()
                        .map(|m| format!("{}@{}:{}", m.ext, m.root, m.path.display()))
                        .collect();
                    format!("{} [{}]", s.key, m.join(" "))
                })
                .collect()
        })
        .map_err(|e| e.to_string())
    }

    proptest! {
        /// Grouping the merged runs gives what grouping in memory gives:
        /// the same samples, or the same duplicate named.
        #[test]
        fn grouped_runs_give_the_samples_of_the_grouped_list(
            files in prop::collection::vec(file(), 0..80),
            run in 1usize..30,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let mut s = Spill::new(dir.path(), run);
            s.extend(files.iter().cloned()).unwrap();
            let streamed = crate::plan::Grouped::new(s.merged().unwrap()).collect();
            prop_assert_eq!(shown(streamed), shown(crate::plan::group(files)));
        }
    }

    #[test]
    fn runs_of_one_and_of_all_agree() {
        let files: Vec<Found> = (0..50)
            .map(|i| found(i % 2, &format!("c{}/{:03}.jpg", i % 7, (i * 37) % 50)))
            .collect();
        let want = names(&sorted(files.clone()));
        for run in [1, 2, 49, 50, 51, 1000] {
            assert_eq!(names(&spilled(&files, run).0), want, "run of {run}");
        }
    }

    #[test]
    fn fewer_files_than_a_run_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 4);
        s.extend((0..3).map(|i| found(0, &format!("{i}.jpg"))))
            .unwrap();
        assert!(!s.has_runs() && s.path().is_none());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert_eq!(s.take_buffered().len(), 3);
        // A fourth file makes a run: the files are on disk, none comes back.
        let mut s = Spill::new(dir.path(), 4);
        s.extend((0..4).map(|i| found(0, &format!("{i}.jpg"))))
            .unwrap();
        assert!(s.has_runs());
        assert!(s.take_buffered().is_empty());
        assert_eq!(s.merged().unwrap().count(), 4);
    }

    #[test]
    fn the_folder_goes_with_the_spill() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 2);
        s.extend((0..5).map(|i| found(0, &format!("{i}.jpg"))))
            .unwrap();
        let path = s.path().unwrap().to_path_buf();
        assert!(path.exists());
        let name = path.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(
            bale_format::atomic::temp_name_rest(&name).is_some(),
            "{name}"
        );
        drop(s);
        assert!(!path.exists());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_damaged_run_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Spill::new(dir.path(), 2);
        s.extend((0..4).map(|i| found(0, &format!("{i}.jpg"))))
            .unwrap();
        let run = s.runs[1].clone();
        let len = std::fs::metadata(&run).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&run)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let err = s
            .merged()
            .unwrap()
            .find_map(Result::err)
            .expect("a truncated run fails");
        assert!(err.to_string().contains("run-000001"), "{err}");
    }
}
