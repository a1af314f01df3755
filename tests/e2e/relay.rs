//! A relay in front of the test server that holds, cuts, answers or loses
//! chosen requests (a [`Gate`]): how the object-storage tests make a store
//! slow, a connection drop after a request went out, or an answer that
//! never comes, at an exact request.

use std::time::Duration;

use bale_tests::seaweed::Seaweed;

use crate::common::{Running, bale_cmd};

/// What a [`Gate`] does to the requests it matches.
#[derive(Clone, PartialEq)]
pub(crate) enum GateDoes {
    /// Holds the request until the test releases it: it lands late.
    HoldRequest,
    /// Forwards the request (it lands) and holds the answer until the test
    /// releases it.
    HoldAnswer,
    /// Forwards the request (it lands), then answers 503 in the server's
    /// stead and closes the connection: an answer lost after the fact.
    LoseAnswer,
    /// Reads the whole request, closes the client's connection with no
    /// answer (the client may send it again on another) and holds the
    /// request until the test releases it: the first attempt lands after a
    /// later one was answered.
    CutAndHold,
    /// Forwards the request and its answer: a match counted, nothing done
    /// (so that a later rule acts on a later request).
    Pass,
    /// Reads the whole request, never forwards it, and answers with these
    /// bytes (a whole HTTP response) in the server's stead.
    Answer(Vec<u8>),
}

/// A TCP relay on 127.0.0.1 in front of the test server that acts on the
/// first `times` requests whose bytes hold `pattern` (a request line), as
/// `does` says; everything else passes through.
pub(crate) struct Gate {
    port: u16,
    /// How many of its `times` it has acted.
    acted: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    rules: std::sync::Arc<Vec<GateRule>>,
    held: std::sync::Arc<(
        std::sync::Mutex<Vec<std::sync::mpsc::Sender<()>>>,
        std::sync::Condvar,
    )>,
}

/// One rule of a [`Gate`].
struct GateRule {
    pattern: Vec<u8>,
    does: GateDoes,
    /// Matches left to act on.
    left: std::sync::atomic::AtomicUsize,
    /// Whether the rule acts yet ([`Gate::arm`]).
    armed: std::sync::atomic::AtomicBool,
}

impl Gate {
    pub(crate) fn start(s: &Seaweed, pattern: Vec<u8>, does: GateDoes, times: usize) -> Gate {
        Gate::with_rules(s, vec![(pattern, does, times, true)])
    }

