//! The hooks a pack runs on each sample in the read stage: a per-member
//! transform ([`TransformFn`]) and a per-sample one ([`SampleTransformFn`]),
//! which the image stage is built on.

use crate::error::{SampleTransformError, TransformError};

/// A per-member transform (see [`crate::PackerBuilder::transform`]): takes the
/// member's extension and bytes, returns the bytes to store.
pub type TransformFn =
    dyn Fn(&str, Vec<u8>) -> std::result::Result<Vec<u8>, TransformError> + Send + Sync;

/// One member of a sample, as a [`SampleTransformFn`] gets and returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberData {
    /// The member's extension (`jpg`, `seg.png`, `cls`).
    pub ext: String,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// A per-sample transform applied in the parallel read stage (see
/// [`crate::PackerBuilder::sample_transform`]): takes the sample's key and its
/// members (sorted by extension, labels not included), returns the members
/// to store. It may change, rename, drop or add members.
pub type SampleTransformFn = dyn Fn(&str, Vec<MemberData>) -> std::result::Result<Vec<MemberData>, SampleTransformError>
    + Send
    + Sync;
