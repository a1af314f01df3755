//! Grouping entries into samples: WebDataset's rule, split keys refused,
//! renamed or regrouped, and the index built as samples close.

use super::*;

pub(super) struct OpenSample {
    pub(super) tar_key: String,
    pub(super) tar_offset: u64,
    pub(super) end: u64,
    /// (ext, data offset, size, checksum, header offset)
    pub(super) members: Vec<(String, u64, u64, u64, u64)>,
}

pub(super) struct Grouper<'a> {
    pub(super) path: &'a Path,
    pub(super) opts: ScanOptions,
    pub(super) index: IndexBuilder,
    /// Tar key -> (first header offset, sample number) of samples already closed.
    pub(super) tar_keys: HashMap<String, (u64, usize)>,
    pub(super) index_keys: HashSet<String>,
    pub(super) fields: BTreeMap<String, FieldStats>,
    pub(super) members: u64,
    pub(super) stats: ScanStats,
    pub(super) last_tar_key: Option<String>,
    /// [`SplitPolicy::Regroup`]: the samples, held until the end of the scan.
    pub(super) held: Vec<OpenSample>,
}

/// A member found by the scan, already split into key and extension.
pub(super) struct Found {
    pub(super) key: String,
    pub(super) ext: String,
    pub(super) header_offset: u64,
    pub(super) data_offset: u64,
    pub(super) size: u64,
}

impl<'a> Grouper<'a> {
    pub(super) fn new(path: &'a Path, opts: ScanOptions, compression: Compression) -> Self {
        Self {
            path,
            opts,
            index: IndexBuilder::with_checksums(compression, opts.checksums),
            tar_keys: HashMap::new(),
            index_keys: HashSet::new(),
            fields: BTreeMap::new(),
            members: 0,
            stats: ScanStats::default(),
            last_tar_key: None,
            held: Vec::new(),
        }
    }

    /// Classifies an entry: `Ok(None)` for entries that belong to no sample (counted).
    pub(super) fn member_of(&mut self, e: &Entry) -> Result<Option<Found>> {
        self.stats.entries += 1;
        if e.kind != EntryKind::File {
            self.stats.skipped_not_files += 1;
            return Ok(None);
        }
        let raw = std::str::from_utf8(&e.name).map_err(|_| {
            FormatError::tar(
                self.path,
                e.header_offset,
                format!(
                    "member name {:?} is not UTF-8",
                    String::from_utf8_lossy(&e.name)
                ),
            )
        })?;
        let name = normalize_member_name(raw);
        let Some((key, ext)) = split_member_name(name) else {
            self.stats.skipped_no_extension += 1;
            return Ok(None);
        };
        for check in [validate_key(key), crate::name::validate_written_ext(ext)] {
            if let Err(FormatError::InvalidName { reason, .. }) = check {
                return Err(FormatError::tar(
                    self.path,
                    e.header_offset,
                    format!(
                        "member {raw:?} cannot be indexed: {reason} (key {key:?}, extension {ext:?}); \
                         rename it in the tar or repack with `bale pack`"
                    ),
                ));
            }
        }
        if name.len() != raw.len() {
            self.stats.stripped_dot_slash += 1;
        }
        if e.long_name {
            self.stats.long_names += 1;
        }
        Ok(Some(Found {
            key: key.to_owned(),
            ext: ext.to_owned(),
            header_offset: e.header_offset,
            data_offset: e.data_offset,
            size: e.size,
        }))
    }

    /// Adds a member to `open` (which must hold the same key).
    /// Opens a sample with its first member `m`.
    pub(super) fn start(&mut self, m: Found, sum: u64) -> Result<OpenSample> {
        let mut o = OpenSample {
            tar_key: m.key.clone(),
            tar_offset: m.header_offset,
            end: 0,
            members: Vec::new(),
        };
        self.add(&mut o, m, sum)?;
        Ok(o)
    }

