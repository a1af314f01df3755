//! Reading samples: by index, in batches, in runs of consecutive samples.

use super::*;

/// How many samples ahead a run's reading asks the CPU for a sample's bytes.
const PREFETCH_AHEAD: usize = 2;

impl Dataset {
    /// The bytes of member `ext` of sample `i`, or `None` when the sample has
    /// no such member. Only the member is read (for a `.tar.zst` shard, its
    /// sample's frame is decompressed), and its checksum is always checked
    /// when the index records checksums, whatever
    /// [`DatasetOptions::verify_on_read`] says.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`]; I/O errors, truncation and checksum
    /// mismatches naming the shard, key and member.
    pub fn read_member(&self, i: u64, ext: &str) -> Result<Option<Vec<u8>>> {
        let (s, local) = self.locate(i)?;
        self.read_member_of(s, local, ext)
            .map_err(|e| self.explain(s, e))
    }

    fn read_member_of(&self, s: usize, local: usize, ext: &str) -> Result<Option<Vec<u8>>> {
        let shard = &self.inner.shards[s];
        let index = &shard.index;
        let Some(m) = index.members(local).find(|m| m.ext == ext) else {
            return Ok(None);
        };
        let remote = self.remote_object(s)?;
        let data = if index.compression() == Compression::Zstd || remote.is_some() {
            let sample = self.read_entry(s, local, Hint::Always)?;
            sample.field(ext).map(<[u8]>::to_vec).unwrap_or_default()
        } else {
            let e = index.sample(local);
            let at = if index.is_scattered() {
                Some(m.offset)
            } else {
                m.offset
                    .checked_sub(e.tar_offset)
                    .and_then(|d| e.file_offset.checked_add(d))
            };
            let at = at.ok_or_else(|| ReaderError::IndexDisagrees {
                path: shard.path.clone(),
                offset: e.file_offset,
                what: format!(
                    "member {}.{} lies before its sample",
                    index.key(local),
                    m.ext
                ),
            })?;
            match self.handle(s)? {
                Handle { map: Some(map), .. } => map_slice(map, &shard.path, at, m.size)?.to_vec(),
                Handle {
                    file: Some(file), ..
                } => bale_format::read::read_exact_at(file, &shard.path, at, m.size)?,
                _ => unreachable_handle(&shard.path)?,
            }
        };
        if index.has_checksums() {
            verify_member(&shard.path, index.key(local), &m, &data)?;
        }
        Ok(Some(data))
    }

    /// Reads sample `i`: one positioned read (or a slice of the shard's map,
    /// see [`Backing`]), decompressing its frame for `.tar.zst` shards.
    ///
    /// # Errors
    /// [`ReaderError::IndexOutOfRange`]; I/O errors, truncated shards, bad
    /// zstd frames and (with `verify_on_read`) checksum mismatches, naming
    /// the shard file and offset; [`ReaderError::BadLabel`].
    pub fn get(&self, i: u64) -> Result<Sample> {
        let (s, local) = self.locate(i)?;
        self.read_local(s, local, false)
    }

    /// Reads sample `i` as [`Dataset::get`] does, and brings its bytes into
    /// memory before returning ([`Sample::populate`]): the page faults of a
    /// mapped sample happen in this call, not where its bytes are used
    /// (in a language binding, while holding a lock).
    ///
    /// For mapped samples the `MADV_WILLNEED` hint is skipped while
    /// recent reads found their pages in memory (see [`Backing::Mmap`]):
    /// a warm read makes no system call.
    ///
    /// # Errors
    /// As [`Dataset::get`].
    pub fn get_populated(&self, i: u64) -> Result<Sample> {
        let (s, local) = self.locate(i)?;
        self.read_touched(s, local)
    }

    /// Sample `local` of shard `s` as [`Dataset::get_populated`] reads it:
    /// hinted while reads wait for storage ([`Residency`]), its pages
    /// touched (and the touch timed) before it is returned.
    pub(crate) fn read_touched(&self, s: usize, local: usize) -> Result<Sample> {
        let sample = self.read_entry(s, local, Hint::Learnt)?;
        self.touch(&sample);
        Ok(sample)
    }

