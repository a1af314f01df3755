//! The house rules the compiler does not check, as tests over the repository's
//! own sources (run by `cargo test -p xtask`, hence by `cargo xtask ci`; the
//! module exists only in test builds):
//!
//! - no module cycle inside a crate: the top-level modules of each crate's
//!   `src/` (a file or directory module) form a graph without circles, so each
//!   can be read, tested and moved after what it uses;
//! - no block of [`REPEAT_LINES`] lines repeated to the letter between two
//!   library source files: shared code has one home;
//! - the command-line crate stays a thin layer over the libraries: at most
//!   [`CLI_MAX_LINES`] lines outside its bench command.
//!
//! The parsing is textual (no syntax tree), which suffices for the project's
//! formatted sources: `rustfmt` puts one item per line and attributes on their
//! own lines. Test modules (`#[cfg(test)]`) and the fuzzing surface
//! (`#[cfg(feature = "fuzzing")]`) are left out, as are `tests/` and `benches/`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};

/// Lines a repeated block must have to count as a copy.
pub const REPEAT_LINES: usize = 6;

/// The command-line crate's budget of lines outside `src/commands/bench/`.
/// The target is 2,600; this is today's count rounded up to 50, lowered as the
/// command-line code moves into the libraries.
pub const CLI_MAX_LINES: usize = 3_550;

/// The target of [`CLI_MAX_LINES`].
pub const CLI_TARGET_LINES: usize = 2_600;

/// One source file of a crate, with the lines that count (test and fuzzing
/// items blanked out).
struct Source {
    /// Path relative to the repository root, `/`-separated.
    rel: String,
    /// Path relative to the crate's `src/`.
    in_src: PathBuf,
    /// Every line, with the excluded ones replaced by an empty string.
    lines: Vec<String>,
}

/// The crates whose `src/` the rules cover: `crates/*` and `xtask`.
fn crate_dirs(root: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs = Vec::new();
    if let Ok(entries) = fs::read_dir(root.join("crates")) {
        for entry in entries.flatten() {
            let path = entry.path();
            if path.join("src").is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                dirs.push((name, path));
            }
        }
    }
    dirs.push(("xtask".to_string(), root.join("xtask")));
    dirs.sort();
    dirs
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            let name = path.file_name().unwrap_or_default();
            if name != "tests" && name != "benches" {
                rs_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether an attribute line puts the next item under test or fuzzing only.
fn excluding_attr(line: &str) -> bool {
    let t = line.trim();
    t.starts_with("#[cfg(")
        && (t == "#[cfg(test)]"
            || t == "#[cfg(feature = \"fuzzing\")]"
            || t == "#[cfg(any(test, feature = \"fuzzing\"))]")
}

/// The braces of a line outside string and character literals.
fn brace_delta(line: &str) -> i64 {
    let code = line.split("//").next().unwrap_or("");
    let mut delta = 0;
    let mut in_str = false;
    let mut prev = ' ';
    for c in code.chars() {
        match c {
            '"' if prev != '\\' => in_str = !in_str,
            '{' if !in_str && prev != '\'' => delta += 1,
            '}' if !in_str && prev != '\'' => delta -= 1,
            _ => {}
        }
        prev = if prev == '\\' && c == '\\' { ' ' } else { c };
    }
    delta
}

/// Blanks the items under an excluding attribute; returns the names of the
/// file modules (`mod x;`) so declared.
fn blank_excluded(lines: &mut [String]) -> Vec<String> {
    let mut file_mods = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if !excluding_attr(&lines[i]) {
            i += 1;
            continue;
        }
        lines[i].clear();
        i += 1;
        // Further attributes of the same item.
        while i < lines.len() && lines[i].trim().starts_with("#[") {
            lines[i].clear();
            i += 1;
        }
        let mut depth = 0;
        let mut opened = false;
        while i < lines.len() {
            let line = std::mem::take(&mut lines[i]);
            i += 1;
            let t = line.trim();
            if !opened && let Some(name) = file_mod_name(t) {
                file_mods.push(name);
                break;
            }
            depth += brace_delta(&line);
            opened |= line.contains('{');
            if (opened && depth <= 0) || (!opened && t.ends_with(';')) {
                break;
            }
        }
    }
    file_mods
}

