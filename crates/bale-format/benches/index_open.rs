//! Opening a shard index of 1,000,000 samples (2 members each): `ShardIndex::open`
//! (mmap, footer checksum, every record validated) against a plain `fs::read` of
//! the same file plus an xxh3 of its bytes, in the same run.
//!
//! ```text
//! cargo bench -p bale-format --bench index_open
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bale_format::{Compression, IndexBuilder, ShardIndex, checksum};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let samples: u64 = std::env::var("BALE_BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench");
    std::fs::create_dir_all(&dir).expect("create target/bench");
    let path = dir.join("index-open-1m.idx");

    let mut b = IndexBuilder::new(Compression::None);
    let mut off = 0u64;
    for i in 0..samples {
        let key = format!("n{:08}/n{:08}_{i:07}", i % 1000, i % 1000);
        let len = 512 + 110_080 + 512 + 512;
        b.push_sample(
            &key,
            off,
            len,
            off,
            len,
            &[("jpg", off + 512, 110_000, i), ("cls", off + 111_104, 3, i)],
        );
        off += len;
    }
    let bytes = b.to_bytes(off + 1024, off + 1024);
    std::fs::write(&path, &bytes).expect("write index");
    println!(
        "index of {samples} samples: {:.1} MiB at {}",
        bytes.len() as f64 / (1 << 20) as f64,
        path.display()
    );
    drop(bytes);

    let runs = 11;
    let mut open = Vec::new();
    let mut raw = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        let idx = ShardIndex::open(&path).expect("open");
        assert_eq!(idx.len() as u64, samples);
        std::hint::black_box(idx.key(idx.len() - 1));
        open.push(t.elapsed());

        let t = Instant::now();
        let b = std::fs::read(&path).expect("read");
        std::hint::black_box(checksum(&b));
        raw.push(t.elapsed());
    }
    let (o, r) = (median(open), median(raw));
    println!("| what | median of {runs} (warm cache) |");
    println!("| --- | --- |");
    println!(
        "| ShardIndex::open (mmap, checksum, validate) | {:.1} ms |",
        o.as_secs_f64() * 1e3
    );
    println!(
        "| fs::read + xxh3 of the same file | {:.1} ms |",
        r.as_secs_f64() * 1e3
    );
    println!(
        "ratio open / read+hash: {:.2}x the time",
        o.as_secs_f64() / r.as_secs_f64()
    );
}
