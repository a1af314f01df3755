//! `bale._native`: the Rust half of the Python package `bale`.
//!
//! The Python package (`python/bale/__init__.py`) re-exports [`PyDataset`] as
//! `bale.Dataset` and the exceptions, and builds `bale.IterableDataset` (which
//! must subclass `torch.utils.data.IterableDataset` when torch is installed)
//! on [`PyDataset::epoch`].
//!
//! Everything goes through `bale-reader`, so every shard kind it reads (tar,
//! tar.zst, ...) reads here too. Reads run with the GIL released
//! ([`Python::detach`]); the GIL is taken only to build the sample dict.
//!
//! Zero-copy: a `.npy` field comes back as a read-only NumPy array that is a
//! view of the sample's bytes ([`SampleBuffer`] is its base object and keeps
//! them alive): the shard's memory map for plain tar shards opened with the
//! default `mmap` backing, else the one buffer the sample was read or
//! decompressed into. Other fields are `bytes` (one copy).
#![deny(missing_docs)]

mod cli;
mod loader;
mod resume;

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use bale_reader::{
    Backing, Dataset, DatasetOptions, EpochPlan, ForkGuard, Partition, ReadAround, ReaderError,
    Sample, SampleIter,
};
use pyo3::IntoPyObjectExt;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyException, PyFileNotFoundError, PyIndexError, PyKeyError, PyOverflowError, PyTypeError,
    PyValueError,
};
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyMemoryView, PyString, PyTuple};

create_exception!(
    bale,
    BaleError,
    PyException,
    "Base class of the errors bale raises (besides IndexError, KeyError, ValueError and OSError)."
);
create_exception!(
    bale,
    FormatError,
    BaleError,
    "Bad bytes on disk: a missing or corrupt manifest, index or shard, a truncated file, \
     a checksum mismatch, a malformed .npy member. The message names the file and offset."
);

/// Converts a reader error to the Python exception the package documents.
fn to_py(e: ReaderError) -> PyErr {
    let msg = e.to_string();
    match e {
        ReaderError::IndexOutOfRange { .. } => PyIndexError::new_err(msg),
        ReaderError::UnknownKey { .. } => PyKeyError::new_err(msg),
        ReaderError::InvalidPartition { .. }
        | ReaderError::InvalidOption { .. }
        | ReaderError::StartPastEnd { .. }
        | ReaderError::InvalidResume { .. } => PyValueError::new_err(msg),
        ReaderError::Prefetch { .. } => BaleError::new_err(msg),
        ReaderError::Forked { .. } => pyo3::exceptions::PyRuntimeError::new_err(msg),
        ReaderError::Storage(e) => {
            use bale_storage::StorageError as S;
            match e {
                S::NotFound { .. } => PyFileNotFoundError::new_err(msg),
                S::Credentials { .. } | S::Denied { .. } => {
                    pyo3::exceptions::PyPermissionError::new_err(msg)
                }
                S::BadUrl { .. } | S::BadOption { .. } => PyValueError::new_err(msg),
                _ => pyo3::exceptions::PyOSError::new_err(msg),
            }
        }
        _ => FormatError::new_err(msg),
    }
}

/// How fields become Python values.
#[derive(Debug)]
enum Decode {
    /// `.npy` fields as NumPy arrays, the rest as bytes (`decode=None`).
    Numpy,
    /// Every field as bytes (`decode="bytes"`).
    Bytes,
    /// Every field as a read-only memoryview of the sample's bytes: no copy
    /// (`decode="memoryview"`).
    View,
    /// `f(ext, value)` on what [`Decode::Numpy`] gives.
    Call(Py<PyAny>),
}

/// What Python value a sample becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// A dict of every wanted field (the default).
    Dict,
    /// The one field `fields` names, alone (`fields="jpg"`).
    One,
    /// A tuple of the `fields` values in their order (`as_tuple=True`).
    Tuple,
}

/// What reopening a dataset needs: the arguments of `bale.Dataset(...)`.
#[derive(Debug)]
struct Spec {
    path: PathBuf,
    fields: Option<Vec<String>>,
    shape: Shape,
    decode: Decode,
    verify_on_read: bool,
    backing: Backing,
    read_around: ReadAround,
    storage_options: Option<BTreeMap<String, String>>,
    cache_dir: Option<PathBuf>,
    cache_limit: Option<u64>,
    /// Names in `fields` that this dataset has not are allowed (a `Mix`'s).
    any_fields: bool,
}

/// The reader's options for a dataset in object storage, from Python's arguments.
pub(crate) fn remote_options(
    options: DatasetOptions,
    storage_options: Option<&BTreeMap<String, String>>,
    cache_dir: Option<&PathBuf>,
    cache_limit: Option<u64>,
) -> PyResult<DatasetOptions> {
    let mut so = bale_storage::StorageOptions::new();
    for (k, v) in storage_options.into_iter().flatten() {
        so.set(k, v);
    }
    let options = options.storage_options(so);
    Ok(match (cache_dir, cache_limit) {
        (Some(dir), Some(limit)) => options.cache(dir, limit),
        (None, None) => options,
        _ => {
            return Err(PyValueError::new_err(
                "give both cache_dir and cache_limit (bytes), or neither",
            ));
        }
    })
}