/// `x` of a `mod x;` or `pub(crate) mod x;` line.
fn file_mod_name(t: &str) -> Option<String> {
    let rest = t.strip_suffix(';')?;
    let name = rest.rsplit_once("mod ")?.1.trim();
    let before = rest.rsplit_once("mod ")?.0.trim();
    let vis_ok = before.is_empty() || before.starts_with("pub");
    (vis_ok && !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .then(|| name.to_string())
}

/// The directory a file's `mod x;` declarations resolve in.
fn mod_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("lib" | "main" | "mod") => parent,
        Some(stem) => parent.join(stem),
        None => parent,
    }
}

/// Every library source file of every crate, by crate name.
fn sources(root: &Path) -> BTreeMap<String, Vec<Source>> {
    let mut all = BTreeMap::new();
    for (name, dir) in crate_dirs(root) {
        let src = dir.join("src");
        let mut files = Vec::new();
        rs_files(&src, &mut files);
        let mut parsed = Vec::new();
        let mut excluded: Vec<PathBuf> = Vec::new();
        for file in &files {
            let text = fs::read_to_string(file).unwrap_or_default();
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for m in blank_excluded(&mut lines) {
                let dir = mod_dir(file);
                excluded.push(dir.join(format!("{m}.rs")));
                excluded.push(dir.join(&m));
            }
            parsed.push((file.clone(), lines));
        }
        let sources = parsed
            .into_iter()
            .filter(|(file, _)| !excluded.iter().any(|e| file.starts_with(e)))
            .filter(|(file, _)| file.file_name().is_none_or(|n| n != "tests.rs"))
            .map(|(file, lines)| Source {
                rel: file
                    .strip_prefix(root)
                    .unwrap_or(&file)
                    .to_string_lossy()
                    .replace('\\', "/"),
                in_src: file.strip_prefix(&src).unwrap_or(&file).to_path_buf(),
                lines,
            })
            .collect();
        all.insert(name, sources);
    }
    all
}

/// The top-level module a file belongs to; `None` for the crate root.
fn top_module(in_src: &Path) -> Option<String> {
    let mut parts = in_src.components();
    let first = parts.next()?.as_os_str().to_string_lossy().into_owned();
    if parts.next().is_some() {
        return Some(first);
    }
    match first.strip_suffix(".rs")? {
        "lib" | "main" => None,
        stem => Some(stem.to_string()),
    }
}

/// How deep a file's module sits below the crate root (`a.rs`, `a/mod.rs`: 1).
fn module_depth(in_src: &Path) -> usize {
    let n = in_src.components().count();
    match in_src.file_stem().and_then(|s| s.to_str()) {
        Some("mod") => n - 1,
        _ => n,
    }
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segments after `crate::` (or a `super::` chain reaching the
/// root) on a line, including those inside a `{…}` group.
fn root_segments(line: &str, depth: usize) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut starts = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let before = code[..i].chars().next_back();
        if before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$')) {
            starts.push(i + "crate::".len());
        }
    }
    let mut i = 0;
    while let Some(at) = code[i..].find("super::") {
        let start = i + at;
        let before = code[..start].chars().next_back();
        let mut end = start;
        let mut supers = 0;
        while code[end..].starts_with("super::") {
            end += "super::".len();
            supers += 1;
        }
        if supers >= depth && before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
        {
            starts.push(end);
        }
        i = end;
    }
    for start in starts {
        let rest = &code[start..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut level = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && level == 0 => {
                        out.push(ident_at(&group[j..]).to_string());
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident_at(rest).to_string());
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// An edge of the module graph: the file that makes it.
type Edges = BTreeMap<(String, String), String>;

fn module_edges(sources: &[Source]) -> Edges {
    let modules: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| top_module(&s.in_src))
        .collect();
    let mut edges = Edges::new();
    for source in sources {
        let Some(from) = top_module(&source.in_src) else {
            continue;
        };
        let depth = module_depth(&source.in_src);
        for line in &source.lines {
            for to in root_segments(line, depth) {
                if to != from && modules.contains(&to) {
                    edges
                        .entry((from.clone(), to))
                        .or_insert_with(|| source.rel.clone());
                }
            }
        }
    }
    edges
}

/// Every elementary cycle, each starting at its smallest module, as
/// `crate: a → b → a (a→b in file, b→a in file)`.
fn cycles(krate: &str, edges: &Edges) -> Vec<String> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges.keys() {
        next.entry(from.as_str()).or_default().push(to.as_str());
    }
    let nodes: Vec<&str> = next.keys().copied().collect();
    let mut found = Vec::new();
    for &start in &nodes {
        let mut path = vec![start];
        let mut stack = vec![0usize];
        while let Some(top) = stack.last_mut() {
            let here = *path.last().unwrap_or(&start);
            let outs = next.get(here).map(Vec::as_slice).unwrap_or(&[]);
            if *top >= outs.len() || found.len() > 500 {
                stack.pop();
                path.pop();
                continue;
            }
            let to = outs[*top];
            *top += 1;
            if to == start {
                let mut names = path.clone();
                names.push(start);
                let files: Vec<String> = names
                    .windows(2)
                    .map(|w| {
                        let file = &edges[&(w[0].to_string(), w[1].to_string())];
                        format!("{}→{} in {file}", w[0], w[1])
                    })
                    .collect();
                found.push(format!(
                    "{krate}: {} ({})",
                    names.join(" → "),
                    files.join(", ")
                ));
            } else if to > start && !path.contains(&to) {
                path.push(to);
                stack.push(0);
            }
        }
    }
    found
}

