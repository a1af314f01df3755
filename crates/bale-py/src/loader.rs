//! `bale._native.Loader`: [`bale_loader::Loader`] for Python. Batches are
//! decoded on the loader's native threads with the GIL released; a batch's
//! images and labels come back as [`BatchBuffer`]s, which `bale.Loader`
//! (python/bale/__init__.py) views as NumPy arrays without a copy.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use bale_image::region::RegionDecoder;
use bale_loader::{Array, Batch, Batches, Loader, LoaderError, LoaderOptions, Resize, ScaleJitter};
use bale_reader::mix::{Mix, Sampling};
use bale_reader::resume::Cut;
use bale_reader::{ForkGuard, Partition};
use pyo3::exceptions::{PyIndexError, PyMemoryError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};

use crate::{FormatError, to_py};

/// Converts a loader error to the Python exception the package documents.
fn loader_err(e: LoaderError) -> PyErr {
    match e {
        LoaderError::Reader(r) => to_py(r),
        LoaderError::Option { .. } | LoaderError::Empty { .. } => {
            PyValueError::new_err(e.to_string())
        }
        LoaderError::Index { .. } => PyIndexError::new_err(e.to_string()),
        LoaderError::OutOfMemory { .. } => PyMemoryError::new_err(e.to_string()),
        other => FormatError::new_err(other.to_string()),
    }
}