    /// Whether a read is expected to take microseconds, with nothing to wait
    /// for and nothing to decompress: the shards are local, mapped and not
    /// compressed, and recent reads found their pages in memory (the same
    /// judgement that skips [`Dataset::get_populated`]'s hint). A hint for a
    /// caller deciding whether to hand a lock to other threads around a read
    /// (the Python package keeps Python's GIL for such a read, where handing
    /// it over and back cost more than the read). It can be wrong once: the
    /// first read of pages the kernel has since evicted waits for storage,
    /// and reads are no longer quick from then on.
    pub fn reads_are_quick(&self) -> bool {
        self.is_mapped() && self.inner.plain && !self.is_remote() && !self.inner.residency.hint()
    }

    /// Reads the samples `indices` (in that order; repeats allowed), each as
    /// [`Dataset::get_populated`] does, in two passes: every sample is
    /// located (and, when reads are cold, hinted to the kernel, so that
    /// their I/O is in flight at once) before any is touched. A touch that
    /// waits for storage while hints were off hints the rest of the batch.
    ///
    /// # Errors
    /// The first error of any sample, as [`Dataset::get`] (an index out of
    /// range is found before any read).
    pub fn get_batch(&self, indices: &[u64]) -> Result<Vec<Sample>> {
        let at = indices
            .iter()
            .map(|&i| self.locate(i))
            .collect::<Result<Vec<_>>>()?;
        if self.is_remote() {
            return self.get_batch_remote(&at);
        }
        if at.len() > 1 {
            self.prefetch(&at);
        }
        let mut hinted = self.inner.residency.hint();
        let mut out = Vec::with_capacity(at.len());
        for &(s, local) in &at {
            out.push(self.read_entry(s, local, Hint::Learnt)?);
        }
        for (k, sample) in out.iter().enumerate() {
            if self.touch(sample) && !hinted {
                out[k + 1..].iter().for_each(Sample::will_need);
                hinted = true;
            }
        }
        Ok(out)
    }

    /// Asks the CPU to load what reading the samples `at` touches: index
    /// records, then keys and member records, then the first 4 KiB of each
    /// member of a mapped plain shard, each stage for the whole batch
    /// before the next, so that the cache misses of a batch of random
    /// samples overlap. Pages not in memory are skipped (a prefetch never
    /// faults).
    pub(super) fn prefetch(&self, at: &[(usize, usize)]) {
        let shards = &self.inner.shards;
        for &(s, local) in at {
            shards[s].index.prefetch_record(local);
        }
        for &(s, local) in at {
            shards[s].index.prefetch_key_and_members(local);
        }
        for &(s, local) in at {
            let shard = &shards[s];
            let Some(Handle { map: Some(map), .. }) = shard.handle.get() else {
                continue;
            };
            if shard.index.compression() == Compression::Zstd {
                continue;
            }
            let e = shard.index.sample(local);
            let scattered = shard.index.is_scattered();
            for m in shard.index.members(local) {
                let at = if scattered {
                    m.offset
                } else {
                    e.file_offset + m.offset.saturating_sub(e.tar_offset)
                };
                let bytes = usize::try_from(at)
                    .ok()
                    .and_then(|a| map.get(a..a.checked_add(m.size.min(4096) as usize)?));
                if let Some(bytes) = bytes {
                    bale_format::prefetch_sample(bytes);
                }
            }
        }
    }

    /// Populates a sample, timing it for [`Residency`] when it is mapped;
    /// true if the touch waited for storage.
    ///
    /// Once reads are warm, one touch in [`Residency::WARM_SAMPLING`] is
    /// timed (see [`Residency::time_touch`]): a batch that finds the cache
    /// cold again is hinted from its first timed touch on.
    ///
    /// Only the touch is timed, not the whole read: the shorter the window,
    /// the more rarely a preemption inside it passes for a wait on storage.
    /// (Parsing a label may fault in the sample's last page first; the
    /// touch of its first field's page still sees a cold sample that spans
    /// two pages, the only kind a hint helps.)
    pub(super) fn touch(&self, sample: &Sample) -> bool {
        if !sample.is_mapped() {
            return false;
        }
        if !self.inner.residency.time_touch() {
            sample.populate();
            return false;
        }
        let t = Instant::now();
        sample.populate();
        self.inner.residency.record(t.elapsed())
    }

    /// Reads the sample with key `key`.
    ///
    /// Looks the key up in each shard's index in turn (a binary search of
    /// its hash table each): `O(shards * log samples)`, no memory held.
    ///
    /// # Errors
    /// [`ReaderError::UnknownKey`], [`ReaderError::AmbiguousKey`] when more
    /// than one sample has it; as [`Dataset::get`].
    pub fn get_by_key(&self, key: &str) -> Result<Sample> {
        let found = self.find_all(key);
        match found[..] {
            [i] => {
                let (s, local) = self.locate(i)?;
                self.read_local(s, local, false)
            }
            [] => Err(ReaderError::UnknownKey {
                dir: self.inner.dir.clone(),
                key: key.to_owned(),
            }),
            _ => Err(ReaderError::AmbiguousKey {
                dir: self.inner.dir.clone(),
                key: key.to_owned(),
                indices: found,
            }),
        }
    }

