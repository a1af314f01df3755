//! The lock object of a prefix: its body ([`LockBody`]), taking it (with
//! `--force`, over a killed run's), the heartbeat that refreshes it, writes
//! over this run's last version only ([`LockWriter`]), the claim, and the
//! note an undo leaves in it.

use super::*;

/// Whether a run still holds its lock ([`Publisher::lock_hold`]).
#[derive(PartialEq)]
pub(super) enum Hold {
    Held,
    Lost,
    Unknown,
}

impl Publisher {
    /// Creates the lock object, or with `--force` takes over that of a run
    /// that ended without releasing it; the killed run's claim carries
    /// over, but to a run beside others (`want`), which never claims.
    pub(super) fn take_lock(&mut self, want: Want<'_>) -> Result<()> {
        let claims = !matches!(want, Want::Alongside(_));
        let path = self.path(LOCK_NAME)?;
        let client = Arc::clone(&self.client);
        let first = self.own_lock_body(false);
        let payload = PutPayload::from(first.clone());
        let created = runtime::block_on(async move {
            client
                .put_opts(&path, payload, PutOptions::from(PutMode::Create))
                .await
        })?;
        // A store without conditional PUTs gets the same protocol, best
        // effort: a lock found by a GET is another run's, and the lock is
        // written by a plain PUT (then refreshed, watched and checked alike).
        let (existed, conditional) = match created {
            Ok(r) => {
                self.lock_writer.wrote(&r);
                (false, true)
            }
            // The client sends a create again when its answer was lost; if
            // the first landed, the retry finds this run's own lock (its
            // body names the run).
            Err(object_store::Error::AlreadyExists { .. }) => match self.seen_lock()? {
                Some(l) if l.bytes.as_ref() == first.as_bytes() => {
                    // Without an ETag no write can be conditional on it.
                    if l.version.e_tag.is_some() {
                        self.lock_writer.expect(l.version);
                    }
                    (false, true)
                }
                _ => (true, true),
            },
            Err(object_store::Error::NotImplemented { .. }) => (self.get_lock()?.is_some(), false),
            Err(e) => return Err(from_object_store(&self.url_of(LOCK_NAME), None, e)),
        };
        if existed {
            if !self.opts.force {
                // An append takes no --force (which would replace the
                // dataset): what a killed one left goes by hand.
                let then = match want {
                    Want::Append => format!(
                        "delete {LOCK_NAME} and the shard objects the dataset's {MANIFEST} does not list (a killed append's uploads), then append again"
                    ),
                    Want::Fresh | Want::Alongside(_) => "pass --force to clear what it left".into(),
                };
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!(
                        "another bale run is writing here, or one was killed before it finished (its lock object {LOCK_NAME} remains); if none is running, {then}"
                    ),
                });
            }
            // --force takes over the lock of a run that ended without
            // releasing it (SIGKILL), never that of a live run, which
            // refreshes it every LOCK_BEAT.
            let before = self.seen_lock()?;
            // A run that ended with requests unanswered said so in its lock:
            // they may still land, and are waited out before this run
            // writes anything the same names.
            let unanswered = before
                .as_ref()
                .and_then(|l| LockBody::parse(&l.bytes).unanswered());
            let wait = LOCK_STALE + unanswered.unwrap_or_default();
            crate::notice(&format!(
                "{}: another bale run's lock object ({LOCK_NAME}) is there; watching it for {} s before --force takes the prefix over{}",
                self.store.url(),
                secs_text(wait),
                if unanswered.is_some() {
                    " (that run said requests of it may still land)"
                } else {
                    ""
                }
            ));
            self.watch(wait)?;
            let now = self.seen_lock()?;
            if now.as_ref().map(|l| &l.bytes) != before.as_ref().map(|l| &l.bytes) {
                return Err(StorageError::Exists {
                    url: self.store.url().to_owned(),
                    what: format!(
                        "another bale run is writing here now (its lock object {LOCK_NAME} changed within {} s); --force clears only what a run that ended left",
                        secs_text(wait)
                    ),
                });
            }
            // The killed run's claim carries over: what it left stays
            // marked if this run stops before it has cleared it. Its last
            // refresh dates what it can have written.
            self.found_at = now.as_ref().map(|l| l.at);
            let said = now.as_ref().map(|l| LockBody::parse(&l.bytes));
            // Its requests may land up to its request timeout after it
            // sent them, and it sent none later than one beat after that
            // refresh: objects dated so late are still its own.
            let its_timeout = said
                .as_ref()
                .map_or(std::time::Duration::ZERO, LockBody::timeout);
            self.found_wait = (wait - LOCK_STALE).max(its_timeout);
            self.inherit_claim(claims && said.as_ref().is_some_and(|b| b.claimed));
            if let (Some(l), Some(said)) = (&now, &said) {
                // What that run's lock carried from one it took over in
                // turn (a run stopped before it cleared anything) holds.
                let old = said.carry();
                let wait_ms = self.found_wait.as_millis() as i64;
                // One beat after its last refresh (it may have sent a
                // request just before its next), its timeout, and the
                // second to which a store may round the time of a write.
                let in_flight = l.at + LOCK_BEAT.as_millis() as i64 + wait_ms + 1_000;
                *lock(&self.carry) = Carry {
                    leftovers_until: self.found_claim.then(|| {
                        old.leftovers_until
                            .unwrap_or(l.at + LEFTOVER_MARGIN_MS + wait_ms)
                    }),
                    in_flight_until: Some(
                        old.in_flight_until.map_or(in_flight, |o| o.max(in_flight)),
                    ),
                };
            }
            let body = self.own_lock_body(self.found_claim);
            // Over the very version watched: another --force taking it over
            // at the same time makes one of the two fail here.
            if let Some(l) = now.filter(|l| conditional && l.version.e_tag.is_some()) {
                self.lock_writer.expect(l.version);
            }
            self.write_lock(body).map_err(|_| StorageError::Exists {
                url: self.store.url().to_owned(),
                what: "another bale run took this prefix over at the same time; it is writing here now".into(),
            })?;
        } else if !conditional {
            self.write_lock(self.own_lock_body(false))?;
        }
        self.record(LOCK_NAME);
        self.locked.store(true, Ordering::SeqCst);
        self.start_heartbeat()?;
        if existed {
            self.wait_out_in_flight()?;
        }
        Ok(())
    }

    /// This run's request timeout, as its lock records it.
    pub(super) fn timeout_ms(&self) -> u64 {
        run_timeout_ms(&self.store)
    }

    /// What this run's lock carries over ([`Carry`]).
    pub(super) fn carried(&self) -> Carry {
        *lock(&self.carry)
    }

    /// This run's lock body, at beat 0 ([`LockBody::new`]), `claimed` or not.
    pub(super) fn own_lock_body(&self, claimed: bool) -> String {
        LockBody::new(&self.run, 0, claimed, self.timeout_ms(), self.carried()).render()
    }

    /// Writes this run's lock body through [`LockWriter`]: over the version
    /// this run wrote last. Another writer meanwhile (a run that took the
    /// prefix over) makes this run lost.
    pub(super) fn write_lock(&self, body: String) -> Result<()> {
        match self
            .lock_writer
            .write(&self.client, &self.path(LOCK_NAME)?, body)
        {
            Ok(()) => Ok(()),
            Err(LockWriteError::Lost) => {
                self.lost.store(true, Ordering::SeqCst);
                Err(self.lost_error())
            }
            Err(LockWriteError::Other(e)) => {
                Err(from_object_store(&self.url_of(LOCK_NAME), None, e))
            }
        }
    }

    /// The lock object as it is now ([`Seen`]), `None` when there is none.
    pub(super) fn seen_lock(&self) -> Result<Option<Seen>> {
        read_seen(&self.client, &self.path(LOCK_NAME)?)
            .map_err(|e| from_object_store(&self.url_of(LOCK_NAME), None, e))
    }

    /// The lock object's bytes, `None` when there is none.
    pub(super) fn get_lock(&self) -> Result<Option<Bytes>> {
        match self.get(LOCK_NAME) {
            Ok(b) => Ok(Some(b)),
            Err(StorageError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Whether the lock object still names this run.
    pub(super) fn owns_lock(&self) -> Result<bool> {
        let body = self.get_lock()?.map(|b| LockBody::parse(&b));
        Ok(body.as_ref().and_then(LockBody::owner) == Some(self.run.as_str()))
    }

    /// Refreshes the lock every [`LOCK_BEAT`] while the run lives, so that
    /// `--force` elsewhere can tell a live run from one that was killed;
    /// notices when another run took it over.
    pub(super) fn start_heartbeat(&self) -> Result<()> {
        let stop = Arc::new(AtomicBool::new(false));
        let me = HeartbeatCtx {
            store: self.store.clone(),
            client: Arc::clone(&self.client),
            run: self.run.clone(),
            claimed: Arc::clone(&self.claimed),
            lock_write: Arc::clone(&self.lock_write),
            lock_writer: Arc::clone(&self.lock_writer),
            lost: Arc::clone(&self.lost),
            stop: Arc::clone(&stop),
            path: self.path(LOCK_NAME)?,
            carry: Arc::clone(&self.carry),
        };
        let handle = std::thread::Builder::new()
            .name("bale-lock".into())
            .spawn(move || me.run())
            .map_err(|e| {
                StorageError::Runtime(format!("cannot start the lock's heartbeat: {e}"))
            })?;
        *lock(&self.heartbeat) = Some((stop, handle));
        Ok(())
    }

    pub(super) fn stop_heartbeat(&self) {
        let beat = lock(&self.heartbeat).take();
        if let Some((stop, handle)) = beat {
            stop.store(true, Ordering::SeqCst);
            let _ = handle.join();
        }
    }

    pub(super) fn check_not_lost(&self) -> Result<()> {
        if self.lost.load(Ordering::SeqCst) {
            return Err(self.lost_error());
        }
        Ok(())
    }

    pub(super) fn lost_error(&self) -> StorageError {
        StorageError::Exists {
            url: self.store.url().to_owned(),
            what: "another bale run took this prefix over (--force) while this one was writing; nothing of this run was committed, and what it uploaded now belongs to the other run".into(),
        }
    }

    /// Marks the lock object claimed: this run's checks of the prefix passed,
    /// and until its manifest the objects of bale's names there are a run's.
    /// A run killed before this (while it listed a large prefix, or one it
    /// refused) leaves an unclaimed lock, which tells `--force` nothing about
    /// the objects beside it.
    pub(super) fn claim(&self) -> Result<()> {
        let _writing = lock(&self.lock_write);
        // A run whose lock another took over owns nothing here.
        self.check_not_lost()?;
        if self.locked.load(Ordering::SeqCst) && !self.owns_lock()? {
            self.lost.store(true, Ordering::SeqCst);
            return Err(self.lost_error());
        }
        self.claimed.store(true, Ordering::SeqCst);
        self.marks_leftovers.store(true, Ordering::SeqCst);
        self.write_lock(self.own_lock_body(true))
    }

    /// Takes over the claim of the lock this run replaced (`found`).
    pub(super) fn inherit_claim(&mut self, found: bool) {
        self.found_claim = found;
        self.claimed.store(found, Ordering::SeqCst);
        self.marks_leftovers.store(found, Ordering::SeqCst);
    }

    /// Whether this run still holds the lock ([`LockRef::hold`]).
    pub(super) fn lock_hold(&self) -> Hold {
        match self.path(LOCK_NAME) {
            Ok(path) => LockRef {
                store: &self.store,
                client: &self.client,
                path: &path,
                run: &self.run,
                claimed: &self.claimed,
                lock_write: &self.lock_write,
                lock_writer: &self.lock_writer,
                lost: &self.lost,
                carry: &self.carry,
            }
            .hold(0),
            Err(_) => Hold::Unknown,
        }
    }

    /// Says in the lock that this run's undo sent requests that got no
    /// answer and may still land: `--force` then waits one request timeout
    /// more before it takes the prefix over, so that they land before it
    /// writes, not over what it wrote. Returns `first`, the undo's error,
    /// with what a rerun does.
    pub(super) fn note_unanswered(&self, first: Option<StorageError>) -> StorageError {
        let wait = std::time::Duration::from_millis(self.timeout_ms());
        let body = LockBody::note(
            &self.run,
            self.claimed.load(Ordering::SeqCst),
            wait.as_millis() as u64,
            self.carried(),
        )
        .render();
        let noted = {
            let _writing = lock(&self.lock_write);
            self.write_lock(body).is_ok()
        };
        let Some(e) = first else {
            self.kept_for_late.store(true, Ordering::SeqCst);
            let then = if noted {
                format!(
                    "; a rerun with --force waits {} s more than usual before it takes the prefix over",
                    secs_text(wait)
                )
            } else {
                String::new()
            };
            return StorageError::Exists {
                url: self.url_of(LOCK_NAME),
                what: format!(
                    "a request of this run (an upload or a DELETE) got no answer, or a server error, and may still land: the run removed what it wrote but kept its lock object{then}"
                ),
            };
        };
        if !noted {
            return e;
        }
        StorageError::Exists {
            url: self.store.url().to_owned(),
            what: format!(
                "{e}; a request of this run got no answer, or a server error, and may still land, so a rerun with --force waits {} s more than usual before it takes the prefix over",
                secs_text(wait)
            ),
        }
    }
}

/// The longest wait a lock's note of unanswered requests makes `--force` take.
pub(super) const MAX_UNANSWERED_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// How much later than a killed run's last refresh of its lock an object
/// may have been written and still be that run's: one refresh, and a margin.
pub(super) const LEFTOVER_MARGIN_MS: i64 = LOCK_BEAT.as_millis() as i64 + 5_000;

/// How often a writing run refreshes its lock object.
pub(super) const LOCK_BEAT: std::time::Duration = std::time::Duration::from_secs(2);

/// How long `--force` watches a lock object before taking it over: a live
/// run refreshes it several times meanwhile.
pub(super) const LOCK_STALE: std::time::Duration = std::time::Duration::from_secs(7);

/// The lock object's body, as a run writes it and as any bale reads it:
/// the run, where it runs, a beat count that changes at each refresh,
/// whether the run claimed the prefix, its request timeout, what it carries
/// over ([`Carry`]), and the note of an undo whose requests got no answer.
///
/// Read leniently, key by key, as every bale before read it: a key that is
/// missing, or whose value is not of its type, reads as unsaid, and so does
/// every key of a body that is not a JSON object. Another run's lock is
/// read, not trusted: its waits are capped ([`MAX_UNANSWERED_WAIT`]).
/// Written with its keys in the order bale always wrote them (sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct LockBody {
    #[serde(
        default,
        deserialize_with = "lenient::u64",
        skip_serializing_if = "Option::is_none"
    )]
    beat: Option<u64>,
    /// Only a JSON `true` says so.
    #[serde(default, deserialize_with = "lenient::flag")]
    claimed: bool,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    host: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient::i64",
        skip_serializing_if = "Option::is_none"
    )]
    in_flight_until_ms: Option<i64>,
    #[serde(
        default,
        deserialize_with = "lenient::i64",
        skip_serializing_if = "Option::is_none"
    )]
    leftovers_until_ms: Option<i64>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    pid: Option<u32>,
    /// The run's request timeout: a request it sent may land that long
    /// after, even once the run is killed ([`LockBody::timeout`]). Read
    /// from any number that is not negative (one too large for a u64 is
    /// capped).
    #[serde(
        default,
        deserialize_with = "lenient::millis",
        skip_serializing_if = "Option::is_none"
    )]
    request_timeout_ms: Option<u64>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    run: Option<String>,
    #[serde(
        default,
        deserialize_with = "lenient::any",
        skip_serializing_if = "Option::is_none"
    )]
    tool: Option<String>,
    /// Set by the note of a run that ended with requests that got no
    /// answer ([`Publisher::note_unanswered`]): `--force` waits that much more.
    #[serde(
        default,
        deserialize_with = "lenient::u64",
        skip_serializing_if = "Option::is_none"
    )]
    unanswered_wait_ms: Option<u64>,
}

