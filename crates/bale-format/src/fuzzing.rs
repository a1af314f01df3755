//! The promises the parsers of untrusted bytes keep, as checks over
//! arbitrary input, and the tar parser's internals for tests that build tars
//! by hand (feature `fuzzing`); not a stable API.
//!
//! Each `check_*` function feeds its bytes to one parser and panics when the
//! parser breaks a promise: it panicked itself, an error does not name the
//! file, or what it accepted does not hold together. The fuzz targets in
//! `fuzz/` are one call each, and `tests/fuzz_inputs.rs` replays the
//! committed inputs (`fuzz/seeds/<target>/`, `fuzz/regressions/<target>/`)
//! through the same functions, so a crash once found stays fixed.
//!
//! ```
//! use bale_format::fuzzing::{check_index, check_manifest, check_npy, check_tar};
//! for bytes in [&b""[..], b"\x93NUMPY\x01\x00", b"{\"format\": \"bale\"}", &[0; 1025]] {
//!     check_index(bytes);
//!     check_manifest(bytes);
//!     check_npy(bytes);
//!     check_tar(bytes);
//! }
//! ```

use std::io::Read;
use std::path::Path;

use crate::npy::{self, Header};
use crate::read::decompress_frame;
use crate::{Manifest, SampleStream, ShardIndex, StreamSample, checksum};

/// The MDS and LitData readers over an `index.json` and its first shard's
/// bytes, as [`check_foreign`] runs them: the samples read, or the error.
pub use crate::foreign::check_bytes as read_foreign;
pub use crate::tar::{
    BLOCK, Entry, EntryKind, PAX_HEADER_NAME, TarReader, encode_member_header, padded,
    parse_header, parse_pax,
};

/// The name the checks give the bytes, which every error must carry.
const INDEX_NAME: &str = "fuzz.idx";
const SHARD_NAME: &str = "fuzz.tar.zst";
const MANIFEST_NAME: &str = "fuzz/bale.json";
const TAR_NAME: &str = "fuzz.tar";

/// [`ShardIndex::from_bytes`] over `data` as it is, and again with its
/// footer checksum recomputed so that the record checks are reached: an
/// error names the file; an index that validates is usable through every
/// accessor and keeps the promises of its records (ranges inside the shard
/// and the tar, members inside their sample, a claimed decompressed size
/// checked before it is allocated).
///
/// # Panics
/// When [`ShardIndex`] breaks one of those promises.
pub fn check_index(data: &[u8]) {
    check_index_bytes(data.to_vec(), data);
    if data.len() >= 8 {
        let mut forged = data.to_vec();
        let body = forged.len() - 8;
        let sum = checksum(&forged[..body]);
        forged[body..].copy_from_slice(&sum.to_le_bytes());
        // Stored compressed (as `.tar.zst` indexes are), the same bytes give
        // the same index or the same refusal.
        let plain = ShardIndex::from_bytes(forged.clone(), INDEX_NAME);
        let nested = forged.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]);
        if let (false, Ok(z)) = (nested, zstd::bulk::compress(&forged, 1)) {
            match (ShardIndex::from_bytes(z, INDEX_NAME), &plain) {
                (Ok(a), Ok(b)) => assert_eq!(a.as_bytes(), b.as_bytes()),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                (a, b) => panic!("compressed {a:?}, plain {b:?}"),
            }
        }
        check_index_bytes(forged, data);
    }
}

