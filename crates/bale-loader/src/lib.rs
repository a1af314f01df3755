//! Decoded, augmented batches straight from bale shards, decoded in native
//! threads: what a training loop feeds the GPU with, in place of Python
//! workers that decode with Pillow and pickle batches between processes.
//!
//! A [`Loader`] walks an epoch with the reader's plans and partitions
//! ([`bale_reader`]), and each sample becomes one task on a pool of threads:
//! read (a slice of the shard's map), decode only the crop's part of the
//! image (JPEG rows outside it skipped; a crop at least twice the output
//! decoded at 1/2, 1/4 or 1/8 scale with the feature `libjpeg`), resize to
//! the output size (bilinear, antialiased, as torchvision on PIL images),
//! flip, convert (channels first, `float32`/`float16` normalised), written
//! straight into its slot of the batch buffer. Batches come out in order.
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
//!     crop: Crop::RANDOM_RESIZED,
//!     flip: true,
//!     order: Order::Shuffled,
//!     seed: 0,
//!     ..LoaderOptions::default()
//! })?;
//! for batch in loader.epoch(0)? {
//!     let batch = batch?;
//!     assert_eq!(batch.images.shape(), [4, 32, 32, 3]);
//!     assert_eq!(batch.labels.len(), 4);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Guarantees
//!
//! - Every random decision of a sample (its crop box, its flip) is drawn
//!   from a generator seeded by `(seed, epoch, sample index)` alone: the same
//!   run gives the same batches whatever the thread count, and a run resumed
//!   at a sample ([`Loader::epoch_from`]) gives what the uninterrupted one
//!   would have. [`Loader::sample_params`] says what was decided.
//! - Each sample of the partition's epoch appears once, in the plan's order.
//! - Memory: `prefetch + 1` batch buffers in flight (each `batch_size x
//!   height x width x 3` elements), reused once dropped; one decoded crop
//!   per thread.
//! - A damaged image is an error naming the sample, or with
//!   [`OnError::Skip`] is left out of its batch and listed in
//!   [`Batch::skipped`]: never replaced silently.
#![deny(missing_docs)]

mod augment;
mod batch;
mod engine;
mod error;
mod options;

use bale_reader::Dataset;

pub use augment::SampleParams;
pub use batch::{Batch, ImageData, Images, Skipped};
pub use engine::Batches;
pub use error::{LoaderError, Result};
pub use options::{
    Crop, Dtype, IMAGENET_MEAN, IMAGENET_STD, LoaderOptions, MAX_BATCH_BYTES, OnError, Order,
};

/// Members the loader takes the image from when none is named, in this order.
pub const IMAGE_EXTS: [&str; 5] = ["jpg", "jpeg", "png", "webp", "npy"];

/// Decoded, augmented batches of a dataset; see the [crate docs](crate).
#[derive(Debug, Clone)]
pub struct Loader {
    ds: Dataset,
    opts: LoaderOptions,
    image: String,
    pool: std::sync::Arc<batch::BufferPool>,
}

impl Loader {
    /// A loader over `ds`.
    ///
    /// # Errors
    /// [`LoaderError::Option`] for options that cannot be used, or a dataset
    /// without an image member (none named, and none of [`IMAGE_EXTS`]);
    /// [`LoaderError::Reader`] for a partition that cannot be (a rank not
    /// below the world size).
    pub fn new(ds: Dataset, opts: LoaderOptions) -> Result<Self> {
        opts.check()?;
        opts.partition.validate()?;
        let image = match &opts.image {
            Some(e) => e.clone(),
            None => IMAGE_EXTS
                .iter()
                .find(|e| ds.fields().iter().any(|f| f == *e))
                .map(|e| (*e).to_owned())
                .ok_or_else(|| LoaderError::Option {
                    name: "image",
                    what: format!(
                        "the dataset has no {} member; name the member holding the image (it has {})",
                        IMAGE_EXTS.join(", "),
                        ds.fields().join(", ")
                    ),
                })?,
        };
        if !(bale_image::is_image_ext(&image) || image == "npy" || image.ends_with(".npy")) {
            return Err(LoaderError::Option {
                name: "image",
                what: format!("{image:?} does not name an image format bale decodes"),
            });
        }
        // An image member no sample has (a typo) would fail every sample:
        // refused here, with the members there are. (A passed-through field
        // a sample lacks is None: one list may serve several datasets.)
        if !ds.fields().contains(&image) {
            return Err(LoaderError::Option {
                name: "image",
                what: format!(
                    "no member {image:?} in the dataset {}: its samples have {}",
                    ds.dir().display(),
                    ds.fields().join(", ")
                ),
            });
        }
        Ok(Loader {
            ds,
            opts,
            image,
            pool: std::sync::Arc::default(),
        })
    }

    /// The options.
    pub fn options(&self) -> &LoaderOptions {
        &self.opts
    }

    /// The member images are taken from.
    pub fn image_member(&self) -> &str {
        &self.image
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
        let iter = order.iter_from(start)?;
        let samples = order.len() - start;
        Batches::start(
            engine::Shared {
                ds: self.ds.clone(),
                opts: self.opts.clone(),
                image: self.image.clone(),
                epoch,
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
    /// The sample cannot be read, lacks the image member, or its header does
    /// not parse.
    pub fn sample_params(&self, epoch: u64, index: u64) -> Result<SampleParams> {
        let s = self.ds.get(index)?;
        let bytes = s
            .field(&self.image)
            .ok_or_else(|| LoaderError::MissingField {
                index,
                key: s.key().to_owned(),
                ext: self.image.clone(),
                has: s.fields().map(|(e, _)| e).collect::<Vec<_>>().join(", "),
            })?;
        let (w, h) =
            bale_image::region::dimensions(&self.image, bytes).map_err(|e| LoaderError::Image {
                index,
                key: s.key().to_owned(),
                source: e,
            })?;
        Ok(augment::sample_params(&self.opts, epoch, index, w, h))
    }
}
