//! Checkpoints and mixes for `bale.IterableDataset` and `bale.Mix`: the
//! epochs of a resumed state (`bale_reader::resume`) and the mixed epochs
//! of several datasets (`bale_reader::mix`). The Python side
//! (`python/bale/__init__.py`) checks and versions the state; this side
//! does the arithmetic and the reading.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use bale_reader::mix::{Mix, MixIter, MixList, MixPlan, Sampling};
use bale_reader::resume::{Cut, Place, Progress, Resume};
use bale_reader::{Dataset, ForkGuard, Partition, Sample};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{PREFETCH_BYTES, PREFETCH_SAMPLES, PyDataset, PyIter, parse_plan, to_py};

/// One stage of a state as Python passes it: `(world_size, num_workers,
/// even, rank, consumed)`, `consumed` one count (or None) per worker.
pub(crate) type StageArg = (u64, u64, bool, u64, Vec<Option<u64>>);

pub(crate) fn resume_of(stages: Vec<StageArg>) -> Resume {
    Resume::new(
        stages
            .into_iter()
            .map(|(w, k, even, rank, consumed)| Progress {
                cut: Cut::new(w, k, even),
                rank,
                consumed,
            })
            .collect(),
    )
}

fn partition(rank: u64, world_size: u64, worker: u64, num_workers: u64, even: bool) -> Partition {
    Partition::new(rank, world_size)
        .with_workers(worker, num_workers)
        .with_even(even)
}

/// The fingerprint of a dataset's content (`bale_reader::resume::fingerprint`).
#[pyfunction]
pub(crate) fn fingerprint(ds: &Bound<'_, PyDataset>) -> String {
    bale_reader::resume::fingerprint(ds.get().ds.manifest())
}

/// Where partition (`rank`, `worker`) of (`world_size`, `num_workers`)
/// reads after `stages`, over a list of `len` items: `(stage, start,
/// share)`, `share` the items it yields from the start of its stage.
#[pyfunction]
#[pyo3(signature = (len, plan, seed, epoch, buffer, rank, world_size, worker, num_workers, even, stages))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn place(
    len: u64,
    plan: &str,
    seed: u64,
    epoch: u64,
    buffer: usize,
    rank: u64,
    world_size: u64,
    worker: u64,
    num_workers: u64,
    even: bool,
    stages: Vec<StageArg>,
) -> PyResult<(u64, u64, u64)> {
    let plan = parse_plan(plan, seed, epoch, buffer)?;
    let cut = Cut::new(world_size, num_workers, even);
    let place = resume_of(stages)
        .place(len, cut, rank, worker, plan.mixing())
        .map_err(to_py)?;
    let total = place.rest.as_ref().map_or(len, |r| r.len());
    Ok((place.stage, place.start, cut.share(total, rank, worker)))
}

/// The samples of one partition in a resumed epoch of `ds`.
#[pyfunction]
#[pyo3(signature = (ds, plan, seed, epoch, buffer, rank, world_size, worker, num_workers, even, stages, prefetch))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn resumed_epoch(
    ds: Bound<'_, PyDataset>,
    plan: &str,
    seed: u64,
    epoch: u64,
    buffer: usize,
    rank: u64,
    world_size: u64,
    worker: u64,
    num_workers: u64,
    even: bool,
    stages: Vec<StageArg>,
    prefetch: usize,
) -> PyResult<PyIter> {
    let plan = parse_plan(plan, seed, epoch, buffer)?;
    let this = ds.get();
    let cut = Cut::new(world_size, num_workers, even);
    let part = partition(rank, world_size, worker, num_workers, even);
    let resume = resume_of(stages);
    let it = ds
        .py()
        .detach(|| {
            let place = resume.place(this.ds.len(), cut, rank, worker, plan.mixing())?;
            this.ds.iter_at(plan, part, &place)
        })
        .map_err(to_py)?
        .prefetch(
            prefetch.min(bale_reader::MAX_PREFETCH_THREADS),
            PREFETCH_SAMPLES,
            PREFETCH_BYTES,
        );
    Ok(PyIter::new(ds.unbind(), it))
}

