//! Fixtures the end-to-end modules share.

use std::path::Path;

use bale_format::Manifest;
use bale_format::read::ShardReader;

/// Samples in order: (key, [(ext, bytes)]).
pub(crate) type Samples = Vec<(String, Vec<(String, Vec<u8>)>)>;

/// Every sample of a dataset, in order, checksums checked.
pub(crate) fn samples(dir: &Path) -> Samples {
    let m = Manifest::read(dir).unwrap();
    let mut out = Vec::new();
    for s in &m.shards {
        let r = ShardReader::open(
            Manifest::resolve(dir, &s.file),
            Manifest::resolve(dir, &s.index),
        )
        .unwrap();
        for i in 0..r.len() {
            let smp = r.read(i, true).unwrap();
            out.push((smp.key.clone(), smp.members.clone()));
        }
    }
    out
}

/// Every file under `dir`, recursively: relative path -> bytes (a symlink
/// -> `"-> target"`, a FIFO or device -> its type), to check that a command
/// left a directory as it was.
pub(crate) fn snapshot(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            let rel = path
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let ty = e.file_type().unwrap();
            if ty.is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("-> {}", target.display()).into_bytes());
            } else if ty.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                stack.push(path);
            } else if ty.is_file() {
                out.insert(rel, std::fs::read(&path).unwrap_or_default());
            } else {
                // A FIFO or a device: its type, never a read that would block.
                out.insert(rel, format!("<{ty:?}>").into_bytes());
            }
        }
    }
    out
}

/// A child process whose stdout and stderr are drained by threads from the
/// start; killed when dropped unfinished, so a failed test leaves none behind.
pub(crate) struct Running {
    child: Option<std::process::Child>,
    what: String,
    stdout: Option<std::thread::JoinHandle<Vec<u8>>>,
    stderr: Option<std::thread::JoinHandle<Vec<u8>>>,
}