/// Map-style random access to a bale dataset.
///
/// `ds[i]` is a dict `{"__key__": str, "__index__": int, "cls": int (labelled
/// datasets), "<ext>": bytes | numpy.ndarray}`. `.npy` fields are read-only
/// NumPy arrays viewing the sample's bytes (zero-copy from the page cache with
/// `backing="mmap"` on tar shards; from the read or decompression buffer
/// otherwise); other fields are `bytes`.
///
/// Example:
///
///     import bale
///     from torch.utils.data import DataLoader
///
///     ds = bale.Dataset("/data/train", fields=["jpg", "cls"])
///     loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=4,
///                         collate_fn=lambda batch: batch)
///     for batch in loader:
///         labels = [s["cls"] for s in batch]
///
/// Args:
///     path: the dataset directory (holding `bale.json`), or its URL.
///     fields: only these fields (extensions, "cls" included); default all.
///         A single string (`fields="jpg"`) makes each sample that field's
///         value alone, not a dict: the cheapest sample to build.
///     as_tuple: each sample is a tuple of the `fields` values in the order
///         given (`"__key__"` and `"__index__"` allowed), as WebDataset's
///         `to_tuple`; a field a sample lacks is None.
///     decode: None or "numpy": `.npy` fields as arrays, the rest as bytes;
///         "bytes": every field as bytes; "memoryview": every field as a
///         read-only memoryview of the sample's bytes (no copy; zero-copy from
///         the page cache with the mmap backing on tar shards); a callable
///         `f(ext, value) -> object` applied to each field after the default.
///     verify_on_read: check each member's checksum on every read.
///     backing: "mmap" (default, zero-copy) or "pread" (one read per sample;
///         errors instead of SIGBUS if a shard is truncated in place).
///     read_around: "auto" (default: when the shards fit in half of the
///         memory available at open, the first cold read in each 8 MiB
///         region of a shard fetches the whole region), "always" or "never"
///         (each read fetches exactly its sample).
///     storage_options: for a dataset in object storage (`path` a URL:
///         `s3://bucket/prefix`, `gs://`, `az://`, `https://`): options on top
///         of the standard environment (`AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL`,
///         ...), e.g. `{"aws_endpoint_url": "http://127.0.0.1:9000",
///         "allow_http": "true"}` (docs/remote.md). A sample is one ranged GET;
///         `ds[indices]` (`__getitems__`) requests a batch at once.
///     cache_dir, cache_limit: keep whole shards of a dataset in object
///         storage in this local directory, at most `cache_limit` bytes,
///         shared by the processes of the node.
///
/// Pickles as its arguments: an unpickled copy (a DataLoader worker) reopens
/// the dataset from its path. Reads release the GIL.
///
/// Raises FileNotFoundError (no such path), bale.FormatError (not a complete,
/// valid dataset) or ValueError (a bad option).
#[pyclass(module = "bale", name = "Dataset", frozen, subclass)]
#[derive(Debug)]
pub struct PyDataset {
    ds: Dataset,
    spec: Spec,
    /// The manifest's field extensions as Python strings, made once: the
    /// dict keys of every sample (a field the manifest does not list gets a
    /// new string).
    names: Vec<(String, Py<PyString>)>,
}

/// A local dataset path that does not exist, as `FileNotFoundError`.
pub(crate) fn check_exists(path: &std::path::Path) -> PyResult<()> {
    if !bale_storage::is_url(path) && !path.exists() {
        return Err(PyFileNotFoundError::new_err(format!(
            "no such dataset directory: {}",
            path.display()
        )));
    }
    Ok(())
}

pub(crate) fn parse_backing(s: &str) -> PyResult<Backing> {
    match s {
        "mmap" => Ok(Backing::Mmap),
        "pread" => Ok(Backing::Pread),
        _ => Err(PyValueError::new_err(format!(
            "backing must be \"mmap\" or \"pread\", not {s:?}"
        ))),
    }
}

pub(crate) fn parse_read_around(s: &str) -> PyResult<ReadAround> {
    match s {
        "auto" => Ok(ReadAround::Auto),
        "always" => Ok(ReadAround::Always),
        "never" => Ok(ReadAround::Never),
        _ => Err(PyValueError::new_err(format!(
            "read_around must be \"auto\", \"always\" or \"never\", not {s:?}"
        ))),
    }
}

fn read_around_name(r: ReadAround) -> &'static str {
    match r {
        ReadAround::Auto => "auto",
        ReadAround::Always => "always",
        ReadAround::Never => "never",
    }
}

fn parse_plan(plan: &str, seed: u64, epoch: u64, buffer: usize) -> PyResult<EpochPlan> {
    match plan {
        "sequential" => Ok(EpochPlan::sequential()),
        "shuffled" => Ok(EpochPlan::shuffled(seed, epoch)),
        "shard_shuffled" => Ok(EpochPlan::shard_shuffled(seed, epoch, buffer)),
        _ => Err(PyValueError::new_err(format!(
            "plan must be \"sequential\", \"shuffled\" or \"shard_shuffled\", not {plan:?}"
        ))),
    }
}

/// Read-ahead of the iterators: at most this many samples and bytes read
/// but not yet yielded (each job a share of it, see `SampleIter::prefetch`).
const PREFETCH_SAMPLES: usize = 256;
const PREFETCH_BYTES: u64 = 64 << 20;

/// Whether a field holds a `.npy` array (`npy`, or `<name>.npy`).
fn is_npy(ext: &str) -> bool {
    ext == "npy" || ext.ends_with(".npy")
}

fn want(fields: Option<&[String]>, ext: &str) -> bool {
    fields.is_none_or(|f| f.iter().any(|x| x == ext))
}