    pub(super) fn handle(&self, s: usize) -> Result<&Handle> {
        let shard = &self.inner.shards[s];
        if let Some(h) = shard.handle.get() {
            return Ok(h);
        }
        let h = open_handle(shard, self.inner.options.backing)?;
        // Another thread may have won the race; its handle is as good.
        Ok(shard.handle.get_or_init(|| h))
    }

    /// As a run read in order asks for `len` bytes at `offset` of shard
    /// `s` ([`Handle::read_in_order`]), opening its handle first.
    #[cfg(feature = "testing")]
    pub(crate) fn read_in_order(&self, s: usize, offset: u64, len: u64) -> Result<()> {
        let h = self.handle(s)?;
        h.read_in_order(&self.inner.shards[s].path, offset, len);
        Ok(())
    }

    /// Sample `local` of shard `s`; with `populate`, a mapped sample's pages are read in now.
    pub(crate) fn read_local(&self, s: usize, local: usize, populate: bool) -> Result<Sample> {
        let sample = self.read_entry(s, local, Hint::Always)?;
        if populate {
            sample.populate();
        }
        Ok(sample)
    }

    /// Brings in the [`READ_AROUND`] region of shard `s` holding `offset`,
    /// the first time it is reached, when the dataset is read around
    /// ([`ReadAround`]): a mapped region is read through the file, at once,
    /// unless it is in memory already ([`Handle::bring_in`]); otherwise the
    /// kernel is asked for it. A failure only loses the hint.
    fn read_around(&self, s: usize, h: &Handle, offset: u64) {
        if !self.inner.read_around {
            return;
        }
        let Some((start, len)) = h.regions.claim(offset) else {
            return;
        };
        match h.bring_in(&self.inner.shards[s].path, start, len) {
            Brought::There => return,
            // The read waited for storage, in the pull rather than in the
            // touch that follows it: keep reads hinted (a read reaching a
            // region not yet read then reads it around).
            Brought::Read => {
                self.inner.residency.saw_cold();
                return;
            }
            Brought::Not => {}
        }
        // The kernel cuts one request to the device's read-ahead window
        // (`read_ahead_kb`, often 128 KiB): the region is asked for in
        // pieces no larger.
        let end = start + len;
        let mut at = start;
        while at < end {
            let n = (end - at).min(READ_AROUND_PIECE);
            h.will_need(at, n);
            at += n;
        }
    }

