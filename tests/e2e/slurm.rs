//! docs/distributed.md's Slurm recipe for object storage, run for real: a
//! single-node Slurm (slurmctld, slurmd and munged of the Debian packages
//! `slurm-wlm` and `munge`, which `cargo xtask ci` installs) started by the
//! test on 127.0.0.1 with free ports, runs the job array that packs N parts
//! into the SeaweedFS bucket, then the dependent merge. The scripts are read
//! out of the doc, unchanged; sbatch's command line and the environment set
//! the array size and the paths, as a user would.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bale_reader::Dataset;
use bale_storage::Store;
use bale_tests::seaweed::{KEY, SECRET, Seaweed};

use crate::common::{pack_quiet, random_tree, snapshot};

/// A one-node Slurm cluster of the test's own; stopped by `Drop`.
struct Slurm {
    dir: tempfile::TempDir,
    conf: PathBuf,
    munge_socket: PathBuf,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn run(cmd: &mut Command) -> String {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Slurm {
    fn start() -> Slurm {
        for bin in ["slurmctld", "slurmd", "sbatch", "scontrol", "munged"] {
            assert!(
                ["/usr/sbin", "/usr/bin"]
                    .iter()
                    .any(|d| Path::new(d).join(bin).exists()),
                "{bin} is missing: the Slurm e2e test needs the Debian packages slurm-wlm and munge; `cargo xtask ci` installs them (as root)"
            );
        }
        assert!(
            is_root(),
            "the Slurm e2e test starts munged and slurmd, which run jobs as their users and need root; run `cargo xtask ci` as root"
        );
        let dir = tempfile::Builder::new()
            .prefix("bale-slurm-")
            .tempdir()
            .unwrap();
        let d = dir.path();
        for sub in ["state", "spool", "munge", "logs"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        // munged runs as the munge user: its directory is its own, and every
        // directory above it must be reachable.
        run(Command::new("chmod").arg("755").arg(d));
        run(Command::new("chown")
            .arg("munge:munge")
            .arg(d.join("munge")));
        let munge = d.join("munge");
        let munge_socket = munge.join("munge.sock");
        run(Command::new("runuser")
            .args(["-u", "munge", "--", "/usr/sbin/munged"])
            .arg(format!("--socket={}", munge_socket.display()))
            .arg(format!("--pid-file={}", munge.join("munged.pid").display()))
            .arg(format!("--log-file={}", munge.join("munged.log").display()))
            .arg(format!(
                "--seed-file={}",
                munge.join("munged.seed").display()
            )));
        let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
        let conf = d.join("slurm.conf");
        let text = format!(
            "ClusterName=baletest\n\
             SlurmctldHost=localhost(127.0.0.1)\n\
             SlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             AuthInfo=socket={sock}\n\
             StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nMpiDefault=none\n\
             ReturnToService=2\nSchedulerType=sched/backfill\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             JobCompType=jobcomp/none\nAccountingStorageType=accounting_storage/none\n\
             JobAcctGatherType=jobacct_gather/none\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            ctld = free_port(),
            slurmd = free_port(),
            sock = munge_socket.display(),
            d = d.display(),
        );
        std::fs::write(&conf, text).unwrap();
        let s = Slurm {
            dir,
            conf,
            munge_socket,
        };
        run(&mut s.cmd("/usr/sbin/slurmctld"));
        run(s.cmd("/usr/sbin/slurmd").args(["-N", "localhost"]));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let o = s.cmd("sinfo").args(["-h", "-o", "%T"]).output().unwrap();
            let state = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            if state == "idle" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the Slurm node never became idle (state {state:?}):\n{}",
                s.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        s
    }

    /// A Slurm command reaching this cluster.
    fn cmd(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn logs(&self) -> String {
        let d = self.dir.path();
        ["slurmctld.log", "slurmd.log", "munge/munged.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {f}\n{}",
                    std::fs::read_to_string(d.join(f)).unwrap_or_default()
                )
            })
            .collect()
    }

    /// The job's state, as `scontrol show job` gives it (`COMPLETED`, ...).
    fn state(&self, job: &str) -> String {
        let out = self
            .cmd("scontrol")
            .args(["show", "job", "-o", job])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // An array job shows one line per task: the worst state wins.
        let states: Vec<String> = text
            .lines()
            .filter_map(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("JobState="))
                    .map(str::to_owned)
            })
            .collect();
        if states.is_empty() {
            return "UNKNOWN".into();
        }
        states
            .iter()
            .find(|s| *s != "COMPLETED")
            .cloned()
            .unwrap_or_else(|| "COMPLETED".into())
    }

