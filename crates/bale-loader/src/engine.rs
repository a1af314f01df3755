//! The threads behind an epoch: each sample is one task (read, then the
//! work of `render.rs`: decode the crop, resize, pad, flip, convert, move
//! the targets, written into its slots of the batch's arrays); batches are
//! handed out in order; at most `prefetch` batches are decoded ahead of the
//! one being consumed.

use std::cell::UnsafeCell;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use bale_reader::ForkGuard;
use crossbeam_channel::{Receiver, Sender};

use crate::batch::{Array, Batch, Boxes, BufferPool, Element, Elements, Skipped};
use crate::error::{LoaderError, Result};
use crate::options::{Dtype, LabelSource, LoaderOptions, MaskDtype, OnError};
use crate::pipeline::Output;
use crate::render::{self, Done, ImagePtr, LabelPtr, MaskPtr, Slots, Work};
use crate::sources::{Ids, Sources};

/// The arrays of a batch being decoded.
struct Parts {
    images: Array,
    labels: Option<Array>,
    masks: Vec<(String, Array)>,
    boxes: Option<Boxes>,
}

/// One batch being decoded.
struct Job {
    number: u64,
    indices: Vec<u64>,
    /// The arrays; their element storage is written through `slots` by the
    /// tasks, one slot each, and taken only once `remaining` is 0.
    parts: UnsafeCell<Option<Parts>>,
    slots: Slots,
    results: Mutex<Vec<Option<Done>>>,
    remaining: AtomicUsize,
}

// SAFETY: a `Job` is shared by the tasks of its batch and the consumer. Each
// task writes only its own slot of each array (disjoint ranges of the
// buffers, through the raw pointers taken before any task started, while
// the buffers are neither moved nor resized), and the consumer reads the
// arrays only after every task has finished (`remaining` reaches 0 with
// release/acquire ordering).
unsafe impl Send for Job {}
// SAFETY: as above.
unsafe impl Sync for Job {}

/// What the threads share.
pub(crate) struct Shared {
    pub ds: Sources,
    pub opts: LoaderOptions,
    /// The members an image may be in, in order of preference.
    pub image: Vec<String>,
    /// Values per `.npy` label (1 otherwise).
    pub classes: usize,
    pub epoch: u64,
    /// The number in the epoch of the first batch (a resumed epoch's is not 0).
    pub first_batch: u64,
    pub pool: Arc<BufferPool>,
}

impl Shared {
    fn work(&self) -> Work<'_> {
        Work {
            opts: &self.opts,
            image: &self.image,
            classes: self.classes,
            output: Output::of(&self.opts),
            epoch: self.epoch,
        }
    }

    /// The arrays of a batch of `n` samples, and where its tasks write.
    fn arrays(&self, n: usize) -> Result<(Parts, Slots)> {
        let opts = &self.opts;
        let (h, w) = (opts.size.0 as usize, opts.size.1 as usize);
        let pool = &self.pool;
        let shape = if opts.channels_first {
            [n, 3, h, w]
        } else {
            [n, h, w, 3]
        };
        let element = match opts.dtype {
            Dtype::U8 => Element::U8,
            Dtype::F32 => Element::F32,
            Dtype::F16 => Element::F16,
        };
        let mut images = pool.take(element, &shape)?;
        let image = match &mut images.data {
            Elements::U8(v) => ImagePtr::U8(v.as_mut_ptr()),
            Elements::F32(v) => ImagePtr::F32(v.as_mut_ptr()),
            Elements::F16(v) => ImagePtr::F16(v.as_mut_ptr()),
            Elements::I64(_) => unreachable!("images are never int64"),
        };
        let (labels, label_ptr) = match opts.label {
            LabelSource::None => (None, LabelPtr::None),
            LabelSource::Npy { .. } => {
                let mut a = pool.take(Element::F32, &[n, self.classes])?;
                let p = LabelPtr::Vector(a.data.as_mut_ptr().cast());
                (Some(a), p)
            }
            LabelSource::Cls | LabelSource::Json { .. } => {
                let mut a = pool.take(Element::I64, &[n])?;
                let p = LabelPtr::Class(a.data.as_mut_ptr().cast());
                (Some(a), p)
            }
        };
        let mut masks = Vec::with_capacity(opts.masks.len());
        let mut mask_ptrs = Vec::with_capacity(opts.masks.len());
        for m in &opts.masks {
            let element = match opts.mask_dtype {
                MaskDtype::U8 => Element::U8,
                MaskDtype::I64 => Element::I64,
            };
            let mut a = pool.take(element, &[n, h, w])?;
            let base = a.data.as_mut_ptr();
            mask_ptrs.push(match opts.mask_dtype {
                MaskDtype::U8 => MaskPtr::U8(base),
                MaskDtype::I64 => MaskPtr::I64(base.cast()),
            });
            masks.push((m.clone(), a));
        }
        let (boxes, box_ptrs) = if opts.boxes.is_some() {
            let max = opts.max_boxes;
            let mut coords = pool.take(Element::F32, &[n, max, 4])?;
            let mut labels = pool.take(Element::I64, &[n, max])?;
            let mut counts = pool.take(Element::I64, &[n])?;
            let ptrs = (
                coords.data.as_mut_ptr().cast(),
                labels.data.as_mut_ptr().cast(),
                counts.data.as_mut_ptr().cast(),
            );
            let boxes = Boxes {
                coords,
                labels,
                counts,
            };
            (Some(boxes), Some(ptrs))
        } else {
            (None, None)
        };
        Ok((
            Parts {
                images,
                labels,
                masks,
                boxes,
            },
            Slots {
                image,
                labels: label_ptr,
                masks: mask_ptrs,
                boxes: box_ptrs,
            },
        ))
    }
}

