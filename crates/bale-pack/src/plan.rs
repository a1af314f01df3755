//! Grouping files into samples, labelling them, and sizing them.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use rayon::prelude::*;

use crate::discover::{Found, Ignored};
use crate::error::{PackError, Result};
use crate::options::LabelMode;

/// One member of a planned sample.
#[derive(Debug)]
pub(crate) struct Member {
    pub ext: String,
    pub path: PathBuf,
    /// Size when listed (filled by [`stat_all`]).
    pub size: u64,
    /// Index of the input directory it was found under.
    pub root: usize,
}

impl Member {
    fn of(ext: &str, root: usize, path: PathBuf) -> Self {
        Member {
            ext: ext.to_owned(),
            path,
            size: 0,
            root,
        }
    }
}

/// The fingerprint of `samples`, the whole listing in planned order.
pub(crate) fn listing(samples: &[PlannedSample]) -> crate::options::Listing {
    let mut h = ListingHash::default();
    for s in samples {
        h.add(s);
    }
    h.finish()
}

/// [`listing`] taken one sample at a time.
#[derive(Default)]
pub(crate) struct ListingHash {
    h: bale_format::hash::Xxh3,
    samples: u64,
}

impl ListingHash {
    pub fn add(&mut self, s: &PlannedSample) {
        let h = &mut self.h;
        // Lengths first, so no two listings hash the same bytes.
        h.update(&(s.key.len() as u64).to_le_bytes());
        h.update(s.key.as_bytes());
        h.update(&(s.members.len() as u64).to_le_bytes());
        for m in &s.members {
            h.update(&(m.ext.len() as u64).to_le_bytes());
            h.update(m.ext.as_bytes());
        }
        h.update(&s.label.map_or(u64::MAX, u64::from).to_le_bytes());
        self.samples += 1;
    }

    pub fn finish(&self) -> crate::options::Listing {
        crate::options::Listing {
            samples: self.samples,
            xxh3: bale_format::hex64(self.h.digest()),
        }
    }
}

/// A planned sample.
#[derive(Debug)]
pub(crate) struct PlannedSample {
    pub key: String,
    /// Sorted by extension, byte-wise.
    pub members: Vec<Member>,
    pub label: Option<u32>,
    /// A problem already known: the sample is skipped or fails when its turn comes.
    pub fail: Option<PackError>,
}

impl PlannedSample {
    pub fn first_path(&self) -> &Path {
        self.members
            .first()
            .map_or(Path::new(""), |m| m.path.as_path())
    }
}

/// Groups candidates into samples sorted by key, members sorted by extension.
///
/// # Errors
/// [`PackError::DuplicateMember`] naming both files when two different files
/// map to one key and extension (the same file listed twice is kept once).
/// Sorts on the current rayon pool.
pub(crate) fn group(mut files: Vec<Found>) -> Result<Vec<PlannedSample>> {
    files.par_sort_unstable_by(crate::spill::order);
    Grouped::new(files.into_iter().map(Ok)).collect()
}

/// Files sorted in [`crate::spill::order`] grouped into samples, one at a
/// time: what [`group`] returns, as a stream (its errors, and those of the
/// files, end it).
pub(crate) struct Grouped<I> {
    files: I,
    cur: Option<PlannedSample>,
    done: bool,
}

impl<I: Iterator<Item = Result<Found>>> Grouped<I> {
    pub fn new(files: I) -> Self {
        Grouped {
            files,
            cur: None,
            done: false,
        }
    }

    /// Adds `f` to the current sample, or returns the sample it ends.
    fn add(&mut self, f: Found) -> Result<Option<PlannedSample>> {
        if let Some(s) = &mut self.cur
            && s.key == f.key()
        {
            if let Some(m) = s.members.last()
                && m.ext == f.ext()
            {
                // Same key and extension: the same file listed twice, or two files.
                if m.root == f.root && m.path == f.path {
                    return Ok(None);
                }
                return Err(PackError::DuplicateMember {
                    key: f.key().to_owned(),
                    ext: f.ext().to_owned(),
                    first: m.path.clone(),
                    second: f.path,
                });
            }
            s.members
                .push(Member::of(&f.rel[f.dot + 1..], f.root, f.path));
            return Ok(None);
        }
        let Found {
            root,
            path,
            mut rel,
            dot,
        } = f;
        let member = Member::of(&rel[dot + 1..], root, path);
        // The key takes over the name's allocation.
        rel.truncate(dot);
        Ok(self.cur.replace(PlannedSample {
            key: rel,
            members: vec![member],
            label: None,
            fail: None,
        }))
    }
}

