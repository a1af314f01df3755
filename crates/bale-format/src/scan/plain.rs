//! Plain tars: header by header with positioned reads (or one sequential
//! pass when checksums are asked for).

use super::*;

pub(super) fn scan_plain(
    file: &dyn ReadAt,
    path: &Path,
    len: u64,
    opts: &ScanOptions,
) -> Result<ScannedShard> {
    let mut g = Grouper::new(path, *opts, Compression::None);
    let mut pread = Pread {
        file,
        path,
        bytes_read: 0,
    };
    let mut seq = opts.checksums.then(|| Sequential::new(file, path, len));
    let src: &mut dyn ByteSource = match seq.as_mut() {
        Some(s) => s,
        None => &mut pread,
    };
    let mut open: Option<OpenSample> = None;
    let mut pos = 0u64;
    let tar_len = loop {
        let e = match next_entry(src, path, pos, len, Bound::File)? {
            Step::Entry(e) => e,
            Step::Zero(at) => break (at + 2 * BLOCK).min(len),
            Step::End(at) => {
                return Err(FormatError::Truncated {
                    path: path.to_path_buf(),
                    what: "the end-of-archive blocks",
                    needed: at + 2 * BLOCK,
                    len: at,
                });
            }
        };
        pos = e.data_offset + padded(e.size);
        if pos > len {
            // The data fits but its padding does not: no end blocks can follow.
            return Err(FormatError::Truncated {
                path: path.to_path_buf(),
                what: "member padding",
                needed: pos,
                len,
            });
        }
        let Some(m) = g.member_of(&e)? else {
            continue;
        };
        let sum = member_sum(src, path, &m, opts.checksums)?;
        match open.as_mut() {
            Some(o) if o.tar_key == m.key => g.add(o, m, sum)?,
            _ => {
                if let Some(done) = open.take() {
                    g.close(done, None)?;
                }
                open = Some(g.start(m, sum)?);
            }
        }
    };
    if let Some(done) = open.take() {
        g.close(done, None)?;
    }
    // A scattered index records no tar length (its samples have no tar range).
    let tar_len = if g.release()? { 0 } else { tar_len };
    let (shard_checksum, bytes_read) = match seq {
        Some(s) => {
            let (sum, read) = s.finish()?;
            (Some(sum), read)
        }
        None => (None, pread.bytes_read),
    };
    g.stats.bytes_read = bytes_read;
    Ok(g.finish(Compression::None, len, tar_len, shard_checksum))
}
