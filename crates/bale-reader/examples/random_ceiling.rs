//! How close warm random reads come to what this machine allows: every
//! sample of a dataset once per pass, in a seeded random order, on N
//! threads, every payload byte read once (xxh3 over it, or with `copy` a
//! `memcpy` of it into a buffer, a loader's copy without a checksum), three
//! ways in turn each pass:
//!
//! - `bale`: `Dataset::get_populated`, as `warm_random` reads;
//! - `index`: the same members' bytes straight from a map of each shard, at
//!   the offsets the shard's index gives (`ShardIndex::members`): the
//!   index's lookups and the bytes, no `Sample`;
//! - `bytes`: the same bytes at offsets listed beforehand in the order they
//!   are read: the bytes alone, the ceiling for this order on this machine.
//!
//! Each pass then times the machine's `memcpy` bandwidth on the same
//! threads: each copies a 128 MiB buffer of its own into another, both
//! written beforehand, four times (no cache holds them). Each pass prints
//! the three rates, the payload bytes per second of each against that
//! bandwidth, and bale's ratio to the two others (all measured in the same
//! pass, so a machine whose speed drifts between runs still gives
//! comparable ratios). Plain tar shards only (a compressed shard's members
//! are not bytes of its file).
//!
//! ```sh
//! cargo run --release -p bale-reader --example random_ceiling -- DATASET [PASSES] [THREADS] [xxh3|copy]
//! ```
//!
//! docs/benchmarks.md ("The ceiling of warm random reads") quotes its figures.

use std::time::Instant;

use bale_format::{Compression, ShardIndex};

/// Reads every byte of `bytes` once: xxh3 over them, or a copy into `buf`
/// (its first and last byte then go into the sum, so the copy is kept).
fn touch(bytes: &[u8], copy: bool, buf: &mut Vec<u8>) -> u64 {
    if !copy {
        return bale_format::checksum(bytes);
    }
    buf.clear();
    buf.extend_from_slice(bytes);
    u64::from(buf.first().copied().unwrap_or(0)) + u64::from(buf.last().copied().unwrap_or(0))
}

/// The bytes per second `threads` threads copy together, each one 128 MiB
/// buffer of its own into another four times: the machine's `memcpy`
/// bandwidth from memory to memory.
fn memcpy_bandwidth(threads: usize) -> f64 {
    const LEN: usize = 128 << 20;
    const ROUNDS: usize = 4;
    let bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
        .map(|k| (vec![k as u8 | 1; LEN], vec![2u8; LEN]))
        .collect();
    let t = Instant::now();
    let (secs, bufs) = std::thread::scope(|scope| {
        let copies: Vec<_> = bufs
            .into_iter()
            .map(|(src, mut dst)| {
                scope.spawn(move || {
                    for _ in 0..ROUNDS {
                        dst.copy_from_slice(&src);
                        std::hint::black_box(&mut dst);
                    }
                    (src, dst)
                })
            })
            .collect();
        let bufs: Vec<_> = copies
            .into_iter()
            .map(|c| c.join().expect("a copying thread panicked"))
            .collect();
        // The clock stops before the buffers are freed (unmapping them is no copy).
        (t.elapsed().as_secs_f64(), bufs)
    });
    drop(bufs);
    (threads * LEN * ROUNDS) as f64 / secs
}

fn arg(n: usize, default: usize) -> usize {
    std::env::args()
        .nth(n)
        .map_or(default, |s| s.parse().expect("a whole number"))
}