/// The batches of one epoch, in order; see [`crate::Loader::epoch`].
pub struct Batches {
    /// The process that started the threads.
    fork: ForkGuard,
    shared: Arc<Shared>,
    order: Ids,
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
    /// A batch's arrays that could not be had: the next batch is this error.
    failed: Option<LoaderError>,
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
    pub(crate) fn start(shared: Shared, order: Ids, samples: u64) -> Result<Self> {
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
            failed: None,
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

    /// Dispatches batches until `prefetch + 1` are in flight (or their
    /// arrays cannot be had: then `failed` says why).
    fn top_up(&mut self) {
        let opts = &self.shared.opts;
        while self.failed.is_none()
            && (self.pending.len() as u64) < (opts.prefetch as u64 + 1).min(self.batches_left)
        {
            let indices: Vec<u64> = self.order.by_ref().take(opts.batch_size).collect();
            if indices.is_empty() {
                break;
            }
            let n = indices.len();
            let (parts, slots) = match self.shared.arrays(n) {
                Ok(a) => a,
                Err(e) => {
                    self.failed = Some(e);
                    break;
                }
            };
            let job = Arc::new(Job {
                number: self.next_number + self.pending.len() as u64,
                indices,
                parts: UnsafeCell::new(Some(parts)),
                slots,
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
        let Some(job) = self.pending.front().cloned() else {
            // Nothing in flight: the arrays of the next batch could not be had.
            return self.failed.take().map(Err);
        };
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
        // so nothing else touches the arrays any more.
        let Some(parts) = (unsafe { (*job.parts.get()).take() }) else {
            return Some(Err(LoaderError::Thread(
                "a batch was handed out twice".into(),
            )));
        };
        let slots = std::mem::take(&mut *job.results.lock().unwrap_or_else(|p| p.into_inner()));
        let mut batch = Batch {
            images: parts.images,
            labels: parts.labels,
            indices: Vec::new(),
            masks: parts.masks,
            boxes: parts.boxes,
            fields: Vec::new(),
            skipped: Vec::new(),
        };
        let (indices, fields, skipped) =
            match assemble(&self.shared.opts, &job.indices, &mut batch, slots) {
                Ok(a) => a,
                Err(e) => return Some(Err(e)),
            };
        batch.indices = indices;
        batch.fields = fields;
        batch.skipped = skipped;
        // The last stage: mixing the batch as it comes out.
        let sh = &self.shared;
        if let Some(p) = crate::mix::mix_params(&sh.opts, sh.epoch, sh.first_batch + job.number)
            && let Err(e) = crate::mix::apply(&sh.opts, &p, &mut batch, &sh.pool)
        {
            return Some(Err(e));
        }
        Some(Ok(batch))
    }
}

type Assembled = (Vec<u64>, Vec<(String, Vec<Option<Vec<u8>>>)>, Vec<Skipped>);

/// The indices, fields and skipped samples of a finished batch; a skipped
/// sample's slots are removed from every array (later samples move down).
fn assemble(
    opts: &LoaderOptions,
    indices: &[u64],
    batch: &mut Batch,
    slots: Vec<Option<Done>>,
) -> Result<Assembled> {
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
            if opts.on_error == OnError::Fail || !e.is_sample_damage() {
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
            batch.arrays_mut().for_each(|a| a.move_sample(k, to));
        }
        kept.push(indices[k]);
        for ((_, column), value) in fields.iter_mut().zip(slot.fields) {
            column.push(value);
        }
    }
    if kept.len() != indices.len() {
        batch.arrays_mut().for_each(|a| a.truncate(kept.len()));
    }
    Ok((kept, fields, skipped))
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
    let work = sh.work();
    for (job, k) in rx {
        let slot = if stop.load(Ordering::Relaxed) {
            Done {
                key: String::new(),
                fields: Vec::new(),
                error: Some(LoaderError::Thread("stopped".into())),
            }
        } else {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                decode_sample(sh, &work, &job, k)
            }));
            r.unwrap_or_else(|_| Done {
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

/// Reads sample `k` of `job` and does its work into its slots.
fn decode_sample(sh: &Shared, work: &Work<'_>, job: &Job, k: usize) -> Done {
    let index = job.indices[k];
    let mut done = Done {
        key: String::new(),
        fields: Vec::new(),
        error: None,
    };
    let sample = match sh.ds.get(index) {
        Ok(s) => s,
        Err(e) => {
            done.error = Some(e.into());
            return done;
        }
    };
    done.key = sample.key().to_owned();
    if !sh.opts.fields.is_empty() {
        done.fields = sh
            .opts
            .fields
            .iter()
            .map(|f| sample.field(f).map(<[u8]>::to_vec))
            .collect();
    }
    // SAFETY: `job.slots` point to the arrays of a batch of
    // `job.indices.len() > k` samples, and slot `k` is this task's alone
    // (see `Job`).
    if let Err(e) = unsafe { render::render_sample(work, &sample, &job.slots, k) } {
        done.error = Some(e);
    }
    if done.error.is_none()
        && let LabelPtr::Class(base) = job.slots.labels
        && sh.opts.label == LabelSource::Cls
        // SAFETY: slot k of the (batch,) labels, this task's alone.
        && let Err(what) = sh.ds.map_label(index, unsafe { &mut *base.add(k) })
    {
        done.error = Some(LoaderError::Target {
            index,
            key: sample.key().to_owned(),
            member: "cls".to_owned(),
            what,
        });
    }
    if done.error.is_none()
        && let (Some(m), LabelPtr::Class(base)) = (sh.opts.mix, job.slots.labels)
    {
        // SAFETY: slot k of the (batch,) labels, this task's alone.
        let label = unsafe { *base.add(k) };
        if let Err(what) = crate::mix::check_label(label, m.num_classes) {
            done.error = Some(LoaderError::Target {
                index,
                key: sample.key().to_owned(),
                member: sh.opts.label.member().unwrap_or("cls").to_owned(),
                what,
            });
        }
    }
    // Damage a skip would leave out is the sample's own only in the file
    // the dataset opened: bytes of a shard written over under its map are
    // another file's, and the next samples would fail too.
    if done
        .error
        .as_ref()
        .is_some_and(LoaderError::is_sample_damage)
        && let Err(e) = sh.ds.check_unchanged(index)
    {
        done.error = Some(e.into());
    }
    done
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
            what: "bad zstd frame".into(),
        }));
        assert!(damaged.is_sample_damage());
        let refused = LoaderError::Reader(R::Storage(bale_storage::StorageError::Request {
            url: "s3://b/ds/shard-000000.tar".into(),
            range: Some(0..512),
            status: Some(503),
            what: "HTTP 503".into(),
        }));
        assert!(!refused.is_sample_damage());
        for storage in [
            R::ShardReplaced {
                path: "s.tar".into(),
            },
            R::ShardRemoved {
                path: "s.tar".into(),
            },
            R::IndexDisagrees {
                path: "s.tar".into(),
                offset: 0,
                what: "outside".into(),
            },
            R::Format(bale_format::FormatError::Truncated {
                path: "s.tar".into(),
                what: "sample data",
                needed: 1024,
                len: 512,
            }),
            R::Format(bale_format::FormatError::Io {
                path: "s.tar".into(),
                source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
            }),
        ] {
            let e = LoaderError::Reader(storage);
            assert!(!e.is_sample_damage(), "{e}");
        }
    }
}