/// `fields` and `as_tuple` as given to `bale.Dataset`: the field list and
/// the shape of each sample.
fn parse_fields(
    fields: Option<Bound<'_, PyAny>>,
    as_tuple: bool,
) -> PyResult<(Option<Vec<String>>, Shape)> {
    let (fields, one) = match fields {
        None => (None, false),
        Some(f) if f.is_none() => (None, false),
        Some(f) => match f.cast::<PyString>() {
            Ok(one) => (Some(vec![one.to_str()?.to_owned()]), true),
            Err(_) => (
                Some(f.extract::<Vec<String>>().map_err(|_| {
                    PyValueError::new_err(format!(
                        "fields must be a string or a sequence of strings, not {}",
                        f.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string())
                    ))
                })?),
                false,
            ),
        },
    };
    let shape = match (as_tuple, one) {
        (true, _) if fields.as_ref().is_none_or(Vec::is_empty) => {
            return Err(PyValueError::new_err(
                "as_tuple=True needs fields: the names to put in each tuple, in order \
                 (e.g. fields=[\"jpg\", \"cls\"])",
            ));
        }
        (true, _) => Shape::Tuple,
        (false, true) => Shape::One,
        (false, false) => Shape::Dict,
    };
    Ok((fields, shape))
}

/// Refuses a name in `fields` that no sample of the dataset can have, when
/// the sample is a tuple or one value (a typo would give None everywhere).
fn check_named(ds: &Dataset, names: &[String]) -> PyResult<()> {
    for name in names {
        let known = matches!(name.as_str(), "__key__" | "__index__")
            || (name == "cls" && ds.labels().is_some())
            || ds.fields().iter().any(|f| f == name);
        if !known {
            let mut have: Vec<&str> = vec!["__key__", "__index__"];
            if ds.labels().is_some() {
                have.push("cls");
            }
            for f in ds.fields() {
                if !have.contains(&f.as_str()) {
                    have.push(f);
                }
            }
            return Err(PyValueError::new_err(format!(
                "no field {name:?} in the dataset {}: its samples have {}",
                ds.dir().display(),
                have.join(", ")
            )));
        }
    }
    Ok(())
}

impl PyDataset {
    /// The error for a subscript that is not an `i64`: an integer past
    /// `i64` is out of range, as a list says (`IndexError`, not
    /// `OverflowError`); anything else keeps its `TypeError`.
    fn not_an_index(&self, i: &Bound<'_, PyAny>, e: PyErr) -> PyErr {
        // An integer of another type (`np.uint64(2**63)`) overflows too.
        if i.is_instance_of::<pyo3::types::PyInt>()
            || e.is_instance_of::<pyo3::exceptions::PyOverflowError>(i.py())
        {
            return self.out_of_range(format_args!("sample {i}"));
        }
        e
    }

    /// The `IndexError` for `what` (`sample 12`), past the dataset's end.
    fn out_of_range(&self, what: std::fmt::Arguments<'_>) -> PyErr {
        PyIndexError::new_err(format!(
            "{what} out of range: the dataset {} holds {} samples",
            self.ds.dir().display(),
            self.ds.len()
        ))
    }

    fn index(&self, i: i64) -> PyResult<u64> {
        let n = self.ds.len();
        let j = if i < 0 {
            i128::from(n) + i128::from(i)
        } else {
            i128::from(i)
        };
        u64::try_from(j)
            .ok()
            .filter(|&j| j < n)
            .ok_or_else(|| self.out_of_range(format_args!("sample {i}")))
    }

    /// Reads sample `i`; its pages are in memory on return, so that no page
    /// fault happens later while the GIL is held. The GIL is released for
    /// the read unless reads are quick ([`Dataset::reads_are_quick`]: warm,
    /// local, mapped, uncompressed): with other Python threads waiting,
    /// handing it over and taking it back cost more than a warm read of a
    /// small sample (two threads of warm `ds[i]` ran 1.5x faster keeping it
    /// on 2 KB samples, 1.18x on 110 KB; docs/benchmarks.md).
    fn read(&self, py: Python<'_>, i: u64) -> PyResult<Sample> {
        if self.ds.reads_are_quick() {
            return self.ds.get_populated(i).map_err(to_py);
        }
        py.detach(|| self.ds.get_populated(i)).map_err(to_py)
    }

