//! Writing objects: single PUTs, multipart uploads with bounded parts in
//! flight and a marker object per open upload, and server-side copies.

use super::*;

pub(super) const MIN_PART_SIZE: usize = 5 << 20;

pub(super) const MAX_PARTS: u64 = 10_000;

/// What a marker object records: an open multipart upload.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct Marker {
    pub(super) name: String,
    pub(super) upload_id: String,
}

impl Publisher {
    /// Records `name` as written by this run (to delete if it is undone).
    pub(super) fn record(&self, name: &str) {
        let mut w = lock(&self.written);
        if !w.names.iter().any(|n| n == name) {
            w.names.push(name.to_owned());
        }
    }

    /// Records that object `name` was written whole, `len` bytes long, and
    /// the ETag the store answered with.
    pub(super) fn record_size(&self, name: &str, len: u64, e_tag: Option<String>) {
        if name != LOCK_NAME && name != MANIFEST && !name.starts_with(UPLOAD_MARKER) {
            lock(&self.written)
                .sizes
                .insert(name.to_owned(), (len, e_tag));
        }
    }

    /// Writes `bytes` as object `name` in one PUT.
    ///
    /// # Errors
    /// Request errors, naming the object's URL.
    pub fn put(&self, name: &str, bytes: Bytes) -> Result<()> {
        self.put_mode(name, bytes, PutMode::Overwrite)
    }