impl LockBody {
    /// The body of run `run` at refresh `beat`, `claimed` or not, with its
    /// request timeout `timeout_ms` and what it carries over.
    fn new(run: &str, beat: u64, claimed: bool, timeout_ms: u64, carry: Carry) -> LockBody {
        LockBody {
            beat: Some(beat),
            claimed,
            host: Some(hostname()),
            in_flight_until_ms: carry.in_flight_until,
            leftovers_until_ms: carry.leftovers_until,
            pid: Some(std::process::id()),
            request_timeout_ms: Some(timeout_ms),
            run: Some(run.to_owned()),
            tool: Some("bale".to_owned()),
            unanswered_wait_ms: None,
        }
    }

    /// The body of a lock whose run ended with requests that got no answer
    /// ([`Publisher::note_unanswered`]): `--force` waits `wait_ms` more
    /// (and counts it as the run's request timeout too).
    fn note(run: &str, claimed: bool, wait_ms: u64, carry: Carry) -> LockBody {
        LockBody {
            unanswered_wait_ms: Some(wait_ms),
            ..LockBody::new(run, 0, claimed, wait_ms, carry)
        }
    }

    /// Reads a lock object's body (see the type's docs: never fails).
    fn parse(bytes: &[u8]) -> LockBody {
        match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(v @ serde_json::Value::Object(_)) => serde_json::from_value(v).unwrap_or_default(),
            _ => LockBody::default(),
        }
    }

    /// The body as written: compact JSON.
    fn render(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The run the lock names.
    fn owner(&self) -> Option<&str> {
        self.run.as_deref()
    }

    /// What the lock carries over ([`Carry`]).
    fn carry(&self) -> Carry {
        Carry {
            leftovers_until: self.leftovers_until_ms,
            in_flight_until: self.in_flight_until_ms,
        }
    }

    /// How long after the lock's last write a request of its run may still
    /// land (its `request_timeout_ms`, at most [`MAX_UNANSWERED_WAIT`]). A
    /// lock that does not say (a bale from before it did) counts as the
    /// default timeout.
    fn timeout(&self) -> std::time::Duration {
        self.request_timeout_ms
            .map(std::time::Duration::from_millis)
            .or_else(|| crate::options::parse_duration(crate::options::DEFAULT_TIMEOUT))
            .unwrap_or(std::time::Duration::from_secs(60))
            .min(MAX_UNANSWERED_WAIT)
    }

    /// How much longer than usual the lock's note asks `--force` to wait
    /// (at most [`MAX_UNANSWERED_WAIT`]); `None` when it has no such note.
    fn unanswered(&self) -> Option<std::time::Duration> {
        self.unanswered_wait_ms
            .map(|ms| std::time::Duration::from_millis(ms).min(MAX_UNANSWERED_WAIT))
    }
}