    /// The sample as the dict `bale.Dataset` documents.
    fn to_dict<'py>(&self, py: Python<'py>, s: &Sample) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item(intern!(py, "__key__"), s.key())?;
        d.set_item(intern!(py, "__index__"), s.index())?;
        let fields = self.spec.fields.as_deref();
        if let Some(label) = s.label()
            && want(fields, "cls")
        {
            d.set_item(intern!(py, "cls"), label)?;
        }
        for (ext, bytes) in s.fields() {
            // A member under a reserved name (written before writers refused
            // them) never shadows `__key__`, `__index__` or `__source__`.
            if (ext == "cls" && s.label().is_some())
                || bale_format::is_reserved_ext(ext)
                || !want(fields, ext)
            {
                continue;
            }
            let value = self.field_value(py, s, ext, bytes)?;
            match self.names.iter().find(|(n, _)| n == ext) {
                Some((_, name)) => d.set_item(name.bind(py), value)?,
                None => d.set_item(PyString::new(py, ext), value)?,
            }
        }
        Ok(d)
    }

    /// One field's bytes as the Python value `decode` asks for.
    fn field_value<'py>(
        &self,
        py: Python<'py>,
        s: &Sample,
        ext: &str,
        bytes: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let value = match &self.spec.decode {
            Decode::Bytes => PyBytes::new(py, bytes).into_any(),
            Decode::View => {
                let buffer = SampleBuffer::bound(py, s, ext)?;
                PyMemoryView::from(&buffer.into_any())?.into_any()
            }
            Decode::Numpy | Decode::Call(_) if is_npy(ext) => self.npy(py, s, ext, bytes)?,
            _ => PyBytes::new(py, bytes).into_any(),
        };
        match &self.spec.decode {
            Decode::Call(f) => f.bind(py).call1((ext, value)),
            _ => Ok(value),
        }
    }

    /// The value of the named field of a sample for `as_tuple` and a single
    /// `fields` string: `__key__`, `__index__`, `cls` (the label), or a
    /// field's value; None when the sample lacks it.
    fn named<'py>(&self, py: Python<'py>, s: &Sample, name: &str) -> PyResult<Bound<'py, PyAny>> {
        match name {
            "__key__" => return Ok(PyString::new(py, s.key()).into_any()),
            "__index__" => return s.index().into_bound_py_any(py),
            "cls" => {
                if let Some(label) = s.label() {
                    return label.into_bound_py_any(py);
                }
            }
            _ => {}
        }
        match s.field(name) {
            Some(bytes) => self.field_value(py, s, name, bytes),
            None => Ok(py.None().into_bound(py)),
        }
    }

    /// The sample as the Python value the dataset was opened to give: a
    /// dict, one field's value or a tuple of them.
    fn to_value<'py>(&self, py: Python<'py>, s: &Sample) -> PyResult<Bound<'py, PyAny>> {
        let names = self.spec.fields.as_deref().unwrap_or_default();
        match self.spec.shape {
            Shape::Dict => Ok(self.to_dict(py, s)?.into_any()),
            Shape::One => self.named(py, s, &names[0]),
            Shape::Tuple => {
                let values = names
                    .iter()
                    .map(|n| self.named(py, s, n))
                    .collect::<PyResult<Vec<_>>>()?;
                Ok(PyTuple::new(py, values)?.into_any())
            }
        }
    }

    /// A `.npy` field as a read-only NumPy array: a view of the sample's
    /// bytes when the header is a plain dtype, else NumPy's own parse (a copy).
    fn npy<'py>(
        &self,
        py: Python<'py>,
        s: &Sample,
        ext: &str,
        bytes: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        static FROMBUFFER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        static EMPTY: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
        let context = |what: &dyn std::fmt::Display| {
            FormatError::new_err(format!(
                "{}: sample {:?} (index {}): field {ext}: {what}",
                self.ds.dir().display(),
                s.key(),
                s.index()
            ))
        };
        let header = bale_format::npy::parse(bytes).map_err(|e| context(&e))?;
        let Some(bale_format::npy::Array {
            descr,
            fortran_order,
            shape,
            data_offset,
        }) = header.into_array()
        else {
            let io = py.import(intern!(py, "io"))?;
            let np = py.import(intern!(py, "numpy"))?;
            let file = io.call_method1(intern!(py, "BytesIO"), (PyBytes::new(py, bytes),))?;
            let kwargs = PyDict::new(py);
            kwargs.set_item(intern!(py, "allow_pickle"), false)?;
            let arr = np
                .call_method(intern!(py, "load"), (file,), Some(&kwargs))
                .map_err(|e| context(&e))?;
            arr.getattr(intern!(py, "flags"))?
                .setattr(intern!(py, "writeable"), false)?;
            return Ok(arr);
        };
        let count = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| context(&"the shape overflows"))?;
        let shape_t = PyTuple::new(py, &shape)?;
        let order = if fortran_order { "F" } else { "C" };
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "dtype"), &descr)?;
        if count == 0 {
            let empty = EMPTY.import(py, "numpy", "empty")?;
            kwargs.set_item(intern!(py, "order"), order)?;
            let arr = empty
                .call((shape_t,), Some(&kwargs))
                .map_err(|e| context(&e))?;
            arr.getattr(intern!(py, "flags"))?
                .setattr(intern!(py, "writeable"), false)?;
            return Ok(arr);
        }
        let buffer = SampleBuffer::bound(py, s, ext)?;
        kwargs.set_item(intern!(py, "count"), count)?;
        kwargs.set_item(intern!(py, "offset"), data_offset)?;
        let flat = FROMBUFFER
            .import(py, "numpy", "frombuffer")?
            .call((buffer,), Some(&kwargs))
            .map_err(|e| context(&e))?;
        if shape.len() == 1 {
            return Ok(flat);
        }
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "order"), order)?;
        flat.call_method(intern!(py, "reshape"), (shape_t,), Some(&kwargs))
    }

    fn order_of(
        &self,
        plan: &str,
        seed: u64,
        epoch: u64,
        buffer: usize,
        partition: Partition,
    ) -> PyResult<bale_reader::Order> {
        let plan = parse_plan(plan, seed, epoch, buffer)?;
        self.ds.order(plan, partition).map_err(to_py)
    }
}

