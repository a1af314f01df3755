//! The stages a sample goes through, in order, and what decides them:
//!
//! 1. read (the sample's bytes, from the shard's map);
//! 2. geometry: the image decoded only where its crop needs, scaled,
//!    cropped, padded and flipped into its slot as RGB `uint8`; every
//!    target (masks, boxes) moved the same way ([`crate::SampleParams`]);
//! 3. pixel stages on that `uint8` crop, in place (photometric
//!    augmentations belong here: a stage per operation, not a flag);
//! 4. [`Output`]: the crop left as it is, or converted to the batch's
//!    layout and type;
//! 5. `RandomErasing` on the output;
//! 6. the batch: samples compacted past skipped ones;
//! 7. per batch, `MixUp` or `CutMix` (`mix.rs`), on the consumer's thread
//!    as the batch is handed out: images mixed in place, labels made soft.

use crate::options::{Dtype, LoaderOptions};

/// How a sample's rendered `uint8` RGB crop becomes its slot of the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// The crop is the slot (`uint8`, `(H, W, 3)`): rendered straight into
    /// the batch, with no copy.
    InPlace,
    /// Rendered aside, then converted into the slot.
    Convert {
        /// `(3, H, W)` rather than `(H, W, 3)`.
        channels_first: bool,
        /// The element type (floats normalised by `mean` and `std`).
        dtype: Dtype,
    },
}

impl Output {
    /// The output stage `opts` ask for.
    pub fn of(opts: &LoaderOptions) -> Output {
        if opts.dtype == Dtype::U8 && !opts.channels_first {
            Output::InPlace
        } else {
            Output::Convert {
                channels_first: opts.channels_first,
                dtype: opts.dtype,
            }
        }
    }
}
