//! Many ranges at once ([`get_ranges`]: neighbours coalesced, a bounded
//! number of requests in flight), sequential reads with read-ahead
//! ([`Chunks`]), and positioned reads for parsers ([`WindowReader`]).

use std::collections::VecDeque;
use std::io;
use std::ops::Range;
use std::sync::Mutex;

use bale_format::read_at::ReadAt;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;

use crate::error::Result;
use crate::runtime::{self, Pending};
use crate::store::Object;

/// How a batch of ranges becomes requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coalesce {
    /// Two ranges of one object whose gap is at most this many bytes are
    /// read with one request (the gap is read and dropped).
    pub gap: u64,
    /// A coalesced request never grows past this many bytes (a single
    /// range larger than this is still one request).
    pub max_request: u64,
    /// Requests in flight at once.
    pub in_flight: usize,
}

impl Default for Coalesce {
    /// 256 KiB gaps, 16 MiB requests, 16 in flight.
    fn default() -> Self {
        Coalesce {
            gap: 256 << 10,
            max_request: 16 << 20,
            in_flight: 16,
        }
    }
}

/// One request of a batch: `range` of object `object`, serving `wants`.
#[derive(Debug, Clone)]
struct Merged {
    object: usize,
    range: Range<u64>,
}

/// Groups `wants` (object number, range) into requests; returns them and,
/// for each want, its request and offset in that request's bytes.
fn plan(wants: &[(usize, Range<u64>)], c: Coalesce) -> (Vec<Merged>, Vec<(usize, usize)>) {
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by_key(|&i| (wants[i].0, wants[i].1.start, wants[i].1.end));
    let mut merged: Vec<Merged> = Vec::new();
    let mut at = vec![(0usize, 0usize); wants.len()];
    for i in order {
        let (o, r) = (&wants[i].0, &wants[i].1);
        let joined = merged.last_mut().filter(|m| {
            m.object == *o
                && r.start <= m.range.end.saturating_add(c.gap)
                && r.end.max(m.range.end) - m.range.start <= c.max_request
        });
        match joined {
            Some(m) => {
                m.range.end = m.range.end.max(r.end);
            }
            None => merged.push(Merged {
                object: *o,
                range: r.clone(),
            }),
        }
        let k = merged.len() - 1;
        at[i] = (k, (r.start - merged[k].range.start) as usize);
    }
    (merged, at)
}

/// Each future with its position, boxed for a stream.
fn tagged<T: Send + 'static>(
    futs: Vec<BoxFuture<'static, T>>,
) -> Vec<BoxFuture<'static, (usize, T)>> {
    futs.into_iter()
        .enumerate()
        .map(|(k, f)| -> BoxFuture<'static, (usize, T)> { Box::pin(async move { (k, f.await) }) })
        .collect()
}

/// The future that reads every range of `wants` from `objects`.
fn batch(
    objects: Vec<Object>,
    wants: Vec<(usize, Range<u64>)>,
    c: Coalesce,
) -> Result<BoxFuture<'static, Result<Vec<Bytes>>>> {
    let (merged, at) = plan(&wants, c);
    let futs = merged
        .iter()
        .map(|m| objects[m.object].fetch(m.range.clone()))
        .collect::<Result<Vec<_>>>()?;
    Ok(Box::pin(async move {
        let mut got: Vec<Option<Bytes>> = vec![None; futs.len()];
        let mut stream = futures::stream::iter(tagged(futs)).buffer_unordered(c.in_flight.max(1));
        while let Some((k, r)) = stream.next().await {
            got[k] = Some(r?);
        }
        Ok(wants
            .iter()
            .zip(at)
            .map(|((_, r), (k, off))| {
                let len = (r.end - r.start) as usize;
                got[k]
                    .as_ref()
                    .map_or_else(Bytes::new, |b| b.slice(off..off + len))
            })
            .collect())
    }))
}

/// Reads every range of `wants` (object number in `objects`, byte range),
/// coalescing neighbours and keeping at most `c.in_flight` requests in
/// flight; returns each range's bytes, in the order of `wants` (slices of
/// the coalesced answers: no copy).
///
/// # Errors
/// The first request error (naming the URL, the coalesced range and the status).
pub fn get_ranges(
    objects: &[Object],
    wants: &[(usize, Range<u64>)],
    c: Coalesce,
) -> Result<Vec<Bytes>> {
    runtime::block_on(batch(objects.to_vec(), wants.to_vec(), c)?)?
}

/// Starts [`get_ranges`] in the background.
///
/// # Errors
/// [`crate::StorageError::Runtime`] when the runtime cannot start.
pub fn start_ranges(
    objects: Vec<Object>,
    wants: Vec<(usize, Range<u64>)>,
    c: Coalesce,
) -> Result<Pending<Result<Vec<Bytes>>>> {
    Pending::spawn(batch(objects, wants, c)?)
}