#[pymethods]
impl PyDataset {
    /// Opens the dataset in `path` (a directory holding `bale.json`).
    #[new]
    #[pyo3(signature = (path, *, fields=None, as_tuple=false, decode=None, verify_on_read=false, backing="mmap", read_around="auto", storage_options=None, cache_dir=None, cache_limit=None, _any_fields=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        fields: Option<Bound<'_, PyAny>>,
        #[pyo3(from_py_with = as_tuple_arg)] as_tuple: bool,
        decode: Option<Bound<'_, PyAny>>,
        #[pyo3(from_py_with = verify_on_read_arg)] verify_on_read: bool,
        backing: &str,
        read_around: &str,
        storage_options: Option<BTreeMap<String, String>>,
        cache_dir: Option<PathBuf>,
        #[pyo3(from_py_with = cache_limit_arg)] cache_limit: Option<u64>,
        _any_fields: bool,
    ) -> PyResult<Self> {
        let decode = match decode {
            None => Decode::Numpy,
            Some(d) if d.is_callable() => Decode::Call(d.unbind()),
            Some(d) => match d.extract::<String>().ok().as_deref() {
                Some("numpy") => Decode::Numpy,
                Some("bytes") => Decode::Bytes,
                Some("memoryview") => Decode::View,
                _ => {
                    return Err(PyValueError::new_err(format!(
                        "decode must be None, \"numpy\", \"bytes\", \"memoryview\" or a callable (ext, value) -> value, not {}",
                        d.repr()?
                    )));
                }
            },
        };
        let (fields, shape) = parse_fields(fields, as_tuple)?;
        let backing = parse_backing(backing)?;
        let read_around = parse_read_around(read_around)?;
        check_exists(&path)?;
        let options = remote_options(
            DatasetOptions::new()
                .verify_on_read(verify_on_read)
                .backing(backing)
                .read_around(read_around),
            storage_options.as_ref(),
            cache_dir.as_ref(),
            cache_limit,
        )?;
        let ds = py.detach(|| options.open(&path)).map_err(to_py)?;
        // A name no sample can have is a typo, in every form (a dict would
        // silently lack it). A `Mix` (`_any_fields`) checks its names
        // against all of its sources together: one list of fields serves
        // datasets of different members there.
        if !_any_fields {
            check_named(&ds, fields.as_deref().unwrap_or_default())?;
        }
        let names = ds
            .fields()
            .iter()
            .map(|f| (f.clone(), PyString::intern(py, f).unbind()))
            .collect();
        Ok(PyDataset {
            ds,
            names,
            spec: Spec {
                path,
                fields,
                shape,
                decode,
                verify_on_read,
                backing,
                read_around,
                storage_options,
                cache_dir,
                cache_limit,
                any_fields: _any_fields,
            },
        })
    }

    /// The arguments that reopen this dataset in another process (pickling).
    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        match (self.spec.shape, self.spec.fields.as_deref()) {
            (Shape::One, Some([one])) => kwargs.set_item("fields", one)?,
            (_, fields) => kwargs.set_item("fields", fields)?,
        }
        kwargs.set_item("as_tuple", self.spec.shape == Shape::Tuple)?;
        match &self.spec.decode {
            Decode::Numpy => kwargs.set_item("decode", py.None())?,
            Decode::Bytes => kwargs.set_item("decode", "bytes")?,
            Decode::View => kwargs.set_item("decode", "memoryview")?,
            Decode::Call(f) => kwargs.set_item("decode", f)?,
        }
        kwargs.set_item("verify_on_read", self.spec.verify_on_read)?;
        let backing = match self.spec.backing {
            Backing::Pread => "pread",
            _ => "mmap",
        };
        kwargs.set_item("backing", backing)?;
        kwargs.set_item("read_around", read_around_name(self.spec.read_around))?;
        kwargs.set_item("storage_options", &self.spec.storage_options)?;
        kwargs.set_item("cache_dir", &self.spec.cache_dir)?;
        if self.spec.any_fields {
            kwargs.set_item("_any_fields", true)?;
        }
        kwargs.set_item("cache_limit", self.spec.cache_limit)?;
        // A URL as text: pathlib would fold its `//`.
        let path = if bale_storage::is_url(&self.spec.path) {
            PyString::new(py, &self.spec.path.to_string_lossy()).into_any()
        } else {
            self.spec.path.clone().into_pyobject(py)?.into_any()
        };
        Ok((PyTuple::new(py, [path])?, kwargs))
    }

    fn __len__(&self) -> usize {
        usize::try_from(self.ds.len()).unwrap_or(usize::MAX)
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        i: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let i = match i.extract::<i64>() {
            Ok(i) => self.index(i)?,
            Err(e) => return Err(self.not_an_index(i, e)),
        };
        let s = self.read(py, i)?;
        self.to_value(py, &s)
    }

    /// The samples `indices`, as `[self[i] for i in indices]`: every index
    /// checked first (IndexError naming it), then one release of the GIL for
    /// the whole batch (`Dataset::get_batch`: memory loads and I/O hints
    /// issued for every sample before any is read), then the dicts.
    /// PyTorch's DataLoader calls this for each batch of a map-style dataset.
    fn __getitems__<'py>(
        &self,
        py: Python<'py>,
        indices: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        // An integer past i64 is out of range, as for `ds[i]`.
        let range = |e: PyErr| {
            if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) {
                self.out_of_range(format_args!("a sample index"))
            } else {
                e
            }
        };
        // A list or tuple at once; any other iterable of integers (a
        // NumPy array, a torch tensor from a sampler) one by one.
        let indices: Vec<i64> = match indices.extract() {
            Ok(v) => v,
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyOverflowError>(py) => {
                return Err(range(e));
            }
            Err(e) => match indices.try_iter() {
                Ok(items) => items
                    .map(|i| i.and_then(|i| i.extract::<i64>()).map_err(range))
                    .collect::<PyResult<_>>()?,
                Err(_) => return Err(e),
            },
        };
        let idx = indices
            .iter()
            .map(|&i| self.index(i))
            .collect::<PyResult<Vec<u64>>>()?;
        let samples = py.detach(|| self.ds.get_batch(&idx)).map_err(to_py)?;
        let out = PyList::empty(py);
        for s in &samples {
            out.append(self.to_value(py, s)?)?;
        }
        Ok(out)
    }

    /// Every sample in dataset order (large sequential reads).
    fn __iter__(slf: Bound<'_, Self>) -> PyResult<PyIter> {
        let it = slf
            .get()
            .ds
            .iter(EpochPlan::sequential(), Partition::ALL)
            .map_err(to_py)?
            .prefetch(1, PREFETCH_SAMPLES, PREFETCH_BYTES);
        Ok(PyIter::new(slf.unbind(), it))
    }

    /// The sample with key `key`.
    fn get_by_key<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        // Read as `ds[i]` reads (hinted only while reads wait for storage);
        // an unknown key gets `get_by_key`'s error, which names the dataset.
        let s = py
            .detach(|| match self.ds.find_all(key)[..] {
                [i] => self.ds.get_populated(i),
                _ => self.ds.get_by_key(key),
            })
            .map_err(to_py)?;
        self.to_value(py, &s)
    }

    /// The key of sample `i`, without reading it.
    fn key(&self, i: &Bound<'_, PyAny>) -> PyResult<String> {
        let i = match i.extract::<i64>() {
            Ok(i) => self.index(i)?,
            Err(e) => return Err(self.not_an_index(i, e)),
        };
        self.ds.key(i).map(str::to_owned).map_err(to_py)
    }

    /// The index of the sample with key `key`, or None.
    fn find(&self, key: &str) -> Option<u64> {
        self.ds.find(key)
    }

    /// The dataset directory, as given.
    #[getter]
    fn path(&self) -> String {
        self.spec.path.display().to_string()
    }

    /// The class names (index = label), or None for an unlabelled dataset.
    #[getter]
    fn classes(&self) -> Option<Vec<String>> {
        self.ds.labels().map(<[String]>::to_vec)
    }

    /// The field extensions the manifest lists, sorted.
    #[getter]
    fn extensions(&self) -> Vec<String> {
        self.ds.fields().to_vec()
    }

    /// Number of samples in each shard.
    #[getter]
    fn shard_sizes(&self) -> Vec<u64> {
        self.ds.shard_sizes()
    }

    /// The global indices one partition yields in one epoch, in order.
    #[pyo3(signature = (plan="sequential", *, seed=0, epoch=0, buffer=1024, rank=0, world_size=1, worker=0, num_workers=1, even=false))]
    #[allow(clippy::too_many_arguments)]
    fn order(
        &self,
        plan: &str,
        #[pyo3(from_py_with = seed_arg)] seed: u64,
        #[pyo3(from_py_with = epoch_arg)] epoch: u64,
        #[pyo3(from_py_with = buffer_arg)] buffer: usize,
        #[pyo3(from_py_with = rank_arg)] rank: u64,
        #[pyo3(from_py_with = world_size_arg)] world_size: u64,
        #[pyo3(from_py_with = worker_arg)] worker: u64,
        #[pyo3(from_py_with = num_workers_arg)] num_workers: u64,
        #[pyo3(from_py_with = even_arg)] even: bool,
    ) -> PyResult<Vec<u64>> {
        let part = partition(rank, world_size, worker, num_workers, even);
        Ok(self
            .order_of(plan, seed, epoch, buffer, part)?
            .iter()
            .collect())
    }

    /// Number of samples one partition yields per epoch (the same for every plan).
    #[pyo3(signature = (*, rank=0, world_size=1, worker=0, num_workers=1, even=false))]
    fn partition_len(
        &self,
        #[pyo3(from_py_with = rank_arg)] rank: u64,
        #[pyo3(from_py_with = world_size_arg)] world_size: u64,
        #[pyo3(from_py_with = worker_arg)] worker: u64,
        #[pyo3(from_py_with = num_workers_arg)] num_workers: u64,
        #[pyo3(from_py_with = even_arg)] even: bool,
    ) -> PyResult<u64> {
        let part = partition(rank, world_size, worker, num_workers, even);
        Ok(self.order_of("sequential", 0, 0, 1, part)?.len())
    }

    /// An iterator over the samples one partition yields in one epoch,
    /// resumed after `start` samples, reading ahead on `prefetch` threads.
    #[pyo3(signature = (plan="sequential", *, seed=0, epoch=0, buffer=1024, rank=0, world_size=1, worker=0, num_workers=1, even=false, start=0, prefetch=1))]
    #[allow(clippy::too_many_arguments)]
    fn epoch(
        slf: Bound<'_, Self>,
        plan: &str,
        #[pyo3(from_py_with = seed_arg)] seed: u64,
        #[pyo3(from_py_with = epoch_arg)] epoch: u64,
        #[pyo3(from_py_with = buffer_arg)] buffer: usize,
        #[pyo3(from_py_with = rank_arg)] rank: u64,
        #[pyo3(from_py_with = world_size_arg)] world_size: u64,
        #[pyo3(from_py_with = worker_arg)] worker: u64,
        #[pyo3(from_py_with = num_workers_arg)] num_workers: u64,
        #[pyo3(from_py_with = even_arg)] even: bool,
        #[pyo3(from_py_with = start_arg)] start: u64,
        #[pyo3(from_py_with = prefetch_arg)] prefetch: usize,
    ) -> PyResult<PyIter> {
        let this = slf.get();
        let part = partition(rank, world_size, worker, num_workers, even);
        let plan = parse_plan(plan, seed, epoch, buffer)?;
        let it = this
            .ds
            .iter(plan, part)
            .and_then(|it| it.start_at(start))
            .map_err(to_py)?
            .prefetch(prefetch, PREFETCH_SAMPLES, PREFETCH_BYTES);
        Ok(PyIter::new(slf.unbind(), it))
    }

    fn __repr__(&self) -> String {
        format!(
            "bale.Dataset({:?}, samples={}, shards={})",
            self.spec.path.display().to_string(),
            self.ds.len(),
            self.ds.shard_count()
        )
    }
}

