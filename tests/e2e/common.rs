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
/// -> `"-> target"`), to check that a command left a directory as it was.
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
            } else {
                out.insert(rel, std::fs::read(&path).unwrap_or_default());
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
