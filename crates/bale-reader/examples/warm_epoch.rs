//! Steady-state epochs from Rust: every sample of a dataset once per pass,
//! in plan order (`sequential` or `shuffled`), read by `Dataset::iter` on the
//! caller's thread (THREADS 0) or with reader threads ahead of it, xxh3 over
//! every byte read. Later passes show the warm rate once the shards' pages
//! are mapped.
//!
//! ```sh
//! cargo run --release -p bale-reader --example warm_epoch -- DATASET [PASSES] [THREADS] [PLAN]
//! ```
//!
//! docs/benchmarks.md ("Reads of 2 KB samples") quotes its figures.

use std::time::Instant;

use bale_reader::{Dataset, EpochPlan, Partition};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let usage = "usage: warm_epoch DATASET [PASSES] [THREADS] [sequential|shuffled]";
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or(usage)?;
    let mut number = |default: usize| -> Result<usize, String> {
        args.next()
            .map_or(Ok(default), |s| s.parse().map_err(|_| usage.to_owned()))
    };
    let (passes, threads) = (number(5)?, number(1)?);
    let plan = match args.next().as_deref() {
        None | Some("sequential") => EpochPlan::sequential(),
        Some("shuffled") => EpochPlan::shuffled(1, 0),
        Some(_) => return Err(usage.into()),
    };
    let ds = Dataset::open(&dir)?;
    for pass in 0..passes {
        let t = Instant::now();
        let mut it = ds.iter(plan, Partition::ALL)?;
        if threads > 0 {
            it = it.prefetch(threads, 1024, 64 << 20);
        }
        let (mut n, mut sum) = (0u64, 0u64);
        for s in it {
            for (_, bytes) in s?.fields() {
                sum = sum.wrapping_add(bale_format::checksum(bytes));
            }
            n += 1;
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {:.0} samples/s ({threads} reader thread(s); checksum {sum:016x})",
            n as f64 / secs
        );
    }
    Ok(())
}