/// The proportions of a mix over opened datasets (`bale.Mix` builds it).
#[pyclass(module = "bale", name = "MixCounts", frozen)]
#[derive(Debug)]
pub struct PyMix {
    datasets: Vec<Py<PyDataset>>,
    handles: Vec<Dataset>,
    mix: Mix,
}

/// Most samples taken from a mix's iterator per release of the GIL.
const READY: usize = 32;

#[pymethods]
impl PyMix {
    #[new]
    #[pyo3(signature = (datasets, weights, samples, replacement))]
    fn new(
        datasets: Vec<Bound<'_, PyDataset>>,
        weights: Vec<f64>,
        samples: Option<u64>,
        replacement: bool,
    ) -> PyResult<Self> {
        let handles: Vec<Dataset> = datasets.iter().map(|d| d.get().ds.clone()).collect();
        let sizes: Vec<u64> = handles.iter().map(Dataset::len).collect();
        let sampling = if replacement {
            Sampling::WithReplacement
        } else {
            Sampling::WithoutReplacement
        };
        let mix = Mix::new(&sizes, &weights, samples, sampling).map_err(to_py)?;
        Ok(PyMix {
            datasets: datasets.into_iter().map(Bound::unbind).collect(),
            handles,
            mix,
        })
    }

    /// Samples per epoch.
    fn __len__(&self) -> usize {
        usize::try_from(self.mix.len()).unwrap_or(usize::MAX)
    }

    /// Samples each source gives per epoch.
    #[getter]
    fn counts(&self) -> Vec<u64> {
        self.mix.counts().to_vec()
    }

    /// `(source, index)` of every position of an epoch's list (for tests
    /// and inspection: a list the epoch's size).
    #[pyo3(signature = (plan, seed, epoch))]
    fn pairs(
        &self,
        py: Python<'_>,
        plan: &str,
        seed: u64,
        epoch: u64,
    ) -> PyResult<Vec<(usize, u64)>> {
        let list = py.detach(|| self.list(plan, seed, epoch))?;
        Ok((0..list.len()).map(|p| list.get(p)).collect())
    }

    /// An iterator over the samples one partition reads in one epoch,
    /// after `stages` (a state's), each a dict with `__source__`, its
    /// `cls` mapped through `labels[source]` when `labels` is given.
    #[pyo3(signature = (plan, seed, epoch, rank, world_size, worker, num_workers, even, stages, prefetch, labels))]
    #[allow(clippy::too_many_arguments)]
    fn epoch(
        &self,
        py: Python<'_>,
        plan: &str,
        seed: u64,
        epoch: u64,
        rank: u64,
        world_size: u64,
        worker: u64,
        num_workers: u64,
        even: bool,
        stages: Vec<StageArg>,
        prefetch: usize,
        labels: Option<Vec<Vec<i64>>>,
    ) -> PyResult<PyMixIter> {
        let cut = Cut::new(world_size, num_workers, even);
        let part = partition(rank, world_size, worker, num_workers, even);
        let resume = resume_of(stages);
        let it = py.detach(|| -> PyResult<MixIter> {
            let list = self.list(plan, seed, epoch)?;
            let place: Place = resume
                .place(list.len(), cut, rank, worker, None)
                .map_err(to_py)?;
            // Each source's share of the budget.
            let per = self.handles.len().max(1);
            MixIter::new(
                &self.handles,
                &list,
                part,
                &place,
                (
                    prefetch.min(bale_reader::MAX_PREFETCH_THREADS),
                    (PREFETCH_SAMPLES / per).max(1),
                    PREFETCH_BYTES / per as u64,
                ),
            )
            .map_err(to_py)
        })?;
        Ok(PyMixIter {
            datasets: self.datasets.iter().map(|d| d.clone_ref(py)).collect(),
            labels,
            fork: ForkGuard::new(),
            it: Mutex::new(MixReady {
                it,
                ready: VecDeque::with_capacity(READY),
            }),
        })
    }
}