/// The native loader; `bale.Loader` wraps it. Its arguments are forwarded
/// into [`LoaderOptions`], which checks them ([`LoaderOptions::check`]):
/// nothing is checked here but what a Rust type cannot hold.
#[pyclass(module = "bale._native", name = "Loader", frozen)]
#[derive(Debug)]
pub struct PyLoader {
    loader: Loader,
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (
        path, *, batch_size, size, crop, scale, ratio, resize, scale_jitter, flip, vflip, fill,
        mask_fill, channels_first, dtype, mean, std, order, buffer, seed, rank, world_size, even,
        threads, prefetch, on_error, image, masks, mask_dtype, boxes, box_labels, max_boxes,
        min_box_size, min_box_area, label, fields, drop_last, dct_scaling, max_pixels,
        storage_options=None, cache_dir=None, cache_limit=None, verify_on_read=false,
        backing="mmap", read_around="auto", augment=None, mix=None, sources=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: String,
        batch_size: usize,
        size: (u32, u32),
        crop: &str,
        scale: (f64, f64),
        ratio: (f64, f64),
        resize: Option<Vec<u32>>,
        scale_jitter: Option<((u32, u32), (f64, f64))>,
        flip: bool,
        vflip: bool,
        fill: [u8; 3],
        mask_fill: i64,
        channels_first: bool,
        dtype: &str,
        mean: [f32; 3],
        std: [f32; 3],
        order: &str,
        buffer: usize,
        seed: u64,
        rank: u64,
        world_size: u64,
        even: bool,
        threads: usize,
        prefetch: usize,
        on_error: &str,
        image: Vec<String>,
        masks: Vec<String>,
        mask_dtype: &str,
        boxes: Option<String>,
        box_labels: Option<String>,
        max_boxes: usize,
        min_box_size: f64,
        min_box_area: f64,
        label: Option<&str>,
        fields: Vec<String>,
        drop_last: bool,
        dct_scaling: bool,
        max_pixels: u64,
        storage_options: Option<std::collections::BTreeMap<String, String>>,
        cache_dir: Option<std::path::PathBuf>,
        cache_limit: Option<u64>,
        verify_on_read: bool,
        backing: &str,
        read_around: &str,
        augment: Option<AugmentArgs<'_>>,
        mix: Option<(f64, f64, usize)>,
        sources: Option<MixArgs<'_>>,
    ) -> PyResult<Self> {
        let opts = LoaderOptions {
            batch_size,
            size,
            resize: match resize.as_deref() {
                None | Some([0]) => Resize::None,
                Some(&[n]) => Resize::Shorter(n),
                Some(&[min, max]) => Resize::Random { min, max },
                Some(other) => {
                    return Err(PyValueError::new_err(format!(
                        "resize must be a side or (min, max), not {other:?}"
                    )));
                }
            },
            scale_jitter: scale_jitter.map(|(target, range)| ScaleJitter { target, range }),
            crop: crop.parse().map_err(loader_err)?,
            scale,
            ratio,
            flip,
            vflip,
            fill,
            mask_fill,
            channels_first,
            dtype: dtype.parse().map_err(loader_err)?,
            mean,
            std,
            order: order
                .parse::<bale_loader::Order>()
                .map_err(loader_err)?
                .with_buffer(buffer),
            seed,
            partition: Partition::new(rank, world_size).with_even(even),
            threads,
            prefetch,
            on_error: on_error.parse().map_err(loader_err)?,
            image,
            masks,
            mask_dtype: mask_dtype.parse().map_err(loader_err)?,
            boxes,
            box_labels,
            max_boxes,
            min_box_size,
            min_box_area,
            label: label.unwrap_or("none").parse().map_err(loader_err)?,
            fields,
            drop_last,
            dct_scaling,
            max_pixels,
            augment: match augment {
                Some(a) => augment_of(a)?,
                None => bale_loader::Augment::default(),
            },
            mix: mix.map(
                |(mixup_alpha, cutmix_alpha, num_classes)| bale_loader::Mix {
                    mixup_alpha,
                    cutmix_alpha,
                    num_classes,
                },
            ),
        };
        // The options first: a wrong one is named before the dataset is opened.
        opts.check().map_err(loader_err)?;
        let options = crate::remote_options(
            bale_reader::DatasetOptions::new()
                .verify_on_read(verify_on_read)
                .backing(crate::parse_backing(backing)?)
                .read_around(crate::parse_read_around(read_around)?),
            storage_options.as_ref(),
            cache_dir.as_ref(),
            cache_limit,
        )?;
        if let Some((datasets, weights, samples, replacement, labels)) = sources {
            let handles: Vec<bale_reader::Dataset> =
                datasets.iter().map(|d| d.get().ds.clone()).collect();
            let sizes: Vec<u64> = handles.iter().map(bale_reader::Dataset::len).collect();
            let sampling = if replacement {
                Sampling::WithReplacement
            } else {
                Sampling::WithoutReplacement
            };
            let mix = Mix::new(&sizes, &weights, samples, sampling).map_err(to_py)?;
            let loader = py
                .detach(|| Loader::mix(handles, mix, labels, opts))
                .map_err(loader_err)?;
            return Ok(PyLoader { loader });
        }
        crate::check_exists(std::path::Path::new(&path))?;
        let ds = py.detach(|| options.open(&path)).map_err(to_py)?;
        let loader = py.detach(|| Loader::new(ds, opts)).map_err(loader_err)?;
        Ok(PyLoader { loader })
    }

