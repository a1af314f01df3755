//! How a running pack reports progress ([`PackProgress`]) and the files it
//! skipped ([`SkippedFile`]).

use std::path::{Path, PathBuf};

use bale_format::ShardEntry;
use serde::Serialize;

/// Receives progress reports from a running pack. Every method has an empty
/// default; all are called from the thread that called [`crate::Packer::run`].
pub trait PackProgress {
    /// Discovery has found `files` candidate files so far.
    fn discovering(&self, _files: u64) {}
    /// The plan is made: this run reads `samples` samples holding `bytes` bytes of files.
    fn planned(&self, _samples: u64, _bytes: u64) {}
    /// `samples` samples holding `bytes` bytes of input have been written so far.
    fn sample_written(&self, _samples: u64, _bytes: u64) {}
    /// A shard and its index are in place.
    fn shard_finished(&self, _shard: &ShardEntry) {}
    /// A file was skipped (`--on-error skip`).
    fn skipped(&self, _file: &SkippedFile) {}
    /// Something worth telling the user (an oversize sample, unused label rows).
    fn warning(&self, _message: &str) {}
}

/// A [`PackProgress`] that ignores every report.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl PackProgress for NoProgress {}

pub(crate) fn lossy<S: serde::Serializer>(p: &Path, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

/// An input file that was not packed because of an error (`--on-error skip`).
///
/// As JSON: `path` (a path that is not UTF-8 with U+FFFD for its other
/// bytes, since JSON strings are UTF-8), `path_bytes` (the path's bytes,
/// only where it is not UTF-8, so that a script can still name the file),
/// and `error`.
#[derive(Debug, Clone)]
pub struct SkippedFile {
    /// The file.
    pub path: PathBuf,
    /// Why, as a message.
    pub error: String,
}

impl Serialize for SkippedFile {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let raw = (self.path.to_str().is_none()).then(|| path_bytes(&self.path));
        let mut st = s.serialize_struct("SkippedFile", 2 + usize::from(raw.is_some()))?;
        st.serialize_field("path", &self.path.to_string_lossy())?;
        if let Some(raw) = raw {
            st.serialize_field("path_bytes", &raw)?;
        }
        st.serialize_field("error", &self.error)?;
        st.end()
    }
}

/// A path's bytes (on Unix, exactly those the kernel takes).
pub(crate) fn path_bytes(p: &Path) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        p.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        p.to_string_lossy().into_owned().into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skipped_path_that_is_not_utf8_keeps_its_bytes_in_json() {
        use std::os::unix::ffi::OsStrExt;
        let f = SkippedFile {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(b"in/caf\xe9.jpg")),
            error: "not valid UTF-8".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(v["path"], "in/caf\u{fffd}.jpg");
        let raw: Vec<u8> = serde_json::from_value(v["path_bytes"].clone()).unwrap();
        assert_eq!(raw, b"in/caf\xe9.jpg");
        assert_eq!(v["error"], "not valid UTF-8");

        let f = SkippedFile {
            path: "in/café.jpg".into(),
            error: "truncated".into(),
        };
        let v = serde_json::to_value(&f).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"path": "in/café.jpg", "error": "truncated"})
        );
    }
}
