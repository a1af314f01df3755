//! Fuzzes the tar reader (`SampleStream`, `TarReader`); the checks are
//! `bale_format::fuzzing::check_tar`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_format::fuzzing::check_tar(data));
