//! What a [`crate::Loader`] produces: [`LoaderOptions`] and its parts, and
//! the one place they are checked ([`LoaderOptions::check`]). Every option
//! named by a string (`crop="random"`, `dtype="float16"`) is parsed here,
//! by `FromStr`, so every front (Rust, Python) takes the same words.

use std::str::FromStr;

use bale_reader::{EpochPlan, Partition};

use crate::error::{LoaderError, Result};

mod augment;
mod mixing;

pub use augment::{Augment, AutoAugment, ColorJitter, EraseValue, Erasing};
pub use mixing::Mix;
pub(crate) use mixing::check_vectors;

/// How each image is cropped, after the scale stage ([`Resize`],
/// [`ScaleJitter`]), to [`LoaderOptions::size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Crop {
    /// torchvision's `RandomResizedCrop(size, scale, ratio)`: a box of a
    /// random area (a fraction of the image in [`LoaderOptions::scale`]) and
    /// aspect ratio (log-uniform in [`LoaderOptions::ratio`]), 10 tries,
    /// then a central fallback; the box is resized to the output size.
    #[default]
    RandomResized,
    /// torchvision's `CenterCrop(size)`: the central box of the output size,
    /// offsets rounded half to even; where the image is smaller, it is
    /// padded on both sides (`fill`, `mask_fill`), as torchvision pads.
    Center,
    /// The whole image resized to the output size (aspect ratio not kept).
    Resize,
    /// torchvision's reference segmentation recipe: the image padded on the
    /// right and bottom up to the output size where it is smaller (`fill`,
    /// masks `mask_fill`), then `RandomCrop(size)`: top and left drawn
    /// independently, uniformly over the positions that fit.
    Random,
    /// The reference detection recipe's `FixedSizeCrop(size)`: a random
    /// crop of at most the output size (top and left from one uniform draw
    /// `r`: `int(r * (H - h))`, `int(r * (W - w))`), padded on the right and
    /// bottom to the output size.
    FixedSize,
}

impl Crop {
    /// The words [`Crop::from_str`] takes.
    pub const NAMES: &'static str =
        "\"random_resized\", \"center\", \"resize\", \"random\" or \"fixed_size\"";

    /// Whether the crop is the output size, cut from the scaled image and
    /// padded where it is smaller (no resize after it).
    pub fn pads(self) -> bool {
        matches!(self, Crop::Center | Crop::Random | Crop::FixedSize)
    }
}

impl FromStr for Crop {
    type Err = LoaderError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "random_resized" => Crop::RandomResized,
            "center" => Crop::Center,
            "resize" => Crop::Resize,
            "random" => Crop::Random,
            "fixed_size" => Crop::FixedSize,
            other => return Err(bad_word("crop", other, Crop::NAMES)),
        })
    }
}

fn bad_word(name: &'static str, got: &str, want: &str) -> LoaderError {
    LoaderError::Option {
        name,
        what: format!("{got:?}: expected {want}"),
    }
}

/// The scale stage: how the image is resized before it is cropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Resize {
    /// No scale stage (default).
    #[default]
    None,
    /// torchvision's `Resize(n)`: the shorter side to `n`, the longer one to
    /// `int(n * long / short)`.
    Shorter(u32),
    /// torchvision v2's `RandomResize(min_size, max_size)`: `Resize(n)` with
    /// `n` drawn uniformly from `min..max` (`torch.randint(min, max)`).
    Random {
        /// The least shorter side.
        min: u32,
        /// One more than the most.
        max: u32,
    },
}

/// torchvision v2's `ScaleJitter(target_size, scale_range)`: the image
/// scaled by `min(target[1] / height, target[0] / width) * s`, `s` drawn
/// uniformly from `range` (in `float32`, as torch draws it); each side
/// truncated. `target` is in torchvision's order: its first value bounds the
/// width, its second the height.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScaleJitter {
    /// torchvision's `target_size`.
    pub target: (u32, u32),
    /// torchvision's `scale_range` (default there: 0.1 to 2.0).
    pub range: (f64, f64),
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

