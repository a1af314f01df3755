//! The threads behind an epoch: each sample is one task (read, decode the
//! crop, resize, flip, convert, written into its slot of the batch buffer);
//! batches are handed out in order; at most `prefetch` batches are decoded
//! ahead of the one being consumed.

use std::cell::{RefCell, UnsafeCell};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bale_image::region::RegionDecoder;
use bale_reader::{Dataset, ForkGuard, OrderIter};
use crossbeam_channel::{Receiver, Sender};
use half::f16;

use crate::augment::sample_params;
use crate::batch::{Batch, BufferPool, ImageData, Images, Skipped};
use crate::error::{LoaderError, Result};
use crate::options::{Dtype, LoaderOptions, OnError};

/// Where a batch's images are written: the element pointer of its buffer.
#[derive(Debug, Clone, Copy)]
enum Slots {
    U8(*mut u8),
    F32(*mut f32),
    F16(*mut f16),
}

/// One batch being decoded.
struct Job {
    number: u64,
    indices: Vec<u64>,
    /// The buffer; its element storage is written through `slots` by the
    /// tasks, one slot each, and taken only once `remaining` is 0.
    images: UnsafeCell<Option<Images>>,
    slots: Slots,
    per_image: usize,
    results: Mutex<Vec<Option<Slot>>>,
    remaining: AtomicUsize,
}

// SAFETY: a `Job` is shared by the tasks of its batch and the consumer. Each
// task writes only its own slot (a disjoint range of the buffer, through the
// raw pointer taken before any task started, while the buffer is neither
// moved nor resized), and the consumer reads the buffer only after every task
// has finished (`remaining` reaches 0 with release/acquire ordering).
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

/// What one task produced besides its pixels.
#[derive(Debug)]
struct Slot {
    label: i64,
    key: String,
    fields: Vec<Option<Vec<u8>>>,
    error: Option<LoaderError>,
}

/// What the threads share.
pub(crate) struct Shared {
    pub ds: Dataset,
    pub opts: LoaderOptions,
    pub image: String,
    pub epoch: u64,
    pub pool: Arc<BufferPool>,
}

thread_local! {
    /// Pixels resized before they are converted (channels first, floats).
    static TEMP: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The batches of one epoch, in order; see [`crate::Loader::epoch`].
pub struct Batches {
    /// The process that started the threads.
    fork: ForkGuard,
    shared: Arc<Shared>,
    order: OrderIter,
    tasks: Option<Sender<(Arc<Job>, usize)>>,
    done: Receiver<u64>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
    /// Batches dispatched and not yet handed out, in order.
    pending: std::collections::VecDeque<Arc<Job>>,
    /// Batch numbers whose tasks have all finished.
    finished: BTreeSet<u64>,
    next_number: u64,
    batches_left: u64,
}

impl std::fmt::Debug for Batches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("epoch", &self.shared.epoch)
            .field("batches_left", &self.batches_left)
            .finish_non_exhaustive()
    }
}

impl Batches {
    pub(crate) fn start(shared: Shared, order: OrderIter, samples: u64) -> Result<Self> {
        let shared = Arc::new(shared);
        let threads = match shared.opts.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let b = shared.opts.batch_size as u64;
        let batches = if shared.opts.drop_last {
            samples / b
        } else {
            samples.div_ceil(b)
        };
        let (task_tx, task_rx) = crossbeam_channel::unbounded::<(Arc<Job>, usize)>();
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<u64>();
        let stop = Arc::new(AtomicBool::new(false));
        let mut handles = Vec::with_capacity(threads);
        for t in 0..threads {
            let rx = task_rx.clone();
            let tx = done_tx.clone();
            let sh = Arc::clone(&shared);
            let st = Arc::clone(&stop);
            let h = std::thread::Builder::new()
                .name(format!("bale-loader-{t}"))
                .spawn(move || worker(&sh, &rx, &tx, &st))
                .map_err(|e| LoaderError::Thread(e.to_string()))?;
            handles.push(h);
        }
        Ok(Batches {
            fork: ForkGuard::new(),
            shared,
            order,
            tasks: Some(task_tx),
            done: done_rx,
            threads: handles,
            stop,
            pending: std::collections::VecDeque::new(),
            finished: BTreeSet::new(),
            next_number: 0,
            batches_left: batches,
        })
    }

    /// Batches still to come in this epoch.
    pub fn remaining(&self) -> u64 {
        self.batches_left
    }

