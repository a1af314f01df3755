//! What a [`crate::Loader`] produces: [`LoaderOptions`] and its parts.

use bale_reader::{EpochPlan, Partition};

use crate::error::{LoaderError, Result};

/// How each image is cropped before it is resized to [`LoaderOptions::size`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Crop {
    /// torchvision's `RandomResizedCrop(size, scale, ratio)`: a box of a
    /// random area (a fraction of the image in `scale`) and aspect ratio
    /// (log-uniform in `ratio`), 10 tries, then a central fallback.
    RandomResized {
        /// Bounds of the box's area as a fraction of the image's (default 0.08 to 1).
        scale: (f64, f64),
        /// Bounds of the box's width / height (default 3/4 to 4/3).
        ratio: (f64, f64),
    },
    /// torchvision's `Resize(resize)` (the shorter side to `resize`, when
    /// given) then `CenterCrop(size)`: the evaluation transform.
    Center {
        /// The shorter side before the crop (`None`: crop the image as it is).
        resize: Option<u32>,
    },
    /// The whole image resized to the output size (aspect ratio not kept).
    Resize,
}

impl Crop {
    /// `RandomResized` with torchvision's defaults: scale (0.08, 1), ratio (3/4, 4/3).
    pub const RANDOM_RESIZED: Crop = Crop::RandomResized {
        scale: (0.08, 1.0),
        ratio: (3.0 / 4.0, 4.0 / 3.0),
    };
}

/// The element type of the images of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dtype {
    /// `uint8`, as decoded (default).
    #[default]
    U8,
    /// `float32`, `(x / 255 - mean) / std`.
    F32,
    /// `float16`, `(x / 255 - mean) / std`.
    F16,
}

/// What a damaged image does to its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnError {
    /// The batch is an error naming the sample (default).
    #[default]
    Fail,
    /// The sample is left out of its batch (which is one image shorter),
    /// and listed in [`crate::Batch::skipped`].
    Skip,
}

/// The order of an epoch (the seed and epoch number come from the loader).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Order {
    /// Shard by shard, in order (default).
    #[default]
    Sequential,
    /// A full random permutation per epoch.
    Shuffled,
    /// Shards in random order, samples mixed in a buffer of this many samples.
    ShardShuffled(usize),
}

/// Options of a [`crate::Loader`]; every default documented on its field.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderOptions {
    /// Images per batch (default 64).
    pub batch_size: usize,
    /// Output height and width (default 224 x 224).
    pub size: (u32, u32),
    /// How images are cropped (default [`Crop::RANDOM_RESIZED`]).
    pub crop: Crop,
    /// Flip each image left-right with probability 1/2 (default `false`).
    pub flip: bool,
    /// Images as `(B, 3, H, W)` instead of `(B, H, W, 3)` (default `false`).
    pub channels_first: bool,
    /// Element type (default [`Dtype::U8`]).
    pub dtype: Dtype,
    /// Per-channel mean subtracted for float outputs (default ImageNet's).
    pub mean: [f32; 3],
    /// Per-channel standard deviation divided by for float outputs (default ImageNet's).
    pub std: [f32; 3],
    /// Epoch order (default [`Order::Sequential`]).
    pub order: Order,
    /// Seed of the order and of every random crop and flip (default 0).
    pub seed: u64,
    /// This process's share of each epoch (default: all of it).
    pub partition: Partition,
    /// Decoding threads (default 0: one per core).
    pub threads: usize,
    /// Batches decoded ahead of the one being consumed (default 2).
    pub prefetch: usize,
    /// What a damaged image does (default [`OnError::Fail`]).
    pub on_error: OnError,
    /// The member holding the image (default: the first of `jpg`, `jpeg`,
    /// `png`, `webp`, `npy` the dataset has).
    pub image: Option<String>,
    /// Other members passed through as bytes, per sample (default none).
    pub fields: Vec<String>,
    /// Leave out the last batch of an epoch when it is short (default `false`).
    pub drop_last: bool,
    /// Decode a JPEG at 1/2, 1/4 or 1/8 scale in the DCT domain when its
    /// crop is at least that many times the output (default `true`).
    pub dct_scaling: bool,
    /// Largest image decoded, in pixels: a larger one (a decompression bomb,
    /// or a mislabelled scan) is refused from its header as a damaged image
    /// (default: `bale_image::DEFAULT_MAX_PIXELS`, Pillow's bomb limit).
    pub max_pixels: u64,
}

