//! Tar headers: the deterministic ustar/pax headers bale writes, and a parser
//! for the headers other tools write (ustar, GNU, pax, v7).
//!
//! bale writes POSIX ustar headers with fixed fields: mode `0644`, uid and gid
//! 0, mtime 0, empty user and group names, type `0` (regular file). A name
//! over 100 bytes gets a pax extended header with a `path` record; a member of
//! 8 GiB or more gets a pax `size` record (and the size field in GNU base-256).

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::error::{FormatError, Result};

/// Size of a tar block.
pub const BLOCK: u64 = 512;
/// Largest size the 11-digit octal size field can hold (8 GiB - 1).
pub const MAX_OCTAL_SIZE: u64 = 0o777_7777_7777;
/// Name written in the header of a pax extended header (as Python's `tarfile` does).
pub const PAX_HEADER_NAME: &[u8] = b"././@PaxHeader";

/// Rounds `n` up to a whole number of tar blocks.
pub const fn padded(n: u64) -> u64 {
    n.div_ceil(BLOCK) * BLOCK
}

/// Appends the header block(s) of a regular-file member named `name` with
/// `size` bytes of data to `out`: a pax extended header when needed, then the
/// ustar header. Returns the number of bytes appended (a multiple of 512).
///
/// The output depends on nothing but `name` and `size`.
pub fn encode_member_header(name: &str, size: u64, out: &mut Vec<u8>) -> usize {
    let start = out.len();
    let name_bytes = name.as_bytes();
    let long_name = name_bytes.len() > 100;
    let big = size > MAX_OCTAL_SIZE;
    if long_name || big {
        let mut records = Vec::new();
        if long_name {
            pax_record(&mut records, "path", name_bytes);
        }
        if big {
            pax_record(&mut records, "size", size.to_string().as_bytes());
        }
        let mut h = blank_header(PAX_HEADER_NAME, records.len() as u64, b'x');
        finish_checksum(&mut h);
        out.extend_from_slice(&h);
        out.extend_from_slice(&records);
        out.resize(
            out.len() + (padded(records.len() as u64) as usize - records.len()),
            0,
        );
    }
    let short = &name_bytes[..name_bytes.len().min(100)];
    let mut h = blank_header(short, size, b'0');
    finish_checksum(&mut h);
    out.extend_from_slice(&h);
    out.len() - start
}

/// The number of header bytes [`encode_member_header`] writes for `name` and `size`.
pub fn member_header_len(name: &str, size: u64) -> u64 {
    let long_name = name.len() > 100;
    let big = size > MAX_OCTAL_SIZE;
    if !(long_name || big) {
        return BLOCK;
    }
    let mut records = Vec::new();
    if long_name {
        pax_record(&mut records, "path", name.as_bytes());
    }
    if big {
        pax_record(&mut records, "size", size.to_string().as_bytes());
    }
    2 * BLOCK + padded(records.len() as u64)
}

fn pax_record(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    // "<len> <key>=<value>\n" where <len> counts the whole record, itself included.
    let rest = 1 + key.len() + 1 + value.len() + 1;
    let mut len = rest + 1;
    while len != rest + len.to_string().len() {
        len = rest + len.to_string().len();
    }
    out.extend_from_slice(len.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value);
    out.push(b'\n');
}

fn blank_header(name: &[u8], size: u64, typeflag: u8) -> [u8; 512] {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name);
    h[100..108].copy_from_slice(b"0000644\0");
    h[108..116].copy_from_slice(b"0000000\0");
    h[116..124].copy_from_slice(b"0000000\0");
    if size <= MAX_OCTAL_SIZE {
        put_octal(&mut h[124..135], size);
    } else {
        // GNU base-256: high bit of the first byte set, big-endian value.
        h[124] = 0x80;
        h[128..136].copy_from_slice(&size.to_be_bytes());
    }
    h[136..148].copy_from_slice(b"00000000000\0");
    h[156] = typeflag;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[329..337].copy_from_slice(b"0000000\0");
    h[337..345].copy_from_slice(b"0000000\0");
    h
}