    /// Waits at most `within` for the next batch: true when [`Iterator::next`]
    /// will not wait (the batch is decoded, or the epoch is over, or what
    /// comes is an error). A caller that must stay responsive (Python, to
    /// Ctrl-C) waits in such slices and does its checks between them.
    pub fn wait(&mut self, within: std::time::Duration) -> bool {
        if self.batches_left == 0 || self.fork.in_child() {
            return true;
        }
        self.top_up();
        let Some(number) = self.pending.front().map(|j| j.number) else {
            return true;
        };
        let deadline = std::time::Instant::now() + within;
        while !self.finished.contains(&number) {
            match self.done.recv_deadline(deadline) {
                Ok(n) => {
                    self.finished.insert(n);
                }
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => return false,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return true,
            }
        }
        true
    }

    /// Dispatches batches until `prefetch + 1` are in flight.
    fn top_up(&mut self) {
        let opts = &self.shared.opts;
        let (h, w) = (opts.size.0 as usize, opts.size.1 as usize);
        let per_image = h * w * 3;
        while (self.pending.len() as u64) < (opts.prefetch as u64 + 1).min(self.batches_left) {
            let indices: Vec<u64> = self.order.by_ref().take(opts.batch_size).collect();
            if indices.is_empty() {
                break;
            }
            let n = indices.len();
            let shape = if opts.channels_first {
                [n, 3, h, w]
            } else {
                [n, h, w, 3]
            };
            let mut images = self.shared.pool.take(opts.dtype, n * per_image, shape);
            let slots = match &mut images.data {
                ImageData::U8(v) => Slots::U8(v.as_mut_ptr()),
                ImageData::F32(v) => Slots::F32(v.as_mut_ptr()),
                ImageData::F16(v) => Slots::F16(v.as_mut_ptr()),
            };
            let job = Arc::new(Job {
                number: self.next_number + self.pending.len() as u64,
                indices,
                images: UnsafeCell::new(Some(images)),
                slots,
                per_image,
                results: Mutex::new((0..n).map(|_| None).collect()),
                remaining: AtomicUsize::new(n),
            });
            if let Some(tx) = &self.tasks {
                for k in 0..n {
                    // The workers live as long as `self`.
                    let _ = tx.send((Arc::clone(&job), k));
                }
            }
            self.pending.push_back(job);
        }
    }

    fn next_batch(&mut self) -> Option<Result<Batch>> {
        if self.batches_left == 0 {
            return None;
        }
        // In a forked child the decoding threads are gone: waiting for them
        // would never end.
        if let Err(e) = self.fork.check() {
            return Some(Err(LoaderError::Reader(e)));
        }
        self.top_up();
        let job = self.pending.front()?.clone();
        while !self.finished.remove(&job.number) {
            match self.done.recv() {
                Ok(n) => {
                    self.finished.insert(n);
                }
                Err(_) => {
                    return Some(Err(LoaderError::Thread(
                        "the decoding threads stopped".into(),
                    )));
                }
            }
        }
        self.pending.pop_front();
        self.next_number += 1;
        self.batches_left -= 1;
        if job.remaining.load(Ordering::Acquire) != 0 {
            return Some(Err(LoaderError::Thread(
                "a batch was handed out before its samples".into(),
            )));
        }
        // SAFETY: every task of this batch has finished (`remaining` is 0,
        // read with acquire ordering after the release by the last task),
        // so nothing else touches the buffer any more.
        let Some(mut images) = (unsafe { (*job.images.get()).take() }) else {
            return Some(Err(LoaderError::Thread(
                "a batch was handed out twice".into(),
            )));
        };
        let slots = std::mem::take(&mut *job.results.lock().unwrap_or_else(|p| p.into_inner()));
        Some(
            assemble(&self.shared.opts, &job.indices, &mut images, slots).map(
                |(labels, indices, fields, skipped)| Batch {
                    images,
                    labels,
                    indices,
                    fields,
                    skipped,
                },
            ),
        )
    }
}

type Assembled = (
    Vec<i64>,
    Vec<u64>,
    Vec<(String, Vec<Option<Vec<u8>>>)>,
    Vec<Skipped>,
);

/// The labels, indices, fields and skipped samples of a finished batch; a
/// skipped sample's image is removed (later images move down).
fn assemble(
    opts: &LoaderOptions,
    indices: &[u64],
    images: &mut Images,
    slots: Vec<Option<Slot>>,
) -> Result<Assembled> {
    let mut labels = Vec::with_capacity(slots.len());
    let mut kept = Vec::with_capacity(slots.len());
    let mut fields: Vec<(String, Vec<Option<Vec<u8>>>)> = opts
        .fields
        .iter()
        .map(|f| (f.clone(), Vec::new()))
        .collect();
    let mut skipped = Vec::new();
    for (k, slot) in slots.into_iter().enumerate() {
        let Some(slot) = slot else {
            return Err(LoaderError::Thread(format!(
                "sample {} of the batch was never decoded",
                indices[k]
            )));
        };
        if let Some(e) = slot.error {
            if opts.on_error == OnError::Fail || !is_sample_error(&e) {
                return Err(e);
            }
            skipped.push(Skipped {
                index: indices[k],
                key: slot.key,
                error: e.to_string(),
            });
            continue;
        }
        let to = kept.len();
        if to != k {
            images.move_image(k, to);
        }
        kept.push(indices[k]);
        labels.push(slot.label);
        for ((_, column), value) in fields.iter_mut().zip(slot.fields) {
            column.push(value);
        }
    }
    if kept.len() != indices.len() {
        images.truncate(kept.len());
    }
    Ok((labels, kept, fields, skipped))
}