/// Reads whole objects, each when its size lies in its `min..=max` (see
/// [`Object::get_sized`]), at most `in_flight` at once; one result per object.
///
/// # Errors
/// [`crate::StorageError::Runtime`] when the runtime cannot start.
pub fn get_sized_many(
    items: &[(Object, u64, u64)],
    what: &'static str,
    in_flight: usize,
) -> Result<Vec<Result<Bytes>>> {
    let futs = items
        .iter()
        .map(|(o, min, max)| o.sized(*min, *max, what))
        .collect::<Result<Vec<_>>>()?;
    runtime::block_on(async move {
        let mut out: Vec<Option<Result<Bytes>>> = (0..futs.len()).map(|_| None).collect();
        let mut stream = futures::stream::iter(tagged(futs)).buffer_unordered(in_flight.max(1));
        while let Some((k, r)) = stream.next().await {
            out[k] = Some(r);
        }
        out.into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(crate::StorageError::Runtime("a request was lost".into())))
            })
            .collect()
    })
}

/// Bytes `range` of an object, in chunks of `chunk` bytes, in order, with up
/// to `ahead` chunk requests in flight (memory: `ahead * chunk`).
#[derive(Debug)]
pub struct Chunks {
    object: Object,
    next: u64,
    end: u64,
    chunk: u64,
    ahead: usize,
    queue: VecDeque<(u64, Pending<Result<Bytes>>)>,
}

impl Chunks {
    /// The chunks of `range` of `object`.
    pub fn new(object: &Object, range: Range<u64>, chunk: u64, ahead: usize) -> Chunks {
        Chunks {
            object: object.clone(),
            next: range.start,
            end: range.end,
            chunk: chunk.max(1),
            ahead: ahead.max(1),
            queue: VecDeque::new(),
        }
    }
}

impl Iterator for Chunks {
    /// (offset of the chunk, its bytes)
    type Item = Result<(u64, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.queue.len() < self.ahead && self.next < self.end {
            let to = self.end.min(self.next + self.chunk);
            match self.object.start_range(self.next..to) {
                Ok(p) => self.queue.push_back((self.next, p)),
                Err(e) => return Some(Err(e)),
            }
            self.next = to;
        }
        let (at, p) = self.queue.pop_front()?;
        Some(p.wait().and_then(|r| r).map(|b| (at, b)))
    }
}

/// Positioned reads of one object for parsers that read small pieces at
/// growing offsets (tar headers): each request fetches at least `window`
/// bytes, and reads inside the last answer cost nothing.
#[derive(Debug)]
pub struct WindowReader {
    object: Object,
    len: u64,
    window: u64,
    last: Mutex<(u64, Bytes)>,
    fetched: std::sync::atomic::AtomicU64,
}

impl WindowReader {
    /// Reads `object` of `len` bytes with requests of at least `window` bytes.
    pub fn new(object: &Object, len: u64, window: u64) -> WindowReader {
        WindowReader {
            object: object.clone(),
            len,
            window: window.max(1),
            last: Mutex::new((0, Bytes::new())),
            fetched: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Bytes fetched so far.
    pub fn bytes_fetched(&self) -> u64 {
        self.fetched.load(std::sync::atomic::Ordering::Relaxed)
    }
}

impl ReadAt for WindowReader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        if offset >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let want = (buf.len() as u64).min(self.len - offset);
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let (start, bytes) = &*last;
        let covered = offset >= *start && offset + want <= *start + bytes.len() as u64;
        if !covered {
            let end = self.len.min(offset + want.max(self.window));
            let got = self.object.get_range(offset..end)?;
            self.fetched
                .fetch_add(got.len() as u64, std::sync::atomic::Ordering::Relaxed);
            *last = (offset, got);
        }
        let (start, bytes) = &*last;
        let from = (offset - start) as usize;
        let n = want as usize;
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn neighbours_are_coalesced_within_the_gap_and_the_request_cap() {
        let c = Coalesce {
            gap: 10,
            max_request: 100,
            in_flight: 4,
        };
        let wants = vec![
            (0, 50..60),
            (0, 0..10),
            (0, 15..20),
            (1, 20..30),
            (0, 200..210),
            (0, 12..14),
        ];
        let (merged, at) = plan(&wants, c);
        let ranges: Vec<_> = merged.iter().map(|m| (m.object, m.range.clone())).collect();
        assert_eq!(
            ranges,
            vec![(0, 0..20), (0, 50..60), (0, 200..210), (1, 20..30)]
        );
        assert_eq!(at[1], (0, 0));
        assert_eq!(at[2], (0, 15));
        assert_eq!(at[5], (0, 12));
        assert_eq!(at[0], (1, 0));
        let capped = Coalesce {
            max_request: 15,
            ..c
        };
        let (merged, _) = plan(&wants, capped);
        assert_eq!(merged.len(), 5, "0..20 exceeds the cap of 15: {merged:?}");
    }
}