/// An iterator over the samples of one epoch (`Dataset.epoch(...)`).
#[pyclass(module = "bale", name = "SampleIterator")]
#[derive(Debug)]
pub struct PyIter {
    ds: Py<PyDataset>,
    it: Mutex<Ready>,
    /// The process that made it: in a process forked from it, another
    /// thread of the parent may have held the lock at the fork, so the
    /// guard is asked before the lock is taken.
    fork: ForkGuard,
}

/// An epoch iterator and the samples taken from it but not yet yielded.
#[derive(Debug)]
struct Ready {
    it: SampleIter,
    /// In order; an error ends a fill, so nothing follows it.
    samples: VecDeque<bale_reader::Result<Sample>>,
}

/// Most samples taken from the iterator per release of the GIL: one
/// release and reacquisition, and one lock, for a run of samples instead
/// of each.
const READY: usize = 32;

impl PyIter {
    fn new(ds: Py<PyDataset>, it: SampleIter) -> Self {
        PyIter {
            ds,
            fork: ForkGuard::new(),
            it: Mutex::new(Ready {
                it,
                samples: VecDeque::with_capacity(READY),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Ready> {
        self.it.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next ready sample, without waiting for the lock or the GIL's
    /// release (another thread holding the lock, or none ready: `None`).
    fn pop_ready(&self) -> Option<bale_reader::Result<Sample>> {
        let mut st = match self.it.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        st.pop()
    }
}

/// How many samples ahead of the one handed out the iterator asks the CPU
/// to load the first bytes of ([`Sample::prefetch`]): far enough that the
/// loads finish while Python handles the samples between, near enough that
/// they are still in the core's caches when the sample is copied. A warm
/// sequential epoch of 2 KB samples ran 1.12x faster than with the whole
/// fill asked for at once, which gained nothing (docs/benchmarks.md).
const PREFETCH_DISTANCE: usize = 2;

impl Ready {
    /// The next ready sample; asks the CPU for the first bytes of the one
    /// [`PREFETCH_DISTANCE`] behind it.
    fn pop(&mut self) -> Option<bale_reader::Result<Sample>> {
        let next = self.samples.pop_front();
        if let Some(Ok(s)) = self.samples.get(PREFETCH_DISTANCE - 1) {
            s.prefetch();
        }
        next
    }

    /// Takes up to [`READY`] samples from the iterator, their pages brought
    /// into memory (so no page fault happens while the GIL is held), and
    /// returns the first. Called without the GIL.
    fn fill_and_pop(&mut self) -> Option<bale_reader::Result<Sample>> {
        if self.samples.is_empty() {
            for _ in 0..READY {
                let Some(next) = self.it.next() else { break };
                let failed = next.is_err();
                self.samples.push_back(next);
                if failed {
                    break;
                }
            }
            let ok = || self.samples.iter().filter_map(|s| s.as_ref().ok());
            ok().for_each(Sample::populate);
            // The samples `pop` will not have asked for (it asks
            // `PREFETCH_DISTANCE` ahead of the one it hands out).
            ok().skip(1)
                .take(PREFETCH_DISTANCE - 1)
                .for_each(Sample::prefetch);
        }
        self.pop()
    }
}

#[pymethods]
impl PyIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let next = match self.pop_ready() {
            Some(x) => Some(x),
            None => {
                self.fork.check().map_err(to_py)?;
                py.detach(|| self.lock().fill_and_pop())
            }
        };
        match next {
            None => Ok(None),
            Some(Err(e)) => Err(to_py(e)),
            Some(Ok(s)) => self.ds.get().to_value(py, &s).map(Some),
        }
    }

    /// Number of samples this partition yields in the epoch (from its start).
    fn __len__(&self) -> usize {
        usize::try_from(self.lock().it.len()).unwrap_or(usize::MAX)
    }

    /// Samples yielded so far, counted from the start of the epoch (pass it
    /// as `start` to resume).
    #[getter]
    fn position(&self) -> u64 {
        let st = self.lock();
        st.it.position() - st.samples.len() as u64
    }
}

/// The bytes of one field of a sample, exposed through the buffer protocol
/// (read-only): the base object of the NumPy arrays bale returns.
#[pyclass(module = "bale", name = "SampleBuffer", frozen)]
#[derive(Debug)]
pub struct SampleBuffer {
    sample: Sample,
    ext: String,
}

impl SampleBuffer {
    /// The buffer over field `ext` of `s`, as a Python object.
    fn bound<'py>(py: Python<'py>, s: &Sample, ext: &str) -> PyResult<Bound<'py, Self>> {
        Bound::new(
            py,
            SampleBuffer {
                sample: s.clone(),
                ext: ext.to_owned(),
            },
        )
    }

    fn bytes(&self) -> &[u8] {
        self.sample.field(&self.ext).unwrap_or_default()
    }
}

#[pymethods]
impl SampleBuffer {
    /// # Safety
    /// Called by Python with a valid `view`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let bytes = slf.get().bytes();
        let len = ffi::Py_ssize_t::try_from(bytes.len())
            .map_err(|_| PyValueError::new_err("field too large for a buffer"))?;
        // SAFETY: `view` is valid (the caller's contract); the bytes live as
        // long as `slf`, which the view holds a reference to; readonly = 1.
        let r = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                bytes.as_ptr().cast_mut().cast::<c_void>(),
                len,
                1,
                flags,
            )
        };
        if r != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    fn __len__(&self) -> usize {
        self.bytes().len()
    }

    /// Whether the bytes are a slice of the shard's memory map (zero-copy).
    #[getter]
    fn mapped(&self) -> bool {
        self.sample.is_mapped()
    }
}