/// Whether an error concerns one sample's bytes (what `OnError::Skip` skips).
fn is_sample_error(e: &LoaderError) -> bool {
    use bale_reader::ReaderError as R;
    match e {
        LoaderError::Image { .. } | LoaderError::MissingField { .. } => true,
        // A shard replaced under the loader, a process forked from it, or
        // object storage failing (unreachable, refusing, or answering with
        // another object) is no damaged sample: skipping would lose every
        // sample after it, and an epoch against a store that refuses every
        // request would end at once with nothing read.
        LoaderError::Reader(R::ShardReplaced { .. } | R::Forked { .. } | R::Storage(_)) => false,
        LoaderError::Reader(_) => true,
        _ => false,
    }
}

impl Iterator for Batches {
    type Item = Result<Batch>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_batch()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::try_from(self.batches_left).unwrap_or(usize::MAX);
        (n, Some(n))
    }
}

impl Drop for Batches {
    fn drop(&mut self) {
        if self.fork.in_child() {
            // A forked child: the threads (and any lock they held) are the
            // parent's; joining them would never return, nor might dropping
            // what they touched (the batches in flight, the channels).
            self.threads.drain(..).for_each(std::mem::forget);
            std::mem::forget(std::mem::take(&mut self.pending));
            std::mem::forget(self.tasks.take());
            std::mem::forget(std::mem::replace(
                &mut self.done,
                crossbeam_channel::never(),
            ));
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        self.tasks = None;
        for h in self.threads.drain(..) {
            let _ = h.join();
        }
    }
}

fn worker(sh: &Shared, rx: &Receiver<(Arc<Job>, usize)>, done: &Sender<u64>, stop: &AtomicBool) {
    for (job, k) in rx {
        let slot = if stop.load(Ordering::Relaxed) {
            Slot {
                label: -1,
                key: String::new(),
                fields: Vec::new(),
                error: Some(LoaderError::Thread("stopped".into())),
            }
        } else {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                decode_sample(sh, &job, k)
            }));
            r.unwrap_or_else(|_| Slot {
                label: -1,
                key: String::new(),
                fields: Vec::new(),
                error: Some(LoaderError::Thread(format!(
                    "decoding sample {} panicked",
                    job.indices[k]
                ))),
            })
        };
        job.results.lock().unwrap_or_else(|p| p.into_inner())[k] = Some(slot);
        if job.remaining.fetch_sub(1, Ordering::AcqRel) == 1 && done.send(job.number).is_err() {
            return;
        }
    }
}

/// Reads sample `k` of `job`, decodes its crop into its slot.
fn decode_sample(sh: &Shared, job: &Job, k: usize) -> Slot {
    let index = job.indices[k];
    let mut slot = Slot {
        label: -1,
        key: String::new(),
        fields: Vec::new(),
        error: None,
    };
    let sample = match sh.ds.get(index) {
        Ok(s) => s,
        Err(e) => {
            slot.error = Some(e.into());
            return slot;
        }
    };
    slot.key = sample.key().to_owned();
    slot.label = sample.label().unwrap_or(-1);
    slot.fields = sh
        .opts
        .fields
        .iter()
        .map(|f| sample.field(f).map(<[u8]>::to_vec))
        .collect();
    let Some(bytes) = sample.field(&sh.image) else {
        let has: Vec<&str> = sample.fields().map(|(e, _)| e).collect();
        slot.error = Some(LoaderError::MissingField {
            index,
            key: slot.key.clone(),
            ext: sh.image.clone(),
            has: has.join(", "),
        });
        return slot;
    };
    if let Err(e) = render(sh, job, k, index, bytes) {
        slot.error = Some(LoaderError::Image {
            index,
            key: slot.key.clone(),
            source: e,
        });
    }
    slot
}