/// Largest batch buffer, in bytes (`batch_size x height x width x 3` elements).
pub const MAX_BATCH_BYTES: u64 = 8 << 30;

/// ImageNet's per-channel mean, as torchvision uses it.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's per-channel standard deviation, as torchvision uses it.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 64,
            size: (224, 224),
            crop: Crop::RANDOM_RESIZED,
            flip: false,
            channels_first: false,
            dtype: Dtype::U8,
            mean: IMAGENET_MEAN,
            std: IMAGENET_STD,
            order: Order::Sequential,
            seed: 0,
            partition: Partition::ALL,
            threads: 0,
            prefetch: 2,
            on_error: OnError::Fail,
            image: None,
            fields: Vec::new(),
            drop_last: false,
            dct_scaling: true,
            max_pixels: bale_image::DEFAULT_MAX_PIXELS,
        }
    }
}

impl LoaderOptions {
    /// The epoch plan of epoch `epoch`.
    pub fn plan(&self, epoch: u64) -> EpochPlan {
        match self.order {
            Order::Sequential => EpochPlan::Sequential,
            Order::Shuffled => EpochPlan::shuffled(self.seed, epoch),
            Order::ShardShuffled(buffer) => EpochPlan::ShardShuffled {
                seed: self.seed,
                epoch,
                buffer,
            },
        }
    }

    /// Checks the options that can be wrong.
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |name, what: String| Err(LoaderError::Option { name, what });
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1".into());
        }
        let (h, w) = self.size;
        if h == 0 || w == 0 || u64::from(h) * u64::from(w) > 1 << 26 {
            return bad("size", format!("{h}x{w} is not a usable output size"));
        }
        if let Crop::RandomResized { scale, ratio } = self.crop {
            let ok = |(a, b): (f64, f64)| a.is_finite() && b.is_finite() && a > 0.0 && a <= b;
            if !ok(scale) || scale.1 > 1.0 {
                return bad("scale", format!("{scale:?}: want 0 < min <= max <= 1"));
            }
            if !ok(ratio) {
                return bad("ratio", format!("{ratio:?}: want 0 < min <= max"));
            }
        }
        if let Crop::Center { resize: Some(0) } = self.crop {
            return bad("resize", "must be at least 1".into());
        }
        if self.std.iter().any(|s| *s == 0.0 || !s.is_finite()) {
            return bad(
                "std",
                format!("{:?}: every value must be finite and non-zero", self.std),
            );
        }
        if self.mean.iter().any(|m| !m.is_finite()) {
            return bad(
                "mean",
                format!("{:?}: every value must be finite", self.mean),
            );
        }
        if self.threads > 1024 {
            return bad("threads", format!("{}: at most 1024", self.threads));
        }
        if self.prefetch > 64 {
            return bad("prefetch", format!("{}: at most 64 batches", self.prefetch));
        }
        // What is in flight is allocated up front, batch by batch: refuse a
        // batch no machine holds rather than abort on a failed allocation.
        let elem: u64 = match self.dtype {
            Dtype::U8 => 1,
            Dtype::F16 => 2,
            Dtype::F32 => 4,
        };
        let batch_bytes = (self.batch_size as u64)
            .checked_mul(u64::from(h) * u64::from(w) * 3 * elem)
            .filter(|b| *b <= MAX_BATCH_BYTES);
        if batch_bytes.is_none() {
            return bad(
                "batch_size",
                format!(
                    "{} images of {h}x{w}x3 {:?} make a batch over {} GiB",
                    self.batch_size,
                    self.dtype,
                    MAX_BATCH_BYTES >> 30
                ),
            );
        }
        Ok(())
    }
}
