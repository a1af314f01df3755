//! `.tar.zst` with one zstd frame per sample: frame boundaries from the
//! block headers, each frame decompressed to find its sample.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Frame {
    pub(super) offset: u64,
    pub(super) len: u64,
    pub(super) skippable: bool,
}

pub(super) fn read_le(
    file: &dyn ReadAt,
    path: &Path,
    offset: u64,
    n: usize,
    len: u64,
    what: &'static str,
) -> Result<u64> {
    if offset + n as u64 > len {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what,
            needed: offset + n as u64,
            len,
        });
    }
    let mut b = [0u8; 8];
    file.read_exact_at(&mut b[..n], offset)
        .map_err(|e| FormatError::io_at(path, offset, e))?;
    Ok(u64::from_le_bytes(b))
}

/// Finds the frame at `offset` and its length, from its header and block headers only.
pub(super) fn frame_at(file: &dyn ReadAt, path: &Path, offset: u64, len: u64) -> Result<Frame> {
    let magic = read_le(file, path, offset, 4, len, "a zstd frame header")? as u32;
    if magic & 0xFFFF_FFF0 == SKIPPABLE_MAGIC {
        let size = read_le(
            file,
            path,
            offset + 4,
            4,
            len,
            "a zstd skippable frame header",
        )?;
        let end = offset + 8 + size;
        if end > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd skippable frame",
                needed: end,
                len,
            });
        }
        return Ok(Frame {
            offset,
            len: end - offset,
            skippable: true,
        });
    }
    if magic != ZSTD_MAGIC {
        return Err(FormatError::corrupt(
            path,
            offset,
            format!("expected a zstd frame (magic 28 b5 2f fd), found {magic:08x}"),
        ));
    }
    let fhd = read_le(file, path, offset + 4, 1, len, "a zstd frame header")? as u8;
    if fhd & 0x08 != 0 {
        return Err(FormatError::corrupt(
            path,
            offset + 4,
            "zstd frame header has its reserved bit set",
        ));
    }
    let single_segment = fhd & 0x20 != 0;
    let fcs_len = match fhd >> 6 {
        0 => u64::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    let dict_len = [0u64, 1, 2, 4][(fhd & 3) as usize];
    let header_len = 1 + u64::from(!single_segment) + dict_len + fcs_len;
    let mut p = offset + 4 + header_len;
    loop {
        let bh = read_le(file, path, p, 3, len, "a zstd block header")?;
        let last = bh & 1 != 0;
        let size = bh >> 3;
        let content = match (bh >> 1) & 3 {
            0 | 2 => size,
            1 => 1,
            _ => {
                return Err(FormatError::corrupt(
                    path,
                    p,
                    "zstd block of the reserved type 3",
                ));
            }
        };
        if size > MAX_ZSTD_BLOCK {
            return Err(FormatError::corrupt(
                path,
                p,
                format!("zstd block of {size} bytes, more than 128 KiB"),
            ));
        }
        p += 3 + content;
        if p > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd block",
                needed: p,
                len,
            });
        }
        if last {
            break;
        }
    }
    if fhd & 0x04 != 0 {
        p += 4;
        if p > len {
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "a zstd frame checksum",
                needed: p,
                len,
            });
        }
    }
    Ok(Frame {
        offset,
        len: p - offset,
        skippable: false,
    })
}

/// A region of a file as a reader, hashing what passes through when asked.
pub(super) struct At<'a> {
    pub(super) file: &'a dyn ReadAt,
    pub(super) pos: u64,
    pub(super) end: u64,
    pub(super) hash: Option<&'a mut Xxh3>,
    pub(super) read: u64,
}

impl Read for At<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (self.end - self.pos).min(buf.len() as u64) as usize;
        if n == 0 {
            return Ok(0);
        }
        let k = self.file.read_at(&mut buf[..n], self.pos)?;
        if k == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being read",
            ));
        }
        if let Some(h) = self.hash.as_mut() {
            h.update(&buf[..k]);
        }
        self.pos += k as u64;
        self.read += k as u64;
        Ok(k)
    }
}