/// One [`check_index`] pass; `frames` stands in for the shard's bytes.
fn check_index_bytes(bytes: Vec<u8>, frames: &[u8]) {
    let index = match ShardIndex::from_bytes(bytes.clone(), INDEX_NAME) {
        Ok(index) => index,
        Err(e) => {
            assert!(
                e.to_string().contains(INDEX_NAME),
                "error does not name the file: {e}"
            );
            return;
        }
    };
    assert_eq!(index.path(), Path::new(INDEX_NAME));
    // A compressed index holds what its frame decompresses to.
    let bytes = if bytes.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
        index.as_bytes().to_vec()
    } else {
        bytes
    };
    assert_eq!(index.as_bytes(), &bytes[..]);
    // Every sample has a member and every member a sample.
    assert_eq!(index.is_empty(), index.member_count() == 0);
    let footer = u64::from_le_bytes(bytes[bytes.len() - 8..].try_into().expect("8 bytes"));
    assert_eq!(index.checksum(), footer);
    let _ = (index.compression(), index.has_checksums());
    let scattered = index.is_scattered();
    let mut members = 0;
    for i in 0..index.len() {
        let e = index.sample(i);
        let key = index.key(i);
        assert!(!key.is_empty(), "sample {i}: empty key");
        index.prefetch_record(i);
        index.prefetch_key_and_members(i);
        let range = index.members(i);
        assert_eq!(range.len(), e.member_count as usize);
        assert_eq!(e.member_start as usize, members);
        members += range.len();
        let mut bytes = Some(0u64);
        for m in range {
            assert!(!m.ext.is_empty(), "sample {i}: empty extension");
            let end = m.offset.checked_add(m.size).expect("member end overflows");
            if scattered {
                assert!(
                    end <= index.shard_len(),
                    "sample {i}: member past the shard"
                );
            } else {
                assert!(
                    m.offset >= e.tar_offset && end <= e.tar_offset + e.tar_len,
                    "sample {i}: member outside its sample"
                );
            }
            bytes = bytes.and_then(|b| b.checked_add(m.size));
        }
        if scattered {
            assert_eq!(Some(index.sample_bytes(i)), bytes);
        } else {
            assert_eq!(index.sample_bytes(i), e.tar_len);
            assert!(e.file_offset + e.file_len <= index.shard_len());
            assert!(e.tar_offset + e.tar_len <= index.tar_len());
        }
        if let Some(j) = index.find(key) {
            assert_eq!(index.key(j), key);
        }
        // The decompressed size the index claims must be checked before it
        // is allocated.
        let frame = &frames[..frames
            .len()
            .min(usize::try_from(e.file_len).unwrap_or(usize::MAX))];
        match decompress_frame(
            Path::new(SHARD_NAME),
            e.file_offset,
            frame,
            e.tar_len,
            index.zstd_dict(),
        ) {
            Ok(tar) => assert_eq!(tar.len() as u64, e.tar_len),
            Err(err) => assert!(
                err.to_string().contains(SHARD_NAME),
                "error does not name the shard: {err}"
            ),
        }
    }
    assert_eq!(members, index.member_count());
    for j in 0..index.member_count() {
        let _ = index.member(j);
    }
    // Out of range: nothing, not a panic.
    index.prefetch_record(index.len());
    index.prefetch_key_and_members(index.len());
}

/// [`Manifest::from_slice`] over `data`: an error names the file; a
/// manifest that parses writes bytes that read back to itself, and writes
/// those same bytes again.
///
/// # Panics
/// When [`Manifest`] breaks one of those promises.
pub fn check_manifest(data: &[u8]) {
    let path = Path::new(MANIFEST_NAME);
    match Manifest::from_slice(data, path) {
        Err(e) => assert!(
            e.to_string().contains(MANIFEST_NAME),
            "error does not name the file: {e}"
        ),
        Ok(m) => {
            let bytes = m.to_bytes();
            let back = Manifest::from_slice(&bytes, path).expect("a manifest bale wrote parses");
            assert_eq!(back, m);
            assert_eq!(back.to_bytes(), bytes, "writing is not byte-stable");
        }
    }
}