impl PyMix {
    fn list(&self, plan: &str, seed: u64, epoch: u64) -> PyResult<MixList> {
        let plan = match plan {
            "sequential" => MixPlan::Sequential { epoch },
            "shuffled" => MixPlan::Shuffled { seed, epoch },
            _ => {
                return Err(PyValueError::new_err(format!(
                    "a mix's plan is \"sequential\" or \"shuffled\", not {plan:?}"
                )));
            }
        };
        self.mix.list(plan).map_err(to_py)
    }
}

#[derive(Debug)]
struct MixReady {
    it: MixIter,
    ready: VecDeque<(usize, bale_reader::Result<Sample>)>,
}

/// The samples of one partition of a mixed epoch (`Mix.epoch(...)`).
#[pyclass(module = "bale", name = "MixIterator")]
#[derive(Debug)]
pub struct PyMixIter {
    datasets: Vec<Py<PyDataset>>,
    labels: Option<Vec<Vec<i64>>>,
    fork: ForkGuard,
    it: Mutex<MixReady>,
}

impl MixReady {
    /// The next ready sample; asks the CPU for the first bytes of the one
    /// [`crate::PREFETCH_DISTANCE`] behind it, as the dataset's iterator does.
    fn pop(&mut self) -> Option<(usize, bale_reader::Result<Sample>)> {
        let next = self.ready.pop_front();
        if let Some((_, Ok(s))) = self.ready.get(crate::PREFETCH_DISTANCE - 1) {
            s.prefetch();
        }
        next
    }

    /// Takes up to [`READY`] samples, their pages in memory, and returns
    /// the first. Called without the GIL.
    fn fill_and_pop(&mut self) -> Option<(usize, bale_reader::Result<Sample>)> {
        if self.ready.is_empty() {
            for _ in 0..READY {
                let Some(x) = self.it.next() else { break };
                let failed = x.1.is_err();
                self.ready.push_back(x);
                if failed {
                    break;
                }
            }
            let ok = || self.ready.iter().filter_map(|(_, s)| s.as_ref().ok());
            ok().for_each(Sample::populate);
            ok().skip(1)
                .take(crate::PREFETCH_DISTANCE - 1)
                .for_each(Sample::prefetch);
        }
        self.pop()
    }
}

impl PyMixIter {
    fn lock(&self) -> MutexGuard<'_, MixReady> {
        self.it.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl PyMixIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        // Ready samples without the GIL's release; else the lock is taken
        // with the GIL released (another thread may hold it meanwhile).
        let ready = match self.it.try_lock() {
            Ok(mut st) => st.pop(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().pop(),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        let next = match ready {
            Some(x) => Some(x),
            None => {
                self.fork.check().map_err(to_py)?;
                py.detach(|| self.lock().fill_and_pop())
            }
        };
        let Some((source, sample)) = next else {
            return Ok(None);
        };
        let s = sample.map_err(to_py)?;
        let value = self.datasets[source].get().to_value(py, &s)?;
        if let Ok(d) = value.cast::<PyDict>() {
            d.set_item(intern!(py, "__source__"), source)?;
            if let (Some(maps), Some(label)) = (&self.labels, s.label())
                && d.contains(intern!(py, "cls"))?
            {
                let map = maps.get(source).map_or(&[][..], Vec::as_slice);
                let Some(&mapped) = usize::try_from(label).ok().and_then(|l| map.get(l)) else {
                    return Err(PyValueError::new_err(format!(
                        "sample {:?} of source {source} ({}) has label {label}, not one of the {} class names of its manifest: it has no place in the mix's class list",
                        s.key(),
                        self.datasets[source].get().spec.path.display(),
                        map.len()
                    )));
                };
                d.set_item(intern!(py, "cls"), mapped)?;
            }
        }
        Ok(Some(value))
    }

    /// Samples this partition yields in the epoch (from the start of its stage).
    fn __len__(&self) -> usize {
        usize::try_from(self.lock().it.len()).unwrap_or(usize::MAX)
    }

    /// Samples yielded so far, counted from the start of its stage.
    #[getter]
    fn position(&self) -> u64 {
        let st = self.lock();
        st.it.position() - st.ready.len() as u64
    }
}
