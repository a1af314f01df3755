//! Fuzzes `Manifest::from_slice`: arbitrary bytes are an error naming the
//! file, never a panic; a manifest that parses writes and reads back to itself.
#![no_main]

use std::path::Path;

use bale_format::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz/bale.json");
    match Manifest::from_slice(data, path) {
        Err(e) => assert!(
            e.to_string().contains("fuzz/bale.json"),
            "error does not name the file: {e}"
        ),
        Ok(m) => {
            let back =
                Manifest::from_slice(&m.to_bytes(), path).expect("a manifest bale wrote parses");
            assert_eq!(back, m);
        }
    }
});