impl Running {
    /// Starts `cmd` with its stdout and stderr captured (stdin is left as set).
    pub(crate) fn start(cmd: &mut std::process::Command) -> Self {
        use std::io::Read;
        use std::process::Stdio;
        let what = format!("{cmd:?}");
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                let _ = r.read_to_end(&mut buf);
                buf
            })
        };
        let stdout = child.stdout.take().map(|r| drain(Box::new(r)));
        let stderr = child.stderr.take().map(|r| drain(Box::new(r)));
        Running {
            child: Some(child),
            what,
            stdout,
            stderr,
        }
    }

    /// The child, for its id or stdin.
    pub(crate) fn child(&mut self) -> &mut std::process::Child {
        self.child.as_mut().expect("running until finished")
    }

    /// Waits for the child to end; if it has not ended within `limit` (from
    /// now), kills it and fails the test.
    pub(crate) fn finish_within(mut self, limit: std::time::Duration) -> std::process::Output {
        let deadline = std::time::Instant::now() + limit;
        let mut child = self.child.take().expect("running until finished");
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{} did not end within {limit:?}; killed", self.what);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let join = |h: Option<std::thread::JoinHandle<Vec<u8>>>| {
            h.map(|h| h.join().unwrap_or_default()).unwrap_or_default()
        };
        std::process::Output {
            status,
            stdout: join(self.stdout.take()),
            stderr: join(self.stderr.take()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `cmd` with its output captured, killing it and failing the test if
/// it has not ended within `limit`.
pub(crate) fn output_within(
    cmd: &mut std::process::Command,
    limit: std::time::Duration,
) -> std::process::Output {
    cmd.stdin(std::process::Stdio::null());
    Running::start(cmd).finish_within(limit)
}

/// `n` small text files under `root/<sub>/`, `NNNN.txt`, each a distinct
/// line that starts with `tag`.
pub(crate) fn text_tree(root: &Path, sub: &str, tag: &str, n: usize) {
    let dir = root.join(sub);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..n {
        std::fs::write(
            dir.join(format!("{i:04}.txt")),
            format!("{tag} sample {i}: {}\n", "x".repeat(i % 50)),
        )
        .unwrap();
    }
}

/// How a child process run under [`run_bounded`] ended.
#[derive(Debug)]
pub(crate) struct Bounded {
    /// Its exit status, `None` when it was killed for time or memory.
    pub status: Option<std::process::ExitStatus>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// When it was spawned.
    pub started: std::time::Instant,
    /// Time from spawn to exit (or to the kill).
    pub elapsed: std::time::Duration,
    /// Why it was killed: `"timeout"` or `"memory"`.
    pub killed: Option<&'static str>,
    /// The largest resident set seen, in KiB.
    pub peak_rss_kib: u64,
}

impl Bounded {
    /// Exit code, stdout and stderr, for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "status {:?}, killed {:?} after {:.1?}, peak RSS {} KiB\nstdout:\n{}\nstderr:\n{}",
            self.status.and_then(|s| s.code()),
            self.killed,
            self.elapsed,
            self.peak_rss_kib,
            String::from_utf8_lossy(&self.stdout),
            String::from_utf8_lossy(&self.stderr)
        )
    }

    /// Whether it exited by itself with a non-zero status.
    pub fn failed_cleanly(&self) -> bool {
        self.killed.is_none() && self.status.is_some_and(|s| !s.success())
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// The resident set of process `pid` in KiB (0 once it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Runs `cmd` (stdin closed, stdout and stderr captured), killing it with
/// SIGKILL when it runs longer than `timeout` or its resident set grows past
/// `max_rss_mib`: a test of a command that might hang or eat memory never
/// hangs the suite or the machine.
pub(crate) fn run_bounded(
    cmd: &mut std::process::Command,
    timeout: std::time::Duration,
    max_rss_mib: u64,
) -> Bounded {
    run_bounded_with_pid(cmd, timeout, max_rss_mib, &std::sync::Mutex::new(None))
}

/// [`run_bounded`], with `pid` holding the child's process id from its
/// start until it is reaped: another thread that signals the pid while
/// holding the lock never reaches a recycled one.
pub(crate) fn run_bounded_with_pid(
    cmd: &mut std::process::Command,
    timeout: std::time::Duration,
    max_rss_mib: u64,
    pid: &std::sync::Mutex<Option<u32>>,
) -> Bounded {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::Instant;
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the command");
    *pid.lock().unwrap() = Some(child.id());
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut killed = None;
    let mut peak = 0;
    let status = loop {
        {
            let mut alive = pid.lock().unwrap();
            if let Some(s) = child.try_wait().expect("wait for the child") {
                *alive = None;
                break Some(s);
            }
        }
        peak = peak.max(rss_kib(child.id()));
        if peak > max_rss_mib * 1024 {
            killed = Some("memory");
        } else if start.elapsed() > timeout {
            killed = Some("timeout");
        }
        if killed.is_some() {
            let mut alive = pid.lock().unwrap();
            let _ = child.kill();
            let _ = child.wait();
            *alive = None;
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let elapsed = start.elapsed();
    Bounded {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
        started: start,
        elapsed,
        killed,
        peak_rss_kib: peak,
    }
}

/// `bale ARGS` as a command, for [`run_bounded`].
pub(crate) fn bale_cmd<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Command {
    let mut c = std::process::Command::new(bale_tests::bale_bin());
    c.args(args);
    c
}

/// Runs `bale ARGS` for at most 20 s and 1 GiB of memory.
pub(crate) fn bale_bounded<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Bounded {
    run_bounded(
        &mut bale_cmd(args),
        std::time::Duration::from_secs(20),
        1024,
    )
}

/// Packs `input` into `out` with the real binary (quiet), panicking on failure.
pub(crate) fn pack_quiet(input: &Path, out: &Path, extra: &[&str]) {
    let mut args: Vec<&std::ffi::OsStr> = vec!["pack".as_ref(), "-q".as_ref()];
    args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
    args.extend(["-o".as_ref(), out.as_os_str(), input.as_os_str()]);
    let o = bale_bounded(&args);
    assert!(o.status.is_some_and(|s| s.success()), "{}", o.describe());
}

/// A tree of `n` files of 16-64 KiB of pseudo-random bytes (fixed seed) in
/// 5 class directories `c0`..`c4`: incompressible data that takes a pack a
/// measurable time.
pub(crate) fn random_tree(root: &Path, n: usize) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..n {
        let dir = root.join(format!("c{}", i % 5));
        std::fs::create_dir_all(&dir).unwrap();
        let len = 16 * 1024 + (next() % (48 * 1024)) as usize;
        let data: Vec<u8> = (0..len.div_ceil(8))
            .flat_map(|_| next().to_le_bytes())
            .take(len)
            .collect();
        std::fs::write(dir.join(format!("{i:05}.bin")), data).unwrap();
    }
}

/// Makes a FIFO at `path` (with the system's `mkfifo`).
pub(crate) fn mkfifo(path: &Path) {
    let o = std::process::Command::new("mkfifo")
        .arg(path)
        .output()
        .unwrap();
    assert!(o.status.success(), "mkfifo {}: {o:?}", path.display());
}

/// A command's exit code, stdout and stderr as one text, for a snapshot of
/// its whole output (`insta::assert_snapshot!`), with each `(from, to)` of
/// `redact` replaced in both streams (a temporary folder's path, say).
pub(crate) fn shown(o: &std::process::Output, redact: &[(&str, &str)]) -> String {
    let mut text = format!(
        "exit code: {:?}\n--- stdout\n{}--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    for (from, to) in redact {
        text = text.replace(from, to);
    }
    text
}
