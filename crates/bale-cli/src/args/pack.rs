//! Arguments of `bale pack`.

use std::path::PathBuf;

use bale_image::{ColorMode, OutputFormat, Resize};
use bale_pack::{CompressSpec, LabelMode, OnError, Part};

fn size(s: &str) -> Result<u64, bale_pack::PackError> {
    bale_pack::parse_size(s)
}

/// Shown after the options by `bale pack --help` (verbatim).
const EXAMPLES: &str = "\
Examples:
  bale pack data/train -o ds/train
      ImageFolder tree -> 1 GiB tar shards, labels from class directories
  bale pack data/train -o ds/train --resize shorter:256 --image-format jpeg:90
      pre-resize JPEGs once, so loaders decode 256-pixel images every epoch
  bale pack data/train -o ds/train --resize longer:512 --image-format raw
      store decoded pixels (.npy, uint8 HxWxC): no decode at load time
  bale pack data/masks -o ds/masks --image-exts jpg --resize fit:640x480
      resize the .jpg members only (leave .png masks as they are)
  bale pack data/train -o ds/train --resize shorter:256 --on-error skip
      skip (and list) corrupt or oversized images instead of failing
  bale pack data/day-2 -o ds/train --append
      add new samples to ds/train; a key it holds already is refused

The image stage writes an orig.json member per sample with each image's
original width and height, and records its options in bale.json
(created_by.options.image). See docs/image.md.";