    /// Checks that the shard holding sample `i` is still the file the
    /// dataset opened (its size, modification and change times; a `stat`
    /// of its path). A caller that found the sample's bytes damaged after
    /// they were read (an image that does not decode) asks before it takes
    /// the damage for the sample's own: the bytes of a shard written over
    /// in place under a map are another file's.
    ///
    /// # Errors
    /// [`ReaderError::ShardReplaced`] or [`ReaderError::ShardRemoved`];
    /// [`ReaderError::IndexOutOfRange`]. A shard in object storage is
    /// checked at every answer instead: always `Ok` here.
    pub fn check_unchanged(&self, i: u64) -> Result<()> {
        let (s, _) = self.locate(i)?;
        match self.inner.shards[s].changed() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `e`, an error reading shard `s`, as [`Shard::explain`] tells it
    /// apart from a shard changed since the open.
    pub(super) fn explain(&self, s: usize, e: ReaderError) -> ReaderError {
        self.inner.shards[s].explain(e)
    }

    /// Sample `local` of shard `s`, not populated.
    pub(super) fn read_entry(&self, s: usize, local: usize, hint: Hint) -> Result<Sample> {
        self.read_entry_of(s, local, hint)
            .map_err(|e| self.explain(s, e))
    }

    fn read_entry_of(&self, s: usize, local: usize, hint: Hint) -> Result<Sample> {
        if let Some(obj) = self.remote_object(s)? {
            return self.read_remote(s, local, obj);
        }
        let shard = &self.inner.shards[s];
        let e = shard.index.sample(local);
        // The key, the member records and the bytes all hang off the
        // record: ask for them at once, so their cache misses overlap
        // instead of following one another.
        shard.index.prefetch_key_and_members(local);
        let h = self.handle(s)?;
        let compression = shard.index.compression();
        if shard.index.is_scattered() {
            return self.read_scattered(s, local, &e, h);
        }
        let (buf, base) = match (&h.map, &h.file, compression) {
            (Some(map), _, Compression::None) => {
                let bytes = map_slice(map, &shard.path, e.file_offset, e.file_len)?;
                bale_format::prefetch_sample(bytes);
                if hint == Hint::Always || self.inner.residency.hint() {
                    self.read_around(s, h, e.file_offset);
                    will_need(map, e.file_offset, e.file_len);
                }
                (Buf::Map(Arc::clone(map)), e.file_offset as usize)
            }
            (Some(map), _, Compression::Zstd) => {
                let frame = map_slice(map, &shard.path, e.file_offset, e.file_len)?;
                self.read_around(s, h, e.file_offset);
                will_need(map, e.file_offset, e.file_len);
                (Buf::owned(shard.decompress(&e, frame)?), 0)
            }
            (None, Some(file), _) => {
                self.read_around(s, h, e.file_offset);
                let raw = self.pread(file, &shard.path, e.file_offset, e.file_len)?;
                match compression {
                    Compression::Zstd => (Buf::owned(shard.decompress(&e, &raw)?), 0),
                    _ => (raw, 0),
                }
            }
            (None, None, _) => unreachable_handle(&shard.path)?,
            (Some(_), _, Compression::H5) => unreachable_handle(&shard.path)?,
        };
        self.build(s, local, &e, buf, base, None)
    }

    /// A sample of a scattered index (HDF5 shard): each member at its own
    /// absolute offset. Mapped: the members are slices of the map. Pread:
    /// one positioned read per member into one buffer.
    pub(super) fn read_scattered(
        &self,
        s: usize,
        local: usize,
        e: &SampleEntry,
        h: &Handle,
    ) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        match (&h.map, &h.file) {
            (Some(map), _) => {
                for m in shard.index.members(local) {
                    map_slice(map, &shard.path, m.offset, m.size)?;
                    self.read_around(s, h, m.offset);
                    will_need(map, m.offset, m.size);
                }
                self.build(s, local, e, Buf::Map(Arc::clone(map)), 0, None)
            }
            (None, Some(file)) => {
                let total = shard.index.sample_bytes(local);
                let n = usize::try_from(total).map_err(|_| FormatError::Limit {
                    path: shard.path.clone(),
                    what: format!("a sample of {total} bytes does not fit in memory"),
                })?;
                let mut starts = Vec::with_capacity(e.member_count as usize);
                let buf = self.inner.pool.filled(n, |buf| {
                    let mut at = 0usize;
                    for m in shard.index.members(local) {
                        self.read_around(s, h, m.offset);
                        let len = m.size as usize;
                        starts.push(at);
                        file.read_exact_at(&mut buf[at..at + len], m.offset)
                            .map_err(|err| {
                                ReaderError::from(FormatError::IoAt {
                                    path: shard.path.clone(),
                                    offset: m.offset,
                                    source: err,
                                })
                            })?;
                        at += len;
                    }
                    Ok::<(), ReaderError>(())
                })?;
                self.build(s, local, e, buf, 0, Some(&starts))
            }
            (None, None) => unreachable_handle(&shard.path),
        }
    }

    /// Samples `local..local + count` of shard `s`, read with one large read
    /// (or sliced from the map). A failed read is retried sample by sample,
    /// so an error names the sample it concerns and the others still arrive.
    pub(crate) fn read_run(
        &self,
        s: usize,
        local: usize,
        count: usize,
        populate: bool,
    ) -> Vec<Result<Sample>> {
        if self.inner.shards[s].index.is_scattered() {
            return (local..local + count)
                .map(|l| self.read_local(s, l, populate))
                .collect();
        }
        match self.try_read_run(s, local, count, populate) {
            Ok(v) => v
                .into_iter()
                .map(|r| r.map_err(|e| self.explain(s, e)))
                .collect(),
            Err(_) => (local..local + count)
                .map(|l| self.read_local(s, l, populate))
                .collect(),
        }
    }