fn finish_checksum(h: &mut [u8; 512]) {
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|&b| u32::from(b)).sum();
    put_octal(&mut h[148..154], u64::from(sum));
    h[154] = 0;
    h[155] = b' ';
}

/// Bytes the end of a tar archive takes: two zero blocks.
pub const TAR_END_LEN: u64 = 2 * BLOCK;

/// Bytes a member named `<key>.<ext>` of `size` bytes takes in a tar stream
/// written by bale: its header(s) and its data padded to whole blocks.
pub fn tar_member_len(key: &str, ext: &str, size: u64) -> u64 {
    let header = if key.len() + 1 + ext.len() <= 100 && size <= MAX_OCTAL_SIZE {
        BLOCK
    } else {
        member_header_len(&format!("{key}.{ext}"), size)
    };
    header + padded(size)
}

/// Writes `v` in octal, zero-padded to fill `out` (as `format!("{v:0N$o}")`
/// with N = `out.len()`; `v` must fit).
fn put_octal(out: &mut [u8], mut v: u64) {
    for b in out.iter_mut().rev() {
        *b = b'0' + (v & 7) as u8;
        v >>= 3;
    }
    debug_assert_eq!(v, 0, "octal field too small");
}

/// What kind of entry a header describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (type `0`, NUL or `7`).
    File,
    /// A directory (type `5`).
    Directory,
    /// A hard or symbolic link, device, FIFO or other non-file entry.
    Other,
}

/// One raw 512-byte header, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawHeader {
    /// The name (ustar prefix and name joined with `/`), raw bytes.
    pub name: Vec<u8>,
    /// The size field.
    pub size: u64,
    /// The type flag byte.
    pub typeflag: u8,
}

/// The first entry of the tar stream that `bytes` begin with (its pax and
/// GNU long-name headers applied), with its data offset relative to
/// `bytes`; `None` when they do not begin with one (other bytes, a bad
/// checksum, an end-of-archive block). What a reader handed a sample's
/// record by offset can check cheaply: that the index read earlier still
/// describes the bytes (a shard replaced since puts other bytes there).
pub fn first_entry(bytes: &[u8]) -> Option<Entry> {
    TarReader::new(bytes, "record").next_entry().ok()?
}

/// Whether `block`, the 512 bytes before a member's data, is the header of
/// a regular file of `size` bytes (a valid checksum, a file's type flag,
/// the size): what a reader handed a scattered index's member offsets can
/// check cheaply, the way [`first_entry`] serves a sample's record. Its
/// name is not compared: a pax or GNU long-name record before it may
/// override the name the block holds, and a size of 8 GiB or more, which
/// the block's octal field cannot hold, is not compared either.
pub fn is_member_header(block: &[u8], size: u64) -> bool {
    let Ok(block) = <&[u8; 512]>::try_from(block) else {
        return false;
    };
    match parse_header(block) {
        Ok(Some(h)) => {
            entry_kind(h.typeflag) == EntryKind::File && (h.size == size || size > 0o777_7777_7777)
        }
        _ => false,
    }
}

/// The kind of entry a header's type flag gives (pax, long-name and sparse
/// flags aside, which the readers handle before).
fn entry_kind(typeflag: u8) -> EntryKind {
    match typeflag {
        b'0' | 0 | b'7' => EntryKind::File,
        b'5' => EntryKind::Directory,
        _ => EntryKind::Other,
    }
}

