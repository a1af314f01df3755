//! Steady-state random reads from Rust: every sample of a dataset once per
//! pass, in a seeded random order, on N threads, one sample at a time
//! (`Dataset::get_populated`) or in batches (`Dataset::get_batch`), xxh3 over
//! every byte read. Later passes show the warm rate once the shards' pages
//! are mapped (the first pages in a fresh process pay their page faults).
//! `verify` as the fifth argument checks every member against the index's
//! checksum as it is read (`verify_on_read`), before the xxh3 of the caller.
//!
//! ```sh
//! cargo run --release -p bale-reader --example warm_random -- DATASET [PASSES] [THREADS] [BATCH] [verify]
//! ```
//!
//! docs/benchmarks.md ("Reads of 2 KB samples") quotes its figures.

use std::time::Instant;

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |s| s.parse().expect("a whole number"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: warm_random DATASET [PASSES] [THREADS] [BATCH] [verify]")?;
    let (passes, threads, batch) = (arg(2, 5), arg(3, 1).max(1), arg(4, 1).max(1));
    let verify = match std::env::args().nth(5).as_deref() {
        None => false,
        Some("verify") => true,
        Some(other) => {
            return Err(format!("the fifth argument is `verify` or nothing, not {other:?}").into());
        }
    };
    let ds = bale_reader::DatasetOptions::new()
        .verify_on_read(verify)
        .open(&dir)?;
    let n = ds.len();
    let order = bale_reader::testing::shuffled_order(n);
    for pass in 0..passes {
        let t = Instant::now();
        let sum = bale_reader::testing::on_threads(
            &order,
            threads,
            |mine| -> bale_reader::Result<u64> {
                let mut sum = 0u64;
                for chunk in mine.chunks(batch) {
                    let samples = if batch == 1 {
                        vec![ds.get_populated(chunk[0])?]
                    } else {
                        ds.get_batch(chunk)?
                    };
                    for s in &samples {
                        for (_, bytes) in s.fields() {
                            sum = sum.wrapping_add(bale_format::checksum(bytes));
                        }
                    }
                }
                Ok(sum)
            },
        )?;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "pass {pass}: {:.0} samples/s ({threads} thread(s), batch {batch}{}; checksum {sum:016x})",
            n as f64 / secs,
            if verify { ", verified" } else { "" }
        );
    }
    Ok(())
}