/// Decompresses frame `f` of `file`, streaming (the compressed bytes are not
/// held), up to `limit` bytes of output (more is [`FormatError::Limit`]).
/// Every byte of the frame passes through `hash`. Returns the output and the
/// number of bytes read from the file.
pub(super) fn decompress(
    file: &dyn ReadAt,
    path: &Path,
    f: Frame,
    limit: u64,
    hash: Option<&mut Xxh3>,
    dict: &[u8],
) -> Result<(Vec<u8>, u64)> {
    let bad = |e: io::Error| FormatError::corrupt(path, f.offset, format!("bad zstd frame: {e}"));
    let at = At {
        file,
        pos: f.offset,
        end: f.offset + f.len,
        hash,
        read: 0,
    };
    let at = io::BufReader::with_capacity(zstd::zstd_safe::DCtx::in_size(), at);
    let mut dec = zstd::stream::read::Decoder::with_dictionary(at, dict)
        .map_err(bad)?
        .single_frame();
    let mut out = Vec::new();
    (&mut dec)
        .take(limit + 1)
        .read_to_end(&mut out)
        .map_err(bad)?;
    if out.len() as u64 > limit {
        return Err(FormatError::Limit {
            path: path.to_path_buf(),
            what: format!(
                "the zstd frame at offset {} decompresses to more than {limit} bytes",
                f.offset
            ),
        });
    }
    // Whatever of the frame the decoder did not need still counts for the file's hash.
    let mut at = dec.finish().into_inner();
    io::copy(&mut at, &mut io::sink()).map_err(|e| FormatError::io_at(path, at.pos, e))?;
    Ok((out, at.read))
}

/// Reads a frame that holds no tar data, for the whole file's hash.
pub(super) fn hash_frame(file: &dyn ReadAt, path: &Path, f: Frame, hash: &mut Xxh3) -> Result<u64> {
    let mut at = At {
        file,
        pos: f.offset,
        end: f.offset + f.len,
        hash: Some(hash),
        read: 0,
    };
    io::copy(&mut at, &mut io::sink()).map_err(|e| FormatError::io_at(path, at.pos, e))?;
    Ok(at.read)
}

pub(super) fn single_frame_error(path: &Path) -> FormatError {
    FormatError::tar(
        path,
        0,
        "single-frame zstd: the whole tar is one zstd frame, which cannot be read at random, so bale cannot \
         index it in place; decompress it (`zstd -d`) and index the plain .tar, repack it with \
         `bale pack --compress zstd` (one frame per sample), or convert it with `bale convert`",
    )
}