/// Decodes one header block. Returns `Ok(None)` for an all-zero block (end of archive).
///
/// # Errors
/// A message saying what is wrong (bad checksum, bad number field); the caller
/// adds the file and offset.
pub fn parse_header(block: &[u8; 512]) -> std::result::Result<Option<RawHeader>, String> {
    if block.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    let stored = parse_number(&block[148..156]).map_err(|e| format!("checksum field: {e}"))?;
    let unsigned: u64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                u64::from(b)
            }
        })
        .sum();
    let signed: i64 = block
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                32
            } else {
                i64::from(b as i8)
            }
        })
        .sum();
    if stored != unsigned && stored as i64 != signed {
        return Err(format!(
            "header checksum mismatch (stored {stored:o}, computed {unsigned:o}): not a tar header or a damaged one"
        ));
    }
    let size = parse_number(&block[124..136]).map_err(|e| format!("size field: {e}"))?;
    let typeflag = block[156];
    let name = cstr(&block[..100]);
    let ustar = &block[257..263] == b"ustar\0";
    let mut full = Vec::new();
    if ustar {
        let prefix = cstr(&block[345..500]);
        if !prefix.is_empty() {
            full.extend_from_slice(prefix);
            full.push(b'/');
        }
    }
    full.extend_from_slice(name);
    Ok(Some(RawHeader {
        name: full,
        size,
        typeflag,
    }))
}

fn cstr(field: &[u8]) -> &[u8] {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    &field[..end]
}

/// Parses a numeric header field: octal digits padded with spaces or NULs, or
/// GNU base-256 (high bit of the first byte set).
pub fn parse_number(field: &[u8]) -> std::result::Result<u64, String> {
    if let Some(&first) = field.first()
        && first & 0x80 != 0
    {
        if first & 0x40 != 0 {
            return Err("negative base-256 number".into());
        }
        let mut v: u64 = u64::from(first & 0x3f);
        for &b in &field[1..] {
            if v > (u64::MAX >> 8) {
                return Err("base-256 number overflows 64 bits".into());
            }
            v = (v << 8) | u64::from(b);
        }
        return Ok(v);
    }
    let s: &[u8] = {
        let start = field
            .iter()
            .position(|&b| b != b' ' && b != 0)
            .unwrap_or(field.len());
        let rest = &field[start..];
        let end = rest
            .iter()
            .position(|&b| b == b' ' || b == 0)
            .unwrap_or(rest.len());
        if rest[end..].iter().any(|&b| b != b' ' && b != 0) {
            return Err(format!(
                "not an octal number: {:?}",
                String::from_utf8_lossy(field)
            ));
        }
        &rest[..end]
    };
    let mut v: u64 = 0;
    for &b in s {
        if !(b'0'..=b'7').contains(&b) {
            return Err(format!(
                "not an octal number: {:?}",
                String::from_utf8_lossy(field)
            ));
        }
        v = v
            .checked_mul(8)
            .and_then(|v| v.checked_add(u64::from(b - b'0')))
            .ok_or_else(|| "octal number overflows 64 bits".to_string())?;
    }
    Ok(v)
}

/// Parses pax extended header records into `(key, value)` pairs.
pub fn parse_pax(data: &[u8]) -> std::result::Result<Vec<(String, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        if rest.iter().all(|&b| b == 0) {
            break;
        }
        let sp = rest
            .iter()
            .position(|&b| b == b' ')
            .ok_or("pax record without a length")?;
        let len: usize = std::str::from_utf8(&rest[..sp])
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or("pax record length is not a number")?;
        if len <= sp + 1 || len > rest.len() {
            return Err(format!("pax record length {len} out of range"));
        }
        let rec = &rest[sp + 1..len];
        let rec = rec
            .strip_suffix(b"\n")
            .ok_or("pax record does not end in a newline")?;
        let eq = rec
            .iter()
            .position(|&b| b == b'=')
            .ok_or("pax record without '='")?;
        let key = String::from_utf8(rec[..eq].to_vec()).map_err(|_| "pax key is not UTF-8")?;
        out.push((key, rec[eq + 1..].to_vec()));
        rest = &rest[len..];
    }
    Ok(out)
}

/// One entry of a tar stream, with its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name (after pax `path` and GNU long-name records), raw bytes.
    pub name: Vec<u8>,
    /// Size of the data in bytes.
    pub size: u64,
    /// What the entry is.
    pub kind: EntryKind,
    /// Offset of the entry's first header block (pax or GNU headers included).
    pub header_offset: u64,
    /// Offset of the entry's data.
    pub data_offset: u64,
    /// The name did not come from the 100-byte ustar name field alone (a
    /// pax record, a GNU long-name record or the ustar prefix gave it).
    pub long_name: bool,
}

