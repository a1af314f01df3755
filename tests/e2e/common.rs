//! Fixtures the end-to-end modules share.

use std::path::Path;

use bale_format::Manifest;
use bale_format::read::ShardReader;

/// Samples in order: (key, [(ext, bytes)]).
pub(crate) type Samples = Vec<(String, Vec<(String, Vec<u8>)>)>;

/// Every sample of a dataset, in order, checksums checked.
pub(crate) fn samples(dir: &Path) -> Samples {
    let m = Manifest::read(dir).unwrap();
    let mut out = Vec::new();
    for s in &m.shards {
        let r = ShardReader::open(
            Manifest::resolve(dir, &s.file),
            Manifest::resolve(dir, &s.index),
        )
        .unwrap();
        for i in 0..r.len() {
            let smp = r.read(i, true).unwrap();
            out.push((smp.key.clone(), smp.members.clone()));
        }
    }
    out
}
