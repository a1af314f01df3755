//! The input trees the benchmarks share, below both `cargo xtask bench`
//! ([`crate::bench`], which generates them) and the benchmarks that read them.

use crate::gen_tree::{Kind, Params};

/// Where every benchmark finds its input tree, relative to the repository root.
pub const TREE: &str = "target/bench/imagenet-like";

/// The benchmark tree: 20,000 ImageNet-like JPEGs in 100 classes.
pub fn tree_params() -> Params {
    Params {
        files: 20_000,
        classes: 100,
        kind: Kind::Jpeg,
        seed: 0,
        json_every: 0,
    }
}

/// The small-file tree the pack group packs too, relative to the repository root.
pub const SMALL_TREE: &str = "target/bench/png-100k";

/// The small-file tree: 100,000 PNGs of about 2 KB in 100 classes.
pub fn small_tree_params() -> Params {
    Params {
        files: 100_000,
        classes: 100,
        kind: Kind::Png,
        seed: 0,
        json_every: 0,
    }
}
