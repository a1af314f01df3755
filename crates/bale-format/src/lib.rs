//! bale-format (work in progress).
