//! `bale._native.Loader`: [`bale_loader::Loader`] for Python. Batches are
//! decoded on the loader's native threads with the GIL released; a batch's
//! images and labels come back as [`BatchBuffer`]s, which `bale.Loader`
//! (python/bale/__init__.py) views as NumPy arrays without a copy.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};

use bale_image::region::RegionDecoder;
use bale_loader::{
    Batch, Batches, Crop, Dtype, Images, Loader, LoaderError, LoaderOptions, OnError, Order,
};
use bale_reader::{ForkGuard, Partition};
use pyo3::exceptions::{PyIndexError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};

use crate::{FormatError, to_py};

/// Converts a loader error to the Python exception the package documents.
fn loader_err(e: LoaderError) -> PyErr {
    match e {
        LoaderError::Reader(r) => to_py(r),
        LoaderError::Option { .. } => PyValueError::new_err(e.to_string()),
        other => FormatError::new_err(other.to_string()),
    }
}

fn parse_crop(
    crop: &str,
    scale: (f64, f64),
    ratio: (f64, f64),
    resize: Option<u32>,
) -> PyResult<Crop> {
    match crop {
        "random_resized" => Ok(Crop::RandomResized { scale, ratio }),
        "center" => Ok(Crop::Center { resize }),
        "resize" => Ok(Crop::Resize),
        other => Err(PyValueError::new_err(format!(
            "crop={other:?}: expected \"random_resized\", \"center\" or \"resize\""
        ))),
    }
}

fn parse_dtype(dtype: &str) -> PyResult<Dtype> {
    match dtype {
        "uint8" | "u1" => Ok(Dtype::U8),
        "float32" | "f4" => Ok(Dtype::F32),
        "float16" | "f2" => Ok(Dtype::F16),
        other => Err(PyValueError::new_err(format!(
            "dtype={other:?}: expected \"uint8\", \"float32\" or \"float16\""
        ))),
    }
}

fn parse_order(order: &str, buffer: usize) -> PyResult<Order> {
    match order {
        "sequential" => Ok(Order::Sequential),
        "shuffled" => Ok(Order::Shuffled),
        "shard_shuffled" => Ok(Order::ShardShuffled(buffer)),
        other => Err(PyValueError::new_err(format!(
            "order={other:?}: expected \"sequential\", \"shuffled\" or \"shard_shuffled\""
        ))),
    }
}

/// The native loader; `bale.Loader` wraps it.
#[pyclass(module = "bale._native", name = "Loader", frozen)]
#[derive(Debug)]
pub struct PyLoader {
    loader: Loader,
}

