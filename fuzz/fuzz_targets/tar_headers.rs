//! Fuzzes the tar reader: `SampleStream` and `TarReader` over arbitrary bytes
//! give samples or an error naming the file and offset, never a panic; and
//! the same bytes read in small pieces give the same result.
#![no_main]

use std::io::Read;

use bale_format::SampleStream;
use bale_format::fuzzing::{TarReader, parse_pax};
use libfuzzer_sys::fuzz_target;

const NAME: &str = "fuzz.tar";

/// Reads at most `n` bytes per call.
struct Chunked<'a>(&'a [u8], usize);

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.1.min(buf.len()).min(self.0.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

fn stream<R: Read>(r: R) -> Result<Vec<bale_format::StreamSample>, String> {
    SampleStream::new(r, NAME)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            let msg = e.to_string();
            assert!(
                msg.contains(NAME) && msg.contains("offset"),
                "error without file or offset: {msg}"
            );
            msg
        })
}

fuzz_target!(|data: &[u8]| {
    let Some((&first, tar)) = data.split_first() else {
        return;
    };
    let whole = stream(tar);
    let chunked = stream(Chunked(tar, usize::from(first % 31) + 1));
    assert_eq!(whole, chunked, "short reads changed the result");

    // The raw entry reader, reading some entries' data and skipping others.
    let mut r = TarReader::new(tar, NAME);
    let mut buf = Vec::new();
    let mut n = 0u32;
    while let Ok(Some(e)) = r.next_entry() {
        assert!(e.data_offset >= e.header_offset + 512);
        let res = if n.is_multiple_of(2) {
            r.read_data(&mut buf)
        } else {
            r.skip_data()
        };
        if res.is_err() {
            break;
        }
        n += 1;
    }

    let _ = parse_pax(tar);
});