/// The readers of [`LockBody`]'s keys: each takes any JSON value, and reads
/// one not of its type as unsaid.
mod lenient {
    use serde::{Deserialize, Deserializer};
    use serde_json::Value;

    type Read<T, E> = std::result::Result<T, E>;

    /// A value of type `T`, if it is one.
    pub fn any<'de, D: Deserializer<'de>, T: serde::de::DeserializeOwned>(
        d: D,
    ) -> Read<Option<T>, D::Error> {
        Ok(serde_json::from_value(Value::deserialize(d)?).ok())
    }

    /// An integer that fits in a u64.
    pub fn u64<'de, D: Deserializer<'de>>(d: D) -> Read<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?.as_u64())
    }

    /// An integer that fits in an i64.
    pub fn i64<'de, D: Deserializer<'de>>(d: D) -> Read<Option<i64>, D::Error> {
        Ok(Value::deserialize(d)?.as_i64())
    }

    /// `true`, and nothing else.
    pub fn flag<'de, D: Deserializer<'de>>(d: D) -> Read<bool, D::Error> {
        Ok(Value::deserialize(d)?.as_bool() == Some(true))
    }

    /// Any number that is not negative, in whole milliseconds, capped at
    /// `u64::MAX`.
    pub fn millis<'de, D: Deserializer<'de>>(d: D) -> Read<Option<u64>, D::Error> {
        Ok(Value::deserialize(d)?
            .as_f64()
            .filter(|ms| *ms >= 0.0)
            .map(|ms| ms.min(u64::MAX as f64) as u64))
    }
}

