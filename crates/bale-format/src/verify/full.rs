//! The full check: one sequential pass comparing every tar member and its
//! checksum with the index, and the whole file's xxh3.

use super::*;

/// A reader that hashes and counts what passes through it.
pub(super) struct Hashing<R> {
    pub(super) inner: R,
    pub(super) hasher: Rc<RefCell<Xxh3>>,
    pub(super) pos: Rc<Cell<u64>>,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.borrow_mut().update(&buf[..n]);
        self.pos.set(self.pos.get() + n as u64);
        Ok(n)
    }
}

/// The index position of the tar's sample `key` found out of order: the
/// sample of that key, or with `rules.renamed_splits` the first renamed run
/// (`key~2`, `key~3`, ...) not yet seen when that one was.
pub(super) fn locate(
    idx: &ShardIndex,
    key: &str,
    seen: &[bool],
    rules: NameRules,
) -> Option<usize> {
    let first = idx.find(key);
    if rules.renamed_splits && first.is_none_or(|j| seen[j]) {
        for n in 2u64.. {
            match idx.find(&format!("{key}~{n}")) {
                Some(j) if !seen[j] => return Some(j),
                Some(_) => {}
                None => break,
            }
        }
    }
    first
}

pub(super) fn full_pass(
    r: &mut ShardReport,
    path: &Path,
    entry: &ShardEntry,
    idx: Option<&ShardIndex>,
    rules: NameRules,
    visitor: &mut dyn Visitor,
) {
    let name = r.shard.clone();
    let Some(file) = open_or_report(r, path) else {
        return;
    };
    let dict = if entry.compression == Compression::Zstd {
        match crate::read::read_shard_zstd_dict(&*file, path) {
            Ok(d) => d,
            Err(e) => {
                r.push(Problem::new(&name, e.to_string()).offset(0));
                return;
            }
        }
    } else {
        None
    };
    if let Some(idx) = idx
        && idx.zstd_dict() != dict.as_deref().unwrap_or(&[])
    {
        r.push(
            Problem::new(
                &name,
                "the zstd dictionary at the shard's start differs from the one its index holds",
            )
            .offset(0),
        );
        return;
    }
    let hasher = Rc::new(RefCell::new(Xxh3::new()));
    let pos = Rc::new(Cell::new(0u64));
    let hashing = Hashing {
        inner: crate::read_at::SeqRead::new(file),
        hasher: Rc::clone(&hasher),
        pos: Rc::clone(&pos),
    };
    let buffered = BufReader::with_capacity(STREAM_BUFFER, hashing);
    let reader: Box<dyn Read> = match entry.compression {
        Compression::None => Box::new(buffered),
        Compression::Zstd => match zstd::stream::read::Decoder::with_dictionary(
            buffered,
            dict.as_deref().unwrap_or(&[]),
        ) {
            Ok(d) => Box::new(BufReader::with_capacity(STREAM_BUFFER, d)),
            Err(e) => {
                r.push(Problem::new(
                    &name,
                    format!("zstd decoder cannot start: {e}"),
                ));
                return;
            }
        },
        Compression::H5 => {
            r.push(Problem::new(&name, "an HDF5 shard is not a tar stream"));
            return;
        }
    };
    let mut stream = SampleStream::new(reader, path).strip_dot_slash(true);
    let n = idx.map_or(0, ShardIndex::len);
    let mut seen = vec![false; n];
    let mut next = 0usize;
    let mut reported = 0u64;
    let mut failed_at: Option<u64> = None;
    loop {
        let s = match stream.next_sample() {
            Ok(Some(s)) => s,
            Ok(None) => break,
            Err(e) => {
                let mut p = Problem::new(&name, format!("tar stream cannot be read: {e}"));
                if let Some(o) = error_offset(&e) {
                    p = p.offset(o);
                }
                r.push(p);
                failed_at = Some(error_offset(&e).unwrap_or(0));
                break;
            }
        };
        let delta = pos.get() - reported;
        reported = pos.get();
        r.bytes_read += delta;
        visitor.progress(delta);
        r.samples_checked += 1;
        r.members_checked += s.members.len() as u64;
        let Some(idx) = idx else {
            // No index to compare with: the structure was parsed, members read.
            for m in &s.members {
                if let Some(what) = member_problem(&m.ext, &m.data)
                    .or_else(|| visitor.member(&s.key, &m.ext, &m.data))
                {
                    r.push(
                        Problem::new(&name, what)
                            .key(&s.key)
                            .member(&m.ext)
                            .offset(m.offset),
                    );
                }
            }
            continue;
        };
        let i = if next < n && rules.key_matches(idx.key(next), &s.key) {
            next
        } else {
            match locate(idx, &s.key, &seen, rules) {
                Some(j) => {
                    r.push(
                        Problem::new(
                            &name,
                            format!("sample is out of order: the index lists it as sample {j}, the tar has it at position {next}"),
                        )
                        .key(&s.key)
                        .offset(s.tar_offset),
                    );
                    j
                }
                None => {
                    r.push(
                        Problem::new(&name, "the tar holds a sample the index does not list")
                            .key(&s.key)
                            .offset(s.tar_offset),
                    );
                    continue;
                }
            }
        };
        if seen[i] {
            r.push(
                Problem::new(&name, "the sample appears twice in the tar")
                    .key(&s.key)
                    .offset(s.tar_offset),
            );
            continue;
        }
        seen[i] = true;
        next = i + 1;
        idx.release_behind(i);
        // Problems from here on name the sample by its index key (`K~2` for a renamed run).
        let key = idx.key(i);
        let e = idx.sample(i);
        if s.tar_offset != e.tar_offset {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "sample starts at tar offset {}, the index says {}",
                        s.tar_offset, e.tar_offset
                    ),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        } else if s.tar_end != e.tar_offset + e.tar_len {
            r.push(
                Problem::new(
                    &name,
                    format!(
                        "sample ends at tar offset {}, the index says {}",
                        s.tar_end,
                        e.tar_offset + e.tar_len
                    ),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        }
        let members: Vec<_> = idx.members(i).collect();
        if members.len() != s.members.len() {
            let want: Vec<&str> = members.iter().map(|m| m.ext).collect();
            let got: Vec<&str> = s.members.iter().map(|m| m.ext.as_str()).collect();
            r.push(
                Problem::new(
                    &name,
                    format!("the tar has members {got:?}, the index lists {want:?}"),
                )
                .key(key)
                .offset(s.tar_offset),
            );
        }
        for (m, sm) in members.iter().zip(&s.members) {
            let p = |what: String| {
                Problem::new(&name, what)
                    .key(key)
                    .member(m.ext)
                    .offset(sm.offset)
            };
            if sm.ext != m.ext {
                r.push(p(format!(
                    "tar member is {:?}, the index says {:?}",
                    sm.ext, m.ext
                )));
                continue;
            }
            if sm.offset != m.offset {
                r.push(p(format!(
                    "data at tar offset {}, the index says {}",
                    sm.offset, m.offset
                )));
            }
            if sm.data.len() as u64 != m.size {
                r.push(p(format!(
                    "tar member has {} bytes, the index says {}",
                    sm.data.len(),
                    m.size
                )));
                continue;
            }
            if idx.has_checksums() {
                let actual = checksum(&sm.data);
                if actual != m.checksum {
                    r.push(p(format!(
                        "checksum mismatch: the index records {}, the data hashes to {}",
                        hex64(m.checksum),
                        hex64(actual)
                    )));
                    continue;
                }
            }
            if let Some(what) =
                member_problem(&sm.ext, &sm.data).or_else(|| visitor.member(key, &sm.ext, &sm.data))
            {
                r.push(p(what));
            }
        }
    }
    drop(stream);
    if let Some(idx) = idx {
        let missing: Vec<usize> = (0..n).filter(|&i| !seen[i]).collect();
        if let Some(at) = failed_at {
            if !missing.is_empty() {
                r.push(
                    Problem::new(
                        &name,
                        format!(
                            "{} samples listed in the index were not checked: the tar cannot be read past offset {at}",
                            missing.len()
                        ),
                    )
                    .key(idx.key(missing[0])),
                );
            }
        } else {
            for i in missing {
                r.push(
                    Problem::new(&name, "sample listed in the index is missing from the tar")
                        .key(idx.key(i))
                        .offset(idx.sample(i).tar_offset),
                );
            }
        }
    }
    // Hash the rest of the file (end blocks and anything read-ahead missed).
    let consumed = pos.get();
    let rest = (|| -> io::Result<u64> {
        let f = open_shard(path).map_err(io::Error::other)?;
        let mut buf = vec![0u8; 1 << 16];
        let mut total = 0u64;
        loop {
            let k = f.read_at(&mut buf, consumed + total)?;
            if k == 0 {
                return Ok(total);
            }
            hasher.borrow_mut().update(&buf[..k]);
            total += k as u64;
        }
    })();
    match rest {
        Ok(k) => {
            let delta = consumed + k - reported;
            r.bytes_read += delta;
            visitor.progress(delta);
        }
        Err(e) => {
            r.push(Problem::new(
                &name,
                format!("shard cannot be read to its end: {e}"),
            ));
            return;
        }
    }
    if let Some(want) = &entry.shard_xxh3 {
        let got = hex64(hasher.borrow().digest());
        if &got != want {
            r.push(Problem::new(
                &name,
                format!(
                    "shard checksum mismatch: the manifest records {want}, the file hashes to {got}"
                ),
            ));
        }
    }
}
