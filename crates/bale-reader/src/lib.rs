//! The loader-facing reader of bale datasets.
//!
//! A data loader links against this crate to read a dataset written by
//! `bale pack`: [`Dataset::open`] reads the manifest and memory-maps the shard
//! indexes; [`Dataset::get`] and [`Dataset::get_by_key`] read one sample with
//! one positioned read (or a slice of the shard's memory map: zero-copy);
//! [`Dataset::iter`] walks an epoch under an [`EpochPlan`] (sequential,
//! shuffled, or shard-shuffled with a bounded buffer) for one [`Partition`]
//! (rank of `world_size`, worker of `num_workers`), resumable at any sample
//! ([`SampleIter::start_at`]) and with background read-ahead
//! ([`SampleIter::prefetch`]). [`stage`] copies a dataset to RAM-backed
//! storage, checked and atomic, before a run reads it (`bale stage`).
//!
//! ```
//! use bale_reader::{Dataset, EpochPlan, Partition};
//! # let dir = tempfile::tempdir()?;
//! # bale_reader::testing::TestDataset::new(100, 4).write(dir.path())?;
//! let ds = Dataset::options().verify_on_read(true).open(dir.path())?;
//! assert_eq!(ds.len(), 100);
//!
//! // Random access.
//! let s = ds.get(7)?;
//! assert_eq!(ds.get_by_key(s.key())?.index(), 7);
//! let label = s.label().and_then(|l| ds.label_name(l));
//! println!("{} ({label:?}): {} bytes of jpg", s.key(), s.field("bin").map_or(0, <[u8]>::len));
//!
//! // Epoch 3 of a shuffled run, rank 1 of 4, worker 0 of 2, read ahead on 2 threads.
//! let part = Partition::new(1, 4).with_workers(0, 2).with_even(true);
//! for sample in ds.iter(EpochPlan::shuffled(1234, 3), part)?.prefetch(2, 64, 64 << 20) {
//!     let sample = sample?;
//!     assert!(sample.field("bin").is_some());
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - Same plan, partition and dataset: same order, on every machine
//!   ([`plan`] documents the algorithm).
//! - In an epoch, the partitions of one `world_size` and `num_workers` are
//!   disjoint and together yield every sample exactly once (with
//!   [`Partition::even`], fewer than `world_size` samples are yielded twice,
//!   so every rank yields the same count).
//! - Bad bytes are errors naming the file (and offset), never panics.
//!   With [`Backing::Mmap`] (the default), a shard truncated *while mapped*
//!   by another program raises `SIGBUS`; see [`Backing`].
#![deny(missing_docs)]

mod dataset;
mod error;
pub mod extract;
mod fork;
mod iter;
pub mod mix;
mod pass;
pub mod plan;
mod reservoir;
pub mod resume;
mod sample;
pub mod stage;
pub mod stats;
#[cfg(feature = "testing")]
pub mod testing;

pub use dataset::{Backing, Dataset, DatasetOptions, MemberInfo, READ_AROUND, ReadAround, Select};
pub use error::{ReaderError, Result};
pub use fork::ForkGuard;
pub use iter::{MAX_PREFETCH_THREADS, SampleIter};
pub use pass::{Pass, RELEASE_BYTES, RELEASE_SAMPLES};
pub use plan::{EpochPlan, Order, OrderIter, Partition};
pub use sample::{Sample, parse_label};
