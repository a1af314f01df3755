//! Shard arguments as users type them: brace patterns (`{000000..000999}`,
//! `{train,val}`, WebDataset's notation) expanded in order, then globs
//! (`*`, `?`, `[...]` within a path component, `**` for any number of
//! directories) matched with `globset` over a `walkdir` walk.

use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use walkdir::WalkDir;

use crate::error::{PackError, Result};

/// Most names one argument may expand to: checked before expanding.
pub const MAX_EXPANSION: u64 = 1_000_000;

/// Expands every argument, in order: brace patterns first, then globs (each
/// glob's matches sorted by path); plain paths stay as they are. Every name
/// must exist, and every glob must match something.
///
/// # Errors
/// [`PackError::Option`] naming the argument as typed: a pattern that expands
/// to more than [`MAX_EXPANSION`] names, a name that does not exist, a glob
/// that matches nothing or is malformed.
pub fn expand_all(args: &[String]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for arg in args {
        let names = expand_braces(arg)?;
        let braces = names.len() > 1 || names.first().is_some_and(|n| n != arg);
        for name in names {
            if bale_format::read_at::is_url(Path::new(&name)) {
                // An object in a bucket: listing is not needed (braces name
                // every shard), and a missing one is the scan's clear error.
                if has_glob_meta(&name) {
                    return Err(PackError::Option(format!(
                        "{name:?}: globs are not expanded in URLs; name the shards with a brace pattern ({{000000..000099}})"
                    )));
                }
                out.push(PathBuf::from(&name));
                continue;
            }
            if has_glob_meta(&name) {
                let matches = glob(&name, arg)?;
                if matches.is_empty() {
                    return Err(PackError::Option(if braces {
                        format!("{name:?} (from the pattern {arg:?}) matches no file")
                    } else {
                        format!("{name:?} matches no file")
                    }));
                }
                out.extend(matches);
            } else {
                let p = PathBuf::from(&name);
                if std::fs::symlink_metadata(&p).is_err() {
                    return Err(PackError::Option(if braces {
                        format!("{name} (from the pattern {arg:?}) does not exist")
                    } else {
                        format!("{name} does not exist")
                    }));
                }
                out.push(p);
            }
        }
    }
    Ok(out)
}

fn has_glob_meta(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// Expands shell-style braces: `{a,b}` lists and `{000..099}` (or `{0..99..2}`)
/// numeric ranges, nested or several in one pattern, in order. A range
/// endpoint with a leading zero pads every number to the wider endpoint.
/// Braces that are neither (`{x}`, unmatched) stay as they are.
///
/// # Errors
/// A pattern expanding to more than [`MAX_EXPANSION`] names (counted before
/// anything is expanded), or a range endpoint too large; both name `pattern`.
pub fn expand_braces(pattern: &str) -> Result<Vec<String>> {
    let count = count_names(pattern)?;
    if count > MAX_EXPANSION {
        return Err(too_many(pattern));
    }
    let mut out = Vec::with_capacity(count as usize);
    expand_into(pattern, pattern, &mut out)?;
    Ok(out)
}

fn too_many(pattern: &str) -> PackError {
    PackError::Option(format!(
        "the pattern {pattern:?} expands to more than {MAX_EXPANSION} names"
    ))
}

/// How many names `s` expands to, without expanding it (saturating).
fn count_names(s: &str) -> Result<u64> {
    let Some(group) = first_group(s, s)? else {
        return Ok(1);
    };
    let (head, tail) = (&s[..group.open], &s[group.close + 1..]);
    let mut total = 0u64;
    match &group.options {
        Options::List(opts) => {
            for opt in opts {
                let n = count_names(&format!("{head}{opt}{tail}"))?;
                total = total.saturating_add(n);
                if total > MAX_EXPANSION {
                    break;
                }
            }
        }
        // Every number has the same shape: count one, times how many.
        Options::Range(r) => {
            let one = count_names(&format!("{head}{}{tail}", r.name(r.start)))?;
            total = one.saturating_mul(r.count);
        }
    }
    Ok(total)
}

fn expand_into(s: &str, typed: &str, out: &mut Vec<String>) -> Result<()> {
    let Some(group) = first_group(s, typed)? else {
        out.push(s.to_owned());
        return Ok(());
    };
    let (head, tail) = (&s[..group.open], &s[group.close + 1..]);
    match group.options {
        Options::List(opts) => {
            for opt in opts {
                expand_into(&format!("{head}{opt}{tail}"), typed, out)?;
            }
        }
        Options::Range(r) => {
            for i in 0..r.count {
                let v = r.nth(i);
                expand_into(&format!("{head}{}{tail}", r.name(v)), typed, out)?;
            }
        }
    }
    if out.len() as u64 > MAX_EXPANSION {
        return Err(too_many(typed));
    }
    Ok(())
}

struct Group {
    open: usize,
    close: usize,
    options: Options,
}

enum Options {
    List(Vec<String>),
    Range(Range),
}

/// A numeric brace range: `count` numbers from `start` by `step`.
struct Range {
    start: i64,
    step: i64,
    count: u64,
    width: usize,
}

impl Range {
    fn nth(&self, i: u64) -> i64 {
        // `count` was computed from the endpoints, so this stays between them.
        self.start + self.step * i as i64
    }

    fn name(&self, v: i64) -> String {
        if v < 0 {
            format!(
                "-{:0w$}",
                v.unsigned_abs(),
                w = self.width.saturating_sub(1)
            )
        } else {
            format!("{v:0w$}", w = self.width)
        }
    }
}

/// The first brace group that expands.
fn first_group(s: &str, typed: &str) -> Result<Option<Group>> {
    let b = s.as_bytes();
    for open in (0..b.len()).filter(|&i| b[i] == b'{') {
        let mut depth = 0usize;
        let mut commas = Vec::new();
        let mut close = None;
        for (i, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(i);
                        break;
                    }
                }
                b',' if depth == 1 => commas.push(i),
                _ => {}
            }
        }
        let Some(close) = close else { continue };
        if !commas.is_empty() {
            let mut opts = Vec::new();
            let mut start = open + 1;
            for c in commas.into_iter().chain([close]) {
                opts.push(s[start..c].to_owned());
                start = c + 1;
            }
            return Ok(Some(Group {
                open,
                close,
                options: Options::List(opts),
            }));
        }
        if let Some(range) = numeric_range(&s[open + 1..close], typed)? {
            return Ok(Some(Group {
                open,
                close,
                options: Options::Range(range),
            }));
        }
    }
    Ok(None)
}