impl Entry {
    /// The name as UTF-8, if it is.
    pub fn name_str(&self) -> Option<&str> {
        std::str::from_utf8(&self.name).ok()
    }
}

/// Largest pax or GNU long-name record this parser accepts (1 MiB).
const MAX_META: u64 = 1 << 20;

/// Largest member size accepted: a file size (`off_t`) is at most `i64::MAX`;
/// beyond it, rounding up to whole blocks would overflow.
const MAX_MEMBER_SIZE: u64 = i64::MAX as u64;

/// The one header loop of every tar parser: fed the header blocks of one
/// entry in order (and the data of its extended headers), it applies the
/// rules for type flags, sizes, links and extended records, and gives the
/// entry. [`TarReader`] (streaming) and the scanner of `bale index`
/// (positioned reads) differ only in how they fetch the bytes.
#[derive(Debug, Default)]
pub(crate) struct EntryHeaders {
    ext: Extended,
    first: Option<u64>,
}

/// What a header block asks for next.
#[derive(Debug)]
pub(crate) enum HeaderStep {
    /// An extended header: fetch its `size` bytes of data (padded to whole
    /// blocks after it) and pass them to [`EntryHeaders::extended`].
    Extended {
        /// Its type flag.
        typeflag: u8,
        /// Bytes of data.
        size: u64,
    },
    /// The entry, complete; its data starts after the block.
    Entry(Entry),
    /// A zero block: the end of the archive.
    End,
}

impl EntryHeaders {
    /// Takes the header block at offset `at` of `path`.
    pub fn block(&mut self, block: &[u8; 512], at: u64, path: &Path) -> Result<HeaderStep> {
        let Some(h) = parse_header(block).map_err(|e| FormatError::tar(path, at, e))? else {
            if self.first.is_some() {
                return Err(FormatError::tar(
                    path,
                    at,
                    "zero block after an extended header",
                ));
            }
            return Ok(HeaderStep::End);
        };
        let first = *self.first.get_or_insert(at);
        match h.typeflag {
            b'x' | b'g' | b'L' | b'K' => {
                if h.size > MAX_META {
                    return Err(FormatError::tar(
                        path,
                        at,
                        format!(
                            "extended header of {} bytes is larger than the 1 MiB allowed",
                            h.size
                        ),
                    ));
                }
                Ok(HeaderStep::Extended {
                    typeflag: h.typeflag,
                    size: h.size,
                })
            }
            b'S' => Err(sparse_error(path, at)),
            t => {
                let kind = entry_kind(t);
                let ext = std::mem::take(&mut self.ext);
                let size = ext.size.unwrap_or(h.size);
                if size > MAX_MEMBER_SIZE {
                    return Err(FormatError::tar(
                        path,
                        at,
                        format!("member size {size} is larger than any tar member can be"),
                    ));
                }
                // Links, devices and FIFOs carry no data whatever the size field says.
                let size = if matches!(t, b'1' | b'2' | b'3' | b'4' | b'6') {
                    0
                } else {
                    size
                };
                let prefixed = &block[257..263] == b"ustar\0" && block[345] != 0;
                self.first = None;
                Ok(HeaderStep::Entry(Entry {
                    long_name: ext.name.is_some() || prefixed,
                    name: ext.name.unwrap_or(h.name),
                    size,
                    kind,
                    header_offset: first,
                    data_offset: at + BLOCK,
                }))
            }
        }
    }

    /// Takes the data of the extended header whose block was at `at`.
    pub fn extended(&mut self, typeflag: u8, data: Vec<u8>, path: &Path, at: u64) -> Result<()> {
        self.ext.apply(typeflag, data, path, at)
    }

    /// Whether extended headers were taken for an entry not yet given.
    pub fn pending(&self) -> bool {
        self.first.is_some()
    }
}