impl<I: Iterator<Item = Result<Found>>> Iterator for Grouped<I> {
    type Item = Result<PlannedSample>;

    fn next(&mut self) -> Option<Result<PlannedSample>> {
        if self.done {
            return None;
        }
        // One pass (each file's first read is a cache miss): a file listed
        // twice is kept once, two files of one key and extension are an error.
        loop {
            let r = match self.files.next() {
                Some(Ok(f)) => self.add(f),
                Some(Err(e)) => Err(e),
                None => {
                    self.done = true;
                    return self.cur.take().map(Ok);
                }
            };
            match r {
                Ok(Some(s)) => return Some(Ok(s)),
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}

/// What labelling decided.
#[derive(Debug, Clone)]
pub(crate) struct LabelOutcome {
    /// `dir`, `csv` or `none`: the mode used (auto resolved).
    pub mode: &'static str,
    /// Class names, index = `.cls` value.
    pub classes: Option<Vec<String>>,
    /// xxh3 of the CSV file's bytes (so parts can check they used the same one).
    pub csv_xxh3: Option<String>,
    /// CSV rows that name no input sample.
    pub unused_rows: u64,
    /// Line of the first unused row.
    pub first_unused: Option<(u64, String)>,
}

/// Sorts class names: numerically when every one is a canonical non-negative
/// integer (`0`, `7`, `12`), else byte-wise (Python's `sorted`, as torchvision).
pub(crate) fn sort_classes(names: &mut [String]) {
    let canonical = |s: &str| {
        !s.is_empty()
            && s.len() <= 19
            && s.bytes().all(|b| b.is_ascii_digit())
            && (s == "0" || !s.starts_with('0'))
    };
    if names.iter().all(|n| canonical(n)) {
        names.sort_by_key(|n| n.parse::<u64>().unwrap_or(u64::MAX));
    } else {
        names.sort();
    }
}

/// The `/`-separated parts of a key, and its class folder (the first part,
/// as an index into the names met) when it has more than one.
#[derive(Debug, Clone, Copy)]
struct Shape {
    parts: usize,
    class: Option<u32>,
}

/// The class folders of sorted samples, in one pass over their keys (each
/// key's first read is a cache miss: four passes took 50 ms for 100,000
/// samples): each sample's [`Shape`], the names in the order met, and the
/// first `.cls` member of any sample (it conflicts with directory labels).
fn shapes(samples: &[PlannedSample]) -> (Vec<Shape>, Vec<String>, Option<PathBuf>) {
    let mut names: Vec<String> = Vec::new();
    let mut ids: HashMap<String, u32> = HashMap::new();
    let mut cls = None;
    let mut prev: Option<u32> = None;
    let mut out = Vec::with_capacity(samples.len());
    for s in samples {
        let key = s.key.as_bytes();
        // A byte count the compiler vectorises (a `split` per key paid a `memchr` call per part).
        let parts = 1 + key.iter().filter(|&&b| b == b'/').count();
        let class = (parts > 1).then(|| {
            let name = &s.key[..key.iter().position(|&b| b == b'/').unwrap_or(key.len())];
            // A class's samples are neighbours: the name before is not looked up again.
            match prev {
                Some(id) if names[id as usize] == name => id,
                _ => {
                    let id = *ids.entry(name.to_owned()).or_insert_with(|| {
                        names.push(name.to_owned());
                        (names.len() - 1) as u32
                    });
                    prev = Some(id);
                    id
                }
            }
        });
        if cls.is_none()
            && let Some(m) = s.members.iter().find(|m| m.ext == "cls")
        {
            cls = Some(m.path.clone());
        }
        out.push(Shape { parts, class });
    }
    (out, names, cls)
}

/// Applies the label mode: sets each sample's label, drops samples outside
/// any class (directory labels) into `ignored`, marks samples without a CSV
/// label as failing.
pub(crate) fn apply_labels(
    samples: &mut Vec<PlannedSample>,
    mode: &LabelMode,
    ignored: &mut Ignored,
    cancel: &AtomicBool,
) -> Result<LabelOutcome> {
    let none = LabelOutcome {
        mode: "none",
        classes: None,
        csv_xxh3: None,
        unused_rows: 0,
        first_unused: None,
    };
    if matches!(mode, LabelMode::None) {
        return Ok(none);
    }
    let (shapes, names, cls) = shapes(samples);
    if matches!(mode, LabelMode::Auto) {
        let image_folder =
            !samples.is_empty() && shapes.iter().all(|s| s.parts == 2) && names.len() >= 2;
        if !image_folder {
            return Ok(none);
        }
    }
    if let Some(path) = cls {
        return Err(PackError::LabelConflict { path });
    }
    if matches!(mode, LabelMode::Dir | LabelMode::Auto) {
        let mut i = 0;
        samples.retain(|s| {
            let keep = shapes[i].parts >= 2;
            i += 1;
            if !keep {
                for m in &s.members {
                    ignored.outside_class.add(&m.path);
                }
            }
            keep
        });
        // Byte-wise order, as the names of the class folders sort.
        let mut order: Vec<u32> = (0..names.len() as u32).collect();
        order.sort_by(|&a, &b| names[a as usize].cmp(&names[b as usize]));
        let mut label_of = vec![0u32; names.len()];
        for (label, &id) in order.iter().enumerate() {
            label_of[id as usize] = label as u32;
        }
        let kept = shapes.iter().filter_map(|s| s.class);
        for (s, id) in samples.iter_mut().zip(kept) {
            s.label = Some(label_of[id as usize]);
        }
        let mut names = names;
        let classes: Vec<String> = order
            .iter()
            .map(|&id| std::mem::take(&mut names[id as usize]))
            .collect();
        return Ok(LabelOutcome {
            mode: "dir",
            classes: Some(classes),
            ..none
        });
    }
    let LabelMode::Csv(path) = mode else {
        unreachable!("handled above")
    };
    let bytes = crate::discover::read_user_list(Some(path), "a label CSV", cancel)?;
    let rows = parse_csv(&bytes, path)?;
    // key -> (label, line)
    let mut by_key: HashMap<String, (String, u64)> = HashMap::new();
    for row in &rows {
        let key = key_of(&row.name);
        if let Some((label, line)) = by_key.get(&key) {
            if *label != row.label {
                return Err(PackError::Labels {
                    path: path.clone(),
                    line: row.line,
                    what: format!(
                        "sample {key:?} is labelled {:?} here and {label:?} on line {line}",
                        row.label
                    ),
                });
            }
            continue;
        }
        by_key.insert(key, (row.label.clone(), row.line));
    }
    let mut classes: Vec<String> = rows
        .iter()
        .map(|r| r.label.clone())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    sort_classes(&mut classes);
    let index: HashMap<&str, u32> = classes
        .iter()
        .enumerate()
        .map(|(i, c)| (c.as_str(), i as u32))
        .collect();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    for s in samples.iter_mut() {
        match by_key.get(&s.key) {
            Some((label, _)) => {
                s.label = index.get(label.as_str()).copied();
                used.insert(by_key.get_key_value(&s.key).map_or("", |(k, _)| k.as_str()));
            }
            None => {
                s.fail = Some(PackError::bad(
                    s.first_path().to_path_buf(),
                    format!("sample {:?} has no label in {}", s.key, path.display()),
                ));
            }
        }
    }
    let mut unused: Vec<(u64, &str)> = by_key
        .iter()
        .filter(|(k, _)| !used.contains(k.as_str()))
        .map(|(k, (_, line))| (*line, k.as_str()))
        .collect();
    unused.sort();
    Ok(LabelOutcome {
        mode: "csv",
        classes: Some(classes),
        csv_xxh3: Some(bale_format::hex64(bale_format::checksum(&bytes))),
        unused_rows: unused.len() as u64,
        first_unused: unused.first().map(|(l, k)| (*l, (*k).to_owned())),
    })
}

/// The sample key a CSV row names: a key as is, or a member path (its base
/// name holds a dot) reduced to its key. A leading `./` is dropped.
fn key_of(name: &str) -> String {
    let mut name = name;
    while let Some(rest) = name.strip_prefix("./") {
        name = rest;
    }
    match bale_format::split_member_name(name) {
        Some((key, _)) => key.to_owned(),
        None => name.to_owned(),
    }
}

/// One CSV row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CsvRow {
    pub line: u64,
    pub name: String,
    pub label: String,
}

/// Parses the label CSV: RFC 4180 records of exactly two fields, `,`
/// separated, optionally double-quoted (`""` is a quote inside quotes;
/// quoted fields may hold commas and newlines); `\n` or `\r\n` line ends; a
/// UTF-8 BOM and blank lines are ignored. The first record is a header, and
/// skipped, when its fields are `path|key|file|filename` and `label|class`
/// (case-insensitive).
pub(crate) fn parse_csv(bytes: &[u8], path: &Path) -> Result<Vec<CsvRow>> {
    let text = std::str::from_utf8(bytes).map_err(|e| {
        let line = 1 + bytes[..e.valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count() as u64;
        PackError::Labels {
            path: path.to_path_buf(),
            line,
            what: "not valid UTF-8".into(),
        }
    })?;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let err = |line: u64, what: &str| PackError::Labels {
        path: path.to_path_buf(),
        line,
        what: what.to_owned(),
    };
    let mut rows = Vec::new();
    let mut chars = text.chars().peekable();
    let mut line: u64 = 1;
    loop {
        if chars.peek().is_none() {
            break;
        }
        let start_line = line;
        let mut fields: Vec<String> = Vec::new();
        let mut field = String::new();
        let mut quoted_field = false;
        // One record.
        loop {
            match chars.next() {
                None => {
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some('"') if field.is_empty() && !quoted_field => {
                    quoted_field = true;
                    loop {
                        match chars.next() {
                            None => return Err(err(start_line, "a quoted field is not closed")),
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                field.push('"');
                            }
                            Some('"') => break,
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                field.push(c);
                            }
                        }
                    }
                    match chars.peek() {
                        None | Some(',') | Some('\n') | Some('\r') => {}
                        Some(_) => return Err(err(line, "text after a closing quote")),
                    }
                }
                Some(',') => {
                    fields.push(std::mem::take(&mut field));
                    quoted_field = false;
                }
                Some('\r') if chars.peek() == Some(&'\n') => {}
                Some('\n') => {
                    line += 1;
                    fields.push(std::mem::take(&mut field));
                    break;
                }
                Some('"') => {
                    return Err(err(
                        line,
                        "a quote inside an unquoted field (quote the whole field)",
                    ));
                }
                Some(c) => field.push(c),
            }
        }
        if fields.len() == 1 && fields[0].is_empty() && !quoted_field {
            continue; // blank line
        }
        if fields.len() != 2 {
            return Err(err(
                start_line,
                &format!(
                    "expected 2 fields (path or key, label), found {}",
                    fields.len()
                ),
            ));
        }
        let label = fields.pop().unwrap_or_default();
        let name = fields.pop().unwrap_or_default();
        if rows.is_empty() && is_header(&name, &label) {
            continue;
        }
        if name.is_empty() {
            return Err(err(start_line, "empty path or key"));
        }
        if label.is_empty() {
            return Err(err(start_line, "empty label"));
        }
        rows.push(CsvRow {
            line: start_line,
            name,
            label,
        });
    }
    Ok(rows)
}

fn is_header(name: &str, label: &str) -> bool {
    let n = name.to_ascii_lowercase();
    let l = label.to_ascii_lowercase();
    matches!(n.as_str(), "path" | "key" | "file" | "filename")
        && matches!(l.as_str(), "label" | "class")
}

/// Stats every member in parallel (on the current rayon pool): fills sizes,
/// marks samples whose files vanished or are no longer regular files.
pub(crate) fn stat_all(samples: &mut [PlannedSample]) {
    samples.par_iter_mut().for_each(|s| {
        if s.fail.is_some() {
            return;
        }
        for m in &mut s.members {
            match std::fs::metadata(&m.path) {
                Ok(meta) if meta.is_file() => m.size = meta.len(),
                Ok(_) => {
                    s.fail = Some(PackError::Changed {
                        path: m.path.clone(),
                        what: "it is no longer a regular file".into(),
                    });
                    return;
                }
                Err(e) => {
                    s.fail = Some(PackError::read(&m.path, e));
                    return;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(root: usize, rel: &str) -> Found {
        Found::named(root, rel)
    }

    #[test]
    fn groups_by_key_with_members_sorted_by_ext() {
        let s = group(vec![
            found(0, "b/0002.jpg"),
            found(0, "a/b/0001.json"),
            found(0, "a/b/0001.jpg"),
            found(0, "a/b/0001.cls.txt"),
        ])
        .unwrap();
        let keys: Vec<&str> = s.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, ["a/b/0001", "b/0002"]);
        let exts: Vec<&str> = s[0].members.iter().map(|m| m.ext.as_str()).collect();
        assert_eq!(exts, ["cls.txt", "jpg", "json"]);
    }

    #[test]
    fn duplicate_key_and_ext_names_both_files() {
        let err = group(vec![
            found(0, "a/0001.jpg"),
            found(1, "a/0001.jpg"),
            found(1, "a/0001.json"),
        ])
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("r0/a/0001.jpg") && msg.contains("r1/a/0001.jpg"),
            "{msg}"
        );
        // The same file twice is not a duplicate; across roots, different extensions join one sample.
        let s = group(vec![
            found(0, "a/0001.jpg"),
            found(0, "a/0001.jpg"),
            found(1, "a/0001.json"),
        ])
        .unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].members.len(), 2);
    }

    /// Directory labels: classes in byte order, every sample its class's
    /// label, files outside any class folder set aside (in dir mode) or no
    /// labels at all (auto), and a `.cls` file a conflict.
    #[test]
    fn directory_labels_in_byte_order() {
        let never = AtomicBool::new(false);
        let files = || {
            vec![
                found(0, "dog/2.jpg"),
                found(0, "Cat/1.jpg"),
                found(0, "dog/1.jpg"),
                found(0, "ant/x/9.jpg"),
                found(0, "top.jpg"),
                found(0, "Cat/3.jpg"),
            ]
        };
        let mut samples = group(files()).unwrap();
        let mut ignored = Ignored::default();
        let out = apply_labels(&mut samples, &LabelMode::Dir, &mut ignored, &never).unwrap();
        assert_eq!(out.classes.unwrap(), ["Cat", "ant", "dog"]);
        let got: Vec<(&str, Option<u32>)> =
            samples.iter().map(|s| (s.key.as_str(), s.label)).collect();
        assert_eq!(
            got,
            [
                ("Cat/1", Some(0)),
                ("Cat/3", Some(0)),
                ("ant/x/9", Some(1)),
                ("dog/1", Some(2)),
                ("dog/2", Some(2))
            ]
        );
        assert_eq!(ignored.outside_class.count, 1);
        // Auto: a key of three parts (and one of one) is no image folder.
        let mut samples = group(files()).unwrap();
        let out = apply_labels(&mut samples, &LabelMode::Auto, &mut ignored, &never).unwrap();
        assert_eq!((out.mode, samples.len()), ("none", 6));
        let mut samples = group(vec![found(0, "a/1.jpg"), found(0, "b/1.jpg")]).unwrap();
        let out = apply_labels(&mut samples, &LabelMode::Auto, &mut ignored, &never).unwrap();
        assert_eq!(out.mode, "dir");
        let mut samples = group(vec![found(0, "a/1.jpg"), found(0, "b/1.cls")]).unwrap();
        let err = apply_labels(&mut samples, &LabelMode::Auto, &mut ignored, &never).unwrap_err();
        assert!(err.to_string().contains("r0/b/1.cls"), "{err}");
    }

    #[test]
    fn csv_parses_quotes_headers_and_reports_lines() {
        let p = Path::new("l.csv");
        let rows = parse_csv(b"\xef\xbb\xbfpath,label\r\na/1.jpg,cat\n\n\"b,2.jpg\",\"big \"\"dog\"\"\"\nc/3,\"x\ny\"\n", p).unwrap();
        assert_eq!(rows.len(), 3);
        assert_eq!(
            rows[0],
            CsvRow {
                line: 2,
                name: "a/1.jpg".into(),
                label: "cat".into()
            }
        );
        assert_eq!(rows[1].name, "b,2.jpg");
        assert_eq!(rows[1].label, "big \"dog\"");
        assert_eq!((rows[2].line, rows[2].label.as_str()), (5, "x\ny"));
        // Without a header the first row is data.
        assert_eq!(parse_csv(b"a/1.jpg,cat", p).unwrap().len(), 1);
        let err = parse_csv(b"a,1\nb,2,3\n", p).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("found 3"), "{err}");
        let err = parse_csv(b"a,1\n\"b,2\n", p).unwrap_err().to_string();
        assert!(
            err.contains("line 2") && err.contains("not closed"),
            "{err}"
        );
        let err = parse_csv(b"a,1\nb\xff,2\n", p).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("UTF-8"), "{err}");
    }

    #[test]
    fn classes_sort_like_torchvision_or_numerically() {
        let mut v: Vec<String> = ["b", "B", "a", "_x", "10"].map(String::from).to_vec();
        sort_classes(&mut v);
        assert_eq!(v, ["10", "B", "_x", "a", "b"]);
        let mut v: Vec<String> = ["10", "2", "0"].map(String::from).to_vec();
        sort_classes(&mut v);
        assert_eq!(v, ["0", "2", "10"]);
        let mut v: Vec<String> = ["10", "02"].map(String::from).to_vec();
        sort_classes(&mut v);
        assert_eq!(v, ["02", "10"]);
    }

    #[test]
    fn keys_from_csv_names() {
        assert_eq!(key_of("./a/b/0001.jpg"), "a/b/0001");
        assert_eq!(key_of("a/b/0001"), "a/b/0001");
        assert_eq!(key_of("a.d/0001.seg.png"), "a.d/0001");
    }
}