fn numeric_range(inner: &str, typed: &str) -> Result<Option<Range>> {
    let parts: Vec<&str> = inner.split("..").collect();
    if !(2..=3).contains(&parts.len()) {
        return Ok(None);
    }
    let is_int = |p: &str| {
        let d = p.strip_prefix('-').unwrap_or(p);
        !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())
    };
    if !parts.iter().all(|p| is_int(p)) {
        return Ok(None);
    }
    let num = |p: &str| {
        p.parse::<i64>()
            .ok()
            .filter(|v| v.unsigned_abs() <= 1 << 53)
            .ok_or_else(|| {
                PackError::Option(format!(
                    "{p:?} in {{{inner}}} of the pattern {typed:?} is too large"
                ))
            })
    };
    let (a, b) = (num(parts[0])?, num(parts[1])?);
    let step = match parts.get(2) {
        Some(s) => num(s)?.unsigned_abs().max(1) as i64,
        None => 1,
    };
    let padded = |p: &str| {
        let d = p.strip_prefix('-').unwrap_or(p);
        d.len() > 1 && d.starts_with('0')
    };
    let width = if padded(parts[0]) || padded(parts[1]) {
        parts[0].len().max(parts[1].len())
    } else {
        0
    };
    Ok(Some(Range {
        start: a,
        step: if a <= b { step } else { -step },
        count: a.abs_diff(b) / step as u64 + 1,
        width,
    }))
}

