//! Fuzzes the readers of MosaicML Streaming (MDS) and LitData datasets
//! (`bale_format::foreign`, what `bale convert` reads); the checks are
//! `bale_format::fuzzing::check_foreign`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_format::fuzzing::check_foreign(data));