/// What a run's lock carries over from the lock of a killed run it took
/// over (server times, ms since the epoch), so that a run taking this one's
/// over in turn still knows them: this run may stop (refused, Ctrl-C,
/// killed) before it cleared anything, and its lock, written later than
/// the killed run's, would otherwise date the user's objects put there
/// since as leftovers, and shorten the wait for the killed run's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Carry {
    /// Objects of bale's names dated up to this are the killed run's
    /// leftovers; carried until this run has cleared them.
    pub(super) leftovers_until: Option<i64>,
    /// A request of the killed run may land until then.
    pub(super) in_flight_until: Option<i64>,
}

/// A run's request timeout as its lock records it (at most
/// [`MAX_UNANSWERED_WAIT`]).
pub(super) fn run_timeout_ms(store: &Store) -> u64 {
    store
        .options()
        .request_timeout()
        .min(MAX_UNANSWERED_WAIT)
        .as_millis() as u64
}

pub(super) struct HeartbeatCtx {
    store: Store,
    client: Arc<dyn ObjectStore>,
    run: String,
    claimed: Arc<AtomicBool>,
    lock_write: Arc<Mutex<()>>,
    lock_writer: Arc<LockWriter>,
    lost: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    path: ObjPath,
    carry: Arc<Mutex<Carry>>,
}

