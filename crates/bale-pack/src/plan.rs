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
pub(crate) fn group(mut files: Vec<Found>) -> Result<Vec<PlannedSample>> {
    files.sort_unstable_by(|a, b| {
        (a.key(), a.ext(), a.root, &a.path).cmp(&(b.key(), b.ext(), b.root, &b.path))
    });
    // The cheap `rel` comparison first: only a file listed twice gets to the path one.
    files.dedup_by(|b, a| a.root == b.root && a.rel == b.rel && a.path == b.path);
    let mut samples: Vec<PlannedSample> = Vec::new();
    let mut prev: Option<&Found> = None;
    for f in &files {
        if let Some(p) = prev
            && p.key() == f.key()
            && p.ext() == f.ext()
        {
            return Err(PackError::DuplicateMember {
                key: f.key().to_owned(),
                ext: f.ext().to_owned(),
                first: p.path.clone(),
                second: f.path.clone(),
            });
        }
        prev = Some(f);
    }
    for f in files {
        let ext = f.ext().to_owned();
        let same = samples
            .last()
            .is_some_and(|s: &PlannedSample| s.key == f.key());
        if !same {
            samples.push(PlannedSample {
                key: f.key().to_owned(),
                members: Vec::with_capacity(1),
                label: None,
                fail: None,
            });
        }
        if let Some(s) = samples.last_mut() {
            s.members.push(Member {
                ext,
                path: f.path,
                size: 0,
            });
        }
    }
    Ok(samples)
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

fn depth(key: &str) -> usize {
    key.split('/').count()
}

/// The first path components of the sample keys, sorted. Samples come
/// sorted by key, so a class's samples are mostly neighbours: a name like
/// the one before it is not looked up again.
fn class_names(samples: &[PlannedSample]) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    let mut prev = None;
    for s in samples {
        let name = s.key.split('/').next().unwrap_or_default();
        if prev != Some(name) {
            names.insert(name);
            prev = Some(name);
        }
    }
    names
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
    let dir = match mode {
        LabelMode::None => return Ok(none),
        LabelMode::Dir => true,
        LabelMode::Auto => {
            let image_folder = !samples.is_empty()
                && samples.iter().all(|s| depth(&s.key) == 2)
                && class_names(samples).len() >= 2;
            if !image_folder {
                return Ok(none);
            }
            true
        }
        LabelMode::Csv(_) => false,
    };
    for s in samples.iter() {
        if let Some(m) = s.members.iter().find(|m| m.ext == "cls") {
            return Err(PackError::LabelConflict {
                path: m.path.clone(),
            });
        }
    }
    if dir {
        samples.retain(|s| {
            if depth(&s.key) < 2 {
                for m in &s.members {
                    ignored.outside_class.add(&m.path);
                }
                false
            } else {
                true
            }
        });
        let classes: Vec<String> = class_names(samples)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let index: HashMap<&str, u32> = classes
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as u32))
            .collect();
        for s in samples.iter_mut() {
            s.label = s.key.split('/').next().and_then(|c| index.get(c).copied());
        }
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
        let (key, _) = bale_format::split_member_name(rel).unwrap();
        Found {
            root,
            path: PathBuf::from(format!("r{root}/{rel}")),
            rel: rel.to_owned(),
            dot: key.len(),
        }
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