/// Whether a line counts for the repeat rule: not blank, not only closing
/// punctuation, not a comment, not a module declaration (two crates' lists
/// of the same commands are alike by design).
fn counts(line: &str) -> bool {
    let t = line.trim();
    let declaration = t
        .strip_prefix("pub ")
        .unwrap_or(t)
        .strip_prefix("mod ")
        .and_then(|m| m.strip_suffix(';'))
        .is_some_and(|m| m.chars().all(|c| c.is_alphanumeric() || c == '_'));
    !(t.is_empty()
        || declaration
        || t.chars()
            .all(|c| c.is_whitespace() || "{}[]();,".contains(c))
        || t.starts_with("//")
        || t.starts_with("/*")
        || t.starts_with('*'))
}

/// Every block of [`REPEAT_LINES`] counting lines found in two different
/// files, as `a.rs:L <-> b.rs:M` (the first line of each run of overlapping
/// blocks).
fn repeats(all: &BTreeMap<String, Vec<Source>>) -> Vec<(String, String, String)> {
    let files: Vec<(&str, Vec<(usize, &str)>)> = all
        .values()
        .flatten()
        .map(|s| {
            let kept = s
                .lines
                .iter()
                .enumerate()
                .filter(|(_, l)| counts(l))
                .map(|(n, l)| (n + 1, l.trim()))
                .collect();
            (s.rel.as_str(), kept)
        })
        .collect();
    let mut seen: HashMap<Vec<&str>, Vec<(usize, usize)>> = HashMap::new();
    for (f, (_, kept)) in files.iter().enumerate() {
        for i in 0..kept.len().saturating_sub(REPEAT_LINES - 1) {
            let key: Vec<&str> = kept[i..i + REPEAT_LINES].iter().map(|k| k.1).collect();
            seen.entry(key).or_default().push((f, i));
        }
    }
    let mut matches: BTreeSet<(usize, usize, usize, usize)> = BTreeSet::new();
    for places in seen.values() {
        for (a, &(fa, ia)) in places.iter().enumerate() {
            for &(fb, ib) in &places[a + 1..] {
                if fa != fb {
                    let (x, y) = if fa < fb {
                        ((fa, ia), (fb, ib))
                    } else {
                        ((fb, ib), (fa, ia))
                    };
                    matches.insert((x.0, x.1, y.0, y.1));
                }
            }
        }
    }
    let mut found = Vec::new();
    for &(fa, ia, fb, ib) in &matches {
        let continues = ia > 0 && ib > 0 && matches.contains(&(fa, ia - 1, fb, ib - 1));
        if !continues {
            let (a, b) = (files[fa].0, files[fb].0);
            found.push((
                a.to_string(),
                b.to_string(),
                format!("{a}:{} <-> {b}:{}", files[fa].1[ia].0, files[fb].1[ib].0),
            ));
        }
    }
    found
}