impl HeartbeatCtx {
    fn run(self) {
        let mut beat = 0u64;
        loop {
            let until = std::time::Instant::now() + LOCK_BEAT;
            while std::time::Instant::now() < until {
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            // A failed refresh is retried at the next beat; a lock another
            // run took over ends the heartbeat.
            beat += 1;
            let mine = LockRef {
                store: &self.store,
                client: &self.client,
                path: &self.path,
                run: &self.run,
                claimed: &self.claimed,
                lock_write: &self.lock_write,
                lock_writer: &self.lock_writer,
                lost: &self.lost,
                carry: &self.carry,
            };
            if mine.hold(beat) == Hold::Lost {
                return;
            }
        }
    }
}

/// A run's lock object and what writes it, borrowed from a
/// [`Publisher`] or its heartbeat.
pub(super) struct LockRef<'a> {
    store: &'a Store,
    client: &'a Arc<dyn ObjectStore>,
    path: &'a ObjPath,
    run: &'a str,
    claimed: &'a AtomicBool,
    lock_write: &'a Mutex<()>,
    lock_writer: &'a LockWriter,
    lost: &'a AtomicBool,
    carry: &'a Mutex<Carry>,
}

impl LockRef<'_> {
    /// Whether the run still holds its lock: the lock names it, and a write
    /// of its body (refresh `beat`) over the version it wrote last lands
    /// (the store compares it). [`Hold::Lost`] when another run took it
    /// over (its name there, or the lock removed by that run's commit), and
    /// the run is marked lost; [`Hold::Unknown`] when the lock could not be
    /// read or written: nothing is concluded, and a lock that cannot be
    /// read is not written (a plain write would bring back a removed one).
    fn hold(&self, beat: u64) -> Hold {
        if self.lost.load(Ordering::SeqCst) {
            return Hold::Lost;
        }
        let owner = match self
            .store
            .object(LOCK_NAME)
            .and_then(|o| o.get_sized(0, 1 << 20, "lock"))
        {
            Ok(b) => LockBody::parse(&b).run,
            Err(StorageError::NotFound { .. }) => None,
            Err(_) => return Hold::Unknown,
        };
        let held = if owner.as_deref() != Some(self.run) {
            Hold::Lost
        } else {
            let _writing = lock(self.lock_write);
            let body = LockBody::new(
                self.run,
                beat,
                self.claimed.load(Ordering::SeqCst),
                run_timeout_ms(self.store),
                *lock(self.carry),
            )
            .render();
            match self.lock_writer.write(self.client, self.path, body) {
                Ok(()) => Hold::Held,
                Err(LockWriteError::Lost) => Hold::Lost,
                Err(LockWriteError::Other(_)) => Hold::Unknown,
            }
        };
        if held == Hold::Lost {
            self.lost.store(true, Ordering::SeqCst);
        }
        held
    }
}

