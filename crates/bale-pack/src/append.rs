//! `--append` of `bale pack`, `bale convert` and `bale index`: the dataset
//! a run adds shards to, and the checks that what it adds fits it, all made
//! before anything is written.
//!
//! An append writes new shards after the old ones (numbered after every
//! shard name in the directory; `index` adds the new tars' indexes) and
//! then one new `bale.json` listing old and new: the manifest stays the
//! commit point, and the old shards and indexes are never opened for
//! writing. A reader that opened the dataset before keeps its manifest,
//! whose files do not change.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bale_format::{Manifest, ShardIndex};
use serde::de::DeserializeOwned;

use crate::error::{PackError, Result};
use crate::options::LabelMode;
use crate::options::ShapingOptions;
use crate::plan::PlannedSample;

/// The dataset an append adds to, with the options (`O`) its command
/// recorded: pack's [`ShapingOptions`], or the JSON of `convert`'s and
/// `index`'s. It is a local directory, or (for `pack`) a prefix in object
/// storage, whose indexes are read through the storage layer.
#[derive(Debug, Clone)]
pub(crate) struct Base<O = ShapingOptions> {
    /// Where it is: its directory, or its URL.
    pub dir: PathBuf,
    /// Its manifest, as read when the output was taken.
    pub manifest: Manifest,
    /// The options it was written with.
    pub options: O,
    /// The number of the first new shard.
    pub first_shard: u64,
}

fn mismatch(dir: &Path, what: String) -> PackError {
    PackError::AppendMismatch {
        dir: dir.to_path_buf(),
        what,
    }
}

impl<O: DeserializeOwned> Base<O> {
    /// The dataset of `manifest` in `dir` (a directory, or a prefix's URL),
    /// which holds the names `names` (of files, or objects), for
    /// `bale {cmd} --append`. Refuses a dataset that no
    /// command of `takes` (the commands, and how to say them) wrote.
    pub fn of(
        dir: &Path,
        manifest: Manifest,
        names: &[String],
        cmd: &str,
        takes: (&[&str], &str),
    ) -> Result<Self> {
        let command = manifest.created_by.command.as_str();
        if !takes.0.contains(&command) {
            return Err(mismatch(
                dir,
                format!(
                    "it was written by `bale {command}`; `bale {cmd} --append` adds to datasets \
                     that {} wrote",
                    takes.1
                ),
            ));
        }
        let options: O =
            serde_json::from_value(manifest.created_by.options.clone()).map_err(|e| {
                mismatch(
                    dir,
                    format!("its manifest's created_by.options are not bale {command}'s: {e}"),
                )
            })?;
        let listed = manifest.shards.iter().map(|s| s.file.as_str());
        let first_shard = listed
            .chain(names.iter().map(String::as_str))
            .filter_map(shard_number)
            .map(|n| n + 1)
            .max()
            .unwrap_or(0)
            .max(manifest.shards.len() as u64);
        Ok(Self {
            dir: dir.to_path_buf(),
            manifest,
            options,
            first_shard,
        })
    }