    pub(super) fn add(&mut self, open: &mut OpenSample, m: Found, sum: u64) -> Result<()> {
        if let Some(prev) = open.members.iter().find(|p| p.0 == m.ext) {
            return Err(FormatError::tar(
                self.path,
                m.header_offset,
                format!(
                    "member {}.{} repeats extension {:?} of sample {:?}, whose member at offset {} has it already",
                    m.key, m.ext, m.ext, open.tar_key, prev.4
                ),
            ));
        }
        open.end = m.data_offset + padded(m.size);
        open.members
            .push((m.ext, m.data_offset, m.size, sum, m.header_offset));
        Ok(())
    }

    /// Records a finished sample; `file` is its byte range in the shard file
    /// (the tar range for a plain tar, the frame for `.tar.zst`).
    pub(super) fn close(&mut self, s: OpenSample, file: Option<(u64, u64)>) -> Result<()> {
        if self.opts.split == SplitPolicy::Regroup {
            return self.hold(s);
        }
        let number = self.index.len();
        let key = match self.tar_keys.get(&s.tar_key) {
            None => s.tar_key.clone(),
            Some(&(first, sample)) => match self.opts.split {
                // (Regroup never gets here: `close` holds its samples.)
                SplitPolicy::Refuse | SplitPolicy::Regroup => {
                    return Err(FormatError::SplitSample {
                        path: self.path.to_path_buf(),
                        offset: s.tar_offset,
                        key: s.tar_key.clone(),
                        first,
                        sample: sample as u64,
                    });
                }
                SplitPolicy::Rename => self.free_key(&s.tar_key),
            },
        };
        let key = if self.index_keys.contains(&key) {
            self.free_key(&key)
        } else {
            key
        };
        if key != s.tar_key {
            self.stats.renamed.push(Renamed {
                tar_key: s.tar_key.clone(),
                key: key.clone(),
                tar_offset: s.tar_offset,
            });
        }
        let tar_len = s.end - s.tar_offset;
        let (file_offset, file_len) = file.unwrap_or((s.tar_offset, tar_len));
        self.push_indexed(&key, (file_offset, file_len), (s.tar_offset, tar_len), &s)?;
        self.tar_keys
            .entry(s.tar_key.clone())
            .or_insert((s.tar_offset, number));
        self.index_keys.insert(key);
        self.last_tar_key = Some(s.tar_key);
        Ok(())
    }

    /// [`SplitPolicy::Regroup`]: keeps a finished run, joined to its key's
    /// first run if the key was seen before.
    pub(super) fn hold(&mut self, s: OpenSample) -> Result<()> {
        let Some(&(first, number)) = self.tar_keys.get(&s.tar_key) else {
            if self.held.len() >= u32::MAX as usize - 1 {
                return Err(FormatError::Limit {
                    path: self.path.to_path_buf(),
                    what: "the shard exceeds the index's limits (2^32-1 samples)".into(),
                });
            }
            self.tar_keys
                .insert(s.tar_key.clone(), (s.tar_offset, self.held.len()));
            self.held.push(s);
            return Ok(());
        };
        let sample = &mut self.held[number];
        for m in &s.members {
            if let Some(prev) = sample.members.iter().find(|p| p.0 == m.0) {
                return Err(FormatError::tar(
                    self.path,
                    m.4,
                    format!(
                        "member {key}.{ext} at offset {} repeats extension {ext:?} of sample {key:?}, whose member \
                         at offset {} has it already: the key reappears after other samples, and regrouping \
                         (--allow-split) would give the sample two {ext:?} members",
                        m.4,
                        prev.4,
                        key = s.tar_key,
                        ext = m.0,
                    ),
                ));
            }
        }
        self.stats.regrouped.push(Regrouped {
            key: s.tar_key,
            first_offset: first,
            tar_offset: s.tar_offset,
        });
        sample.members.extend(s.members);
        Ok(())
    }