impl Dtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            Dtype::U8 => 1,
            Dtype::F16 => 2,
            Dtype::F32 => 4,
        }
    }

    /// NumPy's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U8 => "uint8",
            Dtype::F32 => "float32",
            Dtype::F16 => "float16",
        }
    }
}

impl FromStr for Dtype {
    type Err = LoaderError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "uint8" | "u1" => Dtype::U8,
            "float32" | "f4" => Dtype::F32,
            "float16" | "f2" => Dtype::F16,
            other => {
                return Err(bad_word(
                    "dtype",
                    other,
                    "\"uint8\", \"float32\" or \"float16\"",
                ));
            }
        })
    }
}

/// The element type of the masks of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MaskDtype {
    /// `uint8` (default): a mask value above 255 (a 16-bit mask) is an
    /// error naming the sample.
    #[default]
    U8,
    /// `int64`, what `torch.nn.CrossEntropyLoss` takes as targets.
    I64,
}

impl MaskDtype {
    /// Bytes per element.
    pub fn size(self) -> u64 {
        match self {
            MaskDtype::U8 => 1,
            MaskDtype::I64 => 8,
        }
    }
}

impl FromStr for MaskDtype {
    type Err = LoaderError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "uint8" | "u1" => MaskDtype::U8,
            "int64" | "i8" => MaskDtype::I64,
            other => return Err(bad_word("mask_dtype", other, "\"uint8\" or \"int64\"")),
        })
    }
}

/// What a damaged sample does to its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnError {
    /// The batch is an error naming the sample (default).
    #[default]
    Fail,
    /// The sample is left out of its batch (which is one image shorter),
    /// and listed in [`crate::Batch::skipped`].
    Skip,
}

impl FromStr for OnError {
    type Err = LoaderError;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "fail" => OnError::Fail,
            "skip" => OnError::Skip,
            other => return Err(bad_word("on_error", other, "\"fail\" or \"skip\"")),
        })
    }
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

impl Order {
    /// The same order with a shuffle buffer of `buffer` samples (only
    /// [`Order::ShardShuffled`] has one).
    pub fn with_buffer(self, buffer: usize) -> Order {
        match self {
            Order::ShardShuffled(_) => Order::ShardShuffled(buffer),
            other => other,
        }
    }
}

impl FromStr for Order {
    type Err = LoaderError;
    /// `"sequential"`, `"shuffled"`, `"shard_shuffled"` (a buffer of 1024
    /// samples; [`Order::with_buffer`] sets another).
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "sequential" => Order::Sequential,
            "shuffled" => Order::Shuffled,
            "shard_shuffled" => Order::ShardShuffled(1024),
            other => {
                return Err(bad_word(
                    "order",
                    other,
                    "\"sequential\", \"shuffled\" or \"shard_shuffled\"",
                ));
            }
        })
    }
}

/// Where each sample's class comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub enum LabelSource {
    /// The `.cls` member, a decimal integer (default); `-1` for a sample
    /// without one.
    #[default]
    Cls,
    /// A JSON member: the whole member is an integer (`key: None`), or an
    /// object whose `key` holds one. A sample without it, or whose value is
    /// no integer, is a damaged sample.
    Json {
        /// The member (its extension, `json` or `meta.json`).
        member: String,
        /// The key of the object, if the member is one.
        key: Option<String>,
    },
    /// A `.npy` member holding a vector of `C` values (a multi-label
    /// target): labels are `(B, C)` `float32`. Every sample's vector has the
    /// length of the first sample's.
    Npy {
        /// The member.
        member: String,
    },
    /// No labels.
    None,
}

impl LabelSource {
    /// The member labels are read from, if not `.cls`.
    pub fn member(&self) -> Option<&str> {
        match self {
            LabelSource::Json { member, .. } | LabelSource::Npy { member } => Some(member),
            LabelSource::Cls | LabelSource::None => None,
        }
    }
}

