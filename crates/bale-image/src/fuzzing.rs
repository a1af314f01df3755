//! The promises of the JPEG marker walk (`jpeg.rs`) as a check over
//! arbitrary bytes, for the fuzz target `jpeg_markers` and the replay of its
//! committed inputs by `tests/fuzz_inputs.rs` (feature `fuzzing`); not a
//! stable API.
//!
//! ```
//! bale_image::fuzzing::check_jpeg(b"\xff\xd8\xff\xd9");
//! bale_image::fuzzing::check_jpeg(b"not a jpeg");
//! ```

use crate::jpeg::{Refusal, components};
use crate::policy::MAX_SCANS;

fn check_complete(data: &[u8]) -> Result<(), Refusal> {
    crate::jpeg::check_complete(data, MAX_SCANS)
}

/// The marker walk over `data`: it never panics; a file it finds whole is
/// whole up to an end-of-image marker and no further (the bytes after it are
/// never read, so more bytes keep it whole), and every cut of it before that
/// marker is reported as truncated, as a loader would refuse it.
///
/// # Panics
/// When the walk breaks one of those promises.
pub fn check_jpeg(data: &[u8]) {
    let found = components(data);
    if check_complete(data).is_err() {
        return;
    }
    let mut longer = data.to_vec();
    longer.push(0);
    assert!(check_complete(&longer).is_ok(), "a trailing byte broke it");

    // The shortest whole prefix: wholeness only grows with the length.
    let (mut cut, mut whole) = (0, data.len());
    while whole - cut > 1 {
        let mid = cut + (whole - cut) / 2;
        if check_complete(&data[..mid]).is_ok() {
            whole = mid;
        } else {
            cut = mid;
        }
    }
    assert!(
        whole >= 4 && data[whole - 2..whole] == [0xff, 0xd9],
        "whole at {whole} bytes, not at an end-of-image marker"
    );
    assert_eq!(components(&data[..whole]), found);
    for cut in [2, 3, whole / 2, whole - 2, whole - 1] {
        if (2..whole).contains(&cut) {
            let err = check_complete(&data[..cut]).expect_err("a cut JPEG passed");
            assert!(err.is_truncation(), "cut at {cut}: {err:?}");
        }
    }
}