/// Writes a run's lock object over the version it wrote last (`If-Match` on
/// its ETag), so that nothing of this run's lands over another run's lock:
/// a write of this run that stalled while another took the prefix over is
/// refused by the store. Where the store gives no ETag, or has no
/// conditional PUTs, it writes plainly (the owner checks by GET remain).
#[derive(Default)]
pub(super) struct LockWriter {
    state: Mutex<LockVersion>,
}

#[derive(Default)]
pub(super) struct LockVersion {
    /// The version of the body this run wrote last, when known.
    tag: Option<UpdateVersion>,
    /// The body of a write whose outcome is unknown (an error after the
    /// request may have landed).
    unsure: Option<String>,
    /// The store refused a conditional write as not implemented.
    plain: bool,
}

pub(super) enum LockWriteError {
    /// Another writer changed or removed the lock since this run's write.
    Lost,
    Other(object_store::Error),
}

impl LockWriter {
    /// Records the result of a write of `body` made outside [`Self::write`].
    fn wrote(&self, r: &object_store::PutResult) {
        lock(&self.state).tag = version_of(r);
    }

    /// The next write goes over version `v` (a lock this run takes over).
    fn expect(&self, v: UpdateVersion) {
        lock(&self.state).tag = Some(v);
    }

    fn write(
        &self,
        client: &Arc<dyn ObjectStore>,
        path: &ObjPath,
        body: String,
    ) -> std::result::Result<(), LockWriteError> {
        let mut st = lock(&self.state);
        let mode = match (&st.tag, st.plain) {
            (Some(t), false) => PutMode::Update(t.clone()),
            _ => PutMode::Overwrite,
        };
        let put =
            |mode: PutMode| -> std::result::Result<object_store::PutResult, object_store::Error> {
                let (client, path) = (Arc::clone(client), path.clone());
                let payload = PutPayload::from(body.clone());
                match runtime::block_on(async move {
                    client
                        .put_opts(&path, payload, PutOptions::from(mode))
                        .await
                }) {
                    Ok(r) => r,
                    Err(e) => Err(runtime_failure(&e)),
                }
            };
        let mut result = put(mode);
        if matches!(result, Err(object_store::Error::Precondition { .. })) {
            // A write of this run whose answer was lost may have landed: an
            // earlier one (`unsure`), or this very one, which the client sent
            // again and the store refused, its version having moved. Then
            // the lock is that body (it names the run and its beat), and
            // this run's still.
            let unsure = st.unsure.take();
            if let Ok(Some(seen)) = read_seen(client, path) {
                if seen.bytes.as_ref() == body.as_bytes() {
                    st.tag = Some(seen.version).filter(|v| v.e_tag.is_some());
                    return Ok(());
                }
                if unsure.is_some_and(|u| seen.bytes.as_ref() == u.as_bytes()) {
                    result = put(PutMode::Update(seen.version));
                }
            }
        }
        if matches!(result, Err(object_store::Error::NotImplemented { .. })) {
            st.plain = true;
            result = put(PutMode::Overwrite);
        }
        match result {
            Ok(r) => {
                st.tag = version_of(&r);
                st.unsure = None;
                Ok(())
            }
            Err(
                object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. },
            ) => Err(LockWriteError::Lost),
            Err(e) => {
                st.unsure = Some(body);
                Err(LockWriteError::Other(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The lock's readers and writers as the tests below have always called them.
    fn lock_body(run: &str, beat: u64, claimed: bool, timeout_ms: u64, carry: Carry) -> String {
        LockBody::new(run, beat, claimed, timeout_ms, carry).render()
    }
    fn lock_note(run: &str, claimed: bool, wait_ms: u64, carry: Carry) -> String {
        LockBody::note(run, claimed, wait_ms, carry).render()
    }
    fn lock_owner(bytes: &[u8]) -> Option<String> {
        LockBody::parse(bytes).run
    }
    fn lock_claimed(bytes: &[u8]) -> bool {
        LockBody::parse(bytes).claimed
    }
    fn lock_carry(bytes: &[u8]) -> Carry {
        LockBody::parse(bytes).carry()
    }
    fn lock_timeout(bytes: &[u8]) -> std::time::Duration {
        LockBody::parse(bytes).timeout()
    }
    fn lock_unanswered(bytes: &[u8]) -> Option<std::time::Duration> {
        LockBody::parse(bytes).unanswered()
    }

    /// Bodies an earlier bale wrote (its `lock_body` and `lock_note`), to the
    /// byte.
    const OLD_BODY: &str = r#"{"beat":3,"claimed":true,"host":"vm","pid":8118,"request_timeout_ms":6000,"run":"run-1","tool":"bale"}"#;
    const OLD_CARRYING: &str = r#"{"beat":3,"claimed":false,"host":"vm","in_flight_until_ms":1700000060456,"leftovers_until_ms":1700000000123,"pid":8118,"request_timeout_ms":6000,"run":"run-1","tool":"bale"}"#;
    const OLD_NOTE: &str = r#"{"beat":0,"claimed":true,"host":"vm","in_flight_until_ms":1700000060456,"leftovers_until_ms":1700000000123,"pid":8118,"request_timeout_ms":9000,"run":"run-1","tool":"bale","unanswered_wait_ms":9000}"#;

    const OLD_CARRY: Carry = Carry {
        leftovers_until: Some(1_700_000_000_123),
        in_flight_until: Some(1_700_000_060_456),
    };

    #[test]
    fn a_lock_body_is_written_as_bale_always_wrote_it() {
        let on = |b: LockBody| LockBody {
            pid: Some(8118),
            host: Some("vm".into()),
            ..b
        };
        let body = on(LockBody::new("run-1", 3, true, 6_000, Carry::default()));
        assert_eq!(body.render(), OLD_BODY);
        let carrying = on(LockBody::new("run-1", 3, false, 6_000, OLD_CARRY));
        assert_eq!(carrying.render(), OLD_CARRYING);
        let note = on(LockBody::note("run-1", true, 9_000, OLD_CARRY));
        assert_eq!(note.render(), OLD_NOTE);
        // And read back as written.
        for b in [body, carrying, note] {
            assert_eq!(LockBody::parse(b.render().as_bytes()), b);
        }
    }

    #[test]
    fn an_old_lock_body_reads_as_it_always_did() {
        let secs = std::time::Duration::from_secs;
        let body = LockBody::parse(OLD_BODY.as_bytes());
        assert_eq!(body.owner(), Some("run-1"));
        assert!(body.claimed);
        assert_eq!(body.carry(), Carry::default());
        assert_eq!(body.timeout(), secs(6));
        assert_eq!(body.unanswered(), None);
        assert_eq!((body.beat, body.pid), (Some(3), Some(8118)));
        assert_eq!(
            (body.host.as_deref(), body.tool.as_deref()),
            (Some("vm"), Some("bale"))
        );
        let carrying = LockBody::parse(OLD_CARRYING.as_bytes());
        assert!(!carrying.claimed);
        assert_eq!(carrying.carry(), OLD_CARRY);
        let note = LockBody::parse(OLD_NOTE.as_bytes());
        assert_eq!(note.owner(), Some("run-1"));
        assert_eq!(note.carry(), OLD_CARRY);
        assert_eq!(note.timeout(), secs(9));
        assert_eq!(note.unanswered(), Some(secs(9)));
        // The hand-written locks of the end-to-end tests, as bales before
        // this one wrote them (no timeout, no claim).
        let old = LockBody::parse(br#"{"run": "old", "beat": 1}"#);
        assert_eq!(old.owner(), Some("old"));
        assert!(!old.claimed);
        assert_eq!(old.timeout(), secs(60));
    }

    #[test]
    fn a_lock_body_reads_each_key_on_its_own() {
        // A key of another type reads as unsaid, and the others still read.
        let odd = LockBody::parse(
            br#"{"run": "r", "claimed": "yes", "beat": -1, "pid": "x", "unanswered_wait_ms": -1,
                "leftovers_until_ms": 1.5, "in_flight_until_ms": 7, "request_timeout_ms": 2500.9}"#,
        );
        assert_eq!(odd.owner(), Some("r"));
        assert!(!odd.claimed);
        assert_eq!((odd.beat, odd.pid, odd.unanswered()), (None, None, None));
        assert_eq!(
            odd.carry(),
            Carry {
                leftovers_until: None,
                in_flight_until: Some(7)
            }
        );
        assert_eq!(odd.timeout(), std::time::Duration::from_millis(2500));
        // A number where the run's name goes names no run.
        assert_eq!(
            LockBody::parse(br#"{"run": 5, "claimed": true}"#).owner(),
            None
        );
        // The last of a key said twice counts, as JSON readers take it.
        assert_eq!(
            LockBody::parse(br#"{"run": "a", "run": "b"}"#).owner(),
            Some("b")
        );
        // Not a JSON object: nothing said, every key at its default.
        for garbage in [
            &b"not json"[..],
            b"",
            b"null",
            b"[\"run-1\", 3, true]",
            b"\"run-1\"",
            b"{\"run\": \"cut",
        ] {
            let b = LockBody::parse(garbage);
            assert_eq!(
                b,
                LockBody::default(),
                "{:?}",
                String::from_utf8_lossy(garbage)
            );
            assert_eq!(b.owner(), None);
            assert!(!b.claimed);
            assert_eq!(b.carry(), Carry::default());
            assert_eq!(b.timeout(), std::time::Duration::from_secs(60));
            assert_eq!(b.unanswered(), None);
        }
    }

    #[test]
    fn a_locks_note_of_unanswered_requests_is_read_back_and_capped() {
        let note = lock_note("run-1", true, 6_000, Carry::default());
        assert_eq!(lock_owner(note.as_bytes()).as_deref(), Some("run-1"));
        assert!(lock_claimed(note.as_bytes()));
        assert_eq!(
            lock_unanswered(note.as_bytes()),
            Some(std::time::Duration::from_secs(6))
        );
        // Another run's lock is read, not trusted: no wait past the cap.
        let huge = lock_note("run-2", false, u64::MAX, Carry::default());
        assert_eq!(lock_unanswered(huge.as_bytes()), Some(MAX_UNANSWERED_WAIT));
        for plain in [
            lock_body("run-3", 4, false, 6_000, Carry::default()),
            r#"{"unanswered_wait_ms": -1}"#.to_owned(),
            r#"{"unanswered_wait_ms": "60000"}"#.to_owned(),
            "not json".to_owned(),
        ] {
            assert_eq!(lock_unanswered(plain.as_bytes()), None, "{plain}");
        }
    }

    #[test]
    fn a_lock_says_how_long_its_runs_requests_may_take() {
        let secs = std::time::Duration::from_secs;
        let body = lock_body("run-1", 3, true, 6_000, Carry::default());
        assert_eq!(lock_timeout(body.as_bytes()), secs(6));
        // A note says the same timeout.
        assert_eq!(
            lock_timeout(lock_note("run-1", false, 9_000, Carry::default()).as_bytes()),
            secs(9)
        );
        // Read, not trusted: capped; a lock that does not say (or cannot be
        // read) counts as the default timeout, not as none.
        let huge = lock_body("run-2", 0, false, u64::MAX, Carry::default());
        assert_eq!(lock_timeout(huge.as_bytes()), MAX_UNANSWERED_WAIT);
        for huge in [
            r#"{"request_timeout_ms": 1e300}"#,
            r#"{"request_timeout_ms": 18446744073709551617}"#,
        ] {
            assert_eq!(lock_timeout(huge.as_bytes()), MAX_UNANSWERED_WAIT, "{huge}");
        }
        for silent in [
            r#"{"run": "old", "beat": 1}"#,
            r#"{"request_timeout_ms": -5}"#,
            "not json",
        ] {
            assert_eq!(lock_timeout(silent.as_bytes()), secs(60), "{silent}");
        }
    }

    #[test]
    fn a_lock_carries_over_what_it_took_over() {
        let carry = Carry {
            leftovers_until: Some(1_700_000_000_123),
            in_flight_until: Some(1_700_000_060_456),
        };
        let body = lock_body("run-1", 2, true, 6_000, carry);
        assert_eq!(lock_carry(body.as_bytes()), carry);
        let note = lock_note("run-1", true, 6_000, carry);
        assert_eq!(lock_carry(note.as_bytes()), carry);
        // Nothing carried: nothing said, and nothing read back.
        let plain = lock_body("run-2", 0, false, 6_000, Carry::default());
        assert!(!plain.contains("until"), "{plain}");
        assert_eq!(lock_carry(plain.as_bytes()), Carry::default());
        assert_eq!(lock_carry(b"not json"), Carry::default());
    }
}
