//! The manifest against itself, the dataset directory and each index.

use super::*;

/// Reads the manifest of the dataset in `dir` for checking.
///
/// A manifest that is not valid JSON, or whose totals disagree with its
/// shards, is a finding: it comes back as a problem (with the manifest parsed
/// as far as possible, so that the shards can still be checked).
///
/// # Errors
/// Only what is not a finding about a damaged dataset: `dir` cannot be read,
/// it holds no `bale.json` ([`FormatError::Incomplete`]), the file is not a
/// bale manifest, or it has an unsupported major version.
pub fn load_manifest(dir: &Path) -> Result<(Option<Manifest>, Vec<Problem>), FormatError> {
    let meta = if crate::read_at::is_url(dir) {
        // A prefix in object storage: no directory to stat.
        std::fs::metadata("/")
    } else {
        std::fs::metadata(dir)
    };
    let meta = meta.map_err(|e| FormatError::Io {
        path: dir.to_path_buf(),
        source: e,
    })?;
    if !meta.is_dir() {
        return Err(FormatError::Io {
            path: dir.to_path_buf(),
            source: io::Error::new(io::ErrorKind::NotADirectory, "not a dataset directory"),
        });
    }
    let path = Manifest::path_in(dir);
    let bytes = Manifest::read_bytes(dir)?;
    match Manifest::from_slice(&bytes, &path) {
        Ok(m) => Ok((Some(m), Vec::new())),
        Err(FormatError::Manifest { what, .. }) => {
            let problem = Problem::new(MANIFEST_NAME, format!("invalid manifest: {what}"));
            let lenient = serde_json::from_slice::<Manifest>(&bytes).ok();
            Ok((lenient, vec![problem]))
        }
        Err(e) => Err(e),
    }
}

/// File names that look like a shard or an index.
pub(super) fn looks_like_shard(name: &str) -> bool {
    [".tar", ".tar.zst", ".idx", ".h5"]
        .iter()
        .any(|s| name.ends_with(s))
}

/// At most this many shared keys are listed by [`check_keys`].
pub const MAX_DUPLICATE_KEYS: usize = 10;

/// Keys that more than one sample of the dataset has, each naming the two
/// shards (and sample numbers) that share it: one merged pass over the
/// indexes' hash-sorted lookup tables ([`crate::duplicate_keys`]), so memory
/// is one cursor per shard whatever the sample count. Errors, or warnings
/// when the writing run was asked to allow them (`--allow-duplicate-keys`).
/// Indexes that cannot be opened are left to the shard checks.
pub fn check_keys(dir: &Path, m: &Manifest) -> Vec<Problem> {
    let opened: Vec<(usize, ShardIndex)> = m
        .shards
        .iter()
        .enumerate()
        .filter_map(|(s, e)| Some((s, ShardIndex::open(Manifest::resolve(dir, &e.index)).ok()?)))
        .collect();
    let refs: Vec<&ShardIndex> = opened.iter().map(|(_, x)| x).collect();
    let allowed = m.created_by.options["allow_duplicate_keys"].as_bool() == Some(true);
    crate::duplicate_keys(&refs, MAX_DUPLICATE_KEYS)
        .into_iter()
        .map(|d| {
            let (a, b) = (&m.shards[opened[d.first.0].0], &m.shards[opened[d.second.0].0]);
            let p = Problem::new(
                &b.file,
                format!(
                    "the key is not unique: sample {} of {} has it too (a lookup by key is refused as ambiguous)",
                    d.first.1, a.file
                ),
            )
            .key(&d.key);
            if allowed { p.warning() } else { p }
        })
        .collect()
}

