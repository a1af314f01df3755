//! The shard writer a pack or a conversion writes into: a tar / `.tar.zst`
//! [`ShardFileWriter`] or an HDF5 [`H5ShardWriter`] (feature `hdf5`), behind
//! one set of calls.

use std::fs::File;
use std::io;
use std::path::Path;

use bale_format::MemberSource;
use bale_format::h5::H5ShardWriter;
use bale_format::hash::Hashed;
use bale_format::{Compression, EncodedSample, ShardEntry, ShardFileWriter};

use crate::error::{PackError, Result};

/// One shard being written.
#[derive(Debug)]
pub(crate) enum ShardOut {
    /// A tar or `.tar.zst` shard.
    Tar(Box<ShardFileWriter>),
    /// An HDF5 shard.
    H5(Box<H5ShardWriter>),
}

impl ShardOut {
    /// Starts shard `name` in `dir`. Without the `hdf5` feature, an `.h5`
    /// shard is an error that says how to build with it.
    pub fn create(dir: &Path, name: &str, compression: Compression, level: i32) -> Result<Self> {
        Ok(match compression {
            Compression::H5 => ShardOut::H5(Box::new(H5ShardWriter::create(dir, name)?)),
            c => ShardOut::Tar(Box::new(ShardFileWriter::create(dir, name, c, level)?)),
        })
    }

    pub fn begin_sample(&mut self, key: &str) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().begin_sample(key)?,
            ShardOut::H5(w) => w.begin_sample(key)?,
        }
        Ok(())
    }

    pub fn add_member(&mut self, ext: &str, data: &[u8]) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().add_member(ext, data)?,
            ShardOut::H5(w) => w.add_member(ext, data)?,
        }
        Ok(())
    }

    /// Adds a member whose checksum was computed on a reader thread.
    pub fn add_hashed_member(&mut self, ext: &str, data: &Hashed) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().add_hashed_member(ext, data)?,
            ShardOut::H5(w) => w.add_hashed_member(ext, data)?,
        }
        Ok(())
    }

    /// Writes a sample encoded on a reader thread. Only tar shards take
    /// encoded samples (the pipeline reads members for `.h5` shards).
    pub fn add_encoded_sample(&mut self, sample: &EncodedSample) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().add_encoded_sample(sample)?,
            ShardOut::H5(_) => {
                return Err(PackError::io(
                    sample.key(),
                    io::Error::other("an encoded tar sample cannot be written to an .h5 shard"),
                ));
            }
        }
        Ok(())
    }

    /// Streams member `ext` of `size` bytes from the file `path`, open as `file`.
    pub fn add_member_from(
        &mut self,
        ext: &str,
        size: u64,
        file: &mut File,
        path: &Path,
    ) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().add_member_from(ext, source(size, file, path))?,
            ShardOut::H5(w) => w.add_member_from(ext, source(size, file, path))?,
        }
        Ok(())
    }

    pub fn end_sample(&mut self) -> Result<()> {
        match self {
            ShardOut::Tar(w) => w.writer().end_sample()?,
            ShardOut::H5(w) => w.end_sample()?,
        }
        Ok(())
    }

    /// Finishes the shard: renames shard and index into place.
    pub fn finish(self) -> Result<ShardEntry> {
        Ok(match self {
            ShardOut::Tar(w) => (*w).finish()?,
            ShardOut::H5(w) => (*w).finish()?,
        })
    }
}

fn source<'a>(size: u64, file: &'a mut File, path: &'a Path) -> MemberSource<'a> {
    MemberSource {
        size,
        reader: file,
        path,
    }
}