    /// Batches per epoch.
    fn __len__(&self) -> PyResult<usize> {
        let n = self.loader.batches_per_epoch().map_err(loader_err)?;
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// Samples this loader's partition yields per epoch.
    fn samples_per_epoch(&self) -> PyResult<u64> {
        self.loader.samples_per_epoch().map_err(loader_err)
    }

    /// The members images are taken from, in order of preference.
    #[getter]
    fn image_members(&self) -> Vec<String> {
        self.loader.image_members().to_vec()
    }

    /// The members of the dataset (its manifest's fields).
    #[getter]
    fn dataset_fields(&self) -> Vec<String> {
        self.loader.dataset().fields().to_vec()
    }

    /// The fingerprint of the dataset's content (`bale_reader::resume::fingerprint`).
    #[getter]
    fn fingerprint(&self) -> String {
        bale_reader::resume::fingerprint(self.loader.dataset().manifest())
    }

    /// Samples in the dataset (the length of an epoch's list, all ranks';
    /// a mix's epoch).
    #[getter]
    fn dataset_len(&self) -> u64 {
        self.loader.epoch_len()
    }

    /// Samples each source of a mix gives per epoch (None: one dataset).
    #[getter]
    fn mix_counts(&self) -> Option<Vec<u64>> {
        self.loader.mixed().map(|m| m.counts().to_vec())
    }

    /// Values per label: the length of a `.npy` label vector, else 1.
    #[getter]
    fn label_classes(&self) -> usize {
        self.loader.label_classes()
    }

    /// The batches of `epoch`, after the first `start` samples.
    fn epoch(&self, py: Python<'_>, epoch: u64, start: u64) -> PyResult<PyBatches> {
        let b = py
            .detach(|| self.loader.epoch_from(epoch, start))
            .map_err(loader_err)?;
        Ok(self.batches(b))
    }

    /// The batches of `epoch` resumed after `stages` (a state's, as
    /// `resume::place` takes them): with the last stage's cut (world size,
    /// `even`) they go on where it stopped; with another, a new stage cuts
    /// what the epoch had left. Returns the batches, the stage's number,
    /// the samples of this rank's share of it already read, and the share.
    fn epoch_resumed(
        &self,
        py: Python<'_>,
        epoch: u64,
        stages: Vec<crate::resume::StageArg>,
    ) -> PyResult<(PyBatches, u64, u64, u64)> {
        let opts = self.loader.options();
        let part = opts.partition;
        let cut = Cut::new(part.world_size, 1, part.even);
        let plan = opts.plan(epoch);
        let len = self.loader.epoch_len();
        let resume = crate::resume::resume_of(stages);
        let (b, place) = py.detach(|| -> PyResult<_> {
            let place = resume
                .place(len, cut, part.rank, 0, plan.mixing())
                .map_err(to_py)?;
            let b = self.loader.epoch_at(epoch, &place).map_err(loader_err)?;
            Ok((b, place))
        })?;
        let total = place.rest.as_ref().map_or(len, |r| r.len());
        Ok((
            self.batches(b),
            place.stage,
            place.start,
            cut.share(total, part.rank, 0),
        ))
    }

    /// Every decision for sample `index` in `epoch`, as a dict: the crop in
    /// the source image's pixels (`top`, `left`, `height`, `width`,
    /// fractional where the scale stage resized), `image_size` and
    /// `scaled_size` (height, width), `crop` (top, left, height, width in the
    /// scaled image's pixels), `padding` (left, top, right, bottom), `size`
    /// (the output's height and width), `flip`, `vflip`, and `flip_first`
    /// (the flips come before the padding and the crop, whose window is in
    /// the flipped image: `crop="random"`; else they flip the output).
    /// `index` is of source `source` of a mix.
    #[pyo3(signature = (epoch, index, source=0))]
    fn sample_params<'py>(
        &self,
        py: Python<'py>,
        epoch: u64,
        index: u64,
        source: usize,
    ) -> PyResult<Bound<'py, PyDict>> {
        let index = match self.loader.id(source, index) {
            Ok(id) => id,
            Err(LoaderError::Index { .. }) if self.loader.mixed().is_none() => index,
            Err(e) => return Err(loader_err(e)),
        };
        let p = py
            .detach(|| self.loader.sample_params(epoch, index))
            .map_err(loader_err)?;
        let b = p.source_box();
        let pad = p.padding();
        let d = PyDict::new(py);
        d.set_item("top", b.y)?;
        d.set_item("left", b.x)?;
        d.set_item("height", b.height)?;
        d.set_item("width", b.width)?;
        d.set_item("image_size", (p.image.1, p.image.0))?;
        d.set_item("scaled_size", (p.scaled.1, p.scaled.0))?;
        d.set_item(
            "crop",
            (p.crop.top, p.crop.left, p.crop.height, p.crop.width),
        )?;
        d.set_item("padding", (pad.left, pad.top, pad.right, pad.bottom))?;
        d.set_item("size", (p.out.1, p.out.0))?;
        d.set_item("flip", p.flip)?;
        d.set_item("vflip", p.vflip)?;
        d.set_item("flip_first", p.flip_first)?;
        let px = self.loader.pixel_params(epoch, index).map_err(loader_err)?;
        let jitter = match px.jitter {
            Some(j) => {
                let jd = PyDict::new(py);
                jd.set_item("order", j.order.to_vec())?;
                jd.set_item("brightness", j.brightness)?;
                jd.set_item("contrast", j.contrast)?;
                jd.set_item("saturation", j.saturation)?;
                jd.set_item("hue", j.hue)?;
                jd.into_any()
            }
            None => py.None().into_bound(py),
        };
        d.set_item("color_jitter", jitter)?;
        let ops: Vec<(&str, f64)> = px.ops.iter().map(|o| (o.name(), o.magnitude())).collect();
        d.set_item("augment", ops)?;
        d.set_item("grayscale", px.grayscale)?;
        d.set_item(
            "erase",
            px.erase.map(|b| (b.top, b.left, b.height, b.width)),
        )?;
        Ok(d)
    }

    /// The mixing decisions of batch `batch` of `epoch` as a dict, None
    /// without mixing: `mix` (`"MixUp"` or `"CutMix"`), `lam` (drawn from
    /// `Beta(alpha, alpha)`), `label_lam` (what labels and MixUp's pixels are
    /// mixed with: CutMix's corrected by its box), `center` (x, y) and `box`
    /// (x1, y1, x2, y2) of CutMix, else None.
    fn batch_params<'py>(
        &self,
        py: Python<'py>,
        epoch: u64,
        batch: u64,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(p) = self.loader.batch_params(epoch, batch).map_err(loader_err)? else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("mix", p.kind.name())?;
        d.set_item("lam", p.lam)?;
        d.set_item("label_lam", p.label_lam)?;
        d.set_item("center", p.center)?;
        d.set_item("box", p.cut.map(|c| (c.x1, c.y1, c.x2, c.y2)))?;
        Ok(Some(d))
    }
}

