//! bale-image (work in progress).
