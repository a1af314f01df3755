//! Fuzzes `Manifest::from_slice`; the checks are `bale_format::fuzzing::check_manifest`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_format::fuzzing::check_manifest(data));