    /// Refuses a new sample whose key the dataset holds: `keys` are the
    /// new keys, each with the input file it comes from; the error names
    /// the key, that file and the shard that has it. Reads one index at a
    /// time (mapped, its pages dropped after; in object storage, read whole
    /// into memory, then dropped); memory: the new keys and one index. A shard is searched by its lookup table when the new keys are
    /// few against its samples, else read key by key.
    pub fn refuse_held_keys(&self, keys: &[(&str, &Path)]) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let new: HashMap<&str, &Path> = keys.iter().copied().collect();
        for e in &self.manifest.shards {
            let path = Manifest::resolve(&self.dir, &e.index);
            let idx = ShardIndex::open_expecting(&path, e.samples, e.members)?;
            let found = if new.len().saturating_mul(32) < idx.len() {
                keys.iter()
                    .find(|(k, _)| idx.find(k).is_some())
                    .map(|(k, _)| *k)
            } else {
                (0..idx.len())
                    .map(|i| idx.key(i))
                    .find(|k| new.contains_key(k))
            };
            if let Some(key) = found {
                return Err(PackError::KeyInDataset {
                    key: key.to_owned(),
                    path: new[key].to_path_buf(),
                    shard: e.file.clone(),
                });
            }
            idx.release_pages();
        }
        Ok(())
    }

    /// The manifest of the dataset with `shards` appended.
    pub fn manifest(
        &self,
        shards: Vec<bale_format::ShardEntry>,
        labels: Option<Vec<String>>,
        skipped: u64,
    ) -> Manifest {
        let old = &self.manifest;
        let mut created_by = old.created_by.clone();
        created_by.version = env!("CARGO_PKG_VERSION").into();
        if let serde_json::Value::Object(map) = &mut created_by.options {
            let n = map
                .get("appends")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0);
            map.insert("appends".into(), (n + 1).into());
        }
        let all = old.shards.iter().cloned().chain(shards).collect();
        let mut m = Manifest::new(all, labels, created_by);
        m.skipped = old.skipped + skipped;
        m
    }
}

impl Base<serde_json::Value> {
    /// Refuses a run whose recorded options (`new`, as its command records
    /// them in `created_by.options`) differ from the dataset's in one of
    /// `fields` (each the option's key there and how to name it), naming
    /// the first.
    pub fn check_recorded(&self, new: &serde_json::Value, fields: &[(&str, &str)]) -> Result<()> {
        let at = |v: &serde_json::Value, k: &str| shown(&v.get(k).cloned().unwrap_or_default());
        differ(
            &self.dir,
            fields
                .iter()
                .map(|(k, name)| (*name, at(&self.options, k), at(new, k))),
        )
    }
}

/// Refuses the first of `fields` (name, the dataset's value, the run's)
/// whose values differ.
fn differ<'a>(
    dir: &Path,
    fields: impl IntoIterator<Item = (&'a str, String, String)>,
) -> Result<()> {
    for (name, was, now) in fields {
        if was != now {
            return Err(mismatch(
                dir,
                format!(
                    "the {name} of this run is {now}, the dataset's is {was}: appended shards \
                     must be written as the old ones were"
                ),
            ));
        }
    }
    Ok(())
}

impl Base {
    /// The dataset of `manifest` in `dir`, whose directory holds the
    /// shard names `names`. Refuses a dataset that `bale pack` (or `bale
    /// merge` of its parts) did not write, and a part of `--part I/N`.
    pub fn new(dir: &Path, manifest: Manifest, names: &[String]) -> Result<Self> {
        let base = Self::of(
            dir,
            manifest,
            names,
            "pack",
            (&["pack", "merge"], "`bale pack` (or `bale merge`)"),
        )?;
        if base.manifest.created_by.command == "pack" && base.options.part.is_some() {
            return Err(mismatch(
                dir,
                "it is one part of a `--part I/N` pack: `bale merge` the parts first, then \
                 append to the merged dataset"
                    .into(),
            ));
        }
        Ok(base)
    }

    /// The label mode of the run: `auto` takes the dataset's.
    pub fn labels(&self, asked: &LabelMode) -> LabelMode {
        match (asked, self.options.labels.as_str()) {
            (LabelMode::Auto, "dir") => LabelMode::Dir,
            (LabelMode::Auto, "none") => LabelMode::None,
            (m, _) => m.clone(),
        }
    }

    /// Refuses options that would write shards unlike the dataset's,
    /// naming the first that differs.
    pub fn check_options(&self, new: &ShapingOptions) -> Result<()> {
        let old = &self.options;
        let fields: [(&str, String, String); 7] = [
            (
                "compression (--compress / --format)",
                shown(&old.compression),
                shown(&new.compression),
            ),
            ("zstd level", shown(&old.zstd_level), shown(&new.zstd_level)),
            (
                "shard size (--shard-size)",
                shown(&old.shard_size),
                shown(&new.shard_size),
            ),
            (
                "shard sample limit (--shard-samples)",
                shown(&old.shard_samples),
                shown(&new.shard_samples),
            ),
            ("labels (--labels)", shown(&old.labels), shown(&new.labels)),
            (
                "image stage (--resize, --image-format, --mode, ...)",
                shown(&old.image),
                shown(&new.image),
            ),
            ("transform", shown(&old.transform), shown(&new.transform)),
        ];
        differ(&self.dir, fields)
    }