/// What the extended headers before an entry (pax `x`, GNU long name `L`)
/// say about it. Both tar parsers (the streaming [`TarReader`] and the
/// seeking scanner of `bale index`) collect them through this one type.
#[derive(Debug, Default)]
pub struct Extended {
    /// The name from a pax `path` record or a GNU long-name header.
    pub name: Option<Vec<u8>>,
    /// The size from a pax `size` record.
    pub size: Option<u64>,
}

impl Extended {
    /// Takes in the data of one extended header of type `typeflag` (`x`, `g`,
    /// `L` or `K`) whose header block is at offset `at` of `path`. Global pax
    /// headers and GNU long link names do not change member names.
    ///
    /// # Errors
    /// Bad pax records, a pax size that is not a number, and GNU sparse
    /// records (not supported), naming `path` and `at`.
    pub fn apply(&mut self, typeflag: u8, mut data: Vec<u8>, path: &Path, at: u64) -> Result<()> {
        match typeflag {
            b'x' => {
                for (k, v) in parse_pax(&data).map_err(|e| FormatError::tar(path, at, e))? {
                    match k.as_str() {
                        "path" => self.name = Some(v),
                        "size" => {
                            let s = std::str::from_utf8(&v)
                                .ok()
                                .and_then(|s| s.parse().ok())
                                .ok_or_else(|| {
                                    FormatError::tar(path, at, "pax size record is not a number")
                                })?;
                            self.size = Some(s);
                        }
                        k if k.starts_with("GNU.sparse") => return Err(sparse_error(path, at)),
                        _ => {}
                    }
                }
            }
            b'L' => {
                let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
                data.truncate(end);
                self.name = Some(data);
            }
            _ => {}
        }
        Ok(())
    }
}

/// The error for a GNU sparse member, which bale does not support.
pub fn sparse_error(path: &Path, at: u64) -> FormatError {
    FormatError::tar(
        path,
        at,
        "GNU sparse files are not supported; recreate the archive without --sparse",
    )
}

/// Reads the headers of a tar stream one entry at a time.
///
/// Call [`TarReader::next_entry`], then either read the data with
/// [`TarReader::read_data`] or skip it with [`TarReader::skip_data`].
#[derive(Debug)]
pub struct TarReader<R> {
    inner: R,
    path: PathBuf,
    pos: u64,
    /// Data bytes of the current entry still unread, and its padding.
    pending: u64,
    pending_pad: u64,
    done: bool,
}

impl<R: Read> TarReader<R> {
    /// Wraps a stream positioned at the start of a tar archive. `path` names
    /// it in errors.
    pub fn new(inner: R, path: impl Into<PathBuf>) -> Self {
        Self {
            inner,
            path: path.into(),
            pos: 0,
            pending: 0,
            pending_pad: 0,
            done: false,
        }
    }