/// The regular files (and symlinks to them) matching a glob, sorted by path.
/// As in a shell, `*`, `?` and `**` do not match a name that starts with a
/// dot unless the pattern's component starts with one too. `typed` is the
/// argument as the user gave it, for errors.
fn glob(pattern: &str, typed: &str) -> Result<Vec<PathBuf>> {
    let absolute = pattern.starts_with('/');
    let comps: Vec<&str> = pattern.split('/').filter(|c| !c.is_empty()).collect();
    let literal = comps.iter().take_while(|c| !has_glob_meta(c)).count();
    let mut base = PathBuf::from(if absolute { "/" } else { "" });
    for c in &comps[..literal] {
        base.push(c);
    }
    let rest = &comps[literal..];
    let bad = |e: globset::Error| PackError::Option(format!("bad glob in {typed:?}: {e}"));
    let matcher = |p: &str| -> Result<GlobMatcher> {
        Ok(GlobBuilder::new(p)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(bad)?
            .compile_matcher())
    };
    let whole = matcher(&rest.join("/"))?;
    // Components of the pattern that may match a hidden name.
    let dotted: Vec<GlobMatcher> = rest
        .iter()
        .filter(|c| c.starts_with('.'))
        .map(|c| matcher(c))
        .collect::<Result<_>>()?;
    let recursive = rest.contains(&"**");
    let root = if base.as_os_str().is_empty() {
        Path::new(".")
    } else {
        base.as_path()
    };
    let mut walk = WalkDir::new(root)
        .min_depth(1)
        .follow_links(!recursive)
        .sort_by_file_name();
    if !recursive {
        walk = walk.max_depth(rest.len());
    }
    let mut out = Vec::new();
    let mut it = walk.into_iter();
    while let Some(entry) = it.next() {
        // An unreadable directory, or a dangling link, matches nothing.
        let Ok(entry) = entry else { continue };
        let name = entry.file_name().to_string_lossy();
        if name.starts_with('.') && !dotted.iter().any(|m| m.is_match(name.as_ref())) {
            if entry.file_type().is_dir() {
                it.skip_current_dir();
            }
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        if whole.is_match(rel) && entry.path().is_file() {
            out.push(base.join(rel));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn braces_expand_like_a_shell() {
        let cases: &[(&str, &[&str])] = &[
            ("a.tar", &["a.tar"]),
            (
                "s-{0..3}.tar",
                &["s-0.tar", "s-1.tar", "s-2.tar", "s-3.tar"],
            ),
            (
                "s-{000008..000011}.tar",
                &[
                    "s-000008.tar",
                    "s-000009.tar",
                    "s-000010.tar",
                    "s-000011.tar",
                ],
            ),
            (
                "{train,val}-{0..1}",
                &["train-0", "train-1", "val-0", "val-1"],
            ),
            ("{a,b{1,2}}c", &["ac", "b1c", "b2c"]),
            ("x{3..1}", &["x3", "x2", "x1"]),
            ("x{0..6..3}", &["x0", "x3", "x6"]),
            ("x{-1..1}", &["x-1", "x0", "x1"]),
            ("x{a}y", &["x{a}y"]),
            ("x{1..a}", &["x{1..a}"]),
            ("{unclosed,x", &["{unclosed,x"]),
            ("{a{b,c}", &["{ab", "{ac"]),
            ("e{,s}", &["e", "es"]),
        ];
        for (pattern, want) in cases {
            assert_eq!(expand_braces(pattern).unwrap(), *want, "{pattern}");
        }
        assert!(expand_braces("{0..99999999}").is_err());
    }

    #[test]
    fn huge_patterns_are_refused_before_expanding_naming_the_pattern() {
        let typed = "nx-{0..999}{0..999}{0..999}.tar";
        let err = expand_braces(typed).unwrap_err().to_string();
        assert!(err.contains(typed), "{err}");
        assert!(err.contains("more than 1000000 names"), "{err}");
        // Lists multiply too.
        let list = format!("{{{}}}", vec!["x"; 1001].join(","));
        let err = expand_braces(&format!("{list}{list}")).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        // At the limit is fine.
        assert_eq!(
            expand_braces("{1..1000}{1..1000}").unwrap().len(),
            1_000_000
        );
    }

    #[test]
    fn globs_find_files_sorted_and_skip_hidden_names() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        for f in [
            "s/b.tar",
            "s/a.tar",
            "s/c.idx",
            "s/.h.tar",
            "s/.hid/x.tar",
            "s/sub/d.tar",
            "s/sub/deeper/e.tar",
        ] {
            let p = root.join(f);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, b"").unwrap();
        }
        let r = root.to_str().unwrap();
        let names = |pattern: &str| -> Vec<String> {
            expand_all(&[pattern.to_owned()])
                .unwrap()
                .iter()
                .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&format!("{r}/s/*.tar")), ["s/a.tar", "s/b.tar"]);
        assert_eq!(names(&format!("{r}/s/.*.tar")), ["s/.h.tar"]);
        assert_eq!(names(&format!("{r}/s/[ab].tar")), ["s/a.tar", "s/b.tar"]);
        assert_eq!(names(&format!("{r}/s/?.idx")), ["s/c.idx"]);
        assert_eq!(
            names(&format!("{r}/s/**/*.tar")),
            ["s/a.tar", "s/b.tar", "s/sub/d.tar", "s/sub/deeper/e.tar"]
        );
        assert_eq!(names(&format!("{r}/*/*/d.tar")), ["s/sub/d.tar"]);
        assert_eq!(names(&format!("{r}/s/{{b,a}}.tar")), ["s/b.tar", "s/a.tar"]);
        assert_eq!(
            names(&format!("{r}/s/{{a,sub/*}}.tar")),
            ["s/a.tar", "s/sub/d.tar"]
        );
        let err = expand_all(&[format!("{r}/s/*.zst")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("matches no file"), "{err}");
        let err = expand_all(&[format!("{r}/s/{{a,x}}.tar")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("x.tar (from the pattern"), "{err}");
    }
}
