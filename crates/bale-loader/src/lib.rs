//! Decoded, augmented batches straight from bale shards, decoded in native
//! threads: what a training loop feeds the GPU with, in place of Python
//! workers that decode with Pillow and pickle batches between processes.
//!
//! A [`Loader`] walks an epoch with the reader's plans and partitions
//! ([`bale_reader`]), and each sample becomes one task on a pool of threads:
//! read (a slice of the shard's map), draw its geometry (a scale stage,
//! a crop, flips: torchvision v2's transforms, [`SampleParams`]), decode
//! only the crop's part of the image (JPEG rows outside it skipped; a crop
//! at least twice the output decoded at 1/2, 1/4 or 1/8 scale with the
//! feature `libjpeg`), resize it (bilinear, antialiased, as torchvision),
//! pad, flip, convert (channels first, `float32`/`float16` normalised),
//! written straight into its slot of the batch. Its targets move with it:
//! masks (nearest, torch's index rule: never a value not in the source),
//! boxes (moved, clipped, and dropped with their labels by
//! `SanitizeBoundingBoxes` rules), labels from `.cls`, JSON or `.npy`.
//! Batches come out in order.
//!
//! ```
//! use bale_loader::{Crop, Loader, LoaderOptions, Order};
//! # let dir = tempfile::tempdir()?;
//! # let mut w = bale_format::ShardFileWriter::create(dir.path(), "shard-000000.tar", bale_format::Compression::None, 0)?;
//! # for i in 0..12u32 {
//! #     let img = image::RgbImage::from_fn(64, 48, |x, y| image::Rgb([(x * 4) as u8, (y * 5) as u8, (i * 20) as u8]));
//! #     let mut png = std::io::Cursor::new(Vec::new());
//! #     img.write_to(&mut png, image::ImageFormat::Png)?;
//! #     let cls = (i % 3).to_string();
//! #     w.writer().write_sample(&format!("{i:04}"), &[
//! #         bale_format::Member { ext: "cls", data: cls.as_bytes() },
//! #         bale_format::Member { ext: "png", data: png.get_ref() },
//! #     ])?;
//! # }
//! # let created_by = bale_format::CreatedBy { tool: "doc".into(), version: "0".into(), command: "doc".into(), options: Default::default() };
//! # bale_format::Manifest::new(vec![w.finish()?], None, created_by).write(dir.path())?;
//! let ds = bale_reader::Dataset::open(dir.path())?;
//! let loader = Loader::new(ds, LoaderOptions {
//!     batch_size: 4,
//!     size: (32, 32),
//!     crop: Crop::RandomResized,
//!     flip: true,
//!     order: Order::Shuffled,
//!     seed: 0,
//!     ..LoaderOptions::default()
//! })?;
//! for batch in loader.epoch(0)? {
//!     let batch = batch?;
//!     assert_eq!(batch.images.shape(), [4, 32, 32, 3]);
//!     assert_eq!(batch.class_labels().unwrap().len(), 4);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - Every random decision of a sample (its scale, crop box, flips) is drawn
//!   from a generator seeded by `(seed, epoch, sample index)` alone: the same
//!   run gives the same batches whatever the thread count, and a run resumed
//!   at a sample ([`Loader::epoch_from`]) gives what the uninterrupted one
//!   would have. [`Loader::sample_params`] says what was decided.
//! - Each sample of the partition's epoch appears once, in the plan's order.
//! - Memory: `prefetch + 1` batches in flight (each `batch_size` samples of
//!   [`LoaderOptions::bytes_per_sample`]: image, masks, boxes, label),
//!   bounded by [`MAX_IN_FLIGHT_BYTES`] when the loader is made and reserved
//!   without aborting, reused once dropped; per thread one decoded crop (at
//!   most the source image), one resized crop and one row of a mask.
//! - A damaged image, or a target that does not fit it, is an error naming
//!   the sample, or with [`OnError::Skip`] is left out of its batch and
//!   listed in [`Batch::skipped`]: never replaced or dropped silently.
#![deny(missing_docs)]

mod augment;
mod batch;
mod engine;
mod error;
mod geometry;
mod mix;
mod options;
mod pipeline;
mod policy;
mod render;
mod targets;

use bale_reader::Dataset;

pub use batch::{Array, Batch, Boxes, Element, Elements, Skipped};
pub use engine::Batches;
pub use error::{LoaderError, Result};
pub use geometry::{Padding, SampleParams, Window, nearest};
pub use mix::{CutBox, Mix, MixKind, MixParams};
pub use options::{
    Crop, Dtype, IMAGENET_MEAN, IMAGENET_STD, LabelSource, LoaderOptions, MAX_IN_FLIGHT_BYTES,
    MaskDtype, OnError, Order, Resize, ScaleJitter,
};
pub use policy::{
    Augment, AutoAugment, ColorJitter, EraseBox, EraseValue, Erasing, JitterDraw, PixelParams,
};

