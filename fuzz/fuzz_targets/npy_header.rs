//! Fuzzes the `.npy` header parser (`bale_format::npy::parse`); the checks
//! are `bale_format::fuzzing::check_npy`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_format::fuzzing::check_npy(data));