    /// A gate with several rules `(pattern, does, times, armed)`; the first
    /// armed rule that matches a request acts on it.
    pub(crate) fn with_rules(s: &Seaweed, rules: Vec<(Vec<u8>, GateDoes, usize, bool)>) -> Gate {
        use std::io::{Read, Write};
        use std::net::{TcpListener, TcpStream};
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
        use std::sync::{Arc, Condvar, Mutex, mpsc};
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let upstream = s.endpoint().trim_start_matches("http://").to_owned();
        let held: Arc<(Mutex<Vec<mpsc::Sender<()>>>, Condvar)> = Arc::default();
        let gate_held = Arc::clone(&held);
        let rules: Arc<Vec<GateRule>> = Arc::new(
            rules
                .into_iter()
                .map(|(pattern, does, times, armed)| GateRule {
                    pattern,
                    does,
                    left: AtomicUsize::new(times),
                    armed: AtomicBool::new(armed),
                })
                .collect(),
        );
        let gate_rules = Arc::clone(&rules);
        let acted = Arc::new(AtomicUsize::new(0));
        let gate_acted = Arc::clone(&acted);
        // Waits for the test's release, once it knows of this hold.
        let hold = move |held: &(Mutex<Vec<mpsc::Sender<()>>>, Condvar)| {
            let (tx, rx) = mpsc::channel();
            held.0.lock().unwrap().push(tx);
            held.1.notify_all();
            let _ = rx.recv();
        };
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_in, mut c_out) = (server, client);
                // Set before a matched request goes out (what to do with its
                // answer, which is next): 1 hold, 2 lose.
                let answer = Arc::new(AtomicUsize::new(0));
                let (rules, acted) = (Arc::clone(&gate_rules), Arc::clone(&gate_acted));
                let (held, answer_in) = (Arc::clone(&gate_held), Arc::clone(&answer));
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let matched = rules.iter().find(|r| {
                            r.armed.load(Ordering::SeqCst)
                                && buf[..n].windows(r.pattern.len()).any(|w| w == r.pattern)
                                && r.left
                                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| {
                                        l.checked_sub(1)
                                    })
                                    .is_ok()
                        });
                        if let Some(r) = matched {
                            acted.fetch_add(1, Ordering::SeqCst);
                            if let GateDoes::Answer(answer) = &r.does {
                                let _ = c_in.set_read_timeout(Some(Duration::from_millis(300)));
                                while let Ok(m) = c_in.read(&mut buf) {
                                    if m == 0 {
                                        break;
                                    }
                                }
                                let _ = c_in.write_all(answer);
                                let _ = c_in.shutdown(std::net::Shutdown::Both);
                                let _ = s_out.shutdown(std::net::Shutdown::Both);
                                return;
                            }
                            if let GateDoes::CutAndHold = r.does {
                                // The rest of the request follows at once.
                                let mut whole = buf[..n].to_vec();
                                let _ = c_in.set_read_timeout(Some(Duration::from_millis(300)));
                                while let Ok(m) = c_in.read(&mut buf) {
                                    if m == 0 {
                                        break;
                                    }
                                    whole.extend_from_slice(&buf[..m]);
                                }
                                let _ = c_in.shutdown(std::net::Shutdown::Both);
                                hold(&held);
                                // Left open for writing: a server may drop
                                // a request whose client has gone. The
                                // other half reads the answer, then closes.
                                let _ = s_out.write_all(&whole);
                                return;
                            }
                            match r.does {
                                GateDoes::HoldRequest => hold(&held),
                                GateDoes::HoldAnswer => answer_in.store(1, Ordering::SeqCst),
                                GateDoes::LoseAnswer => answer_in.store(2, Ordering::SeqCst),
                                GateDoes::Pass | GateDoes::CutAndHold | GateDoes::Answer(_) => {}
                            }
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = s_out.shutdown(std::net::Shutdown::Write);
                });
                let held = Arc::clone(&gate_held);
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 1 << 16];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let what = answer.swap(0, Ordering::SeqCst);
                        if what != 0 {
                            if what == 2 {
                                let _ = c_out.write_all(
                                    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                                );
                                break;
                            }
                            hold(&held);
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                    let _ = s_in.shutdown(std::net::Shutdown::Both);
                });
            }
        });
        Gate {
            port,
            acted,
            held,
            rules,
        }
    }

    /// The storage options of [`Seaweed::cli_options`], through this relay.
    pub(crate) fn cli_options(&self, s: &Seaweed) -> Vec<String> {
        s.cli_options()
            .into_iter()
            .map(|a| {
                if a.starts_with("aws_endpoint_url=") {
                    format!("aws_endpoint_url=http://127.0.0.1:{}", self.port)
                } else {
                    a
                }
            })
            .collect()
    }

    /// Waits until `n` requests or answers have been held.
    pub(crate) fn wait_held(&self, n: usize, within: Duration) {
        let (m, cv) = &*self.held;
        let (g, timeout) = cv
            .wait_timeout_while(m.lock().unwrap(), within, |h| h.len() < n)
            .unwrap();
        assert!(!timeout.timed_out(), "{} of {n} held", g.len());
    }

    /// Makes rule `i` act from now on.
    pub(crate) fn arm(&self, i: usize) {
        self.rules[i]
            .armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Lets the `i`th held request or answer (from 0) go on.
    pub(crate) fn release(&self, i: usize) {
        self.held.0.lock().unwrap()[i].send(()).unwrap();
    }

    /// How many requests its rules have acted on.
    pub(crate) fn acted(&self) -> usize {
        self.acted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// `bale ARGS...` through this relay, running.
    pub(crate) fn bale(&self, s: &Seaweed, args: &[&str]) -> Running {
        let mut all: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        all.extend(self.cli_options(s));
        Running::start(&mut bale_cmd(&all))
    }
}

/// The request line of a PUT of `key` (`ds/bale.json`) into `bucket`, for a [`Gate`].
pub(crate) fn put_of(bucket: &str, key: &str) -> Vec<u8> {
    format!("PUT /{bucket}/{key} ").into_bytes()
}

/// The request line of a bulk DELETE (`DeleteObjects`) in `bucket`, for a [`Gate`].
pub(crate) fn bulk_delete_in(bucket: &str) -> Vec<u8> {
    format!("POST /{bucket}?delete ").into_bytes()
}
