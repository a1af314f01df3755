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
mod sources;
mod targets;

use bale_reader::Dataset;

pub use batch::{Array, Batch, Boxes, Element, Elements, Skipped};
pub use engine::Batches;
pub use error::{LoaderError, Result};
pub use geometry::{Padding, SampleParams, Window, nearest};
pub use mix::{CutBox, MixKind, MixParams};
pub use options::{
    Augment, AutoAugment, ColorJitter, Crop, Dtype, EraseValue, Erasing, IMAGENET_MEAN,
    IMAGENET_STD, LabelSource, LoaderOptions, MAX_IN_FLIGHT_BYTES, MaskDtype, Mix, OnError, Order,
    Resize, ScaleJitter,
};
pub use policy::{EraseBox, JitterDraw, PixelParams};

/// Members the loader takes the image from when none is named, in this
/// order (each matched regardless of case: `JPEG`, `Png`).
pub const IMAGE_EXTS: [&str; 5] = ["jpg", "jpeg", "png", "webp", "npy"];

/// Decoded, augmented batches of a dataset; see the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Loader {
    src: sources::Sources,
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
        let image: Vec<String> = if opts.image.is_empty() {
            IMAGE_EXTS.iter().map(|e| (*e).to_owned()).collect()
        } else {
            opts.image.clone()
        };
        check_members(&ds, &opts, &image)?;
        let classes = match &opts.label {
            LabelSource::Npy { member } => {
                let classes = first_vector_len(&ds, member)?;
                opts.check_in_flight(classes)?;
                options::check_vectors(&opts, classes)?;
                classes
            }
            _ => 1,
        };
        Ok(Self::made(sources::Sources::One(ds), opts, image, classes))
    }

    /// A loader over a weighted mix of `datasets` (`bale.Mix`'s epochs:
    /// [`bale_reader::mix`]): `mix` made for their sizes, in order, and
    /// `labels`, when given, each source's class index mapped to a label
    /// of one class list (a label outside its source's map is an error
    /// naming the source). Each batch's [`Batch::indices`] are then ids,
    /// one per sample: [`Loader::locate`] gives their (source, index).
    /// Each sample's random decisions are those of its index in its own
    /// dataset, as a loader over that dataset alone with the same options.
    ///
    /// # Errors
    /// As [`Loader::new`] for each dataset (the error names it); a mix
    /// made for other sizes; datasets whose images are in other members
    /// than the first one's, or whose `.npy` labels differ in length;
    /// a `shard_shuffled` order, or draws with replacement in order.
    pub fn mix(
        datasets: Vec<Dataset>,
        mix: bale_reader::mix::Mix,
        labels: Option<Vec<Vec<i64>>>,
        opts: LoaderOptions,
    ) -> Result<Self> {
        opts.check()?;
        let sizes: Vec<u64> = datasets.iter().map(Dataset::len).collect();
        if datasets.is_empty() || mix.sizes() != sizes {
            return Err(LoaderError::Option {
                name: "datasets",
                what: format!(
                    "the mix is of sources of {:?} samples and the datasets have {sizes:?}",
                    mix.sizes()
                ),
            });
        }
        if labels.as_ref().is_some_and(|l| l.len() != datasets.len()) {
            return Err(LoaderError::Option {
                name: "classes",
                what: "give one class map per source".into(),
            });
        }
        let image: Vec<String> = if opts.image.is_empty() {
            IMAGE_EXTS.iter().map(|e| (*e).to_owned()).collect()
        } else {
            opts.image.clone()
        };
        let layout = |ds: &Dataset| -> Vec<String> {
            image
                .iter()
                .filter(|e| has_member(ds, e))
                .map(|e| e.to_ascii_lowercase())
                .collect()
        };
        let first = layout(&datasets[0]);
        let mut classes = 1;
        for (i, ds) in datasets.iter().enumerate() {
            if ds.is_empty() {
                continue;
            }
            check_members(ds, &opts, &image)?;
            let this = layout(ds);
            if this != first {
                return Err(LoaderError::Option {
                    name: "image",
                    what: format!(
                        "the dataset {} (source {i}) has its images in {} and {} (source 0) in {}: \
                         every dataset of a mix must have the same image members",
                        ds.dir().display(),
                        this.join(", "),
                        datasets[0].dir().display(),
                        first.join(", ")
                    ),
                });
            }
            if let LabelSource::Npy { member } = &opts.label {
                let n = first_vector_len(ds, member)?;
                if i > 0 && n != classes {
                    return Err(LoaderError::Option {
                        name: "label",
                        what: format!(
                            "the dataset {} (source {i}) has label vectors of {n} values, the sources before it {classes}",
                            ds.dir().display()
                        ),
                    });
                }
                classes = n;
            }
        }
        if let LabelSource::Npy { .. } = &opts.label {
            opts.check_in_flight(classes)?;
            options::check_vectors(&opts, classes)?;
        }
        let mut offsets = Vec::with_capacity(sizes.len() + 1);
        let mut total = 0u64;
        for n in &sizes {
            offsets.push(total);
            total += n;
        }
        offsets.push(total);
        let src = sources::Sources::Many(Box::new(sources::Many {
            datasets,
            offsets,
            mix,
            labels,
        }));
        src.check_order(opts.order)?;
        Ok(Self::made(src, opts, image, classes))
    }

    fn made(
        src: sources::Sources,
        opts: LoaderOptions,
        image: Vec<String>,
        classes: usize,
    ) -> Self {
        // Arrays of a batch, times the batches in flight and one held.
        let arrays = 2
            + opts.masks.len()
            + if opts.boxes.is_some() { 3 } else { 0 }
            + usize::from(opts.mix.is_some());
        let keep = arrays * (opts.prefetch + 2);
        Loader {
            src,
            opts,
            image,
            classes,
            pool: std::sync::Arc::new(batch::BufferPool::new(keep)),
        }
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

    /// The dataset (a mix's first).
    pub fn dataset(&self) -> &Dataset {
        self.src.first()
    }

    /// The datasets of a mix, in order (one for a loader of one dataset).
    pub fn datasets(&self) -> &[Dataset] {
        match &self.src {
            sources::Sources::One(ds) => std::slice::from_ref(ds),
            sources::Sources::Many(m) => &m.datasets,
        }
    }

    /// The mix a loader of [`Loader::mix`] reads.
    pub fn mixed(&self) -> Option<&bale_reader::mix::Mix> {
        match &self.src {
            sources::Sources::One(_) => None,
            sources::Sources::Many(m) => Some(&m.mix),
        }
    }

    /// The (source, index in it) of a sample id of a batch
    /// ([`Batch::indices`]): `(0, id)` for a loader of one dataset.
    pub fn locate(&self, id: u64) -> (usize, u64) {
        self.src.locate(id)
    }

    /// The id of sample `index` of source `source` (what
    /// [`Loader::sample_params`] takes).
    ///
    /// # Errors
    /// [`LoaderError::Index`] outside the source; [`LoaderError::Option`]
    /// for a source there is not.
    pub fn id(&self, source: usize, index: u64) -> Result<u64> {
        self.src.id(source, index)
    }

    /// The epoch list's length (all ranks'): the dataset's samples, or the mix's epoch.
    pub fn epoch_len(&self) -> u64 {
        self.src.mix_len().unwrap_or_else(|| self.src.len())
    }

    /// Samples this loader's partition yields per epoch.
    ///
    /// # Errors
    /// An invalid partition.
    pub fn samples_per_epoch(&self) -> Result<u64> {
        match &self.src {
            sources::Sources::One(ds) => {
                Ok(ds.order(self.opts.plan(0), self.opts.partition)?.len())
            }
            sources::Sources::Many(m) => Ok(bale_reader::Order::resumed(
                bale_reader::EpochPlan::Sequential,
                self.opts.partition,
                &[m.mix.len()],
                &bale_reader::resume::Place::FRESH,
            )?
            .len()),
        }
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
        match &self.src {
            sources::Sources::One(ds) => {
                let order = ds.order(self.opts.plan(epoch), self.opts.partition)?;
                self.batches(epoch, &order, start)
            }
            sources::Sources::Many(_) => self.epoch_at(
                epoch,
                &bale_reader::resume::Place {
                    rest: None,
                    stage: 0,
                    start,
                },
            ),
        }
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
        match &self.src {
            sources::Sources::One(ds) => {
                let order = bale_reader::Order::resumed(
                    self.opts.plan(epoch),
                    self.opts.partition,
                    &ds.shard_sizes(),
                    place,
                )?;
                self.batches(epoch, &order, place.start)
            }
            sources::Sources::Many(m) => {
                let o = &self.opts;
                let ids = sources::Sources::mix_ids(m, o.order, o.seed, epoch, o.partition, place)?;
                let samples = ids.len() as u64;
                self.start(
                    epoch,
                    sources::Ids::List(ids.into_iter()),
                    place.start,
                    samples,
                )
            }
        }
    }

    fn batches(&self, epoch: u64, order: &bale_reader::Order, start: u64) -> Result<Batches> {
        let iter = order.iter_from(start)?;
        let samples = order.len() - start;
        self.start(epoch, sources::Ids::Order(iter), start, samples)
    }

    fn start(&self, epoch: u64, ids: sources::Ids, start: u64, samples: u64) -> Result<Batches> {
        Batches::start(
            engine::Shared {
                ds: self.src.clone(),
                opts: self.opts.clone(),
                image: self.image.clone(),
                classes: self.classes,
                epoch,
                first_batch: start / self.opts.batch_size as u64,
                pool: std::sync::Arc::clone(&self.pool),
            },
            ids,
            samples,
        )
    }

    /// The random decisions for sample `index` in epoch `epoch` (its image's
    /// header is read for its size): what the loader does to it. For a mix
    /// `index` is a sample's id ([`Loader::id`]).
    ///
    /// # Errors
    /// [`LoaderError::Option`] for an index past the dataset's end; the
    /// sample cannot be read, lacks an image member, or its header does not
    /// parse.
    pub fn sample_params(&self, epoch: u64, index: u64) -> Result<SampleParams> {
        if index >= self.src.len() {
            return Err(LoaderError::Index {
                index,
                len: self.src.len(),
            });
        }
        let s = self.src.get(index)?;
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
    /// `(seed, epoch, index)` alone (a mix's sample: its index in its own
    /// dataset); the sample is not read. For a mix `index` is a sample's id.
    ///
    /// # Errors
    /// [`LoaderError::Index`] for an index past the dataset's end.
    pub fn pixel_params(&self, epoch: u64, index: u64) -> Result<PixelParams> {
        if index >= self.src.len() {
            return Err(LoaderError::Index {
                index,
                len: self.src.len(),
            });
        }
        let (_, index) = self.src.locate(index);
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

/// Whether `ds` has an image member of `image` and every member `opts` names.
fn check_members(ds: &Dataset, opts: &LoaderOptions, image: &[String]) -> Result<()> {
    let has = || ds.fields().join(", ");
    if !image.iter().any(|e| has_member(ds, e)) {
        let what = if opts.image.is_empty() {
            format!(
                "the dataset {} has no {} member; name the member holding the image (it has {})",
                ds.dir().display(),
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
        if !has_member(ds, m) {
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
    Ok(())
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