impl PyLoader {
    fn batches(&self, b: Batches) -> PyBatches {
        let offsets = self.loader.mixed().map(|_| {
            let mut offsets = vec![0u64];
            for ds in self.loader.datasets() {
                offsets.push(offsets[offsets.len() - 1] + ds.len());
            }
            offsets
        });
        PyBatches {
            inner: Mutex::new(b),
            fork: ForkGuard::new(),
            offsets,
        }
    }
}

/// A mix's arguments: `(datasets, weights, samples, replacement, labels)`,
/// `labels` each source's class index mapped onto one class list.
type MixArgs<'py> = (
    Vec<Bound<'py, crate::PyDataset>>,
    Vec<f64>,
    Option<u64>,
    bool,
    Option<Vec<Vec<i64>>>,
);

/// `bale.Loader`'s augmentation arguments: `(color_jitter, auto_augment,
/// random_grayscale, erasing)`, where `color_jitter` is four values, each
/// a number or a `(min, max)` pair, and `erasing` is `(p, scale, ratio,
/// value)` (value None: `"random"`).
type AugmentArgs<'py> = (
    Option<Vec<Bound<'py, PyAny>>>,
    Option<String>,
    f64,
    Option<(f64, (f64, f64), (f64, f64), Option<[f32; 3]>)>,
);

