//! Shards with a scattered index (layout 1.1): regrouped tars and HDF5 files,
//! checked member by member.

use super::*;

/// A scattered index of a plain tar (`bale index --allow-split`): scans the
/// tar's headers again, regrouping split samples as the index did, and checks
/// that they give the index's samples (keys, in order) and members
/// (extension, data offset, size).
pub(super) fn check_regrouped_tar(
    r: &mut ShardReport,
    path: &Path,
    idx: &ShardIndex,
    visitor: &mut dyn Visitor,
) {
    use crate::scan::{ScanOptions, SplitPolicy, scan_shard};
    let name = r.shard.clone();
    let opts = ScanOptions {
        checksums: false,
        split: SplitPolicy::Regroup,
    };
    let scanned = match scan_shard(path, &opts) {
        Ok(s) => s,
        Err(e) => {
            let mut p = Problem::new(&name, format!("tar headers cannot be read: {e}"));
            if let Some(o) = error_offset(&e) {
                p = p.offset(o);
            }
            r.push(p);
            return;
        }
    };
    r.bytes_read += scanned.stats.bytes_read;
    visitor.progress(scanned.stats.bytes_read);
    let tar = match ShardIndex::from_bytes(scanned.index_bytes(), path) {
        Ok(t) => t,
        Err(e) => {
            r.push(Problem::new(
                &name,
                format!("tar headers give no valid index: {e}"),
            ));
            return;
        }
    };
    if tar.len() != idx.len() {
        r.push(Problem::new(
            &name,
            format!(
                "the tar's headers give {} samples (split samples regrouped), the index lists {}",
                tar.len(),
                idx.len()
            ),
        ));
    }
    for i in 0..tar.len().min(idx.len()) {
        idx.release_behind(i);
        let key = idx.key(i);
        if tar.key(i) != key {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "index sample {i} is {key:?}, the tar's headers give {:?} there",
                        tar.key(i)
                    ),
                )
                .key(key),
            );
            continue;
        }
        let want: Vec<(&str, u64, u64)> =
            idx.members(i).map(|m| (m.ext, m.offset, m.size)).collect();
        let got: Vec<(&str, u64, u64)> =
            tar.members(i).map(|m| (m.ext, m.offset, m.size)).collect();
        if want != got {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "members (extension, offset, size) differ: the index lists {want:?}, the tar's headers give {got:?}"
                    ),
                )
                .key(key),
            );
        }
    }
}

/// The HDF5 file signature, at offset 0 of every `.h5` shard bale writes.
pub(super) const HDF5_SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Checks a shard whose index is scattered: at `Quick`, the HDF5 signature
/// (HDF5 shards) or the tar's headers against the index (plain tars whose
/// split samples `bale index --allow-split` regrouped); at `Full`, also the
/// whole file against the manifest's checksum and every member's bytes, read
/// at its offset, against its checksum in the index.
pub(super) fn check_scattered(
    r: &mut ShardReport,
    path: &Path,
    entry: &ShardEntry,
    idx: Option<&ShardIndex>,
    level: Level,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let Some(file) = open_or_report(r, path) else {
        return;
    };
    let mut sig = [0u8; 8];
    if entry.compression == Compression::H5
        && (file.read_exact_at(&mut sig, 0).is_err() || &sig != HDF5_SIGNATURE)
    {
        r.push(Problem::new(&name, "shard does not start with the HDF5 signature").offset(0));
    }
    if entry.compression == Compression::None
        && let Some(idx) = idx
    {
        check_regrouped_tar(r, path, idx, visitor);
    }
    if level == Level::Quick {
        // Labels are checked at every level (a few bytes a sample).
        if let Some(idx) = idx {
            for i in 0..idx.len() {
                idx.release_behind(i);
                for m in idx.members(i) {
                    if m.ext != "cls" || m.size > super::quick::MAX_QUICK_LABEL {
                        continue;
                    }
                    let what = match crate::read::read_member(&*file, path, &m) {
                        Ok(d) => member_problem(m.ext, &d),
                        Err(e) => Some(format!("member cannot be read: {e}")),
                    };
                    if let Some(what) = what {
                        r.push(
                            Problem::new(&name, what)
                                .key(idx.key(i))
                                .member(m.ext)
                                .offset(m.offset),
                        );
                    }
                }
            }
        }
        return;
    }
    if let Some(want) = &entry.shard_xxh3 {
        let mut hasher = Xxh3::new();
        let mut buf = vec![0u8; STREAM_BUFFER];
        let mut at = 0u64;
        let read = loop {
            match file.read_at(&mut buf, at) {
                Ok(0) => break Ok(()),
                Ok(k) => {
                    hasher.update(&buf[..k]);
                    at += k as u64;
                    r.bytes_read += k as u64;
                    visitor.progress(k as u64);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        if let Err(e) = read {
            r.push(Problem::new(&name, format!("shard cannot be read: {e}")).offset(at));
        }
        let got = hex64(hasher.digest());
        if &got != want {
            r.push(Problem::new(
                &name,
                format!(
                    "shard checksum mismatch: the manifest records {want}, the file hashes to {got}"
                ),
            ));
        }
    }
    let Some(idx) = idx else { return };
    for i in 0..idx.len() {
        idx.release_behind(i);
        let key = idx.key(i);
        r.samples_checked += 1;
        for m in idx.members(i) {
            r.members_checked += 1;
            let data = match crate::read::read_member(&*file, path, &m) {
                Ok(d) => d,
                Err(e) => {
                    r.push(
                        Problem::new(&name, format!("member cannot be read: {e}"))
                            .key(key)
                            .member(m.ext)
                            .offset(m.offset),
                    );
                    continue;
                }
            };
            if idx.has_checksums() && checksum(&data) != m.checksum {
                r.push(
                    Problem::new(
                        &name,
                        format!(
                            "member bytes do not match the index checksum {:016x}",
                            m.checksum
                        ),
                    )
                    .key(key)
                    .member(m.ext)
                    .offset(m.offset),
                );
                continue;
            }
            if let Some(what) =
                member_problem(m.ext, &data).or_else(|| visitor.member(key, m.ext, &data))
            {
                r.push(
                    Problem::new(&name, what)
                        .key(key)
                        .member(m.ext)
                        .offset(m.offset),
                );
            }
        }
    }
}