    pub(super) fn try_read_run(
        &self,
        s: usize,
        local: usize,
        count: usize,
        populate: bool,
    ) -> Result<Vec<Result<Sample>>> {
        let shard = &self.inner.shards[s];
        let first = shard.index.sample(local);
        let last = shard.index.sample(local + count - 1);
        let span_start = first.file_offset;
        let span_len = (last.file_offset + last.file_len).saturating_sub(span_start);
        if let Some(obj) = self.remote_object(s)? {
            let bytes = obj.get_range(span_start..span_start.saturating_add(span_len))?;
            return Ok(self.samples_of_run(
                s,
                local,
                count,
                Buf::Bytes(bytes),
                span_start,
                populate,
                true,
            ));
        }
        let h = self.handle(s)?;
        let buf = match (&h.map, &h.file) {
            (Some(map), _) => {
                map_slice(map, &shard.path, span_start, span_len)?;
                // The run is brought in now when it is cold
                // ([`Handle::read_in_order`]); the kernel then reads on ahead
                // of it. Else (a short run, a failed pull) the kernel is
                // asked to start reading it and the run after it, the
                // read-ahead a sequential reader would get without
                // `MADV_RANDOM`. What was asked for already, as the run after
                // the last one, is not asked for again
                // ([`Ahead`](super::around::Ahead)).
                let pulled = h
                    .ahead
                    .claim(span_start, span_len)
                    .is_some_and(|(at, len)| h.read_in_order(&shard.path, at, len));
                let next = span_start + span_len;
                let next_len = span_len.min((map.len() as u64).saturating_sub(next));
                if !pulled && let Some((at, len)) = h.ahead.claim(next, next_len) {
                    will_need(map, at, len);
                }
                Buf::job_map(map)
            }
            (None, Some(file)) => self.pread(file, &shard.path, span_start, span_len)?,
            (None, None) => unreachable_handle(&shard.path)?,
        };
        // Read: a later read of these bytes (the next epoch) asks for them again.
        h.ahead.read(span_start, span_len);
        Ok(self.samples_of_run(s, local, count, buf, span_start, populate, false))
    }