/// Checks the manifest against itself and the dataset directory: totals
/// (samples, bytes, per-extension counts) against the shard entries, shard
/// entries naming the same file twice, and files in the directory that are
/// not listed: with a name bale gives its shards and indexes
/// ([`crate::is_bale_file_name`]), errors ("unknown shard"); other `.tar`,
/// `.tar.zst`, `.h5` and `.idx` files, warnings (the user's: `--force`
/// leaves them); leftover temporary files of an interrupted write
/// (`.bale-tmp-<pid>-*`), warnings.
///
/// Only the dataset directory is scanned (not its subdirectories, nor the
/// directories of shards it refers to elsewhere: other tars there are none
/// of its business). In a dataset written by `bale index`, whose directory
/// may hold the user's other tars, unlisted `.idx` files and files with
/// bale's shard names are unknown, and other tars are not reported.
pub fn check_manifest(dir: &Path, m: &Manifest) -> Vec<Problem> {
    let mut out = Vec::new();
    // In u128: a hand-edited count near 2**64 is a problem reported, not an overflow.
    let samples: u128 = m.shards.iter().map(|s| u128::from(s.samples)).sum();
    if samples != u128::from(m.samples) {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest total samples is {}, its shards hold {samples}",
                m.samples
            ),
        ));
    }
    let bytes: u128 = m.shards.iter().map(|s| u128::from(s.bytes)).sum();
    if bytes != u128::from(m.bytes) {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest total bytes is {}, its shards hold {bytes}",
                m.bytes
            ),
        ));
    }
    let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
    for s in &m.shards {
        for (k, v) in &s.fields {
            fields.entry(k.clone()).or_default().add(*v);
        }
    }
    if fields != m.fields {
        out.push(Problem::new(
            MANIFEST_NAME,
            format!(
                "manifest per-extension totals disagree with its shards: {}",
                describe_field_diff(&m.fields, &fields)
            ),
        ));
    }
    let mut known: BTreeSet<PathBuf> = BTreeSet::new();
    let dirs = [dir.to_path_buf()];
    let adopted = m.created_by.command == "index";
    let appending = crate::atomic::has_append_mark(dir);
    for s in &m.shards {
        for f in [&s.file, &s.index] {
            let p = Manifest::resolve(dir, f);
            if !known.insert(p) {
                out.push(Problem::new(
                    f.clone(),
                    "the manifest lists this file twice",
                ));
            }
        }
    }
    for d in &dirs {
        let Ok(entries) = std::fs::read_dir(d) else {
            continue;
        };
        let mut names: Vec<(String, PathBuf)> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| (e.file_name().to_string_lossy().into_owned(), e.path()))
            .collect();
        names.sort();
        for (name, path) in names {
            let shown = path
                .strip_prefix(dir)
                .map_or_else(|_| path.display().to_string(), |p| p.display().to_string());
            if name.starts_with(TEMP_PREFIX) {
                // Only bale's own shape (`.bale-tmp-<pid>-...`) is its
                // leftover; another name under the prefix is the user's.
                if crate::atomic::temp_name_rest(&name).is_none() {
                    continue;
                }
                out.push(
                    Problem::new(
                        shown,
                        "leftover temporary file of an interrupted write (not part of the dataset; safe to delete)",
                    )
                    .warning(),
                );
            } else if looks_like_shard(&name) && !known.contains(&path) {
                let ours = crate::is_bale_file_name(&name) || (adopted && name.ends_with(".idx"));
                if appending && ours {
                    out.push(
                        Problem::new(
                            shown,
                            "not listed in the manifest: left by an interrupted `--append` \
                             (not part of the dataset; the next append or --force removes it)",
                        )
                        .warning(),
                    );
                } else if crate::is_bale_file_name(&name) || (adopted && name.ends_with(".idx")) {
                    out.push(Problem::new(
                        shown,
                        "unknown shard: this file is not listed in the manifest",
                    ));
                } else if !adopted {
                    // A tar or index of a name bale never gives: the user's,
                    // and `--force` leaves it where it is.
                    out.push(
                        Problem::new(
                            shown,
                            "not listed in the manifest and not named like bale's shards: not part of the dataset",
                        )
                        .warning(),
                    );
                }
            }
        }
    }
    out
}

pub(super) fn describe_field_diff(
    recorded: &BTreeMap<String, FieldStats>,
    actual: &BTreeMap<String, FieldStats>,
) -> String {
    let exts: BTreeSet<&String> = recorded.keys().chain(actual.keys()).collect();
    let mut parts = Vec::new();
    for ext in exts {
        let r = recorded.get(ext).copied().unwrap_or_default();
        let a = actual.get(ext).copied().unwrap_or_default();
        if r != a {
            parts.push(format!(
                "{ext}: recorded {} members / {} bytes, actual {} / {}",
                r.count, r.bytes, a.count, a.bytes
            ));
        }
    }
    parts.join("; ")
}

pub(super) fn check_index_against_manifest(
    r: &mut ShardReport,
    idx: &ShardIndex,
    entry: &ShardEntry,
    shard_len: Option<u64>,
) {
    let name = entry.file.clone();
    let sum = hex64(idx.checksum());
    if sum != entry.index_xxh3 {
        r.push(Problem::new(
            &name,
            format!(
                "index checksum {sum} differs from the manifest's {} (the index was rewritten, or belongs to another dataset)",
                entry.index_xxh3
            ),
        ));
    }
    // Opening an index checks its structure and UTF-8, not the key syntax the
    // writers guarantee (that would double the cost of every open): check it here.
    for i in 0..idx.len() {
        idx.release_behind(i);
        if crate::name::key_is_valid_fast(idx.key(i).as_bytes()) {
            continue;
        }
        if let Err(e) = crate::name::validate_key(idx.key(i)) {
            r.push(Problem::new(&name, format!("index sample {i}: {e}")).key(idx.key(i)));
        }
    }
    let mut mismatch = |what: &str, index: u64, manifest: u64| {
        if index != manifest {
            r.push(Problem::new(
                &name,
                format!("index records {index} {what}, the manifest records {manifest}"),
            ));
        }
    };
    mismatch("samples", idx.len() as u64, entry.samples);
    mismatch("members", idx.member_count() as u64, entry.members);
    mismatch("shard bytes", idx.shard_len(), entry.bytes);
    mismatch("uncompressed tar bytes", idx.tar_len(), entry.tar_bytes);
    if idx.compression() != entry.compression {
        r.push(Problem::new(
            &name,
            format!(
                "index says compression {}, the manifest says {}",
                idx.compression().as_str(),
                entry.compression.as_str()
            ),
        ));
    }
    if let Some(len) = shard_len
        && len != idx.shard_len()
        && idx.shard_len() != entry.bytes
    {
        // (When the index agrees with the manifest, the size problem is already listed.)
        r.push(Problem::new(
            &name,
            format!(
                "shard file has {len} bytes, its index describes {}",
                idx.shard_len()
            ),
        ));
    }
    let mut fields: BTreeMap<String, FieldStats> = BTreeMap::new();
    for j in 0..idx.member_count() {
        idx.release_behind(j);
        let m = idx.member(j);
        let f = fields.entry(m.ext.to_owned()).or_default();
        f.count += 1;
        f.bytes += m.size;
    }
    if fields != entry.fields {
        r.push(Problem::new(
            &name,
            format!(
                "per-extension totals differ between manifest and index: {}",
                describe_field_diff(&entry.fields, &fields)
            ),
        ));
    }
}