    /// [`SplitPolicy::Regroup`]: builds the index from the held samples, at
    /// the end of the scan. Without regrouped samples it is the index the
    /// other policies give; with them, a scattered one. Returns whether it is
    /// scattered.
    pub(super) fn release(&mut self) -> Result<bool> {
        let scattered = !self.stats.regrouped.is_empty();
        if scattered {
            self.index = std::mem::take(&mut self.index).scattered();
        }
        for s in std::mem::take(&mut self.held) {
            let range = if scattered {
                (0, 0)
            } else {
                (s.tar_offset, s.end - s.tar_offset)
            };
            self.push_indexed(&s.tar_key, range, range, &s)?;
        }
        Ok(scattered)
    }

    /// Adds sample `s` to the index under `key`, with its (offset, length)
    /// in the file and in the tar stream, and counts its members.
    pub(super) fn push_indexed(
        &mut self,
        key: &str,
        (file_offset, file_len): (u64, u64),
        (tar_offset, tar_len): (u64, u64),
        s: &OpenSample,
    ) -> Result<()> {
        let members: Vec<(&str, u64, u64, u64)> = s
            .members
            .iter()
            .map(|m| (m.0.as_str(), m.1, m.2, m.3))
            .collect();
        self.index
            .push_sample(key, file_offset, file_len, tar_offset, tar_len, &members);
        if self.index.over_limits() {
            return Err(FormatError::Limit {
                path: self.path.to_path_buf(),
                what: "the shard exceeds the index's limits (2^32-1 samples, members or key bytes)"
                    .into(),
            });
        }
        for m in &s.members {
            let f = self.fields.entry(m.0.clone()).or_default();
            f.count += 1;
            f.bytes += m.2;
        }
        self.members += s.members.len() as u64;
        Ok(())
    }

    pub(super) fn free_key(&self, base: &str) -> String {
        (2u64..)
            .map(|n| format!("{base}~{n}"))
            .find(|k| !self.index_keys.contains(k) && !self.tar_keys.contains_key(k))
            .unwrap_or_default()
    }

    pub(super) fn finish(
        self,
        compression: Compression,
        shard_len: u64,
        tar_len: u64,
        shard_checksum: Option<u64>,
    ) -> ScannedShard {
        ScannedShard {
            path: self.path.to_path_buf(),
            compression,
            shard_len,
            tar_len,
            samples: self.index.len() as u64,
            members: self.members,
            fields: self.fields,
            shard_checksum,
            stats: self.stats,
            index: self.index,
        }
    }
}

/// The xxh3 of member `m`'s data when checksums are asked for, else 0.
/// A `.cls` member is read whatever `checksums` says: a label no reader can
/// parse ([`crate::parse_label`]) is refused, naming the sample.
pub(super) fn member_sum(
    src: &mut dyn ByteSource,
    path: &Path,
    m: &Found,
    checksums: bool,
) -> Result<u64> {
    if m.ext == "cls" {
        let bad = |what: String| {
            Err(FormatError::tar(
                path,
                m.header_offset,
                format!(
                    "sample {:?} has a .cls member that is not a decimal integer{what}; \
                     a label is an integer in ASCII (such as 3), which every reader parses",
                    m.key
                ),
            ))
        };
        if m.size > crate::name::MAX_LABEL_BYTES {
            return bad(format!(" ({} bytes)", m.size));
        }
        let mut data = vec![0u8; m.size as usize];
        src.read_at(m.data_offset, &mut data)?;
        if crate::name::parse_label(&data).is_none() {
            let shown = String::from_utf8_lossy(&data[..data.len().min(64)]);
            return bad(format!(": {shown:?}"));
        }
        return Ok(if checksums {
            crate::hash::xxh3_64(&data)
        } else {
            0
        });
    }
    if checksums {
        src.hash_at(m.data_offset, m.size)
    } else {
        Ok(0)
    }
}