impl FromStr for LabelSource {
    type Err = LoaderError;
    /// `"cls"`, `"json:MEMBER"`, `"json:MEMBER:KEY"`, `"npy:MEMBER"` or `"none"`.
    fn from_str(s: &str) -> Result<Self> {
        let want = "\"cls\", \"json:MEMBER\", \"json:MEMBER:KEY\", \"npy:MEMBER\" or \"none\"";
        let mut parts = s.splitn(3, ':');
        let kind = parts.next().unwrap_or_default();
        let member = parts.next();
        let key = parts.next();
        let named = |m: Option<&str>| m.filter(|m| !m.is_empty()).map(str::to_owned);
        Ok(match (kind, named(member), key) {
            ("cls", None, None) => LabelSource::Cls,
            ("none", None, None) => LabelSource::None,
            ("json", Some(member), None) => LabelSource::Json { member, key: None },
            ("json", Some(member), Some(key)) if !key.is_empty() => LabelSource::Json {
                member,
                key: Some(key.to_owned()),
            },
            ("npy", Some(member), None) => LabelSource::Npy { member },
            _ => return Err(bad_word("label", s, want)),
        })
    }
}

/// Options of a [`crate::Loader`]; every default documented on its field.
/// [`LoaderOptions::check`] is the one place they are checked.
#[derive(Debug, Clone, PartialEq)]
pub struct LoaderOptions {
    /// Images per batch (default 64).
    pub batch_size: usize,
    /// Output height and width (default 224 x 224).
    pub size: (u32, u32),
    /// The scale stage, before the crop (default none).
    pub resize: Resize,
    /// torchvision's `ScaleJitter` as the scale stage (default none; not
    /// with [`LoaderOptions::resize`]).
    pub scale_jitter: Option<ScaleJitter>,
    /// How images are cropped (default [`Crop::RandomResized`]).
    pub crop: Crop,
    /// Bounds of a random-resized crop's area, as a fraction of the image's
    /// (default 0.08 to 1).
    pub scale: (f64, f64),
    /// Bounds of a random-resized crop's width / height (default 3/4 to 4/3).
    pub ratio: (f64, f64),
    /// Flip each sample left-right with probability 1/2 (default `false`).
    pub flip: bool,
    /// Flip each sample upside down with probability 1/2 (default `false`).
    pub vflip: bool,
    /// The RGB value of padded image pixels (default black).
    pub fill: [u8; 3],
    /// The value of padded mask pixels (default 255, the ignore index of the
    /// segmentation recipes).
    pub mask_fill: i64,
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
    /// Seed of the order and of every random decision (default 0).
    pub seed: u64,
    /// This process's share of each epoch (default: all of it).
    pub partition: Partition,
    /// Decoding threads (default 0: one per core).
    pub threads: usize,
    /// Batches decoded ahead of the one being consumed (default 2).
    pub prefetch: usize,
    /// What a damaged sample does (default [`OnError::Fail`]).
    pub on_error: OnError,
    /// The members that may hold the image, in order of preference: each
    /// sample's image is the first of them it has, matched regardless of
    /// case (`JPEG`, `Jpg`). Empty (default): [`crate::IMAGE_EXTS`].
    pub image: Vec<String>,
    /// Members holding masks: one-channel PNGs (8- or 16-bit grey; palette
    /// PNGs give their indices) or `.npy` `uint8`/`uint16` `(H, W)` arrays,
    /// of the image's size (default none).
    pub masks: Vec<String>,
    /// The element type of the masks (default [`MaskDtype::U8`]).
    pub mask_dtype: MaskDtype,
    /// The member holding boxes: JSON (`{"boxes": [[x1, y1, x2, y2], ...],
    /// "labels": [...]}` or a bare list of boxes) or `.npy` `(N, 4)`, in
    /// the source image's pixels (default none).
    pub boxes: Option<String>,
    /// The member holding the boxes' classes, when the boxes' own member
    /// has none: a JSON list or `.npy` `(N,)` (default none).
    pub box_labels: Option<String>,
    /// Boxes per sample in a batch's padded arrays: a sample that keeps more
    /// is a damaged sample (default 100).
    pub max_boxes: usize,
    /// Boxes narrower or lower than this after the geometry are dropped with
    /// their labels (`SanitizeBoundingBoxes(min_size)`; default 1).
    pub min_box_size: f64,
    /// Boxes of a smaller area after the geometry are dropped
    /// (`SanitizeBoundingBoxes(min_area)`; default 1).
    pub min_box_area: f64,
    /// Where each sample's class comes from (default [`LabelSource::Cls`]).
    pub label: LabelSource,
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
    /// Pixel augmentations after the geometry: `ColorJitter`, an
    /// auto-augment policy, `RandomGrayscale`, `RandomErasing` (default none).
    pub augment: Augment,
    /// `MixUp` and `CutMix` per batch, the last stage (default none).
    pub mix: Option<Mix>,
}