    /// Writes `bytes` as object `name` in mode `mode`. The manifest carries
    /// this run's id in its metadata ([`RUN_METADATA`]): manifests are
    /// deterministic, so two runs of the same input write the same bytes,
    /// and only that tells this run's apart.
    pub(super) fn put_mode(&self, name: &str, bytes: Bytes, mode: PutMode) -> Result<()> {
        if name != LOCK_NAME {
            self.check_not_lost()?;
            self.ensure_cleared()?;
        }
        let path = self.path(name)?;
        self.record(name);
        let client = Arc::clone(&self.client);
        let payload = PutPayload::from(bytes.clone());
        let create = matches!(mode, PutMode::Create);
        let mut opts = PutOptions::from(mode);
        if name == MANIFEST {
            opts.attributes.insert(
                object_store::Attribute::Metadata(RUN_METADATA.into()),
                self.run.clone().into(),
            );
        }
        match runtime::block_on(async move { client.put_opts(&path, payload, opts).await })? {
            Ok(r) => {
                self.record_size(name, bytes.len() as u64, r.e_tag);
                Ok(())
            }
            // A store without conditional PUTs (the lock is then a mark
            // only): the object must still be absent, checked by a HEAD.
            Err(object_store::Error::NotImplemented { .. }) if create => {
                match self.store.object(name)?.head() {
                    Ok(_) => Err(StorageError::Exists {
                        url: self.url_of(name),
                        what: "another run wrote it meanwhile".into(),
                    }),
                    Err(StorageError::NotFound { .. }) => {
                        self.put_mode(name, bytes, PutMode::Overwrite)
                    }
                    Err(e) => Err(e),
                }
            }
            Err(object_store::Error::AlreadyExists { .. }) => Err(StorageError::Exists {
                url: self.url_of(name),
                what: "another run wrote it meanwhile".into(),
            }),
            Err(object_store::Error::Precondition { .. }) => Err(StorageError::Changed {
                url: self.url_of(name),
                what: "it is no longer the version this run read".into(),
            }),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(name), None, e))),
        }
    }

    /// Uploads the local file `local` as object `name`: one PUT when it fits
    /// in a part, else a multipart upload with at most
    /// [`WriteOptions::parts_in_flight`] parts in memory. Returns its size.
    ///
    /// # Errors
    /// [`StorageError::Io`] reading the file; request errors;
    /// [`StorageError::Cancelled`] when `cancel` is set between parts (the
    /// upload is then aborted).
    pub fn upload_file(&self, local: &Path, name: &str, cancel: &AtomicBool) -> Result<u64> {
        let io = |e: std::io::Error| StorageError::Io {
            path: local.to_path_buf(),
            source: e,
        };
        let mut file = File::open(local).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        self.ensure_cleared()?;
        let part = part_size(self.opts.part_size, len);
        if len <= part as u64 {
            let mut buf = Vec::with_capacity(len as usize);
            file.read_to_end(&mut buf).map_err(io)?;
            if buf.len() as u64 != len {
                return Err(io(std::io::Error::other(format!(
                    "it changed size while being uploaded ({len} then {} bytes)",
                    buf.len()
                ))));
            }
            if cancel.load(Ordering::Relaxed) {
                return Err(StorageError::Cancelled);
            }
            self.put(name, Bytes::from(buf))?;
            return Ok(len);
        }
        let path = self.path(name)?;
        let url = self.url_of(name);
        let mp = Arc::clone(&self.mp);
        let p2 = path.clone();
        let id = runtime::block_on(async move { mp.create_multipart(&p2).await })?
            .map_err(|e| from_object_store(&url, None, e))?;
        let marker = format!(
            "{UPLOAD_MARKER}{}-{}",
            self.run,
            self.markers.fetch_add(1, Ordering::Relaxed)
        );
        lock(&self.written).open.push((name.to_owned(), id.clone()));
        let record = serde_json::to_vec(&Marker {
            name: name.to_owned(),
            upload_id: id.clone(),
        })
        .unwrap_or_default();
        self.put(&marker, Bytes::from(record))?;
        let parts = self
            .send_parts(&mut file, len, part, &path, &id, &url, local, cancel)
            .map_err(|e| self.unanswered_if(e))?;
        let mp = Arc::clone(&self.mp);
        let (p2, id2) = (path.clone(), id.clone());
        let done = runtime::block_on(async move { mp.complete_multipart(&p2, &id2, parts).await })?
            .map_err(|e| self.unanswered_if(from_object_store(&url, None, e)))?;
        lock(&self.written).open.retain(|(_, i)| *i != id);
        self.record(name);
        self.record_size(name, len, done.e_tag);
        self.delete(&marker)?;
        Ok(len)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn send_parts(
        &self,
        file: &mut File,
        len: u64,
        part: usize,
        path: &ObjPath,
        id: &str,
        url: &str,
        local: &Path,
        cancel: &AtomicBool,
    ) -> Result<Vec<PartId>> {
        let mut pending: VecDeque<Pending<object_store::Result<PartId>>> = VecDeque::new();
        let mut parts = Vec::new();
        let mut sent = 0u64;
        let mut idx = 0usize;
        let take = |p: Pending<object_store::Result<PartId>>, parts: &mut Vec<PartId>| {
            let r = p.wait()?;
            parts.push(r.map_err(|e| from_object_store(url, None, e))?);
            Ok::<_, StorageError>(())
        };
        while sent < len {
            if cancel.load(Ordering::Relaxed) {
                return Err(StorageError::Cancelled);
            }
            self.check_not_lost()?;
            let n = (len - sent).min(part as u64) as usize;
            let mut buf = vec![0u8; n];
            file.read_exact(&mut buf).map_err(|e| StorageError::Io {
                path: local.to_path_buf(),
                source: e,
            })?;
            while pending.len() >= self.opts.parts_in_flight.max(1) {
                if let Some(p) = pending.pop_front() {
                    take(p, &mut parts)?;
                }
            }
            let mp = Arc::clone(&self.mp);
            let (path, id) = (path.clone(), id.to_owned());
            let payload = PutPayload::from(Bytes::from(buf));
            let i = idx;
            pending.push_back(Pending::spawn(async move {
                mp.put_part(&path, &id, i, payload).await
            })?);
            sent += n as u64;
            idx += 1;
        }
        while let Some(p) = pending.pop_front() {
            take(p, &mut parts)?;
        }
        Ok(parts)
    }

    /// Copies object `name` of `src` (another prefix reached with the same
    /// client: the same bucket) to `dst` under this prefix, on the server:
    /// no bytes pass through this machine.
    ///
    /// # Errors
    /// [`StorageError::BadUrl`] when `src` is not reached by this prefix's
    /// client; request errors.
    pub fn copy_from(&self, src: &Store, name: &str, dst: &str) -> Result<()> {
        if !src.same_client(&self.store) {
            return Err(StorageError::BadUrl {
                url: src.url().to_owned(),
                what: format!(
                    "a server-side copy reaches only objects of the output's bucket and endpoint ({})",
                    self.store.url()
                ),
            });
        }
        self.ensure_cleared()?;
        let from = src.object(name)?.obj_path().clone();
        let to = self.path(dst)?;
        self.record(dst);
        let client = Arc::clone(&self.client);
        runtime::block_on(async move { client.copy(&from, &to).await })?.map_err(|e| {
            self.unanswered_if(from_object_store(
                &src.object(name)
                    .map(|o| o.url().to_owned())
                    .unwrap_or_default(),
                None,
                e,
            ))
        })
    }
}

/// The part size for a file of `len` bytes: `want`, at least S3's minimum,
/// raised so that the file fits in 10,000 parts.
pub(super) fn part_size(want: usize, len: u64) -> usize {
    let floor = len.div_ceil(MAX_PARTS) as usize;
    want.max(MIN_PART_SIZE).max(floor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_at_least_five_mib_and_never_more_than_ten_thousand() {
        assert_eq!(part_size(1, 10), MIN_PART_SIZE);
        assert_eq!(part_size(8 << 20, 100 << 20), 8 << 20);
        let huge = 200u64 << 30;
        let p = part_size(8 << 20, huge);
        assert!(huge.div_ceil(p as u64) <= MAX_PARTS);
        assert!(p > 8 << 20);
    }
}
