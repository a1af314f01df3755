//! Fuzzes `ShardIndex::from_bytes`; the checks are `bale_format::fuzzing::check_index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_format::fuzzing::check_index(data));