/// The most bytes of batches a loader keeps in flight (`prefetch + 1`
/// batches of images, masks, boxes and labels): options that need more are
/// refused when the loader is made.
pub const MAX_IN_FLIGHT_BYTES: u64 = 8 << 30;

/// ImageNet's per-channel mean, as torchvision uses it.
pub const IMAGENET_MEAN: [f32; 3] = [0.485, 0.456, 0.406];
/// ImageNet's per-channel standard deviation, as torchvision uses it.
pub const IMAGENET_STD: [f32; 3] = [0.229, 0.224, 0.225];

impl Default for LoaderOptions {
    fn default() -> Self {
        LoaderOptions {
            batch_size: 64,
            size: (224, 224),
            resize: Resize::None,
            scale_jitter: None,
            crop: Crop::RandomResized,
            scale: (0.08, 1.0),
            ratio: (3.0 / 4.0, 4.0 / 3.0),
            flip: false,
            vflip: false,
            fill: [0; 3],
            mask_fill: 255,
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
            image: Vec::new(),
            masks: Vec::new(),
            mask_dtype: MaskDtype::U8,
            boxes: None,
            box_labels: None,
            max_boxes: 100,
            min_box_size: 1.0,
            min_box_area: 1.0,
            label: LabelSource::Cls,
            fields: Vec::new(),
            drop_last: false,
            dct_scaling: true,
            max_pixels: bale_image::DEFAULT_MAX_PIXELS,
            augment: Augment::default(),
            mix: None,
        }
    }
}