/// The module `bale._native`.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<PyDataset>()?;
    m.add_class::<PyIter>()?;
    m.add_class::<SampleBuffer>()?;
    m.add_class::<loader::PyLoader>()?;
    m.add_class::<loader::PyBatches>()?;
    m.add_class::<loader::BatchBuffer>()?;
    m.add_function(wrap_pyfunction!(loader::decode_image, m)?)?;
    m.add_function(wrap_pyfunction!(loader::apply_op, m)?)?;
    m.add_class::<resume::PyMix>()?;
    m.add_class::<resume::PyMixIter>()?;
    m.add_function(wrap_pyfunction!(resume::fingerprint, m)?)?;
    m.add_function(wrap_pyfunction!(resume::place, m)?)?;
    m.add_function(wrap_pyfunction!(resume::resumed_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(cli::cli_main, m)?)?;
    m.add("BaleError", py.get_type::<BaleError>())?;
    m.add("FormatError", py.get_type::<FormatError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("MAX_PREFETCH_THREADS", bale_reader::MAX_PREFETCH_THREADS)?;
    Ok(())
}

/// An int argument from 0 to `hi`: `-1` or `hi + 1` is a `ValueError`
/// naming it and `True` or `1.5` a `TypeError`, as the Python wrappers'
/// `_whole` says (pyo3's own is an `OverflowError` whose message does not
/// name the argument). NumPy integers are taken.
fn whole(v: &Bound<'_, PyAny>, name: &str, hi: u64) -> PyResult<u64> {
    if v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            shown(v)
        )));
    }
    let out_of_range = || PyValueError::new_err(format!("{name} must be from 0 to {hi}, not {v}"));
    match v.extract::<u64>() {
        Ok(n) if n <= hi => Ok(n),
        Ok(_) => Err(out_of_range()),
        Err(e) if e.is_instance_of::<PyOverflowError>(v.py()) => Err(out_of_range()),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            shown(v)
        ))),
    }
}

