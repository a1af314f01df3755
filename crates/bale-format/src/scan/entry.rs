//! One tar entry at an offset, through the shared header loop
//! ([`crate::tar::EntryHeaders`]), bounded by the end of the file or frame.

use super::*;

/// Where the bytes being parsed end.
#[derive(Clone, Copy)]
pub(super) enum Bound {
    /// The end of a plain tar file.
    File,
    /// The end of a decompressed zstd frame that starts at this file offset.
    Frame(u64),
}

pub(super) enum Step {
    Entry(Entry),
    /// A zero block (end of archive) at this offset.
    Zero(u64),
    /// The bytes end exactly here, at a header boundary, without a zero block.
    End(u64),
}

pub(super) fn past_end(
    path: &Path,
    bound: Bound,
    at: u64,
    what: &'static str,
    needed: u64,
    end: u64,
) -> FormatError {
    match bound {
        Bound::File => FormatError::Truncated {
            path: path.to_path_buf(),
            what,
            needed,
            len: end,
        },
        Bound::Frame(frame) => FormatError::tar(
            path,
            at,
            format!(
                "{what} crosses the end of the zstd frame at file offset {frame}: the shard is not compressed \
                 one frame per sample; decompress it and index the plain .tar, or repack it with `bale pack`"
            ),
        ),
    }
}

/// Reads the entry whose first header is at `pos` (which is < `end` or == `end`).
pub(super) fn next_entry(
    src: &mut dyn ByteSource,
    path: &Path,
    mut pos: u64,
    end: u64,
    bound: Bound,
) -> Result<Step> {
    let mut headers = EntryHeaders::default();
    loop {
        let at = pos;
        if at == end {
            if headers.pending() {
                return Err(FormatError::tar(
                    path,
                    at,
                    "archive ends after an extended header",
                ));
            }
            return Ok(Step::End(at));
        }
        if end - at < BLOCK {
            return Err(past_end(path, bound, at, "a tar header", at + BLOCK, end));
        }
        let mut block = [0u8; BLOCK as usize];
        src.read_at(at, &mut block)?;
        pos = at + BLOCK;
        match headers.block(&block, at, path)? {
            HeaderStep::End => return Ok(Step::Zero(at)),
            HeaderStep::Extended { typeflag, size } => {
                if end - pos < padded(size) {
                    return Err(past_end(
                        path,
                        bound,
                        at,
                        "an extended header",
                        pos + padded(size),
                        end,
                    ));
                }
                let mut data = vec![0u8; size as usize];
                src.read_at(pos, &mut data)?;
                pos += padded(size);
                headers.extended(typeflag, data, path, at)?;
            }
            HeaderStep::Entry(e) => {
                if end - e.data_offset < e.size {
                    return Err(past_end(
                        path,
                        bound,
                        at,
                        "member data",
                        e.data_offset + e.size,
                        end,
                    ));
                }
                return Ok(Step::Entry(e));
            }
        }
    }
}
