//! bale-reader (work in progress).