/// Members the loader takes the image from when none is named, in this
/// order (each matched regardless of case: `JPEG`, `Png`).
pub const IMAGE_EXTS: [&str; 5] = ["jpg", "jpeg", "png", "webp", "npy"];

/// Decoded, augmented batches of a dataset; see the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Loader {
    ds: Dataset,
    opts: LoaderOptions,
    /// The members an image may be in, in order of preference.
    image: Vec<String>,
    /// Values per `.npy` label (1 otherwise).
    classes: usize,
    pool: std::sync::Arc<batch::BufferPool>,
}

/// Whether the dataset's members include `want`, regardless of case.
fn has_member(ds: &Dataset, want: &str) -> bool {
    ds.fields().iter().any(|f| f.eq_ignore_ascii_case(want))
}

impl Loader {
    /// A loader over `ds`.
    ///
    /// # Errors
    /// [`LoaderError::Option`] for options that cannot be used (see
    /// [`LoaderOptions::check`]), a dataset without an image member (none
    /// of those named or of [`IMAGE_EXTS`]), or without a member the
    /// options name (a typo would fail every sample); [`LoaderError::Empty`]
    /// for a dataset without samples.
    pub fn new(ds: Dataset, opts: LoaderOptions) -> Result<Self> {
        opts.check()?;
        if ds.is_empty() {
            return Err(LoaderError::Empty {
                path: ds.dir().display().to_string(),
            });
        }
        let has = || ds.fields().join(", ");
        let image: Vec<String> = if opts.image.is_empty() {
            IMAGE_EXTS.iter().map(|e| (*e).to_owned()).collect()
        } else {
            opts.image.clone()
        };
        if !image.iter().any(|e| has_member(&ds, e)) {
            let what = if opts.image.is_empty() {
                format!(
                    "the dataset has no {} member; name the member holding the image (it has {})",
                    IMAGE_EXTS.join(", "),
                    has()
                )
            } else {
                format!(
                    "no member {} in the dataset {}: its samples have {}",
                    image
                        .iter()
                        .map(|e| format!("{e:?}"))
                        .collect::<Vec<_>>()
                        .join(" or "),
                    ds.dir().display(),
                    has()
                )
            };
            return Err(LoaderError::Option {
                name: "image",
                what,
            });
        }
        let named = opts
            .masks
            .iter()
            .map(|m| ("masks", m.as_str()))
            .chain(opts.boxes.as_deref().map(|m| ("boxes", m)))
            .chain(opts.box_labels.as_deref().map(|m| ("box_labels", m)))
            .chain(opts.label.member().map(|m| ("label", m)));
        for (name, m) in named {
            if !has_member(&ds, m) {
                return Err(LoaderError::Option {
                    name,
                    what: format!(
                        "no member {m:?} in the dataset {}: its samples have {}",
                        ds.dir().display(),
                        has()
                    ),
                });
            }
        }
        let classes = match &opts.label {
            LabelSource::Npy { member } => {
                let classes = first_vector_len(&ds, member)?;
                opts.check_in_flight(classes)?;
                mix::check_vectors(&opts, classes)?;
                classes
            }
            _ => 1,
        };
        // Arrays of a batch, times the batches in flight and one held.
        let arrays = 2
            + opts.masks.len()
            + if opts.boxes.is_some() { 3 } else { 0 }
            + usize::from(opts.mix.is_some());
        let keep = arrays * (opts.prefetch + 2);
        Ok(Loader {
            ds,
            opts,
            image,
            classes,
            pool: std::sync::Arc::new(batch::BufferPool::new(keep)),
        })
    }

    /// The options.
    pub fn options(&self) -> &LoaderOptions {
        &self.opts
    }

    /// The members an image is taken from, in order of preference: each
    /// sample's is the first of them it has.
    pub fn image_members(&self) -> &[String] {
        &self.image
    }

    /// Values per sample's label: the length of a `.npy` label vector, else 1.
    pub fn label_classes(&self) -> usize {
        self.classes
    }

    /// The dataset.
    pub fn dataset(&self) -> &Dataset {
        &self.ds
    }