    /// The file named in errors.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Offset in the tar stream of the next byte to be read.
    pub fn position(&self) -> u64 {
        self.pos
    }

    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<bool> {
        // Returns false on a clean EOF before the first byte.
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => {
                    if got == 0 {
                        return Ok(false);
                    }
                    return Err(FormatError::Truncated {
                        path: self.path.clone(),
                        what,
                        needed: self.pos + buf.len() as u64,
                        len: self.pos + got as u64,
                    });
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(FormatError::io_at(
                        self.path.clone(),
                        self.pos + got as u64,
                        e,
                    ));
                }
            }
        }
        self.pos += buf.len() as u64;
        Ok(true)
    }

    fn fill_exact(&mut self, buf: &mut [u8], what: &'static str) -> Result<()> {
        let at = self.pos;
        if self.fill(buf, what)? {
            Ok(())
        } else {
            Err(FormatError::Truncated {
                path: self.path.clone(),
                what,
                needed: at + buf.len() as u64,
                len: at,
            })
        }
    }

    fn discard(&mut self, mut n: u64, what: &'static str) -> Result<()> {
        let mut scratch = [0u8; 8192];
        while n > 0 {
            let k = n.min(scratch.len() as u64) as usize;
            self.fill_exact(&mut scratch[..k], what)?;
            n -= k as u64;
        }
        Ok(())
    }

    /// Reads the next entry's headers. Returns `None` at the end of the archive:
    /// a zero block (normally the first of two).
    ///
    /// A stream that ends without a zero block is truncated: that is an error,
    /// since a cut at a member boundary would otherwise lose members silently.
    ///
    /// Any data of the previous entry not read is skipped first.
    ///
    /// # Errors
    /// Truncation, bad header checksums, bad number fields, oversized or bad
    /// pax records, and GNU sparse files (not supported) are errors naming the
    /// file and the header's offset.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        if self.done {
            return Ok(None);
        }
        self.skip_data()?;
        let mut headers = EntryHeaders::default();
        loop {
            let at = self.pos;
            let mut block = [0u8; 512];
            if !self.fill(&mut block, "a tar header")? {
                self.done = true;
                if headers.pending() {
                    return Err(FormatError::tar(
                        self.path.clone(),
                        at,
                        "archive ends after an extended header",
                    ));
                }
                return Err(FormatError::Truncated {
                    path: self.path.clone(),
                    what: "the end-of-archive blocks",
                    needed: at + 2 * BLOCK,
                    len: at,
                });
            }
            match headers.block(&block, at, &self.path)? {
                // End of archive: a second zero block normally follows; tolerate its absence.
                HeaderStep::End => {
                    self.done = true;
                    return Ok(None);
                }
                HeaderStep::Extended { typeflag, size } => {
                    let mut data = vec![0u8; size as usize];
                    self.fill_exact(&mut data, "an extended header")?;
                    self.discard(padded(size) - size, "extended header padding")?;
                    let path = self.path.clone();
                    headers.extended(typeflag, data, &path, at)?;
                }
                HeaderStep::Entry(e) => {
                    self.pending = e.size;
                    self.pending_pad = padded(e.size) - e.size;
                    return Ok(Some(e));
                }
            }
        }
    }

    /// Reads all of the current entry's data into `buf` (cleared first).
    ///
    /// # Errors
    /// Truncation or an I/O error, naming the file and offset.
    pub fn read_data(&mut self, buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        let n = self.pending;
        // Grow as data arrives rather than trusting a size field from untrusted bytes.
        let mut chunk = [0u8; 64 * 1024];
        let mut left = n;
        while left > 0 {
            let k = left.min(chunk.len() as u64) as usize;
            self.fill_exact(&mut chunk[..k], "member data")?;
            buf.extend_from_slice(&chunk[..k]);
            left -= k as u64;
        }
        self.pending = 0;
        let pad = self.pending_pad;
        self.pending_pad = 0;
        self.discard(pad, "member padding")
    }

    /// Skips what is left of the current entry's data and padding.
    ///
    /// # Errors
    /// Truncation or an I/O error.
    pub fn skip_data(&mut self) -> Result<()> {
        let n = self.pending + self.pending_pad;
        self.pending = 0;
        self.pending_pad = 0;
        self.discard(n, "member data")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal_fields_match_format() {
        for v in [0u64, 1, 7, 8, 511, 512, 4096, 123_456_789, MAX_OCTAL_SIZE] {
            let mut f = [b'x'; 11];
            put_octal(&mut f, v);
            assert_eq!(f.as_slice(), format!("{v:011o}").as_bytes());
        }
        let mut f = [b'x'; 6];
        put_octal(&mut f, 130_560);
        assert_eq!(f.as_slice(), b"377000");
    }

    #[test]
    fn header_round_trips() {
        for (name, size) in [
            ("a.jpg", 0u64),
            ("x/y/z.txt", 12345),
            (&"n".repeat(100) as &str, 7),
            (&format!("{}.jpg", "d/".repeat(80)), 99),
        ] {
            let mut out = Vec::new();
            let n = encode_member_header(name, size, &mut out);
            assert_eq!(n as u64, member_header_len(name, size));
            let mut r = TarReader::new(&out[..], "mem");
            // The data is absent, so only headers are checked.
            let e = r.next_entry().unwrap().unwrap();
            assert_eq!(e.name, name.as_bytes());
            assert_eq!(e.size, size);
            assert_eq!(e.data_offset, n as u64);
        }
    }

    #[test]
    fn a_header_is_told_from_data_zeros_and_short_bytes() {
        let mut out = Vec::new();
        encode_member_header("k/0001.jpg", 3000, &mut out);
        let e = first_entry(&out).unwrap();
        assert_eq!(
            (e.name.as_slice(), e.size, e.data_offset),
            (&b"k/0001.jpg"[..], 3000, 512)
        );
        assert_eq!(e.kind, EntryKind::File);
        // A long name's pax header is read through to the member's own.
        let long = format!("{}.jpg", "d".repeat(120));
        let mut pax = Vec::new();
        encode_member_header(&long, 1, &mut pax);
        let e = first_entry(&pax).unwrap();
        assert_eq!(
            (e.name, e.size, e.data_offset),
            (long.into_bytes(), 1, 1536)
        );
        assert!(first_entry(&out[..511]).is_none());
        assert!(first_entry(&[0u8; 512]).is_none());
        let mut flipped = out.clone();
        flipped[3] ^= 1;
        assert!(first_entry(&flipped).is_none());
        let data: Vec<u8> = (0..512u32).map(|i| (i * 7 % 251) as u8).collect();
        assert!(first_entry(&data).is_none());
    }

    #[test]
    fn a_member_header_is_checked_by_kind_and_size() {
        let mut out = Vec::new();
        encode_member_header("k/0001.jpg", 3000, &mut out);
        assert!(is_member_header(&out, 3000));
        assert!(!is_member_header(&out, 3001));
        assert!(!is_member_header(&out[..511], 3000));
        assert!(!is_member_header(&[0u8; 512], 0));
        let mut flipped = out.clone();
        flipped[3] ^= 1;
        assert!(!is_member_header(&flipped, 3000));
        // A directory's header, checksum fixed, is not a member's.
        let mut dir = out.clone();
        dir[156] = b'5';
        dir[148..156].copy_from_slice(b"        ");
        let sum: u32 = dir.iter().map(|&b| u32::from(b)).sum();
        dir[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        assert!(parse_header(dir.as_slice().try_into().unwrap()).is_ok());
        assert!(!is_member_header(&dir, 3000));
        // A long name: the block before the data is the member's own.
        let long = format!("{}.jpg", "d".repeat(120));
        let mut pax = Vec::new();
        let n = encode_member_header(&long, 7, &mut pax);
        assert!(is_member_header(&pax[n - 512..n], 7));
        assert!(!is_member_header(&pax[..512], 7));
    }

    #[test]
    fn huge_sizes_use_pax_and_base256() {
        let size = 9 * (1u64 << 30);
        let mut out = Vec::new();
        encode_member_header("big.bin", size, &mut out);
        assert_eq!(out.len(), 3 * 512);
        let e = TarReader::new(&out[..], "mem")
            .next_entry()
            .unwrap()
            .unwrap();
        assert_eq!(e.size, size);
        // The ustar header alone also carries the size, in base-256.
        let h = parse_header(out[1024..1536].try_into().unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(h.size, size);
    }

    #[test]
    fn pax_record_lengths_are_self_consistent() {
        for vlen in [1usize, 5, 6, 7, 8, 90, 91, 92, 93, 994, 995, 996, 997] {
            let mut out = Vec::new();
            pax_record(&mut out, "path", &vec![b'a'; vlen]);
            let parsed = parse_pax(&out).unwrap();
            assert_eq!(parsed[0].1.len(), vlen);
        }
    }

    #[test]
    fn numbers_parse() {
        assert_eq!(parse_number(b"0000644\0").unwrap(), 0o644);
        assert_eq!(parse_number(b"  17 \0").unwrap(), 15);
        assert_eq!(parse_number(b"\0\0\0").unwrap(), 0);
        assert!(parse_number(b"12 3").is_err());
        assert!(parse_number(b"9").is_err());
    }
}
