//! The marker of a staging folder, `.bale-stage.json`: written before
//! anything else, it says the folder is bale's and which files in it bale
//! wrote (or is about to write).

use std::collections::BTreeSet;
use std::path::{Component, Path};

use bale_format::FormatError;
use bale_format::atomic::replace_atomic;
use bale_format::files::read_capped;
use bale_format::shown;
use serde::{Deserialize, Serialize};

use crate::error::{ReaderError, Result, StageErrorKind};

/// The file name of a staging folder's marker.
pub const MARKER: &str = ".bale-stage.json";
/// The marker format this crate writes and reads.
const MARKER_VERSION: u32 = 1;
/// Largest marker read (it lists the files: room for about 500,000).
const MAX_MARKER_BYTES: u64 = 64 << 20;

/// The contents of `.bale-stage.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Marker {
    /// Marker format version (1).
    pub bale_stage: u32,
    /// The dataset that was copied (absolute path).
    pub source: String,
    /// xxh3 of the source's bale.json bytes, 16 hex digits.
    pub manifest_xxh3: String,
    /// Whether bale mounted a tmpfs on this folder (then unstage unmounts it).
    pub mounted: bool,
    /// Files the copy holds besides the manifest, relative to the folder.
    pub files: Vec<String>,
    /// Whether the folder was there before bale first staged into it (the
    /// user's, given with `--to`): unstage empties it and leaves it. Absent
    /// in markers of older versions: then bale made it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kept: bool,
}

impl Marker {
    /// A marker for a copy of `source` holding `files`.
    pub fn new(source: &Path, manifest_xxh3: String, mounted: bool, files: Vec<String>) -> Self {
        Marker {
            bale_stage: MARKER_VERSION,
            source: source.display().to_string(),
            manifest_xxh3,
            mounted,
            files,
            kept: false,
        }
    }

    /// The files this marker says bale wrote, as plain relative paths (a
    /// name that could leave the folder is not one of them).
    pub fn owned(&self) -> BTreeSet<&str> {
        self.files
            .iter()
            .map(String::as_str)
            .filter(|f| is_plain_relative(f))
            .collect()
    }
}

/// Whether `p` is a relative path of plain names (no `..`, no root, not empty).
pub(crate) fn is_plain_relative(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Reads the marker of `dir`; `None` when it has none.
///
/// # Errors
/// A marker that is not a regular file, too large, not JSON of this shape,
/// or of another version; I/O errors.
pub(crate) fn read(dir: &Path) -> Result<Option<Marker>> {
    let path = dir.join(MARKER);
    let bytes = match read_capped(&path, MAX_MARKER_BYTES, "staging marker") {
        Ok(b) => b,
        Err(FormatError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    let bad = |why: String| ReaderError::Stage {
        path: path.clone(),
        what: format!("{} is not a valid bale staging marker: {why}", shown(&path)),
        kind: StageErrorKind::NotStagingFolder,
    };
    let m: Marker = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    if m.bale_stage != MARKER_VERSION {
        return Err(bad(format!(
            "version {} (this bale reads version {MARKER_VERSION})",
            m.bale_stage
        )));
    }
    Ok(Some(m))
}

/// Writes the marker of `dir` atomically, replacing the one there (the
/// marker is the staging folder's own file).
pub(crate) fn write(dir: &Path, m: &Marker) -> Result<()> {
    let mut bytes = serde_json::to_vec_pretty(m).unwrap_or_default();
    bytes.push(b'\n');
    replace_atomic(dir.join(MARKER), &bytes)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_round_trips_and_bad_ones_are_refused() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(read(d.path()).unwrap(), None);
        let m = Marker::new(
            Path::new("/data/ds"),
            "0123456789abcdef".into(),
            false,
            vec![
                "a.tar".into(),
                "../escape".into(),
                "/abs".into(),
                "s/b.idx".into(),
            ],
        );
        write(d.path(), &m).unwrap();
        assert_eq!(read(d.path()).unwrap(), Some(m.clone()));
        assert_eq!(
            m.owned().into_iter().collect::<Vec<_>>(),
            ["a.tar", "s/b.idx"]
        );
        // Rewriting replaces the marker.
        let mut m2 = m.clone();
        m2.mounted = true;
        write(d.path(), &m2).unwrap();
        assert!(read(d.path()).unwrap().unwrap().mounted);

        std::fs::write(d.path().join(MARKER), b"{\"bale_stage\": 1}").unwrap();
        let e = read(d.path()).unwrap_err();
        assert!(
            e.to_string().contains("is not a valid bale staging marker"),
            "{e}"
        );
        let mut v = serde_json::to_value(&m).unwrap();
        v["bale_stage"] = 2.into();
        std::fs::write(d.path().join(MARKER), v.to_string()).unwrap();
        let e = read(d.path()).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
        std::fs::remove_file(d.path().join(MARKER)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", d.path().join(MARKER)).unwrap();
        let e = read(d.path()).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }

    #[test]
    fn plain_relative_paths() {
        assert!(is_plain_relative("shard-000000.tar"));
        assert!(is_plain_relative("train/shard-000000.tar"));
        assert!(!is_plain_relative(""));
        assert!(!is_plain_relative("../x.tar"));
        assert!(!is_plain_relative("a/../../x.tar"));
        assert!(!is_plain_relative("/etc/passwd"));
        assert!(!is_plain_relative("./x.tar"));
    }
}