    fn wait(&self, job: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let s = self.state(job);
            if !matches!(
                s.as_str(),
                "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING" | "UNKNOWN"
            ) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "job {job} still {s} after {limit:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let _ = self.cmd("scontrol").arg("shutdown").output();
        let d = self.dir.path().to_path_buf();
        let pid_of = |f: &str| -> Option<i32> {
            std::fs::read_to_string(d.join(f)).ok()?.trim().parse().ok()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        for f in ["slurmctld.pid", "slurmd.pid", "munge/munged.pid"] {
            let Some(pid) = pid_of(f) else { continue };
            if f.starts_with("munge") {
                // SAFETY: stops the munged this test started.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            // SAFETY: signal 0 only checks the process exists.
            while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            // SAFETY: the daemon this test started, still there after 10 s.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::fs::remove_file(&self.munge_socket);
    }
}

/// The ```bash block that follows the line naming `file` in docs/distributed.md.
fn doc_script(file: &str) -> String {
    let doc = std::fs::read_to_string(bale_tests::repo_root().join("docs/distributed.md")).unwrap();
    let at = doc
        .find(&format!("`{file}`:"))
        .unwrap_or_else(|| panic!("docs/distributed.md has no `{file}`: script"));
    let rest = &doc[at..];
    let start = rest.find("```bash\n").expect("a bash block") + "```bash\n".len();
    let len = rest[start..].find("```").expect("the block's end");
    rest[start..start + len].to_owned()
}

#[test]
fn the_slurm_recipe_packs_parts_into_a_bucket_and_merges_them() {
    let weed = Seaweed::shared();
    let slurm = Slurm::start();
    let t = tempfile::tempdir().unwrap();
    let tree = t.path().join("tree");
    random_tree(&tree, 300);
    let b = crate::store::bucket(weed, "slurm");
    let parts = format!("s3://{b}/parts");
    let out = format!("s3://{b}/train");
    let work = t.path().join("jobs");
    std::fs::create_dir_all(work.join("logs")).unwrap();
    std::fs::write(work.join("pack-s3.sbatch"), doc_script("pack-s3.sbatch")).unwrap();
    std::fs::write(work.join("merge-s3.sbatch"), doc_script("merge-s3.sbatch")).unwrap();
    let bin_dir = bale_tests::bale_bin().parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let sbatch = |args: &[&str]| -> String {
        let mut c = slurm.cmd("sbatch");
        c.current_dir(&work)
            .env("PATH", &path)
            .env("SRC", &tree)
            .env("PARTS", &parts)
            .env("OUT", &out)
            .env("N", "3")
            .env("AWS_ACCESS_KEY_ID", KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET)
            .env("AWS_ENDPOINT_URL", weed.endpoint())
            .env("AWS_ALLOW_HTTP", "true")
            .env("AWS_REGION", "us-east-1")
            .args(args);
        run(&mut c).trim().to_owned()
    };
    // The doc's submission, with 3 parts of 1 CPU each on this machine.
    let pack = sbatch(&[
        "--parsable",
        "--array=0-2",
        "--cpus-per-task=1",
        "--mem=100M",
        "pack-s3.sbatch",
    ]);
    let merge = sbatch(&[
        "--parsable",
        &format!("--dependency=afterok:{pack}"),
        "--kill-on-invalid-dep=yes",
        "--mem=100M",
        "--output=logs/merge.out",
        "merge-s3.sbatch",
    ]);
    let job_logs = || -> String {
        std::fs::read_dir(work.join("logs"))
            .map(|rd| {
                rd.flatten()
                    .map(|e| {
                        format!(
                            "--- {}\n{}",
                            e.file_name().to_string_lossy(),
                            std::fs::read_to_string(e.path()).unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let state = slurm.wait(&pack, Duration::from_secs(300));
    assert_eq!(
        state,
        "COMPLETED",
        "the pack array:\n{}\n{}",
        job_logs(),
        slurm.logs()
    );
    let state = slurm.wait(&merge, Duration::from_secs(300));
    assert_eq!(
        state,
        "COMPLETED",
        "the merge:\n{}\n{}",
        job_logs(),
        slurm.logs()
    );
    assert!(
        job_logs().contains(": ok"),
        "the merge job verified: {}",
        job_logs()
    );

    // The merged dataset holds a single pack's samples, and its objects are
    // the bytes of a local merge of local parts packed the same way.
    let options = crate::store::options(weed);
    let remote = Dataset::options()
        .storage_options(options.clone())
        .open(&out)
        .unwrap();
    let single = t.path().join("single");
    pack_quiet(
        &tree,
        &single,
        &["--shuffle", "--seed", "1", "--shard-size", "1GiB"],
    );
    let single = Dataset::open(&single).unwrap();
    assert_eq!(remote.len(), single.len());
    for i in 0..single.len() {
        let (a, b) = (remote.get(i).unwrap(), single.get(i).unwrap());
        assert_eq!(a.key(), b.key());
        assert!(a.fields().eq(b.fields()), "sample {i}");
    }
    let mut local_parts = Vec::new();
    for i in 0..3 {
        let dir = t.path().join(format!("part-{i}"));
        let part = format!("{i}/3");
        pack_quiet(
            &tree,
            &dir,
            &[
                "--part",
                &part,
                "--shuffle",
                "--seed",
                "1",
                "--shard-size",
                "1GiB",
            ],
        );
        local_parts.push(dir);
    }
    let merged = t.path().join("merged");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "merge".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        merged.as_os_str(),
    ];
    args.extend(local_parts.iter().map(|p| p.as_os_str()));
    let o = crate::common::bale_bounded(&args);
    assert!(o.status.is_some_and(|s| s.success()), "{}", o.describe());
    let store = Store::open(&out, &options).unwrap();
    for (name, bytes) in snapshot(&merged) {
        let obj = store.object(&name).unwrap();
        let len = obj.head().unwrap();
        assert!(
            obj.get_range(0..len).unwrap().to_vec() == bytes,
            "{out}/{name}"
        );
    }
}