pub(super) fn scan_zstd(
    file: &dyn ReadAt,
    path: &Path,
    len: u64,
    opts: &ScanOptions,
) -> Result<ScannedShard> {
    // Walk the frames first (headers only), so a single-frame file is refused
    // before anything is decompressed.
    let mut frames = Vec::new();
    let mut at = 0u64;
    while at < len {
        let f = frame_at(file, path, at, len)?;
        at += f.len;
        frames.push(f);
    }
    let data_frames = frames.iter().filter(|f| !f.skippable).count();
    if data_frames == 0 {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "a zstd frame",
            needed: len + 1,
            len,
        });
    }
    // bale's shards keep their dictionary in a skippable frame at offset 0.
    let dict = match frames.first() {
        Some(f) if f.skippable && f.offset == 0 => {
            crate::read::read_shard_zstd_dict(file, path)?.unwrap_or_default()
        }
        _ => Vec::new(),
    };
    if data_frames == 1 {
        // An empty shard is one frame of end blocks; anything else is a whole tar in one frame.
        let f = frames
            .iter()
            .find(|f| !f.skippable)
            .copied()
            .unwrap_or(frames[0]);
        let (head, _) = decompress(file, path, f, 64 << 10, None, &dict).map_err(|e| {
            if matches!(e, FormatError::Limit { .. }) {
                single_frame_error(path)
            } else {
                e
            }
        })?;
        if head.iter().any(|&b| b != 0) {
            return Err(single_frame_error(path));
        }
    }
    let mut g = Grouper::new(path, *opts, Compression::Zstd);
    g.index.set_zstd_dict(&dict);
    let mut file_hash = opts.checksums.then(Xxh3::new);
    let mut bytes_read = 0u64;
    let mut base = 0u64;
    let mut tar_len: Option<u64> = None;
    for &f in &frames {
        if f.skippable || tar_len.is_some() {
            // Not tar data (a skippable frame, or frames after the end blocks):
            // read only to hash the whole file.
            if let Some(h) = file_hash.as_mut() {
                bytes_read += hash_frame(file, path, f, h)?;
            }
            continue;
        }
        let (data, read) = decompress(file, path, f, MAX_FRAME_CONTENT, file_hash.as_mut(), &dict)?;
        bytes_read += read;
        let end = base + data.len() as u64;
        let mut src = Slice { data, base };
        let mut open: Option<OpenSample> = None;
        let mut pos = base;
        loop {
            let e = match next_entry(&mut src, path, pos, end, Bound::Frame(f.offset))? {
                Step::Entry(e) => e,
                Step::Zero(at) => {
                    if open.is_some() || at != base {
                        return Err(FormatError::tar(
                            path,
                            at,
                            format!(
                                "the end-of-archive blocks share the zstd frame at file offset {} with members: \
                                 the shard is not compressed one frame per sample",
                                f.offset
                            ),
                        ));
                    }
                    tar_len = Some(end);
                    break;
                }
                Step::End(_) => break,
            };
            pos = e.data_offset + padded(e.size);
            if pos > end {
                return Err(past_end(
                    path,
                    Bound::Frame(f.offset),
                    e.header_offset,
                    "member padding",
                    pos,
                    end,
                ));
            }
            let Some(m) = g.member_of(&e)? else {
                if open.is_some() {
                    return Err(frame_extra(path, f, e.header_offset));
                }
                continue;
            };
            let sum = member_sum(&mut src, path, &m, opts.checksums)?;
            match open.as_mut() {
                Some(o) if o.tar_key == m.key => g.add(o, m, sum)?,
                Some(o) => {
                    return Err(FormatError::tar(
                        path,
                        m.header_offset,
                        format!(
                            "the zstd frame at file offset {} holds more than one sample ({:?} and {:?}): \
                             the shard is not compressed one frame per sample; decompress it and index the \
                             plain .tar, or repack it with `bale pack`",
                            f.offset, o.tar_key, m.key
                        ),
                    ));
                }
                None => {
                    if m.header_offset != base {
                        return Err(frame_extra(path, f, base));
                    }
                    if g.last_tar_key.as_deref() == Some(m.key.as_str()) {
                        return Err(FormatError::tar(
                            path,
                            m.header_offset,
                            format!(
                                "sample {:?} is spread over more than one zstd frame (this one at file offset {}): \
                                 the shard is not compressed one frame per sample; decompress it and index the \
                                 plain .tar, or repack it with `bale pack`",
                                m.key, f.offset
                            ),
                        ));
                    }
                    open = Some(g.start(m, sum)?);
                }
            }
        }
        if let Some(o) = open.take() {
            if o.end != end {
                return Err(frame_extra(path, f, o.end));
            }
            g.close(o, Some((f.offset, f.len)))?;
        }
        base = end;
    }
    let Some(tar_len) = tar_len else {
        return Err(FormatError::Truncated {
            path: path.to_path_buf(),
            what: "the end-of-archive blocks",
            needed: base + 2 * BLOCK,
            len: base,
        });
    };
    g.stats.bytes_read = bytes_read;
    Ok(g.finish(
        Compression::Zstd,
        len,
        tar_len,
        file_hash.map(|h| h.digest()),
    ))
}

pub(super) fn frame_extra(path: &Path, f: Frame, at: u64) -> FormatError {
    FormatError::tar(
        path,
        at,
        format!(
            "the zstd frame at file offset {} holds tar entries outside its sample: the shard is not compressed \
             one frame per sample; decompress it and index the plain .tar, or repack it with `bale pack`",
            f.offset
        ),
    )
}