    /// Gives the samples the dataset's class numbers: every class of the
    /// run (`classes`, numbered as the run's labels are) must be one of
    /// the dataset's. Returns the dataset's classes.
    pub fn map_labels(
        &self,
        classes: Option<Vec<String>>,
        samples: &mut [PlannedSample],
    ) -> Result<Option<Vec<String>>> {
        let old = self.manifest.labels.clone();
        let (Some(new), Some(have)) = (classes, old.as_ref()) else {
            return Ok(old);
        };
        let at: HashMap<&str, u32> = have
            .iter()
            .enumerate()
            .map(|(i, c)| (c.as_str(), i as u32))
            .collect();
        let mut to = Vec::with_capacity(new.len());
        for c in &new {
            let Some(&i) = at.get(c.as_str()) else {
                return Err(mismatch(
                    &self.dir,
                    format!(
                        "class {c:?} of this run is not one of the dataset's {} classes: an \
                         append keeps the dataset's class list (repack to add a class)",
                        have.len()
                    ),
                ));
            };
            to.push(i);
        }
        for s in samples {
            if let Some(l) = s.label.as_mut() {
                *l = to[*l as usize];
            }
        }
        Ok(old)
    }

    /// Refuses a sample whose key the dataset holds, naming the key, the
    /// file it came from and the shard that has it
    /// ([`Base::refuse_held_keys`]).
    pub fn check_keys(&self, samples: &[PlannedSample]) -> Result<()> {
        let keys: Vec<(&str, &Path)> = samples
            .iter()
            .map(|s| (s.key.as_str(), s.first_path()))
            .collect();
        self.refuse_held_keys(&keys)
    }
}

/// The dataset in object storage a `--append -o URL` run adds to, as
/// [`crate::Destination::open_appending`] read it under the prefix's lock
/// (its manifest, and the names under the prefix), for
/// [`crate::PackerBuilder::append_onto`] and [`crate::ConvertOptions::onto`].
#[derive(Debug, Clone)]
pub struct AppendBase {
    /// The prefix's URL.
    pub(crate) dir: PathBuf,
    pub(crate) manifest: Manifest,
    pub(crate) names: Vec<String>,
}

impl AppendBase {
    /// The base of `bale pack --append` ([`Base::new`]).
    pub(crate) fn for_pack(&self) -> Result<Base> {
        Base::new(&self.dir, self.manifest.clone(), &self.names)
    }
}

/// The number `N` of a shard file named `shard-N.<ext>` (six or more digits).
pub(crate) fn shard_number(name: &str) -> Option<u64> {
    let rest = Path::new(name)
        .file_name()?
        .to_str()?
        .strip_prefix("shard-")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits < 6 || !rest[digits..].starts_with('.') {
        return None;
    }
    rest[..digits].parse().ok()
}

/// An option's value as JSON, for a mismatch's message.
fn shown<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::Null) => "none".into(),
        Ok(v) => v.to_string(),
        Err(_) => "?".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_numbers_come_from_bales_names_only() {
        assert_eq!(shard_number("shard-000041.tar"), Some(41));
        assert_eq!(shard_number("shard-1234567.tar.zst"), Some(1_234_567));
        assert_eq!(shard_number("sub/shard-000002.idx"), Some(2));
        assert_eq!(shard_number("shard-41.tar"), None);
        assert_eq!(shard_number("part-0000-of-0002-shard-000001.tar"), None);
        assert_eq!(shard_number("shard-000001x.tar"), None);
    }
}