/// Lines of the command-line crate outside its bench command.
fn cli_lines(root: &Path) -> usize {
    let src = root.join("crates/bale-cli/src");
    let mut files = Vec::new();
    rs_files(&src, &mut files);
    files
        .iter()
        .filter(|f| !f.starts_with(src.join("commands/bench")))
        .map(|f| fs::read_to_string(f).unwrap_or_default().lines().count())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::repo_root;

    /// Repeated blocks present when the rule came in, as pairs of files, in
    /// crates being restructured. Remove an entry once its copy is gone.
    const KNOWN_REPEATS: &[(&str, &str)] = &[
        (
            "crates/bale-cli/src/args/convert.rs",
            "crates/bale-cli/src/args/merge.rs",
        ),
        (
            "crates/bale-cli/src/commands/index.rs",
            "crates/bale-cli/src/commands/pack.rs",
        ),
        (
            "crates/bale-format/src/manifest.rs",
            "crates/bale-reader/src/stats.rs",
        ),
    ];

    #[test]
    fn no_module_cycle_inside_a_crate() {
        let all = sources(&repo_root());
        assert!(all.contains_key("bale-format") && all.contains_key("xtask"));
        let found: Vec<String> = all
            .iter()
            .flat_map(|(krate, files)| cycles(krate, &module_edges(files)))
            .collect();
        assert!(found.is_empty(), "module cycles:\n{}", found.join("\n"));
    }

    #[test]
    fn no_six_line_block_repeated_between_files() {
        let all = sources(&repo_root());
        let found = repeats(&all);
        let new: Vec<&str> = found
            .iter()
            .filter(|(a, b, _)| !KNOWN_REPEATS.contains(&(a.as_str(), b.as_str())))
            .map(|(_, _, line)| line.as_str())
            .collect();
        assert!(new.is_empty(), "repeated blocks:\n{}", new.join("\n"));
        let gone: Vec<String> = KNOWN_REPEATS
            .iter()
            .filter(|(a, b)| !found.iter().any(|(x, y, _)| x == a && y == b))
            .map(|(a, b)| format!("{a} <-> {b}"))
            .collect();
        assert!(
            gone.is_empty(),
            "repeats gone, remove them from KNOWN_REPEATS:\n{}",
            gone.join("\n")
        );
    }

    #[test]
    fn command_line_crate_within_its_line_budget() {
        let lines = cli_lines(&repo_root());
        assert!(lines > 0, "no bale-cli sources found");
        assert!(
            lines <= CLI_MAX_LINES,
            "bale-cli has {lines} lines outside src/commands/bench/, over its budget of \
             {CLI_MAX_LINES} (target {CLI_TARGET_LINES})"
        );
    }

    #[test]
    fn cycles_are_found_with_their_files() {
        let mut edges = Edges::new();
        edges.insert(("a".into(), "b".into()), "src/a.rs".into());
        edges.insert(("b".into(), "a".into()), "src/b/mod.rs".into());
        edges.insert(("b".into(), "c".into()), "src/b/x.rs".into());
        assert_eq!(
            cycles("k", &edges),
            ["k: a → b → a (a→b in src/a.rs, b→a in src/b/mod.rs)"]
        );
    }

    #[test]
    fn root_segments_read_groups_and_supers() {
        assert_eq!(
            root_segments("use crate::{a::X, b, c::{d, e}};", 1),
            ["a", "b", "c"]
        );
        assert_eq!(root_segments("let x = crate::f::g();", 1), ["f"]);
        assert_eq!(root_segments("use super::h;", 1), ["h"]);
        assert!(root_segments("use super::h;", 2).is_empty());
        assert_eq!(root_segments("use super::super::h;", 2), ["h"]);
        assert!(root_segments("use bale_crate::x;", 1).is_empty());
    }

    #[test]
    fn punctuation_and_comments_do_not_count_as_lines() {
        for line in [
            "",
            "   ",
            ") {",
            "});",
            "] ,",
            "// a note",
            "/// docs",
            " * more",
            "pub mod convert;",
            "    mod tests;",
        ] {
            assert!(!counts(line), "{line:?} counted");
        }
        assert!(counts("let x = 1;"));
        assert!(counts("} else {"));
        assert!(counts("mod tests {"));
        assert!(counts("pub mod x { use y; }"));
    }

    #[test]
    fn test_items_are_left_out() {
        let mut lines: Vec<String> = [
            "fn a() {}",
            "#[cfg(test)]",
            "mod tests {",
            "    use crate::b;",
            "    fn f() { let s = \"{\"; }",
            "}",
            "#[cfg(feature = \"fuzzing\")]",
            "pub mod fuzzing;",
            "fn c() {}",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(blank_excluded(&mut lines), ["fuzzing"]);
        let kept: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(kept, ["fn a() {}", "fn c() {}"]);
    }
}
