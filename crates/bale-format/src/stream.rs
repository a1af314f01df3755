//! Sequential reading: a shard (or any WebDataset tar) as a stream of samples.

use std::io::Read;
use std::path::PathBuf;

use crate::error::{FormatError, Result};
use crate::name::split_member_name;
use crate::scan::normalize_member_name;
use crate::tar::{EntryKind, TarReader};

/// Buffer size for sequential shard reads (4 MiB).
pub const STREAM_BUFFER: usize = 4 << 20;

/// One member read from a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMember {
    /// Extension.
    pub ext: String,
    /// Data.
    pub data: Vec<u8>,
    /// Offset of the data in the uncompressed tar stream.
    pub offset: u64,
}

/// One sample read from a stream: a run of members sharing a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSample {
    /// The key.
    pub key: String,
    /// Members in stream order.
    pub members: Vec<StreamMember>,
    /// Offset of the first member's first header in the uncompressed tar stream.
    pub tar_offset: u64,
    /// Offset just past the last member's padding.
    pub tar_end: u64,
}

/// Groups the regular-file members of a tar stream into samples by
/// WebDataset's rule: consecutive members with the same key form a sample.
///
/// Directories, links and members whose base name has no dot are skipped,
/// as WebDataset does. A member name that is not UTF-8 is an error.
/// Names are taken as they are, unless [`SampleStream::strip_dot_slash`] is set.
#[derive(Debug)]
pub struct SampleStream<R> {
    tar: TarReader<R>,
    next: Option<(String, StreamMember, u64)>,
    done: bool,
    strip_dot_slash: bool,
}

impl<R: Read> SampleStream<R> {
    /// Wraps an uncompressed tar stream; `path` names it in errors.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        Self {
            tar: TarReader::new(inner, path),
            next: None,
            done: false,
            strip_dot_slash: false,
        }
    }

    /// Removes any leading `./` from member names before splitting them into
    /// key and extension, as `bale index` does
    /// ([`normalize_member_name`]): `./d/0001.jpg` is then member `jpg` of
    /// sample `d/0001`. Off by default (WebDataset keeps the `./`).
    pub fn strip_dot_slash(mut self, yes: bool) -> Self {
        self.strip_dot_slash = yes;
        self
    }

    fn next_member(&mut self) -> Result<Option<(String, StreamMember, u64)>> {
        loop {
            let Some(e) = self.tar.next_entry()? else {
                return Ok(None);
            };
            if e.kind != EntryKind::File {
                continue;
            }
            let name = e.name_str().ok_or_else(|| {
                FormatError::tar(
                    self.tar.path().to_path_buf(),
                    e.header_offset,
                    format!(
                        "member name {:?} is not UTF-8",
                        String::from_utf8_lossy(&e.name)
                    ),
                )
            })?;
            let name = if self.strip_dot_slash {
                normalize_member_name(name)
            } else {
                name
            };
            let Some((key, ext)) = split_member_name(name) else {
                continue;
            };
            let (key, ext) = (key.to_owned(), ext.to_owned());
            let mut data = Vec::new();
            self.tar.read_data(&mut data)?;
            return Ok(Some((
                key,
                StreamMember {
                    ext,
                    data,
                    offset: e.data_offset,
                },
                e.header_offset,
            )));
        }
    }

    /// The next sample, or `None` at the end of the archive.
    ///
    /// # Errors
    /// Tar errors naming the file and offset.
    pub fn next_sample(&mut self) -> Result<Option<StreamSample>> {
        if self.done {
            return Ok(None);
        }
        let first = match self.next.take() {
            Some(m) => m,
            None => match self.next_member()? {
                Some(m) => m,
                None => {
                    self.done = true;
                    return Ok(None);
                }
            },
        };
        let (key, member, tar_offset) = first;
        let mut sample = StreamSample {
            key,
            members: vec![member],
            tar_offset,
            tar_end: 0,
        };
        loop {
            let end = self.tar.position();
            match self.next_member()? {
                Some((k, m, h)) if k == sample.key => {
                    let _ = h;
                    sample.members.push(m);
                }
                Some(other) => {
                    sample.tar_end = end;
                    self.next = Some(other);
                    return Ok(Some(sample));
                }
                None => {
                    sample.tar_end = end;
                    self.done = true;
                    return Ok(Some(sample));
                }
            }
        }
    }
}

impl<R: Read> Iterator for SampleStream<R> {
    type Item = Result<StreamSample>;
    fn next(&mut self) -> Option<Self::Item> {
        match self.next_sample() {
            Ok(Some(s)) => Some(Ok(s)),
            Ok(None) => None,
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// Opens a shard file for sequential reading with large buffered reads,
/// decompressing `.tar.zst` on the fly.
///
/// # Errors
/// I/O errors opening the file; an HDF5 shard.
#[cfg(feature = "fuzzing")]
pub fn open_shard_stream(
    path: &std::path::Path,
    compression: crate::Compression,
) -> Result<SampleStream<Box<dyn Read + Send>>> {
    use crate::Compression;
    use std::io::BufReader;

    let file = crate::files::open_regular(path)?;
    let dict = match compression {
        Compression::Zstd => crate::read::read_shard_zstd_dict(&file, path)?,
        _ => None,
    };
    let buffered = BufReader::with_capacity(STREAM_BUFFER, file);
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(buffered),
        Compression::Zstd => Box::new(BufReader::with_capacity(
            STREAM_BUFFER,
            // The decoder skips the dictionary's own (skippable) frame.
            zstd::stream::read::Decoder::with_dictionary(buffered, dict.as_deref().unwrap_or(&[]))
                .map_err(|e| FormatError::io(path, e))?,
        )),
        Compression::H5 => {
            return Err(FormatError::Limit {
                path: path.to_path_buf(),
                what: "an HDF5 shard is not a tar stream: read it through its index".into(),
            });
        }
    };
    Ok(SampleStream::new(reader, path))
}
