//! Fuzzes the JPEG marker walk of bale-image; the checks are
//! `bale_image::fuzzing::check_jpeg`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| bale_image::fuzzing::check_jpeg(data));