    /// Samples this loader's partition yields per epoch.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn samples_per_epoch(&self) -> Result<u64> {
        Ok(self.ds.order(self.opts.plan(0), self.opts.partition)?.len())
    }

    /// Batches per epoch (the last one short unless `drop_last`).
    ///
    /// # Errors
    /// An invalid partition.
    pub fn batches_per_epoch(&self) -> Result<u64> {
        let n = self.samples_per_epoch()?;
        let b = self.opts.batch_size as u64;
        Ok(if self.opts.drop_last {
            n / b
        } else {
            n.div_ceil(b)
        })
    }

    /// The batches of epoch `epoch`, decoded on the loader's threads
    /// (started now, stopped when the iterator is dropped).
    ///
    /// # Errors
    /// An invalid partition; threads that cannot start.
    pub fn epoch(&self, epoch: u64) -> Result<Batches> {
        self.epoch_from(epoch, 0)
    }

    /// As [`Loader::epoch`], resumed after the first `start` samples of the
    /// partition's epoch (a multiple of the batch size gives the remaining
    /// batches exactly).
    ///
    /// # Errors
    /// As [`Loader::epoch`]; `start` past the end of the epoch.
    pub fn epoch_from(&self, epoch: u64, start: u64) -> Result<Batches> {
        let order = self.ds.order(self.opts.plan(epoch), self.opts.partition)?;
        self.batches(epoch, &order, start)
    }

    /// As [`Loader::epoch_from`], at `place` in an epoch resumed from a
    /// checkpoint ([`bale_reader::resume::Resume::place`]): with a new
    /// stage, the part of what the epoch had left that this partition gets
    /// (a checkpoint of another world size). Batches are numbered from the
    /// start of the stage.
    ///
    /// # Errors
    /// As [`Loader::epoch_from`]; a place that does not fit the dataset.
    pub fn epoch_at(&self, epoch: u64, place: &bale_reader::resume::Place) -> Result<Batches> {
        let order = bale_reader::Order::resumed(
            self.opts.plan(epoch),
            self.opts.partition,
            &self.ds.shard_sizes(),
            place,
        )?;
        self.batches(epoch, &order, place.start)
    }

    fn batches(&self, epoch: u64, order: &bale_reader::Order, start: u64) -> Result<Batches> {
        let iter = order.iter_from(start)?;
        let samples = order.len() - start;
        Batches::start(
            engine::Shared {
                ds: self.ds.clone(),
                opts: self.opts.clone(),
                image: self.image.clone(),
                classes: self.classes,
                epoch,
                first_batch: start / self.opts.batch_size as u64,
                pool: std::sync::Arc::clone(&self.pool),
            },
            iter,
            samples,
        )
    }

    /// The random decisions for sample `index` in epoch `epoch` (its image's
    /// header is read for its size): what the loader does to it.
    ///
    /// # Errors
    /// [`LoaderError::Option`] for an index past the dataset's end; the
    /// sample cannot be read, lacks an image member, or its header does not
    /// parse.
    pub fn sample_params(&self, epoch: u64, index: u64) -> Result<SampleParams> {
        if index >= self.ds.len() {
            return Err(LoaderError::Index {
                index,
                len: self.ds.len(),
            });
        }
        let s = self.ds.get(index)?;
        let work = render::Work {
            opts: &self.opts,
            image: &self.image,
            classes: self.classes,
            output: pipeline::Output::of(&self.opts),
            epoch,
        };
        render::params_of(&work, &s)
    }

    /// The pixel decisions for sample `index` in `epoch`: the
    /// `ColorJitter` factors and their order, the auto-augment ops and
    /// magnitudes, the grey conversion and the erased box. They depend on
    /// `(seed, epoch, index)` alone; the sample is not read.
    ///
    /// # Errors
    /// [`LoaderError::Index`] for an index past the dataset's end.
    pub fn pixel_params(&self, epoch: u64, index: u64) -> Result<PixelParams> {
        if index >= self.ds.len() {
            return Err(LoaderError::Index {
                index,
                len: self.ds.len(),
            });
        }
        Ok(policy::pixel_params(&self.opts, epoch, index))
    }

    /// The mixing decisions for batch `batch` of `epoch` (counted from the
    /// epoch's start: a run resumed at sample `start` begins with batch
    /// `start / batch_size`), `None` without `MixUp` or `CutMix`: which one,
    /// its `lambda`, `CutMix`'s box. Each sample's partner is the one
    /// before it in the batch as it comes out ([`MixParams::partner`]).
    /// They depend on `(seed, epoch, batch)` alone.
    ///
    /// # Errors
    /// [`LoaderError::Option`] for a batch past the epoch's end; an invalid
    /// partition.
    pub fn batch_params(&self, epoch: u64, batch: u64) -> Result<Option<MixParams>> {
        let batches = self.batches_per_epoch()?;
        if batch >= batches {
            return Err(LoaderError::Option {
                name: "batch",
                what: format!("{batch} is past the epoch's end ({batches} batches)"),
            });
        }
        Ok(mix::mix_params(&self.opts, epoch, batch))
    }
}

/// The length of the `.npy` label vector of the dataset's first sample.
fn first_vector_len(ds: &Dataset, member: &str) -> Result<usize> {
    let s = ds.get(0)?;
    let bad = |what: String| LoaderError::Option {
        name: "label",
        what: format!(
            "npy:{member}: the length of the label vectors is that of the first sample's, and its {what}"
        ),
    };
    let (ext, bytes) = targets::find(&s, member)
        .ok_or_else(|| bad(format!("sample ({:?}) has no such member", s.key())))?;
    let v = targets::npy_vector(ext, bytes).map_err(|(_, what)| bad(what))?;
    if v.is_empty() {
        return Err(bad("vector is empty".into()));
    }
    Ok(v.len())
}