fn bad(name: &'static str, what: impl Into<String>) -> Result<()> {
    Err(LoaderError::Option {
        name,
        what: what.into(),
    })
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

    /// Whether a batch is more than images and `.cls` labels: masks, boxes
    /// or another label source were asked for.
    pub fn has_targets(&self) -> bool {
        !self.masks.is_empty() || self.boxes.is_some() || self.label != LabelSource::Cls
    }

    /// Checks every option that can be wrong, naming it: the one check of
    /// the loader's options (the Python `Loader` forwards its arguments
    /// here). The bytes in flight are checked with a label of one value;
    /// [`LoaderOptions::check_in_flight`] checks them again once the length
    /// of a `.npy` label is known.
    ///
    /// # Errors
    /// [`LoaderError::Option`] naming the option and what is wrong with it.
    pub fn check(&self) -> Result<()> {
        if self.batch_size == 0 {
            return bad("batch_size", "must be at least 1, not 0");
        }
        let (h, w) = self.size;
        if h == 0 || w == 0 || u64::from(h) * u64::from(w) > 1 << 26 {
            return bad(
                "size",
                format!("{h}x{w} is not a usable output size (1 to 2**26 pixels)"),
            );
        }
        match self.resize {
            Resize::Shorter(0) => return bad("resize", "must be at least 1 (0 for none)"),
            Resize::Random { min, max } if min == 0 || min >= max => {
                return bad(
                    "resize",
                    format!(
                        "({min}, {max}): want 1 <= min < max (the shorter side is drawn from min to max - 1)"
                    ),
                );
            }
            _ => {}
        }
        if let Some(j) = self.scale_jitter {
            if self.resize != Resize::None {
                return bad(
                    "scale_jitter",
                    "is a scale stage of its own: give resize or scale_jitter, not both",
                );
            }
            let (tw, th) = j.target;
            if tw == 0 || th == 0 {
                return bad(
                    "scale_jitter",
                    format!("target {:?}: both sides at least 1", j.target),
                );
            }
            let (lo, hi) = j.range;
            if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && lo <= hi && hi <= 64.0) {
                return bad(
                    "scale_jitter",
                    format!("scale range {:?}: want 0 < low <= high <= 64", j.range),
                );
            }
        }
        let ok = |(a, b): (f64, f64)| a.is_finite() && b.is_finite() && a > 0.0 && a <= b;
        if !ok(self.scale) || self.scale.1 > 1.0 {
            return bad(
                "scale",
                format!("{:?}: want 0 < min <= max <= 1", self.scale),
            );
        }
        if !ok(self.ratio) {
            return bad("ratio", format!("{:?}: want 0 < min <= max", self.ratio));
        }
        let default = LoaderOptions::default();
        if self.crop != Crop::RandomResized
            && (self.scale != default.scale || self.ratio != default.ratio)
        {
            return bad(
                "scale",
                "scale and ratio shape a random-resized crop: they do nothing with another crop",
            );
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
        if self.mask_dtype == MaskDtype::U8 && !(0..=255).contains(&self.mask_fill) {
            return bad(
                "mask_fill",
                format!(
                    "{} does not fit uint8 masks (0 to 255; mask_dtype=\"int64\" takes any)",
                    self.mask_fill
                ),
            );
        }
        self.check_members()?;
        augment::check(self)?;
        mixing::check(self)?;
        if self.boxes.is_none() {
            if self.box_labels.is_some() {
                return bad("box_labels", "labels boxes: name the boxes member too");
            }
        } else {
            if self.max_boxes == 0 || self.max_boxes > 1 << 20 {
                return bad("max_boxes", format!("{}: from 1 to 2**20", self.max_boxes));
            }
            // torchvision's SanitizeBoundingBoxes refuses less than 1.
            if !(self.min_box_size.is_finite() && self.min_box_size >= 1.0) {
                return bad(
                    "min_box_size",
                    format!(
                        "{}: at least 1, as SanitizeBoundingBoxes takes it",
                        self.min_box_size
                    ),
                );
            }
            if !(self.min_box_area.is_finite() && self.min_box_area >= 1.0) {
                return bad(
                    "min_box_area",
                    format!(
                        "{}: at least 1, as SanitizeBoundingBoxes takes it",
                        self.min_box_area
                    ),
                );
            }
        }
        if self.partition.world_size == 0 {
            return bad("world_size", "must be at least 1, not 0");
        }
        if self.partition.rank >= self.partition.world_size {
            return bad(
                "rank",
                format!(
                    "{} is not below world_size {}",
                    self.partition.rank, self.partition.world_size
                ),
            );
        }
        if let Err(e) = self.partition.validate() {
            return bad("partition", e.to_string());
        }
        self.check_in_flight(1)
    }

    fn check_members(&self) -> Result<()> {
        let named = |name: &'static str, m: &str| {
            if m.is_empty() || m.starts_with('.') || m.chars().any(char::is_control) {
                bad(name, format!("{m:?} is not a member's extension"))
            } else {
                Ok(())
            }
        };
        for m in &self.image {
            named("image", m)?;
            if !(bale_image::is_image_ext(m) || is_npy(m)) {
                return bad(
                    "image",
                    format!("{m:?} does not name an image format bale decodes"),
                );
            }
        }
        for m in &self.masks {
            named("masks", m)?;
            if !(is_npy(m) || last_ext(m).eq_ignore_ascii_case("png")) {
                return bad("masks", format!("{m:?}: a mask is a PNG or a .npy member"));
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        for m in &self.masks {
            if seen.iter().any(|s| s.eq_ignore_ascii_case(m)) {
                return bad("masks", format!("{m:?} is named twice"));
            }
            seen.push(m);
        }
        for (name, m) in [("boxes", &self.boxes), ("box_labels", &self.box_labels)] {
            if let Some(m) = m {
                named(name, m)?;
                if !(is_npy(m) || is_json(m)) {
                    return bad(name, format!("{m:?}: a JSON or .npy member"));
                }
            }
        }
        match &self.label {
            LabelSource::Json { member, .. } => {
                named("label", member)?;
                if !is_json(member) {
                    return bad("label", format!("json:{member}: the member is not JSON"));
                }
            }
            LabelSource::Npy { member } => {
                named("label", member)?;
                if !is_npy(member) {
                    return bad("label", format!("npy:{member}: the member is not .npy"));
                }
            }
            LabelSource::Cls | LabelSource::None => {}
        }
        Ok(())
    }

    /// Bytes of one sample's share of a batch: its image, masks, boxes,
    /// label (`classes` values) and index.
    pub fn bytes_per_sample(&self, classes: usize) -> u64 {
        let (h, w) = self.size;
        let pixels = u64::from(h) * u64::from(w);
        let mut bytes = pixels * 3 * self.dtype.size();
        bytes += self.masks.len() as u64 * pixels * self.mask_dtype.size();
        if self.boxes.is_some() {
            // Coordinates (4 float32), a label (int64) per box; a count.
            bytes += self.max_boxes as u64 * (16 + 8) + 8;
        }
        bytes += match self.label {
            LabelSource::Npy { .. } => classes as u64 * 4,
            _ => 8,
        };
        if let Some(m) = self.mix
            && !matches!(self.label, LabelSource::Npy { .. })
        {
            // The soft labels, besides the classes they are made from.
            bytes += m.num_classes as u64 * 4;
        }
        bytes + 8
    }

    /// Checks that the `prefetch + 1` batches in flight fit
    /// [`MAX_IN_FLIGHT_BYTES`], with labels of `classes` values.
    ///
    /// # Errors
    /// [`LoaderError::Option`] naming the options that make them.
    pub fn check_in_flight(&self, classes: usize) -> Result<()> {
        let batches = self.prefetch as u64 + 1;
        let per_batch = (self.batch_size as u64).checked_mul(self.bytes_per_sample(classes));
        let total = per_batch.and_then(|b| b.checked_mul(batches));
        if total.is_some_and(|t| t <= MAX_IN_FLIGHT_BYTES) {
            return Ok(());
        }
        let (h, w) = self.size;
        let gib = |b: Option<u64>| {
            b.map_or("over 2**64 bytes".to_owned(), |b| {
                format!("{:.1} GiB", b as f64 / f64::from(1u32 << 30))
            })
        };
        let mut what = format!(
            "{} images of {h}x{w}x3 {}",
            self.batch_size,
            self.dtype.name()
        );
        if !self.masks.is_empty() {
            what += &format!(" with {} mask(s)", self.masks.len());
        }
        if self.boxes.is_some() {
            what += &format!(" and max_boxes={}", self.max_boxes);
        }
        bad(
            "batch_size",
            format!(
                "{what} make batches of {}; with prefetch={} the loader holds {batches} of them ({}), over its bound of {} GiB in flight: lower batch_size, size or prefetch{}",
                gib(per_batch),
                self.prefetch,
                gib(total),
                MAX_IN_FLIGHT_BYTES >> 30,
                if self.dtype == Dtype::U8 {
                    ""
                } else {
                    ", or take uint8 images"
                },
            ),
        )
    }
}

/// The part of a member's extension after its last dot (`png` of `mask.png`).
pub(crate) fn last_ext(ext: &str) -> &str {
    ext.rsplit('.').next().unwrap_or(ext)
}

/// Whether the member is a `.npy` array.
pub(crate) fn is_npy(ext: &str) -> bool {
    last_ext(ext).eq_ignore_ascii_case("npy")
}

/// Whether the member is JSON.
pub(crate) fn is_json(ext: &str) -> bool {
    last_ext(ext).eq_ignore_ascii_case("json")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_to_their_options_and_others_name_the_option() {
        assert_eq!("random".parse::<Crop>().unwrap(), Crop::Random);
        assert_eq!("fixed_size".parse::<Crop>().unwrap(), Crop::FixedSize);
        assert_eq!("f2".parse::<Dtype>().unwrap(), Dtype::F16);
        assert_eq!("int64".parse::<MaskDtype>().unwrap(), MaskDtype::I64);
        assert_eq!(
            "shard_shuffled".parse::<Order>().unwrap().with_buffer(7),
            Order::ShardShuffled(7)
        );
        assert_eq!(
            "json:meta.json:category".parse::<LabelSource>().unwrap(),
            LabelSource::Json {
                member: "meta.json".into(),
                key: Some("category".into())
            }
        );
        assert_eq!(
            "npy:tags.npy".parse::<LabelSource>().unwrap(),
            LabelSource::Npy {
                member: "tags.npy".into()
            }
        );
        for (word, name) in [
            ("diagonal", "crop"),
            ("int7", "dtype"),
            ("retry", "on_error"),
            ("random", "order"),
        ] {
            let e = match name {
                "crop" => word.parse::<Crop>().unwrap_err(),
                "dtype" => word.parse::<Dtype>().unwrap_err(),
                "on_error" => word.parse::<OnError>().unwrap_err(),
                _ => word.parse::<Order>().unwrap_err(),
            };
            assert!(
                matches!(e, LoaderError::Option { name: n, .. } if n == name),
                "{e}"
            );
        }
        for bad in ["json", "json:", "npy", "cls:x", "json:a:", "yaml:x"] {
            assert!(bad.parse::<LabelSource>().is_err(), "{bad}");
        }
    }

    #[test]
    fn the_whole_in_flight_total_is_checked() {
        // One batch of 7.5 GiB fits the bound, three of them do not.
        let opts = LoaderOptions {
            batch_size: 10,
            size: (8192, 8192),
            dtype: Dtype::F32,
            prefetch: 2,
            ..LoaderOptions::default()
        };
        let e = opts.check().unwrap_err().to_string();
        assert!(e.contains("prefetch=2") && e.contains("batch_size"), "{e}");
        assert!(
            LoaderOptions {
                prefetch: 0,
                ..opts.clone()
            }
            .check()
            .is_ok()
        );
        // Masks count.
        let seg = LoaderOptions {
            batch_size: 64,
            size: (4096, 4096),
            masks: vec!["mask.png".into()],
            mask_dtype: MaskDtype::I64,
            prefetch: 0,
            ..LoaderOptions::default()
        };
        assert!(seg.check().unwrap_err().to_string().contains("mask"));
        assert!(
            LoaderOptions {
                masks: vec![],
                ..seg
            }
            .check()
            .is_ok()
        );
    }

    #[test]
    fn contradictions_are_refused() {
        let base = LoaderOptions::default();
        let cases = [
            LoaderOptions {
                resize: Resize::Random { min: 5, max: 5 },
                ..base.clone()
            },
            LoaderOptions {
                resize: Resize::Shorter(256),
                scale_jitter: Some(ScaleJitter {
                    target: (1024, 1024),
                    range: (0.1, 2.0),
                }),
                ..base.clone()
            },
            LoaderOptions {
                crop: Crop::Center,
                scale: (0.5, 1.0),
                ..base.clone()
            },
            LoaderOptions {
                mask_fill: 256,
                ..base.clone()
            },
            LoaderOptions {
                box_labels: Some("cls.npy".into()),
                ..base.clone()
            },
            LoaderOptions {
                boxes: Some("json".into()),
                min_box_size: 0.5,
                ..base.clone()
            },
            LoaderOptions {
                masks: vec!["mask.jpg".into()],
                ..base.clone()
            },
            LoaderOptions {
                masks: vec!["m.png".into(), "M.PNG".into()],
                ..base.clone()
            },
            LoaderOptions {
                partition: Partition::new(2, 2),
                ..base.clone()
            },
        ];
        for c in cases {
            assert!(c.check().is_err(), "{c:?}");
        }
        assert!(
            LoaderOptions {
                mask_fill: -1,
                mask_dtype: MaskDtype::I64,
                ..base
            }
            .check()
            .is_ok()
        );
    }
}
