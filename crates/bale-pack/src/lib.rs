//! bale-pack (work in progress).
