//! DELETEs of a run (in bulk where the store takes it, each attempt sent
//! by the run itself, so that it knows which may still land) and aborts of
//! multipart uploads.

use super::*;

impl Publisher {
    /// The open multipart uploads under the prefix, as (name relative to
    /// it, upload id); empty where the store cannot list them (only S3 can).
    pub(super) fn open_uploads(&self) -> Result<Vec<(String, String)>> {
        let Some(lister) = self.lister.clone() else {
            return Ok(Vec::new());
        };
        let prefix = format!("{}/", self.store.prefix().as_ref())
            .trim_start_matches('/')
            .to_owned();
        let p2 = prefix.clone();
        let open = runtime::block_on(async move { lister.list(&p2).await })??;
        Ok(open
            .into_iter()
            .filter_map(|u| Some((u.key.strip_prefix(&prefix)?.to_owned(), u.id)))
            .collect())
    }

    pub(super) fn get(&self, name: &str) -> Result<Bytes> {
        self.store.object(name)?.get_sized(0, 1 << 20, "marker")
    }

    /// Deletes object `name` ([`Publisher::delete_all`]).
    pub(super) fn delete(&self, name: &str) -> Result<()> {
        self.delete_all(&[name], false)
    }

    /// Deletes the objects `names`, up to [`DELETES_PER_REQUEST`] to a
    /// request: one bulk DeleteObjects on S3 (`--force` over 100,000
    /// objects is 100 requests, not 100,000); stores without one get a
    /// DELETE per object from the client, several at once. Every chunk is
    /// tried (an `interruptible` call stops before the next chunk once the
    /// run is interrupted: a clear; an undo goes on); returns the first
    /// error.
    pub(super) fn delete_all(&self, names: &[&str], interruptible: bool) -> Result<()> {
        let mut first = None;
        for chunk in names.chunks(DELETES_PER_REQUEST) {
            if interruptible && self.cancelled() {
                return Err(first.unwrap_or(StorageError::Cancelled));
            }
            if let Err(e) = self.delete_chunk(chunk) {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Deletes `names` (at most [`DELETES_PER_REQUEST`]), sending each
    /// attempt itself: the names not yet deleted are sent again, up to the
    /// options' `max_retries` more times within `retry_timeout`, with their
    /// backoff. An attempt that got no answer (a timeout, a connection cut
    /// off after the request went out) may still land after a later one was
    /// answered: over what this run or a later one writes under those
    /// names. Such an attempt is remembered ([`Publisher::deletes_land_by`],
    /// waited out before the run's first write after its clear) and makes
    /// an undone run keep its lock with a note, as a failed DELETE does.
    pub(super) fn delete_chunk(&self, names: &[&str]) -> Result<()> {
        let retry = self.store.options().retry()?;
        let timeout = self.store.options().request_timeout();
        let first = std::time::Instant::now();
        let mut backoff = retry.backoff.init_backoff;
        let mut tries = 0;
        let mut left: Vec<&str> = names.to_vec();
        loop {
            let paths = left
                .iter()
                .map(|n| self.path(n))
                .collect::<Result<Vec<_>>>()?;
            // A successful bulk answer lists every key it deleted: one that
            // holds such a word would read as a server error.
            let single = self.once_single.as_ref().filter(|_| {
                paths
                    .iter()
                    .any(|p| SERVER_ERROR_WORDS.iter().any(|w| p.as_ref().contains(w)))
            });
            // `once_single` is there exactly when `once` deletes in bulk.
            let one_request = single.is_none() && self.once_single.is_some();
            let client = Arc::clone(single.unwrap_or(&self.once));
            let sent = std::time::Instant::now();
            // In a task of its own: the S3 client panics on a bulk answer
            // that names a key the request did not, which is then this
            // request's error, not the end of the process.
            let answers = runtime::block_on(async move {
                tokio::spawn(async move {
                    client
                        .delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed())
                        .collect::<Vec<object_store::Result<ObjPath>>>()
                        .await
                })
                .await
            })?;
            let (failed, e, unanswered) = match answers {
                Ok(answers) => self.delete_failures(&left, answers),
                // Answered, but not so that it tells what was deleted: as
                // a server error, sent again.
                Err(_) => (
                    left.clone(),
                    Some(StorageError::Request {
                        url: self.many_url(&left),
                        range: None,
                        status: Some(502),
                        what: "the store's answer to the DELETE could not be read (it named an object the request did not)".into(),
                    }),
                    false,
                ),
            };
            // Anything but a definite refusal may have deleted some.
            if unanswered || failed.len() < left.len() || e.as_ref().is_some_and(may_land) {
                self.deleted_any.store(true, Ordering::SeqCst);
            }
            let Some(e) = e else {
                return Ok(());
            };
            // An answer, even an error, says the store is done with it.
            if unanswered {
                self.unanswered.store(true, Ordering::SeqCst);
                // One request timeout from when the attempt went out: for
                // a client that sends one DELETE per object (several at
                // once), the last may have gone out just before the answers
                // were in, not when the chunk began.
                let out = if left.len() == 1 || one_request {
                    sent
                } else {
                    std::time::Instant::now()
                };
                let by = out + timeout;
                let mut until = lock(&self.deletes_land_by);
                *until = Some(until.map_or(by, |u| u.max(by)));
            }
            let again = resendable(&e)
                && tries < retry.max_retries
                && first.elapsed() + backoff <= retry.retry_timeout;
            if !again {
                // Unanswered, it may still land: on what a later run writes
                // under that name, unless that run waits it out.
                return Err(self.unanswered_if(e));
            }
            left = failed;
            tries += 1;
            std::thread::sleep(backoff);
            backoff = backoff
                .mul_f64(retry.backoff.base)
                .min(retry.backoff.max_backoff);
        }
    }

    /// Which of `sent` a delete request's `answers` left undeleted, the
    /// error that stands for them (the first that no attempt can mend, a
    /// refusal; else one with no answer, which may land; else the first),
    /// and whether any of them got no answer.
    /// The client answers once per name, in order, or once for a request
    /// that failed as a whole (then for all of its names).
    pub(super) fn delete_failures<'a>(
        &self,
        sent: &[&'a str],
        answers: Vec<object_store::Result<ObjPath>>,
    ) -> (Vec<&'a str>, Option<StorageError>, bool) {
        let whole = answers.len() != sent.len();
        let mut failed = Vec::new();
        let mut errors = Vec::new();
        for (i, a) in answers.into_iter().enumerate() {
            match a {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    let url = if whole {
                        self.many_url(sent)
                    } else {
                        failed.push(sent[i]);
                        self.url_of(sent[i])
                    };
                    errors.push(from_object_store(&url, None, e));
                }
            }
        }
        if whole {
            failed = sent.to_vec();
            if errors.is_empty() {
                errors.push(StorageError::Request {
                    url: self.many_url(sent),
                    range: None,
                    status: None,
                    what: "the store answered for fewer objects than the DELETE named".into(),
                });
            }
        }
        let unanswered = errors.iter().any(no_answer);
        let pick = errors
            .iter()
            .position(|e| !resendable(e))
            .or_else(|| errors.iter().position(no_answer));
        let e = match pick {
            Some(i) => Some(errors.swap_remove(i)),
            None => errors.into_iter().next(),
        };
        (failed, e, unanswered)
    }

    /// The URL of a request for `names`: the first object's, and how many
    /// more it named.
    pub(super) fn many_url(&self, names: &[&str]) -> String {
        match names.len() {
            0 | 1 => self.url_of(names.first().copied().unwrap_or_default()),
            n => format!("{} (and {} more objects)", self.url_of(names[0]), n - 1),
        }
    }

    pub(super) fn abort_upload(&self, name: &str, id: &str) -> Result<()> {
        let path = self.path(name)?;
        let mp = Arc::clone(&self.mp);
        let id = id.to_owned();
        match runtime::block_on(async move { mp.abort_multipart(&path, &id).await })? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.unanswered_if(from_object_store(&self.url_of(name), None, e))),
        }
    }
}

/// The words whose presence anywhere in a 200 answer makes the S3 client
/// take it for a server error (S3 answers some failures so).
pub(super) const SERVER_ERROR_WORDS: [&str; 2] = ["InternalError", "SlowDown"];

/// The most objects one DELETE request names: S3's bulk DeleteObjects
/// takes 1,000 keys.
pub(super) const DELETES_PER_REQUEST: usize = 1000;