#[pymethods]
impl PyLoader {
    #[new]
    #[pyo3(signature = (
        path, batch_size, crop, size, scale, ratio, resize, flip, channels_first, dtype, mean,
        std, order, buffer, seed, rank, world_size, even, threads, prefetch, on_error, image,
        fields, drop_last, dct_scaling, max_pixels, storage_options=None, cache_dir=None, cache_limit=None,
        verify_on_read=false, backing="mmap", read_around="auto"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: String,
        batch_size: usize,
        crop: &str,
        size: (u32, u32),
        scale: (f64, f64),
        ratio: (f64, f64),
        resize: Option<u32>,
        flip: bool,
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
        image: Option<String>,
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
    ) -> PyResult<Self> {
        let opts = LoaderOptions {
            batch_size,
            size,
            crop: parse_crop(crop, scale, ratio, resize)?,
            flip,
            channels_first,
            dtype: parse_dtype(dtype)?,
            mean,
            std,
            order: parse_order(order, buffer)?,
            seed,
            partition: Partition::new(rank, world_size).with_even(even),
            threads,
            prefetch,
            on_error: match on_error {
                "fail" => OnError::Fail,
                "skip" => OnError::Skip,
                other => {
                    return Err(PyValueError::new_err(format!(
                        "on_error={other:?}: expected \"fail\" or \"skip\""
                    )));
                }
            },
            image,
            fields,
            drop_last,
            dct_scaling,
            max_pixels,
        };
        let options = crate::remote_options(
            bale_reader::DatasetOptions::new()
                .verify_on_read(verify_on_read)
                .backing(crate::parse_backing(backing)?)
                .read_around(crate::parse_read_around(read_around)?),
            storage_options.as_ref(),
            cache_dir.as_ref(),
            cache_limit,
        )?;
        crate::check_exists(std::path::Path::new(&path))?;
        let ds = py.detach(|| options.open(&path)).map_err(to_py)?;
        let loader = Loader::new(ds, opts).map_err(loader_err)?;
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

    /// The member images are taken from.
    #[getter]
    fn image_member(&self) -> String {
        self.loader.image_member().to_owned()
    }

    /// The batches of `epoch`, after the first `start` samples.
    fn epoch(&self, py: Python<'_>, epoch: u64, start: u64) -> PyResult<PyBatches> {
        let b = py
            .detach(|| self.loader.epoch_from(epoch, start))
            .map_err(loader_err)?;
        Ok(PyBatches {
            inner: Mutex::new(b),
            fork: ForkGuard::new(),
        })
    }

    /// `(top, left, height, width, flip)` decided for sample `index` in
    /// `epoch` (in the source image's pixels; fractional for center crops).
    fn sample_params(
        &self,
        py: Python<'_>,
        epoch: u64,
        index: u64,
    ) -> PyResult<(f64, f64, f64, f64, bool)> {
        let p = py
            .detach(|| self.loader.sample_params(epoch, index))
            .map_err(loader_err)?;
        Ok((p.crop.y, p.crop.x, p.crop.height, p.crop.width, p.flip))
    }
}

/// The batches of one epoch: `next()` returns `(images, labels, indices,
/// fields, skipped)`, the first three as buffers.
#[pyclass(module = "bale._native", name = "Batches", frozen)]
#[derive(Debug)]
pub struct PyBatches {
    inner: Mutex<Batches>,
    /// The process that made it: asked before the lock is taken (a thread
    /// of the parent may have held it at a fork).
    fork: ForkGuard,
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
        batch_to_py(py, batch).map(Some)
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.lock().remaining()).unwrap_or(usize::MAX)
    }
}

fn batch_to_py(py: Python<'_>, batch: Batch) -> PyResult<Py<PyTuple>> {
    let Batch {
        images,
        labels,
        indices,
        fields,
        skipped,
    } = batch;
    let shape = images.shape();
    let dtype = match images.dtype() {
        Dtype::U8 => "uint8",
        Dtype::F32 => "float32",
        Dtype::F16 => "float16",
    };
    let images = Bound::new(py, BatchBuffer::new(Owned::Images(images)))?;
    let labels = Bound::new(py, BatchBuffer::new(Owned::I64(labels)))?;
    let indices = Bound::new(py, BatchBuffer::new(Owned::U64(indices)))?;
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
    let skipped = PyList::new(py, skipped.into_iter().map(|s| (s.index, s.key, s.error)))?;
    let t = PyTuple::new(
        py,
        [
            images.into_any(),
            PyTuple::new(py, shape)?.into_any(),
            dtype.into_pyobject(py)?.into_any(),
            labels.into_any(),
            indices.into_any(),
            extra.into_any(),
            skipped.into_any(),
        ],
    )?;
    Ok(t.unbind())
}

/// A batch's images, labels or indices, exposed through the buffer protocol
/// (writable: the caller owns the batch): the base object of the NumPy
/// arrays `bale.Loader` returns. Images go back to the loader's pool when it
/// is freed.
#[pyclass(module = "bale._native", name = "BatchBuffer", frozen)]
pub struct BatchBuffer {
    data: UnsafeCell<Owned>,
}

/// What a [`BatchBuffer`] holds.
#[derive(Debug)]
enum Owned {
    Images(Images),
    I64(Vec<i64>),
    U64(Vec<u64>),
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
            Owned::Images(i) => {
                let b = i.as_bytes();
                (b.as_ptr().cast_mut(), b.len())
            }
            Owned::I64(v) => of(v),
            Owned::U64(v) => of(v),
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