/// Runs `read` over this thread's share of `order` (every `threads`-th
/// sample from `k`) on `threads` threads; returns samples/s and a checksum.
fn timed<F>(order: &[u64], threads: usize, read: F) -> Result<(f64, u64), String>
where
    F: Fn(&[u64]) -> Result<u64, String> + Sync,
{
    let t = Instant::now();
    let sum = bale_reader::testing::on_threads(order, threads, read)?;
    Ok((order.len() as f64 / t.elapsed().as_secs_f64(), sum))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args()
        .nth(1)
        .ok_or("usage: random_ceiling DATASET [PASSES] [THREADS] [xxh3|copy]")?;
    let (passes, threads) = (arg(2, 5), arg(3, 1).max(1));
    let copy = match std::env::args().nth(4).as_deref() {
        None | Some("xxh3") => false,
        Some("copy") => true,
        Some(other) => return Err(format!("touch {other:?}: xxh3 or copy").into()),
    };
    let ds = bale_reader::Dataset::open(&dir)?;
    let root = ds.dir().to_path_buf();
    let mut maps = Vec::new();
    let mut indexes = Vec::new();
    for shard in &ds.manifest().shards {
        let index = ShardIndex::open(root.join(&shard.index))?;
        if index.compression() != Compression::None {
            return Err(
                format!("{}: a compressed shard (plain tar shards only)", shard.file).into(),
            );
        }
        let file = std::fs::File::open(root.join(&shard.file))?;
        // SAFETY: a read-only map of a shard nobody writes while this runs;
        // every slice below is bounds-checked.
        maps.push(unsafe { memmap2::Mmap::map(&file)? });
        indexes.push(index);
    }
    let n = ds.len();
    let order = bale_reader::testing::shuffled_order(n);
    // `bytes`: every member's (shard, offset, length), in the order read.
    let mut spans: Vec<(u32, u64, u32)> = Vec::new();
    let mut first = Vec::with_capacity(order.len() + 1);
    for &g in &order {
        first.push(spans.len() as u64);
        let (s, local) = ds.locate(g)?;
        for m in indexes[s].members(local) {
            spans.push((s as u32, m.offset, u32::try_from(m.size)?));
        }
    }
    first.push(spans.len() as u64);
    // The payload bytes one pass reads, for its rates in bytes per second.
    let payload: u64 = spans.iter().map(|&(_, _, len)| u64::from(len)).sum();
    let slice = |s: usize, offset: u64, len: u64| -> Result<&[u8], String> {
        let (a, b) = (offset as usize, (offset + len) as usize);
        maps[s]
            .get(a..b)
            .ok_or_else(|| format!("shard {s}: bytes {a}..{b} outside the file"))
    };
    // Positions in `order` rather than sample numbers: `spans` is in read order.
    let positions: Vec<u64> = (0..n).collect();
    for pass in 0..passes {
        let (bale, sum_bale) = timed(&order, threads, |mine| {
            let (mut sum, mut buf) = (0u64, Vec::new());
            for &g in mine {
                let s = ds.get_populated(g).map_err(|e| e.to_string())?;
                for (_, bytes) in s.fields() {
                    sum = sum.wrapping_add(touch(bytes, copy, &mut buf));
                }
            }
            Ok(sum)
        })?;
        let (index, sum_index) = timed(&order, threads, |mine| {
            let (mut sum, mut buf) = (0u64, Vec::new());
            for &g in mine {
                let (s, local) = ds.locate(g).map_err(|e| e.to_string())?;
                for m in indexes[s].members(local) {
                    sum = sum.wrapping_add(touch(slice(s, m.offset, m.size)?, copy, &mut buf));
                }
            }
            Ok(sum)
        })?;
        let (bytes, sum_bytes) = timed(&positions, threads, |mine| {
            let (mut sum, mut buf) = (0u64, Vec::new());
            for &p in mine {
                let (a, b) = (first[p as usize] as usize, first[p as usize + 1] as usize);
                for &(s, offset, len) in &spans[a..b] {
                    let bytes = slice(s as usize, offset, u64::from(len))?;
                    sum = sum.wrapping_add(touch(bytes, copy, &mut buf));
                }
            }
            Ok(sum)
        })?;
        if sum_bale != sum_index || sum_bale != sum_bytes {
            return Err(format!(
                "pass {pass}: the three reads disagree ({sum_bale:016x}, {sum_index:016x}, {sum_bytes:016x})"
            )
            .into());
        }
        let memcpy = memcpy_bandwidth(threads);
        let gbs = |rate: f64| rate * payload as f64 / n as f64 / 1e9;
        println!(
            "pass {pass}: bale {bale:.0}/s, index {index:.0}/s, bytes {bytes:.0}/s ({threads} thread(s), {}); \
             bale/index {:.2}x, bale/bytes {:.2}x, index/bytes {:.2}x; \
             payload GB/s bale {:.2}, bytes {:.2}, memcpy {:.2}: bale/memcpy {:.2}x, bytes/memcpy {:.2}x",
            if copy { "copy" } else { "xxh3" },
            bale / index,
            bale / bytes,
            index / bytes,
            gbs(bale),
            gbs(bytes),
            memcpy / 1e9,
            gbs(bale) * 1e9 / memcpy,
            gbs(bytes) * 1e9 / memcpy,
        );
    }
    Ok(())
}