/// Decodes, crops, resizes, flips and converts one image into slot `k`.
fn render(
    sh: &Shared,
    job: &Job,
    k: usize,
    index: u64,
    bytes: &[u8],
) -> std::result::Result<(), bale_image::ImageError> {
    let opts = &sh.opts;
    let (out_h, out_w) = opts.size;
    let (w, h) = bale_image::region::dimensions(&sh.image, bytes)?;
    let params = sample_params(opts, sh.epoch, index, w, h);
    let per = job.per_image;
    let direct = opts.dtype == Dtype::U8 && !opts.channels_first;
    let write_hwc = |hwc: &mut [u8]| {
        RegionDecoder::with(|d| {
            d.set_max_pixels(opts.max_pixels);
            d.crop_resize_into(
                &sh.image,
                bytes,
                params.crop,
                out_w,
                out_h,
                opts.dct_scaling,
                hwc,
            )
        })?;
        if params.flip {
            flip_rows(hwc, out_w as usize);
        }
        Ok::<(), bale_image::ImageError>(())
    };
    if direct {
        let Slots::U8(base) = job.slots else {
            unreachable!("a u8 batch has u8 slots")
        };
        // SAFETY: slot `k` of a buffer of `indices.len() * per` elements,
        // written by this task alone (see `Job`).
        let out = unsafe { std::slice::from_raw_parts_mut(base.add(k * per), per) };
        return write_hwc(out);
    }
    TEMP.with(|t| {
        let mut tmp = t.borrow_mut();
        tmp.resize(per, 0);
        write_hwc(&mut tmp)?;
        let plane = out_h as usize * out_w as usize;
        let at = |p: usize, c: usize| {
            if opts.channels_first {
                c * plane + p
            } else {
                p * 3 + c
            }
        };
        match job.slots {
            Slots::U8(base) => {
                // SAFETY: as above.
                let out = unsafe { std::slice::from_raw_parts_mut(base.add(k * per), per) };
                for p in 0..plane {
                    for c in 0..3 {
                        out[at(p, c)] = tmp[p * 3 + c];
                    }
                }
            }
            Slots::F32(base) => {
                // SAFETY: as above.
                let out = unsafe { std::slice::from_raw_parts_mut(base.add(k * per), per) };
                let (scale, shift) = normalisation(opts);
                for p in 0..plane {
                    for c in 0..3 {
                        out[at(p, c)] = f32::from(tmp[p * 3 + c]) * scale[c] + shift[c];
                    }
                }
            }
            Slots::F16(base) => {
                // SAFETY: as above.
                let out = unsafe { std::slice::from_raw_parts_mut(base.add(k * per), per) };
                let (scale, shift) = normalisation(opts);
                for p in 0..plane {
                    for c in 0..3 {
                        out[at(p, c)] =
                            f16::from_f32(f32::from(tmp[p * 3 + c]) * scale[c] + shift[c]);
                    }
                }
            }
        }
        Ok(())
    })
}

/// `(x / 255 - mean) / std` as `x * scale + shift`, per channel.
fn normalisation(opts: &LoaderOptions) -> ([f32; 3], [f32; 3]) {
    let mut scale = [0.0; 3];
    let mut shift = [0.0; 3];
    for c in 0..3 {
        scale[c] = 1.0 / (255.0 * opts.std[c]);
        shift[c] = -opts.mean[c] / opts.std[c];
    }
    (scale, shift)
}

/// Flips RGB rows of `width` pixels left-right, in place.
fn flip_rows(pixels: &mut [u8], width: usize) {
    for row in pixels.chunks_exact_mut(width * 3) {
        let (mut a, mut b) = (0, width - 1);
        while a < b {
            for c in 0..3 {
                row.swap(a * 3 + c, b * 3 + c);
            }
            a += 1;
            b -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_samples_own_bytes_are_skippable() {
        use bale_reader::ReaderError as R;
        let damaged = LoaderError::Reader(R::Format(bale_format::FormatError::Corrupt {
            path: "s.tar".into(),
            offset: 512,
            what: "bad".into(),
        }));
        assert!(is_sample_error(&damaged));
        let refused = LoaderError::Reader(R::Storage(bale_storage::StorageError::Request {
            url: "s3://b/ds/shard-000000.tar".into(),
            range: Some(0..512),
            status: Some(503),
            what: "HTTP 503".into(),
        }));
        assert!(!is_sample_error(&refused));
        let replaced = LoaderError::Reader(R::ShardReplaced {
            path: "s.tar".into(),
        });
        assert!(!is_sample_error(&replaced));
    }

    #[test]
    fn rows_flip_left_right() {
        let mut px: Vec<u8> = (0..18).collect();
        flip_rows(&mut px, 3);
        assert_eq!(
            px,
            [6, 7, 8, 3, 4, 5, 0, 1, 2, 15, 16, 17, 12, 13, 14, 9, 10, 11]
        );
    }
}
