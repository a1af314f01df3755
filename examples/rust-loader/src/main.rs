//! Reads a bale dataset the way a training loop's loader would: one
//! shuffled epoch per rank, with read-ahead, checking every sample.
//!
//! ```sh
//! cargo run --manifest-path examples/rust-loader/Cargo.toml -- DATASET [WORLD_SIZE]
//! ```
//!
//! Prints one line: `samples=N bytes=B ranks=W labelled=L`, where N counts
//! every sample read over all ranks (each exactly once) and B their member
//! bytes.

use std::collections::HashSet;
use std::process::ExitCode;

use bale_reader::{Dataset, EpochPlan, Partition};

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<String, Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: rust-loader DATASET [WORLD_SIZE]")?;
    let world: u64 = args.next().map_or(Ok(2), |w| w.parse())?;
    let ds = Dataset::open(&dir)?;
    let (mut samples, mut bytes, mut labelled) = (0u64, 0u64, 0u64);
    let mut seen = HashSet::new();
    for rank in 0..world {
        let epoch = ds.iter(EpochPlan::shuffled(42, 0), Partition::new(rank, world))?;
        for sample in epoch.prefetch(2, 32, 16 << 20) {
            let sample = sample?;
            if !seen.insert(sample.index()) {
                return Err(format!("sample {} read twice", sample.key()).into());
            }
            // Random access gives the same bytes as the epoch.
            let again = ds.get(sample.index())?;
            for (ext, data) in sample.fields() {
                if again.field(ext) != Some(data) {
                    return Err(format!("{}.{ext} differs between reads", sample.key()).into());
                }
                bytes += data.len() as u64;
            }
            labelled += u64::from(sample.label().is_some());
            samples += 1;
        }
    }
    if samples != ds.len() {
        return Err(format!("read {samples} samples, the dataset has {}", ds.len()).into());
    }
    Ok(format!(
        "samples={samples} bytes={bytes} ranks={world} labelled={labelled}"
    ))
}
