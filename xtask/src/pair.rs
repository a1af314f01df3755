//! `cargo xtask pair`: times two shell commands against each other, in pairs.
//!
//! On a shared machine absolute times drift from one minute to the next, while
//! two commands run one right after the other see the same machine. So each
//! pair runs both, the order alternating from pair to pair (base then new,
//! new then base, ...: a drift that slows every later run slows each side
//! alike), and the figure that counts is the median of the pairs' ratios.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::util::{self, Args};

const USAGE: &str = "\
usage: cargo xtask pair --base CMD --new CMD [--runs N] [--prepare CMD] [--timeout SECS]

Times two shell commands against each other: N pairs (default 5), each
command run by `sh -c` from the repository root, the order alternating from
pair to pair (base then new, then new then base). Prints every pair, the
median and range of each command's wall time, and the median and range of
the pairs' ratios, new's time / base's: below 1.00x, new is faster.

  --base CMD     the yardstick (a peer, or the build before a change)
  --new CMD      the command measured against it
  --runs N       pairs to time (default 5)
  --prepare CMD  runs untimed before every timed command (removing the last
                 run's output, say); its failure stops the run
  --timeout SECS stop a command that runs longer (it and every process it
                 started are killed) and the run with it (default: no limit;
                 with a limit, times are taken to the nearest millisecond)

A command that fails stops the run with an error naming it. Example, pack
against the disk's durable write speed:

  cargo xtask pair --runs 5 \\
    --prepare 'rm -rf /tmp/pj /tmp/dd.bin' \\
    --base 'dd if=/dev/zero of=/tmp/dd.bin bs=1M count=2132 conv=fdatasync 2>/dev/null' \\
    --new 'target/release/bale pack target/bench/imagenet-like -o /tmp/pj -q'";

/// `cargo xtask pair`
pub fn main(mut args: Args) -> Result<()> {
    if args.wants_help() {
        println!("{USAGE}");
        return Ok(());
    }
    let base: Option<String> = args.value("--base")?;
    let new: Option<String> = args.value("--new")?;
    let runs: usize = args.value("--runs")?.unwrap_or(5);
    let prepare: Option<String> = args.value("--prepare")?;
    let limit = match args.value::<f64>("--timeout")? {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
        Some(s) => bail!("--timeout must be a positive number of seconds, not {s}"),
    };
    args.finish()?;
    let (Some(base), Some(new)) = (base, new) else {
        bail!("--base and --new are both needed (try --help)");
    };
    if runs == 0 {
        bail!("--runs must be at least 1");
    }
    let mut pairs = Vec::with_capacity(runs);
    for k in 0..runs {
        let mut times = [Duration::ZERO; 2];
        for side in order(k) {
            if let Some(p) = &prepare {
                timed(p, limit)?;
            }
            times[side] = timed(if side == 0 { &base } else { &new }, limit)?;
        }
        let pair = Pair {
            base: times[0],
            new: times[1],
        };
        eprintln!(
            "pair {}: base {:.3} s, new {:.3} s, new / base {:.2}x",
            k + 1,
            pair.base.as_secs_f64(),
            pair.new.as_secs_f64(),
            pair.ratio()
        );
        pairs.push(pair);
    }
    println!("{}", summary(&pairs));
    Ok(())
}

/// The sides of pair `k` in the order they run: 0 (base) first in even pairs.
fn order(k: usize) -> [usize; 2] {
    if k.is_multiple_of(2) { [0, 1] } else { [1, 0] }
}

/// One pair's wall times.
#[derive(Debug, Clone, Copy)]
struct Pair {
    base: Duration,
    new: Duration,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.new.as_secs_f64() / self.base.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Runs `cmd` with `sh -c` from the repository root; its wall time, or an
/// error naming it if it fails or outlives `limit` (then the shell and every
/// process it started are killed). The shell stays in this process group,
/// so that Ctrl-C at the terminal stops it with the run.
fn timed(cmd: &str, limit: Option<Duration>) -> Result<Duration> {
    let mut c = Command::new("sh");
    c.arg("-c").arg(cmd).current_dir(util::repo_root());
    let t = Instant::now();
    let mut child = c
        .spawn()
        .with_context(|| format!("cannot start `{}`", util::display(&c)))?;
    let status = loop {
        let Some(limit) = limit else {
            break child.wait()?;
        };
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if t.elapsed() > limit {
            let mut pids = descendants(child.id());
            pids.push(child.id());
            let _ = Command::new("kill")
                .arg("-KILL")
                .args(pids.iter().map(u32::to_string))
                .stderr(std::process::Stdio::null())
                .status();
            let _ = child.wait();
            bail!(
                "`{cmd}` ran longer than the --timeout of {:.1} s and was killed",
                t.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let took = t.elapsed();
    if !status.success() {
        bail!("`{cmd}` failed ({status})");
    }
    Ok(took)
}

/// The processes descended from `pid` (children, theirs, ...), from `/proc`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(p) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // `pid (comm) state ppid ...`: comm may hold spaces and parentheses.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(ppid) = ppid {
            parent_of.push((p, ppid));
        }
    }
    let mut found = vec![pid];
    let mut k = 0;
    while k < found.len() {
        let parent = found[k];
        found.extend(
            parent_of
                .iter()
                .filter(|&&(_, pp)| pp == parent)
                .map(|&(p, _)| p),
        );
        k += 1;
    }
    found.remove(0);
    found
}

/// The median (the mean of the middle two for an even count) and the range.
fn median_range(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if !n.is_multiple_of(2) {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    (median, v[0], v[n - 1])
}

/// Three lines: each side's median wall time and range, and the pairs'
/// median ratio and range.
fn summary(pairs: &[Pair]) -> String {
    let side =
        |f: fn(&Pair) -> Duration| median_range(pairs.iter().map(|p| f(p).as_secs_f64()).collect());
    let (b, b0, b1) = side(|p| p.base);
    let (n, n0, n1) = side(|p| p.new);
    let (r, r0, r1) = median_range(pairs.iter().map(Pair::ratio).collect());
    format!(
        "base: {b:.3} s ({b0:.3}-{b1:.3} s)\n\
         new:  {n:.3} s ({n0:.3}-{n1:.3} s)\n\
         new / base: {r:.2}x ({r0:.2}-{r1:.2}x), median of {} pair{}",
        pairs.len(),
        if pairs.len() == 1 { "" } else { "s" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(base_ms: u64, new_ms: u64) -> Pair {
        Pair {
            base: Duration::from_millis(base_ms),
            new: Duration::from_millis(new_ms),
        }
    }

    #[test]
    fn the_order_alternates_so_each_side_runs_first_as_often() {
        let firsts: Vec<usize> = (0..6).map(|k| order(k)[0]).collect();
        assert_eq!(firsts, [0, 1, 0, 1, 0, 1]);
        for k in 0..6 {
            let mut sides = order(k);
            sides.sort_unstable();
            assert_eq!(sides, [0, 1], "pair {k} runs each side once");
        }
    }

    #[test]
    fn the_summary_takes_the_median_of_the_ratios_not_the_ratio_of_the_medians() {
        // Ratios 0.5, 2.0 and 0.8: median 0.8. The sides' medians (200 ms
        // and 400 ms) would give 2.00x.
        let pairs = [pair(100, 50), pair(200, 400), pair(500, 400)];
        let s = summary(&pairs);
        assert!(
            s.contains("new / base: 0.80x (0.50-2.00x), median of 3 pairs"),
            "{s}"
        );
        assert!(s.contains("base: 0.200 s (0.100-0.500 s)"), "{s}");
        assert!(s.contains("new:  0.400 s (0.050-0.400 s)"), "{s}");
    }

    #[test]
    fn an_even_count_takes_the_mean_of_the_middle_two() {
        assert_eq!(median_range(vec![4.0, 1.0, 3.0, 2.0]), (2.5, 1.0, 4.0));
        assert_eq!(median_range(vec![7.0]), (7.0, 7.0, 7.0));
    }

    #[test]
    fn a_failing_command_is_an_error_naming_it() {
        let e = timed("exit 3", None).unwrap_err().to_string();
        assert!(e.contains("`exit 3` failed"), "{e}");
        assert!(timed("true", None).is_ok());
    }

    #[test]
    fn a_command_past_the_timeout_is_killed_with_what_it_started() {
        // The shell starts a child that would outlive it and writes its pid;
        // after the timeout neither may be left running.
        let dir = std::env::temp_dir().join(format!("xtask-pair-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let cmd = format!("sleep 30 & echo $! > '{}'; wait", pid_file.display());
        let e = timed(&cmd, Some(Duration::from_millis(300)))
            .unwrap_err()
            .to_string();
        assert!(e.contains("ran longer than the --timeout"), "{e}");
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        // Killed: gone from /proc once reaped, or a zombie until then
        // (a signal takes a moment to land: look for up to two seconds).
        let running = || {
            std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
                .is_ok_and(|s| !s.contains(") Z "))
        };
        let mut tries = 0;
        while running() && tries < 100 {
            std::thread::sleep(Duration::from_millis(20));
            tries += 1;
        }
        assert!(
            !running(),
            "the shell's child {} is still running",
            pid.trim()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