/// The [`bale_loader::Augment`] of `bale.Loader`'s arguments (checked by
/// [`LoaderOptions::check`]).
fn augment_of(
    (jitter, auto, grayscale, erasing): AugmentArgs<'_>,
) -> PyResult<bale_loader::Augment> {
    use bale_loader::{Augment, ColorJitter, EraseValue, Erasing};
    let color_jitter = match jitter {
        None => None,
        Some(v) if v.len() == 4 => {
            // torchvision's _check_input: a number v is [max(0, 1 - v), 1 + v]
            // ([-v, v] for hue), a pair is the range itself.
            let mut ranges = [None; 4];
            for (k, item) in v.iter().enumerate() {
                ranges[k] = if let Ok(x) = item.extract::<f64>() {
                    if x < 0.0 {
                        return Err(PyValueError::new_err(format!(
                            "color_jitter: {x} is negative (a number v is the range 1 - v to 1 + v, -v to v for hue)"
                        )));
                    }
                    let one = ColorJitter::new(x, x, x, x);
                    if k == 3 { one.hue } else { one.brightness }
                } else if let Ok((a, b)) = item.extract::<(f64, f64)>() {
                    let center = if k == 3 { 0.0 } else { 1.0 };
                    (!(a == center && b == center)).then_some((a, b))
                } else {
                    return Err(PyValueError::new_err(format!(
                        "color_jitter: each of the four values is a number or a (min, max) pair, not {item}"
                    )));
                };
            }
            Some(ColorJitter {
                brightness: ranges[0],
                contrast: ranges[1],
                saturation: ranges[2],
                hue: ranges[3],
            })
        }
        Some(v) => {
            return Err(PyValueError::new_err(format!(
                "color_jitter takes four values (brightness, contrast, saturation, hue), not {}",
                v.len()
            )));
        }
    };
    let auto_augment = auto.map(|a| a.parse()).transpose().map_err(loader_err)?;
    Ok(Augment {
        color_jitter,
        auto_augment,
        grayscale,
        erasing: erasing.map(|(p, scale, ratio, value)| Erasing {
            p,
            scale,
            ratio,
            value: value.map_or(EraseValue::Random, EraseValue::Fill),
        }),
    })
}

/// The batches of one epoch: `next()` returns a batch as `batch_to_py`
/// makes it.
#[pyclass(module = "bale._native", name = "Batches", frozen)]
#[derive(Debug)]
pub struct PyBatches {
    inner: Mutex<Batches>,
    /// The process that made it: asked before the lock is taken (a thread
    /// of the parent may have held it at a fork).
    fork: ForkGuard,
    /// A mix's first id of each source, and the total (None: one dataset).
    offsets: Option<Vec<u64>>,
}

impl PyBatches {
    fn lock(&self) -> MutexGuard<'_, Batches> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyBatches {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyTuple>>> {
        self.fork.check().map_err(crate::to_py)?;
        // Waits in slices, so that Ctrl-C is a KeyboardInterrupt within one
        // (the batch being decoded stays the next one).
        while !py.detach(|| self.lock().wait(WAIT_SLICE)) {
            py.check_signals()?;
        }
        let next = py.detach(|| self.lock().next());
        let batch = match next {
            None => return Ok(None),
            Some(Err(e)) => return Err(loader_err(e)),
            Some(Ok(b)) => b,
        };
        batch_to_py(py, batch, self.offsets.as_deref()).map(Some)
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.lock().remaining()).unwrap_or(usize::MAX)
    }
}

