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
#[derive(Debug, Clone, Serialize)]
pub struct SkippedFile {
    /// The file.
    #[serde(serialize_with = "lossy")]
    pub path: PathBuf,
    /// Why, as a message.
    pub error: String,
}