/// The tar parsers over `data[1..]` (the first byte picks the read size of
/// the short-read pass, 1 to 31 bytes): [`SampleStream`] gives samples or an
/// error naming the file and offset, the same read whole and in small
/// pieces; [`TarReader`] gives entries whose data follows their headers,
/// whether their data is read or skipped; [`parse_header`] and
/// [`parse_pax`] take any block or record bytes.
///
/// # Panics
/// When a tar parser breaks one of those promises.
pub fn check_tar(data: &[u8]) {
    let Some((&first, tar)) = data.split_first() else {
        return;
    };
    let whole = stream(tar);
    let chunked = stream(Chunked {
        bytes: tar,
        max: usize::from(first % 31) + 1,
    });
    assert_eq!(whole, chunked, "short reads changed the result");

    // The raw entry reader, reading some entries' data and skipping others.
    let mut r = TarReader::new(tar, TAR_NAME);
    let mut buf = Vec::new();
    let mut n = 0u32;
    while let Ok(Some(e)) = r.next_entry() {
        assert!(e.data_offset >= e.header_offset + BLOCK);
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

    for block in tar.chunks_exact(BLOCK as usize) {
        let _ = parse_header(block.try_into().expect("one block"));
    }
    let _ = parse_pax(tar);
}

/// Reads at most `max` bytes per call.
struct Chunked<'a> {
    bytes: &'a [u8],
    max: usize,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.max.min(buf.len()).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

/// Every sample of the tar `r`, or the first error's message.
fn stream<R: Read>(r: R) -> Result<Vec<StreamSample>, String> {
    SampleStream::new(r, TAR_NAME)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            let msg = e.to_string();
            assert!(
                msg.contains(TAR_NAME) && msg.contains("offset"),
                "error without file or offset: {msg}"
            );
            msg
        })
}

/// [`npy::parse`] over `data`: a header that parses puts `data_offset`
/// within the input and was read from the bytes before it alone (cut there,
/// it parses the same; cut shorter, it is truncated); [`Header::itemsize`],
/// [`Header::data_len`] and [`Header::u8_hwc`] give consistent answers for
/// any member size.
///
/// # Panics
/// When the parser or [`Header`] breaks one of those promises.
pub fn check_npy(data: &[u8]) {
    let Ok(header) = npy::parse(data) else {
        return;
    };
    let sizes = [0, 1, data.len() as u64, u64::MAX];
    let Header::Simple { data_offset, .. } = header else {
        assert_eq!(header.itemsize(), None);
        assert_eq!(header.data_len(), None);
        assert!(sizes.iter().all(|&total| header.u8_hwc(total).is_none()));
        return;
    };
    assert!(
        (10..=data.len()).contains(&data_offset),
        "data_offset {data_offset} outside the {}-byte input",
        data.len()
    );
    assert_eq!(npy::parse(&data[..data_offset]).as_ref(), Ok(&header));
    assert!(npy::parse(&data[..data_offset - 1]).is_err());

    let data_len = header.data_len();
    if let Some(n) = data_len {
        assert!(header.itemsize().is_some_and(|s| s > 0 && n % s == 0));
    }
    let exact = data_len.and_then(|n| n.checked_add(data_offset as u64));
    for total in sizes.into_iter().chain(exact) {
        if let Some((dims, offset)) = header.u8_hwc(total) {
            assert_eq!(offset, data_offset);
            let pixels = dims.iter().map(|&d| d as u64).product::<u64>();
            assert!(pixels > 0);
            assert_eq!(Some(pixels), data_len);
            assert_eq!(offset as u64 + pixels, total);
        }
    }
}

/// The MDS and LitData readers ([`crate::foreign`], what `bale convert`
/// reads) over `data`: a little-endian u16 length, that many bytes of
/// `index.json`, then the bytes of its first shard. An error names a file;
/// what is accepted is a list of samples with keys and valid extensions.
///
/// # Panics
/// When the readers panic, an error names no file, or a sample breaks
/// those promises.
pub fn check_foreign(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let split = usize::from(u16::from_le_bytes([data[0], data[1]])).min(data.len() - 2);
    let (index, shard) = data[2..].split_at(split);
    match crate::foreign::check_bytes(index, shard) {
        Err(e) => assert!(e.to_string().contains("fuzz/"), "error names no file: {e}"),
        Ok(samples) => {
            for (key, members) in samples {
                assert!(!key.is_empty(), "a sample without a key");
                for (ext, _) in members {
                    crate::name::validate_ext(&ext).expect("extensions are checked");
                }
            }
        }
    }
}