/// `(buffer, shape, dtype)` of an array.
fn array_to_py(py: Python<'_>, a: Array) -> PyResult<Bound<'_, PyTuple>> {
    let shape = PyTuple::new(py, a.shape())?;
    let dtype = a.element().name();
    let buf = Bound::new(py, BatchBuffer::new(Owned::Array(a)))?;
    PyTuple::new(
        py,
        [
            buf.into_any(),
            shape.into_any(),
            dtype.into_pyobject(py)?.into_any(),
        ],
    )
}

/// A batch as `(images, labels, indices, masks, boxes, fields, skipped,
/// sources)`: `images` an array's `(buffer, shape, dtype)`, `labels` one
/// or None, `indices` a buffer of uint64, `masks` a list of `(member,
/// array)`, `boxes` None or `(coords, labels, counts)` arrays, `fields` a
/// dict of lists of bytes, `skipped` `(index, key, error, source)` tuples,
/// `sources` a buffer of int64 (a mix: each sample's source, `indices`
/// then in that source; `offsets` its sources' first ids) or None.
fn batch_to_py(py: Python<'_>, batch: Batch, offsets: Option<&[u64]>) -> PyResult<Py<PyTuple>> {
    let Batch {
        images,
        labels,
        mut indices,
        masks,
        boxes,
        fields,
        mut skipped,
    } = batch;
    let locate = |id: u64| -> (i64, u64) {
        match offsets {
            Some(o) => {
                let s = o.partition_point(|&x| x <= id) - 1;
                (s as i64, id - o[s])
            }
            None => (0, id),
        }
    };
    let sources = match offsets {
        Some(_) => {
            let mut sources = Vec::with_capacity(indices.len());
            for id in &mut indices {
                let (s, i) = locate(*id);
                sources.push(s);
                *id = i;
            }
            Bound::new(py, BatchBuffer::new(Owned::I64(sources)))?.into_any()
        }
        None => py.None().into_bound(py),
    };
    let mut skipped_sources = Vec::with_capacity(skipped.len());
    for s in &mut skipped {
        let (src, i) = locate(s.index);
        skipped_sources.push(src);
        s.index = i;
    }
    let images = array_to_py(py, images)?;
    let labels = match labels {
        Some(l) => array_to_py(py, l)?.into_any(),
        None => py.None().into_bound(py),
    };
    let indices = Bound::new(py, BatchBuffer::new(Owned::U64(indices)))?;
    let mask_list = PyList::empty(py);
    for (name, m) in masks {
        mask_list.append((name, array_to_py(py, m)?))?;
    }
    let boxes = match boxes {
        Some(b) => PyTuple::new(
            py,
            [
                array_to_py(py, b.coords)?,
                array_to_py(py, b.labels)?,
                array_to_py(py, b.counts)?,
            ],
        )?
        .into_any(),
        None => py.None().into_bound(py),
    };
    let extra = PyDict::new(py);
    for (name, column) in fields {
        let list = PyList::empty(py);
        for v in column {
            match v {
                Some(b) => list.append(PyBytes::new(py, &b))?,
                None => list.append(py.None())?,
            }
        }
        extra.set_item(name, list)?;
    }
    let skipped = PyList::new(
        py,
        skipped
            .into_iter()
            .zip(skipped_sources)
            .map(|(s, src)| (s.index, s.key, s.error, src)),
    )?;
    let t = PyTuple::new(
        py,
        [
            images.into_any(),
            labels,
            indices.into_any(),
            mask_list.into_any(),
            boxes,
            extra.into_any(),
            skipped.into_any(),
            sources,
        ],
    )?;
    Ok(t.unbind())
}

/// A batch's array (images, labels, masks, boxes) or indices, exposed
/// through the buffer protocol (writable: the caller owns the batch): the
/// base object of the NumPy arrays `bale.Loader` returns. An array goes
/// back to the loader's pool when it is freed.
#[pyclass(module = "bale._native", name = "BatchBuffer", frozen)]
pub struct BatchBuffer {
    data: UnsafeCell<Owned>,
}

/// What a [`BatchBuffer`] holds.
#[derive(Debug)]
enum Owned {
    Array(Array),
    U64(Vec<u64>),
    I64(Vec<i64>),
}

// SAFETY: after construction Rust never reads or writes the bytes: it only
// hands their address and length to Python (`__getbuffer__`) and frees them
// on drop. Reads and writes through the exported buffer are Python's, as for
// any writable buffer object.
unsafe impl Sync for BatchBuffer {}

impl std::fmt::Debug for BatchBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchBuffer").finish_non_exhaustive()
    }
}

impl BatchBuffer {
    fn new(data: Owned) -> Self {
        BatchBuffer {
            data: UnsafeCell::new(data),
        }
    }

    /// Address and length of the bytes.
    fn raw(&self) -> (*mut u8, usize) {
        // SAFETY: see the `Sync` impl: only the address and length are taken.
        let data = unsafe { &mut *self.data.get() };
        fn of<T>(v: &mut [T]) -> (*mut u8, usize) {
            (v.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(v))
        }
        match data {
            Owned::Array(a) => {
                let b = a.as_bytes();
                (b.as_ptr().cast_mut(), b.len())
            }
            Owned::U64(v) => of(v),
            Owned::I64(v) => of(v),
        }
    }
}

#[pymethods]
impl BatchBuffer {
    /// # Safety
    /// Called by Python with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let (ptr, len) = slf.get().raw();
        let len = ffi::Py_ssize_t::try_from(len)
            .map_err(|_| PyIndexError::new_err("batch too large for a buffer"))?;
        // SAFETY: `view` is valid (the caller's contract); the bytes live as
        // long as `slf`, which the view holds a reference to.
        let r = unsafe {
            ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.cast::<c_void>(), len, 0, flags)
        };
        if r != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.raw().1
    }
}