    /// Samples `local..local + count` of shard `s` from `buf`, which holds
    /// the run's bytes from file offset `span_start` on (or the whole shard
    /// for a map). With `heads` (bytes read from an object in a bucket),
    /// each sample's record is first checked to begin with the tar header
    /// its index describes ([`Dataset::check_record`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn samples_of_run(
        &self,
        s: usize,
        local: usize,
        count: usize,
        buf: Buf,
        span_start: u64,
        populate: bool,
        heads: bool,
    ) -> Vec<Result<Sample>> {
        let shard = &self.inner.shards[s];
        let compression = shard.index.compression();
        // Offset of file byte `o` in `buf` (None if a corrupt index puts it before the run).
        let shift = |o: u64| match &buf {
            Buf::Map(_) | Buf::JobMap(_) => usize::try_from(o).ok(),
            Buf::Heap(_) | Buf::Bytes(_) => o
                .checked_sub(span_start)
                .and_then(|d| usize::try_from(d).ok()),
        };
        let mut out = Vec::with_capacity(count);
        for l in local..local + count {
            let e = shard.index.sample(l);
            let at = shift(e.file_offset);
            // The CPU's own prefetchers stop at page boundaries, which most
            // samples of a few KB cross: ask for a sample's lines two ahead.
            if compression != Compression::Zstd && l + PREFETCH_AHEAD < local + count {
                let ahead = shard.index.sample(l + PREFETCH_AHEAD);
                if let Some(bytes) = shift(ahead.file_offset)
                    .and_then(|a| buf.get(a..a.checked_add(ahead.file_len as usize)?))
                {
                    bale_format::prefetch_sample(bytes);
                }
            }
            let outside = || ReaderError::IndexDisagrees {
                path: shard.path.clone(),
                offset: e.file_offset,
                what: format!(
                    "sample {:?} lies outside the run read for it",
                    shard.index.key(l)
                ),
            };
            let r = match (compression, at) {
                (_, None) => Err(outside()),
                (Compression::None, Some(at)) if heads => self
                    .check_record(s, l, buf.get(at..).unwrap_or_default())
                    .and_then(|()| self.build(s, l, &e, buf.clone(), at, None)),
                (Compression::None | Compression::H5, Some(at)) => {
                    self.build(s, l, &e, buf.clone(), at, None)
                }
                (Compression::Zstd, Some(at)) => at
                    .checked_add(e.file_len as usize)
                    .and_then(|end| buf.get(at..end))
                    .ok_or_else(outside)
                    .and_then(|frame| shard.decompress(&e, frame))
                    .and_then(|d| {
                        if heads {
                            self.check_record(s, l, &d)?;
                        }
                        self.build(s, l, &e, Buf::owned(d), 0, None)
                    }),
            };
            if populate && let Ok(sample) = &r {
                sample.populate();
            }
            out.push(r);
        }
        out
    }

    /// Builds a sample whose tar bytes start at `buf[base]`: fields as ranges,
    /// label parsed, checksums verified when asked. `starts`, when given,
    /// holds each member's start in `buf` (members read one by one).
    pub(super) fn build(
        &self,
        s: usize,
        local: usize,
        e: &SampleEntry,
        buf: Buf,
        base: usize,
        starts: Option<&[usize]>,
    ) -> Result<Sample> {
        let shard = &self.inner.shards[s];
        let index = &shard.index;
        let key = index.key(local);
        let verify = self.inner.options.verify_on_read && index.has_checksums();
        let mut fields = Fields::with_capacity(e.member_count as usize);
        let mut label = None;
        for (k, m) in index.members(local).enumerate() {
            let start = match starts {
                Some(v) => v.get(k).copied().unwrap_or(usize::MAX),
                None => m.offset.saturating_sub(e.tar_offset) as usize,
            };
            let len = m.size as usize;
            let range = (|| {
                let a = base.checked_add(start)?;
                Some(a..a.checked_add(len)?)
            })();
            let data =
                range
                    .and_then(|r| buf.get(r))
                    .ok_or_else(|| ReaderError::IndexDisagrees {
                        path: shard.path.clone(),
                        offset: e.file_offset,
                        what: format!(
                            "member {key}.{} lies outside the bytes read for its sample",
                            m.ext
                        ),
                    })?;
            if verify {
                verify_member(&shard.path, key, &m, data)?;
            }
            if m.ext == "cls" {
                label = Some(parse_label(data).ok_or_else(|| ReaderError::BadLabel {
                    path: shard.path.clone(),
                    key: key.to_owned(),
                    text: String::from_utf8_lossy(&data[..data.len().min(32)]).into_owned(),
                })?);
            }
            fields.push(Field {
                ext: SmallStr::new(m.ext),
                start,
                len,
            });
        }
        Ok(Sample {
            key: SmallStr::new(key),
            index: self.inner.offsets[s] + local as u64,
            label,
            buf,
            base,
            fields,
        })
    }

    /// Reads `len` bytes at `offset` into a pooled buffer.
    pub(super) fn pread(&self, file: &File, path: &Path, offset: u64, len: u64) -> Result<Buf> {
        let n = usize::try_from(len).map_err(|_| FormatError::Limit {
            path: path.to_path_buf(),
            what: format!("a read of {len} bytes does not fit in memory"),
        })?;
        self.inner.pool.filled(n, |buf| {
            bale_format::read::read_exact_into(file, path, offset, buf).map_err(ReaderError::from)
        })
    }

    /// Asks the kernel to start reading samples `local..local + count` of
    /// shard `s` from storage, without waiting (`MADV_WILLNEED` on the map,
    /// `POSIX_FADV_WILLNEED` on the file). Only a hint: errors are left to
    /// the read itself.
    ///
    /// A single sample is hinted only while reads wait for storage
    /// ([`Residency`]): on a warm cache the call finds every page there and
    /// costs a system call per sample (a shuffled epoch read one sample at
    /// a time). A run of samples is hinted once while it is ahead of the
    /// reader ([`Ahead`](super::around::Ahead)), unless its read brings it
    /// in itself: a mapped run of 64 KiB or more, read through the file
    /// when it is cold ([`Handle::read_in_order`]).
    pub(crate) fn will_read(&self, s: usize, local: usize, count: usize) {
        let index = &self.inner.shards[s].index;
        if count == 0 || local + count > index.len() || self.inner.shards[s].remote.is_some() {
            return;
        }
        if count == 1 && !self.inner.residency.hint() {
            return;
        }
        let first = index.sample(local);
        let last = index.sample(local + count - 1);
        let start = first.file_offset;
        let len = (last.file_offset + last.file_len).saturating_sub(start);
        match self.handle(s) {
            // Only ranges inside the map (a corrupt index is the read's error).
            Ok(Handle { map: Some(map), .. })
                if map_slice(map, &self.inner.shards[s].path, start, len).is_err() => {}
            // A run asked for ahead is not asked for again when it is read.
            // A run the read brings in itself is left to it.
            Ok(h) if count > 1 && h.pulls(len) => {}
            Ok(h) if count > 1 => {
                if let Some((at, len)) = h.ahead.claim(start, len) {
                    h.will_need(at, len);
                }
            }
            Ok(h) => h.will_need(start, len),
            Err(_) => {}
        }
    }
}
