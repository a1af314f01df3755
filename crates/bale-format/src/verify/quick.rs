//! The quick check: every member's tar header at the offsets the index gives.

use super::*;

/// A positioned reader over a file, from an offset on.
pub(super) struct ReadAt<'a> {
    pub(super) file: &'a dyn crate::read_at::ReadAt,
    pub(super) pos: u64,
}

impl Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

/// Whether a tar entry is a member of some sample (a regular file whose
/// name, without a leading `./`, has an extension), as `bale index` and
/// [`SampleStream`] decide. A name that is not UTF-8 counts as a member:
/// neither skips it.
pub(super) fn is_member(e: &crate::tar::Entry) -> bool {
    e.kind == EntryKind::File
        && e.name_str()
            .is_none_or(|n| split_member_name(normalize_member_name(n)).is_some())
}

/// Parses the tar entries in `bytes` (`len` bytes, which must end exactly
/// where the member's data starts): entries that belong to no sample are
/// stepped over, the first member's header must name `key`.`ext` (by `rules`)
/// and give `size`. Returns what is wrong, if anything.
pub(super) fn check_header(
    bytes: impl Read,
    len: u64,
    key: &str,
    ext: &str,
    size: u64,
    rules: NameRules,
) -> Option<String> {
    let mut t = TarReader::new(bytes, "");
    let e = loop {
        match t.next_entry() {
            Ok(Some(e)) if is_member(&e) => break e,
            // A directory, link or file without extension: not the member's header.
            Ok(Some(_)) => {}
            Ok(None) => {
                return Some("end-of-archive block where the index puts a tar header".into());
            }
            Err(FormatError::Tar { what, .. }) => return Some(format!("bad tar header: {what}")),
            Err(FormatError::Truncated { .. }) => {
                return Some(
                    "the tar headers do not end where the index puts the member's data".into(),
                );
            }
            Err(e) => return Some(format!("tar header cannot be read: {e}")),
        }
    };
    let named = e
        .name_str()
        .map(normalize_member_name)
        .and_then(split_member_name)
        .is_some_and(|(k, x)| x == ext && rules.key_matches(key, k));
    if !named {
        Some(format!(
            "tar header names {:?}, the index says \"{key}.{ext}\"",
            String::from_utf8_lossy(&e.name)
        ))
    } else if e.size != size {
        Some(format!(
            "tar header gives size {}, the index says {size}",
            e.size
        ))
    } else if e.data_offset != len {
        Some("tar header does not end where the index puts the member's data".into())
    } else {
        None
    }
}

/// The largest `.cls` member the quick check reads to check it is a label
/// (a label is a few bytes; a larger one is left to the full check).
pub(super) const MAX_QUICK_LABEL: u64 = 64 << 10;

pub(super) fn quick_headers(
    r: &mut ShardReport,
    path: &Path,
    idx: &ShardIndex,
    shard_len: u64,
    rules: NameRules,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let Some(file) = open_or_report(r, path) else {
        return;
    };
    let compressed = idx.compression() == Compression::Zstd;
    if compressed {
        // The shard's own copy of its dictionary (what `zstd -D` and
        // `bale index` use) must be the index's (what readers use).
        let same = match crate::read::read_shard_zstd_dict(&*file, path) {
            Ok(d) => d.as_deref().unwrap_or(&[]) == idx.zstd_dict(),
            Err(_) => false,
        };
        if !same {
            r.push(
                Problem::new(
                    &name,
                    "the zstd dictionary at the shard's start differs from the one its index holds",
                )
                .offset(0),
            );
        }
    }
    for i in 0..idx.len() {
        idx.release_behind(i);
        let e = idx.sample(i);
        let key = idx.key(i);
        if e.file_offset.saturating_add(e.file_len) > shard_len {
            let left = idx.len() - i;
            r.push(
                Problem::new(
                    &name,
                    format!("the shard ends before this sample: {left} samples from here on lie past its end"),
                )
                .key(key)
                .offset(e.file_offset),
            );
            return;
        }
        // For a compressed shard, the sample's tar bytes; else read per member.
        let buf = if compressed {
            match read_sample(&*file, path, idx, &e) {
                Ok(b) => Some(b),
                Err(err) => {
                    r.push(
                        Problem::new(&name, format!("sample does not decompress: {err}"))
                            .key(key)
                            .offset(e.file_offset),
                    );
                    continue;
                }
            }
        } else {
            None
        };
        let mut start = e.tar_offset;
        let mut read = 0u64;
        for m in idx.members(i) {
            if m.offset < start {
                r.push(
                    Problem::new(&name, "member overlaps the previous one")
                        .key(key)
                        .member(m.ext)
                        .offset(m.offset),
                );
                break;
            }
            let len = m.offset - start;
            let found = match &buf {
                Some(b) => {
                    let a = (start - b.tar_offset) as usize;
                    let z = (m.offset - b.tar_offset) as usize;
                    b.data
                        .get(a..z)
                        .map(|region| check_header(region, len, key, m.ext, m.size, rules))
                }
                None => {
                    // Usually one read of the member's header(s); entries stepped
                    // over (a directory, a file without extension) are read through.
                    let at = ReadAt {
                        file: &*file,
                        pos: start,
                    }
                    .take(len);
                    let reader = BufReader::with_capacity(len.clamp(1, 1 << 16) as usize, at);
                    Some(check_header(reader, len, key, m.ext, m.size, rules))
                }
            };
            let Some(found) = found else {
                r.push(
                    Problem::new(&name, "tar header cannot be read")
                        .key(key)
                        .member(m.ext)
                        .offset(start),
                );
                break;
            };
            read += len;
            if let Some(what) = found {
                r.push(
                    Problem::new(&name, what)
                        .key(key)
                        .member(m.ext)
                        .offset(start),
                );
            }
            // A label is read too (a few bytes beside the header just read):
            // one no reader parses is reported at every level.
            if m.ext == "cls" && m.size <= MAX_QUICK_LABEL {
                let data = match &buf {
                    Some(b) => {
                        let a = (m.offset - b.tar_offset) as usize;
                        b.data.get(a..a + m.size as usize).map(<[u8]>::to_vec)
                    }
                    None => read_exact_at(&*file, path, m.offset, m.size).ok(),
                };
                let what = match data {
                    Some(d) => member_problem(m.ext, &d),
                    None => Some("the .cls member cannot be read".into()),
                };
                if let Some(what) = what {
                    r.push(
                        Problem::new(&name, what)
                            .key(key)
                            .member(m.ext)
                            .offset(m.offset),
                    );
                }
                read += m.size;
            }
            r.members_checked += 1;
            start = m.offset + crate::tar::padded(m.size);
        }
        r.samples_checked += 1;
        let n = if compressed { e.file_len } else { read };
        r.bytes_read += n;
        visitor.progress(n);
    }
    // The end-of-archive blocks of a plain tar.
    if !compressed && idx.tar_len() >= 1024 {
        match read_exact_at(&*file, path, idx.tar_len() - 1024, 1024) {
            Ok(b) if b.iter().all(|&x| x == 0) => {}
            Ok(_) => r.push(
                Problem::new(&name, "the tar does not end with two zero blocks")
                    .offset(idx.tar_len() - 1024),
            ),
            Err(err) => r.push(Problem::new(
                &name,
                format!("the tar's end cannot be read: {err}"),
            )),
        }
    }
}