/// A wrong argument as an error message shows it: its type and repr (`int 2`).
fn shown(v: &Bound<'_, PyAny>) -> String {
    let ty = v
        .get_type()
        .name()
        .map_or_else(|_| "?".to_owned(), |t| t.to_string());
    let repr = v.repr().map_or_else(|_| "?".to_owned(), |r| r.to_string());
    format!("{ty} {repr}")
}

/// A bool argument: `True`/`False` (or a NumPy bool); `1` or `"yes"` is a
/// `TypeError` naming it.
fn flag(v: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    v.extract::<bool>().map_err(|_| {
        PyTypeError::new_err(format!("{name} must be True or False, not {}", shown(v)))
    })
}

fn as_tuple_arg(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    flag(v, "as_tuple")
}

fn verify_on_read_arg(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    flag(v, "verify_on_read")
}

fn even_arg(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    flag(v, "even")
}

/// One `from_py_with` function per int argument of `bale.Dataset`'s
/// methods, so that each error names its argument ([`whole`]).
macro_rules! whole_args {
    ($($f:ident: $t:ty = $name:literal),* $(,)?) => {$(
        fn $f(v: &Bound<'_, PyAny>) -> PyResult<$t> {
            let hi = u64::try_from(<$t>::MAX).unwrap_or(u64::MAX);
            // In range of `$t` by `hi`.
            whole(v, $name, hi).map(|n| n as $t)
        }
    )*};
}

whole_args! {
    seed_arg: u64 = "seed",
    epoch_arg: u64 = "epoch",
    buffer_arg: usize = "buffer",
    rank_arg: u64 = "rank",
    world_size_arg: u64 = "world_size",
    worker_arg: u64 = "worker",
    num_workers_arg: u64 = "num_workers",
    start_arg: u64 = "start",
}

/// `prefetch`: threads, at most [`bale_reader::MAX_PREFETCH_THREADS`].
fn prefetch_arg(v: &Bound<'_, PyAny>) -> PyResult<usize> {
    let hi = bale_reader::MAX_PREFETCH_THREADS as u64;
    // At most `MAX_PREFETCH_THREADS`, a usize.
    whole(v, "prefetch", hi).map(|n| n as usize)
}

/// `cache_limit`: None, or bytes as [`whole`] takes them.
fn cache_limit_arg(v: &Bound<'_, PyAny>) -> PyResult<Option<u64>> {
    if v.is_none() {
        return Ok(None);
    }
    whole(v, "cache_limit", u64::MAX).map(Some)
}

/// Rank `rank` of `world_size`, worker `worker` of `num_workers`, as the Python API names them.
fn partition(rank: u64, world_size: u64, worker: u64, num_workers: u64, even: bool) -> Partition {
    Partition::new(rank, world_size)
        .with_workers(worker, num_workers)
        .with_even(even)
}
