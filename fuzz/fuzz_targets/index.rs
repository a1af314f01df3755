//! Fuzzes `ShardIndex::from_bytes`: arbitrary bytes are an error naming the
//! file, never a panic. Each input is tried as it is, and again with its
//! footer checksum recomputed, so the fuzzer gets past the checksum and into
//! the record checks; an index that validates must then be usable through
//! every accessor without a panic.
#![no_main]

use std::path::Path;

use bale_format::{ShardIndex, checksum, read};
use libfuzzer_sys::fuzz_target;

const NAME: &str = "fuzz.idx";

fn check(bytes: Vec<u8>, frames: &[u8]) {
    match ShardIndex::from_bytes(bytes, NAME) {
        Err(e) => assert!(
            e.to_string().contains(NAME),
            "error does not name the file: {e}"
        ),
        Ok(index) => {
            for i in 0..index.len() {
                let e = index.sample(i);
                let key = index.key(i);
                for m in index.members(i) {
                    assert!(!m.ext.is_empty());
                    assert!(m.offset >= e.tar_offset);
                }
                if let Some(j) = index.find(key) {
                    assert_eq!(index.key(j), key);
                }
                // The decompressed size the index claims must be checked
                // before it is allocated.
                let frame = &frames[..frames.len().min(e.file_len as usize)];
                let _ = read::decompress_frame(
                    Path::new("fuzz.tar.zst"),
                    e.file_offset,
                    frame,
                    e.tar_len,
                );
            }
            for j in 0..index.member_count() {
                let _ = index.member(j);
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    check(data.to_vec(), data);
    if data.len() >= 8 {
        let mut forged = data.to_vec();
        let body = forged.len() - 8;
        let sum = checksum(&forged[..body]);
        forged[body..].copy_from_slice(&sum.to_le_bytes());
        check(forged, data);
    }
});