/// How long `Batches.__next__` waits before it looks for signals again.
const WAIT_SLICE: std::time::Duration = std::time::Duration::from_millis(100);

/// The most a thread calling [`decode_image`] keeps of its pixel buffer.
const DECODE_KEEP: usize = 16 << 20;

/// `bale._native.decode_image(data, ext)`: the image decoded whole, at full
/// scale, as `(height, width, RGB bytearray)`, decoded with the GIL released by
/// the loader's decoder (libjpeg-turbo for JPEG).
#[pyfunction]
pub fn decode_image<'py>(
    py: Python<'py>,
    data: &[u8],
    ext: &str,
    max_pixels: u64,
) -> PyResult<(u32, u32, Bound<'py, PyByteArray>)> {
    let (w, h) = py
        .detach(|| {
            RegionDecoder::with(|d| {
                d.set_max_pixels(max_pixels);
                d.decode_rgb(ext, data).map(|(w, h, _)| (w, h))
            })
        })
        .map_err(|e| FormatError::new_err(e.to_string()))?;
    // Same thread, so its decoder still holds the pixels: one copy, into the
    // bytes. The caller's thread keeps no buffer past 16 MiB (a 2,300 x
    // 2,300 image): one huge image does not hold its memory until exit.
    let pixels = RegionDecoder::with(|d| {
        let pixels = PyByteArray::new(py, d.pixels());
        d.trim(DECODE_KEEP);
        pixels
    });
    Ok((h, w, pixels))
}

/// `bale._native._apply_op(name, pixels, height, width, value, fill)`: one
/// of bale-image's pixel operations on `height x width` RGB bytes, returned
/// as new bytes. For testing them against torchvision: `name` is a
/// functional op taking its torchvision argument as `value`
/// (`"brightness"`, `"contrast"`, `"saturation"`, `"hue"`, `"grayscale"`,
/// `"sharpness"`, `"posterize"`, `"solarize"`, `"autocontrast"`,
/// `"equalize"`, `"invert"`, `"rotate"`) or an `AutoAugment` op taking its
/// magnitude (`"ShearX"`, `"TranslateY"`, `"Color"`, ...). Not a stable API.
#[pyfunction]
#[pyo3(name = "_apply_op")]
pub fn apply_op<'py>(
    py: Python<'py>,
    name: &str,
    pixels: &[u8],
    height: usize,
    width: usize,
    value: f64,
    fill: [u8; 3],
) -> PyResult<Bound<'py, PyBytes>> {
    use bale_image::ops;
    if height.checked_mul(width).and_then(|n| n.checked_mul(3)) != Some(pixels.len()) {
        return Err(PyValueError::new_err(format!(
            "{} bytes are not {height} x {width} RGB pixels",
            pixels.len()
        )));
    }
    let mut px = pixels.to_vec();
    let mut scratch = Vec::new();
    match name {
        "brightness" => ops::adjust_brightness(&mut px, value),
        "contrast" => ops::adjust_contrast(&mut px, value),
        "saturation" => ops::adjust_saturation(&mut px, value),
        "hue" => ops::adjust_hue(&mut px, value),
        "grayscale" => ops::rgb_to_grayscale(&mut px),
        "sharpness" => ops::adjust_sharpness(&mut px, width, height, value, &mut scratch),
        "posterize" => ops::posterize(&mut px, value as u8),
        "solarize" => ops::solarize(&mut px, value),
        "autocontrast" => ops::autocontrast(&mut px),
        "equalize" => ops::equalize(&mut px),
        "invert" => ops::invert(&mut px),
        "rotate" => ops::rotate(&mut px, width, height, value, fill, &mut scratch),
        other => match ops::Op::from_name(other, value) {
            Some(op) => op.apply(&mut px, width, height, fill, &mut scratch),
            None => return Err(PyValueError::new_err(format!("no op {other:?}"))),
        },
    }
    Ok(PyBytes::new(py, &px))
}