/// Pack a tree of files into WebDataset-style tar shards with an index and a manifest.
///
/// Files sharing a key form one sample: `a/b/0001.jpg` and `a/b/0001.json` are the members `jpg`
/// and `json` of sample `a/b/0001` (the key is the path relative to the input directory up to the
/// first dot of the base name). The manifest `bale.json` is written last: a pack that fails or is
/// interrupted leaves no manifest and removes the shards it wrote. The same input and options give
/// byte-identical output, whatever `--jobs`. See docs/pack.md for every rule.
///
/// The image stage (--resize, --image-format) decodes, resizes and re-encodes or pre-decodes image
/// members in the parallel stage, once, instead of in every epoch of every loader; see
/// docs/image.md.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct PackArgs {
    /// Input directories; keys are relative to each. With --files-from, at most one: the directory
    /// the listed paths are relative to (default: the current directory).
    #[arg(value_name = "DIR")]
    pub inputs: Vec<PathBuf>,

    /// Output directory (created if missing; must be empty unless --force), or a prefix in object
    /// storage (`s3://bucket/prefix`, `gs://`, `az://`): shards upload as they are finished,
    /// `bale.json` last (docs/remote.md).
    #[arg(short, long, value_name = "OUT")]
    pub output: PathBuf,

    /// Pack the paths listed in FILE, one per line (`-` reads stdin); a listed directory is walked.
    #[arg(long, value_name = "FILE")]
    pub files_from: Option<PathBuf>,

    /// Pack only files matching GLOB (repeatable). A glob without `/` matches
    /// the base name; with `/`, the path under the input directory.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,

    /// Leave out files and directories matching GLOB (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,

    /// Follow symlinks met in the walk (default: they are ignored and counted).
    #[arg(long)]
    pub follow_links: bool,

    /// Labels: `auto` (ImageFolder classes when the tree is CLASS/FILE, else none), `dir` (the
    /// first directory is the class), `csv:FILE` (rows of path-or-key,label), or `none`. Stored as
    /// a `.cls` member holding the class index.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub labels: LabelMode,

    /// Largest shard, in bytes of tar stream: 1GiB, 512MiB, 100MB, ...
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = size)]
    pub shard_size: u64,

    /// Most samples in a shard.
    #[arg(long, value_name = "N")]
    pub shard_samples: Option<u64>,

    /// Put samples in a seeded random order before sharding (default: sorted by key).
    #[arg(long)]
    pub shuffle: bool,

    /// Seed of --shuffle.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "shuffle")]
    pub seed: u64,

    /// Compression: none, zstd or zstd:LEVEL (writes .tar.zst, one frame per sample).
    ///
    /// Each frame is compressed against the shard's first sample (a zstd dictionary stored in the
    /// shard and its index), and the index is stored compressed: for small samples the dataset is a
    /// few percent over the payload. `zstd -D DICT -d` gives the plain tar; docs/format.md shows
    /// how to write DICT out of a shard.
    #[arg(long, value_name = "ALGO", default_value = "none")]
    pub compress: CompressSpec,

    /// Shard format: `tar` (WebDataset tar; .tar.zst with --compress zstd) or `h5` (HDF5 files that
    /// h5py opens, layout in docs/format.md; needs a bale built with `--features hdf5`).
    #[arg(long, value_name = "FORMAT", default_value = "tar")]
    pub format: PackFormat,

    /// Reader threads (default: 4 per core, as reads mostly wait on the disk).
    #[arg(short, long, value_name = "N")]
    pub jobs: Option<usize>,

    /// Most bytes of file data read ahead of the writer.
    #[arg(long, value_name = "SIZE", default_value = "128MiB", value_parser = size)]
    pub in_flight: u64,

    /// On an input that cannot be packed (unreadable, vanished, changed, broken symlink, FIFO,
    /// non-UTF-8 name; with the image stage, a corrupt, truncated, mislabelled or oversized image):
    /// `fail` stops; `skip` drops its sample, lists it and counts it in the manifest.
    #[arg(long, value_name = "WHAT", default_value = "fail")]
    pub on_error: OnError,

    /// Resize images, keeping the aspect ratio: `shorter:N` (shorter side N), `longer:N` (longer
    /// side at most N), `fit:WxH` (inside a W x H box). Lanczos3; never enlarges unless --upscale.
    #[arg(long, value_name = "RULE", help_heading = "Image stage")]
    pub resize: Option<Resize>,

    /// Enlarge images smaller than the --resize target too.
    #[arg(long, requires = "resize", help_heading = "Image stage")]
    pub upscale: bool,

    /// How to store images: `jpeg[:QUALITY]` (default quality 90), `png`,
    /// `keep` (original bytes when unchanged, else re-encoded in their own
    /// format), or `raw` (decoded pixels as .npy, uint8 H x W x C).
    #[arg(
        long,
        value_name = "FORMAT",
        default_value = "keep",
        help_heading = "Image stage"
    )]
    pub image_format: OutputFormat,

    /// Colours of transformed images: `rgb` (8-bit RGB: gray, alpha, palette,
    /// CMYK and 16-bit converted) or `keep` (gray, alpha and 16 bits kept
    /// where the format holds them) [default: rgb].
    #[arg(long, value_name = "MODE", help_heading = "Image stage")]
    pub mode: Option<ColorMode>,

    /// Which members are images, by extension, comma-separated [default:
    /// jpg,jpeg,png,webp,bmp,tif,tiff,gif]. `png` also matches `seg.png`.
    #[arg(
        long,
        value_name = "EXTS",
        value_delimiter = ',',
        help_heading = "Image stage"
    )]
    pub image_exts: Option<Vec<String>>,

    /// Refuse images with more pixels than N (decompression bombs), checked
    /// from the header before decoding [default: 178956970, as Pillow].
    #[arg(long, value_name = "N", help_heading = "Image stage")]
    pub max_pixels: Option<u64>,

    /// Pack part I of N (I from 0) of the input, for `bale merge`. A part
    /// that gets no sample (N above the number of samples) is written empty.
    #[arg(long, value_name = "I/N")]
    pub part: Option<Part>,

    /// Write a dataset of 0 samples when the input holds no file that makes
    /// one (without it, such a pack fails: usually a wrong path or glob).
    #[arg(long)]
    pub allow_empty: bool,

    /// Write into a non-empty output directory or prefix, removing an old dataset there once the
    /// input is walked and checked (in a bucket: just before the first upload); a failure after
    /// that leaves neither (docs/reliability.md). In a bucket, the lock of a killed run is taken
    /// over once it has not changed for 7 s, and that run's requests in flight are waited out
    /// (up to its request timeout since it last refreshed its lock; docs/remote.md).
    #[arg(long, conflicts_with = "append")]
    pub force: bool,

    /// Add the samples to the dataset in OUT, a directory or a prefix in object storage: new
    /// shards, then a new bale.json (docs/pack.md)
    #[arg(long, conflicts_with_all = ["part", "dali_index"])]
    pub append: bool,

    /// Once the dataset is complete, also write NVIDIA DALI's index files for
    /// its shards into DIR (as `bale export-index --dali`; plain tar only).
    #[arg(long, value_name = "DIR")]
    pub dali_index: Option<PathBuf>,

    /// Options for an output in object storage.
    #[command(flatten)]
    pub storage: super::storage::StorageArgs,

    #[command(flatten)]
    pub out: super::output::OutputFlags,
}

/// The shard format of `bale pack --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PackFormat {
    /// WebDataset tar shards (`.tar`, or `.tar.zst` with `--compress zstd`).
    Tar,
    /// HDF5 shards (`.h5`).
    H5,
}
