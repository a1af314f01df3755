"""``bale.timed``: how long a training loop waits for its data, and what to do about it."""

from __future__ import annotations

import operator
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator

#: Below this share of wall time spent waiting for data, the loop is compute-bound.
KEEPS_UP = 0.10


class _Gpu:
    """GPU utilisation and memory through NVML, sampled at most every 0.1 s."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        self.why_not = ""
        self.nvml: Any = None
        try:
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            self.why_not = "pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as e:  # NVMLError and its many subclasses
            self.why_not = f"NVML is not available ({e})"
            return
        if not self.handles:
            self.why_not = "NVML sees no GPU"
            return
        self.nvml = pynvml
        self.next_at = 0.0
        self.reset()

    def reset(self) -> None:
        self.util_sum = 0.0
        self.mem_max = 0
        self.mem_total = 0
        self.samples = 0

    def sample(self, now: float) -> None:
        if self.nvml is None or now < self.next_at:
            return
        self.next_at = now + 0.1
        try:
            util = [self.nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self.handles]
            mem = [self.nvml.nvmlDeviceGetMemoryInfo(h) for h in self.handles]
        except Exception:
            return
        self.util_sum += sum(util) / len(util)
        self.mem_max = max(self.mem_max, max(m.used for m in mem))
        self.mem_total = max(m.total for m in mem)
        self.samples += 1

    def figures(self) -> dict[str, float]:
        if self.nvml is None or self.samples == 0:
            return {}
        return {
            "gpu_util": self.util_sum / self.samples / 100.0,
            "gpu_mem_used_gib": self.mem_max / 2**30,
            "gpu_mem_total_gib": self.mem_total / 2**30,
        }


class timed:  # noqa: N801  (used like a function: ``for batch in bale.timed(loader)``)
    """Wraps an iterable of batches and measures, per step, the time blocked
    waiting for the next batch against the time spent in the loop body.

    Example::

        t = bale.timed(loader, every=200)
        for images, labels in t:
            train_step(images, labels)
        print(t.stats()["data_wait_share"])

    Every ``every`` steps and at the end it reports steps/s, the share of
    wall time spent waiting for data and, when the loop waits, a remedy
    drawn from what it can see of the iterable (a PyTorch ``DataLoader``'s
    ``num_workers``, ``pin_memory``, ``prefetch_factor``,
    ``persistent_workers``; whether the dataset is a bale dataset, packed,
    pre-resized, staged in RAM). The report goes to stderr, or to
    ``report(stats_dict)`` when given (TensorBoard, W&B, a logger).

    With ``pynvml`` and an NVIDIA GPU it also samples GPU utilisation and
    memory over the same window (at most every 0.1 s, on the loop's own
    thread); without them it says so once.

    ``every`` is a whole number of steps: ``1.5`` or ``True`` is a
    ``TypeError``, ``0`` a ``ValueError``.

    The first batch (worker start-up, first reads) is timed apart
    (``first_batch_sec``) and left out of the shares. The wrapper starts no
    thread; its cost is two clock reads per step.
    """

    def __init__(
        self,
        iterable: Iterable[Any],
        every: int = 100,
        report: Callable[[dict[str, Any]], None] | None = None,
        gpu: bool = True,
        file: Any = None,
    ) -> None:
        # A whole number of steps (NumPy's integers too): 1.5 would never
        # report, and True is no count.
        try:
            if isinstance(every, bool):
                raise TypeError
            every = operator.index(every)
        except TypeError:
            raise TypeError(f"every={every!r}: expected a whole number of steps (an int)") from None
        if every < 1:
            raise ValueError(f"every={every}: expected a positive number of steps")
        self.iterable = iterable
        self.every = every
        self.report = report
        self.file = file
        self._gpu = _Gpu() if gpu else None
        self._said_gpu = False
        self._reset_totals()

    def _reset_totals(self) -> None:
        self.steps = 0
        self.wait = 0.0
        self.body = 0.0
        self.first: float | None = None

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        clock = time.perf_counter
        it = iter(self.iterable)
        self._reset_totals()
        gpu = self._gpu if self._gpu is not None and self._gpu.nvml is not None else None
        every = self.every
        t0 = clock()
        try:
            batch = next(it)
        except StopIteration:
            self._emit(self._figures(0, 0.0, 0.0, final=True))
            return
        self.first = clock() - t0
        self.steps = 1
        # Folded into the totals every `every` steps, at the end, and when the
        # loop leaves early (break, exception: the generator is closed).
        wait = body = 0.0
        steps = 0
        try:
            yield batch
            last = clock()
            while True:
                t0 = clock()
                try:
                    batch = next(it)
                except StopIteration:
                    break
                t1 = clock()
                body += t0 - last
                wait += t1 - t0
                last = t1
                steps += 1
                if gpu is not None:
                    gpu.sample(t1)
                if steps == every:
                    self._fold(steps, wait, body, window_report=True)
                    wait = body = 0.0
                    steps = 0
                yield batch
            body += t0 - last
        finally:
            self._fold(steps, wait, body, window_report=False)
            self._emit(self._figures(self.steps - 1, self.wait, self.body, final=True))

    def _fold(self, steps: int, wait: float, body: float, window_report: bool) -> None:
        self.steps += steps
        self.wait += wait
        self.body += body
        if window_report:
            self._emit(self._figures(steps, wait, body, final=False))
            if self._gpu is not None:
                self._gpu.reset()

    def _figures(self, steps: int, wait: float, body: float, final: bool) -> dict[str, Any]:
        wall = wait + body
        share = wait / wall if wall > 0 else 0.0
        d: dict[str, Any] = {
            "steps": self.steps,
            "window_steps": steps,
            "steps_per_sec": steps / wall if wall > 0 else 0.0,
            "data_wait_share": share,
            "wait_sec": wait,
            "body_sec": body,
            "first_batch_sec": self.first if self.first is not None else 0.0,
            "final": final,
        }
        if self._gpu is not None:
            d.update(self._gpu.figures())
        d["remedy"] = remedy(self.iterable, share)
        return d

    def stats(self) -> dict[str, Any]:
        """The figures over the whole iteration so far (steps after the first):
        ``steps``, ``steps_per_sec``, ``data_wait_share`` (0 to 1),
        ``wait_sec``, ``body_sec``, ``first_batch_sec``, ``remedy`` and,
        with a GPU, ``gpu_util`` (0 to 1) and ``gpu_mem_used_gib``."""
        return self._figures(max(self.steps - 1, 0), self.wait, self.body, final=True)

    def _emit(self, d: dict[str, Any]) -> None:
        if self.report is not None:
            self.report(d)
            return
        out = self.file if self.file is not None else sys.stderr
        print(format_report(d), file=out, flush=True)
        if self._gpu is not None and self._gpu.nvml is None and not self._said_gpu:
            self._said_gpu = True
            print(f"bale.timed: GPU utilisation not sampled: {self._gpu.why_not}", file=out)


def format_report(d: dict[str, Any]) -> str:
    """The one-paragraph report ``timed`` prints."""
    head = "bale.timed: " + ("whole run" if d["final"] else f"last {d['window_steps']} steps")
    line = (
        f"{head}: {d['steps_per_sec']:.2f} steps/s, waiting for data "
        f"{d['data_wait_share']:.0%} of the time"
    )
    if "gpu_util" in d:
        line += f", GPU busy {d['gpu_util']:.0%}, memory {d['gpu_mem_used_gib']:.1f}/{d['gpu_mem_total_gib']:.1f} GiB"
    if d["final"]:
        line += f" ({d['steps']} steps; first batch {d['first_batch_sec']:.2f} s)"
    return line + "\n  " + d["remedy"].replace("\n", "\n  ")


# ---- what the wrapper can see of the pipeline -----------------------------------------


def _on_ram(path: str) -> bool:
    """Whether `path` lives on tmpfs / ramfs (staged)."""
    try:
        real = os.path.realpath(path)
        best, fstype = "", ""
        with open("/proc/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) > len(best):
                    best, fstype = mnt, parts[2]
        return fstype in ("tmpfs", "ramfs")
    except OSError:
        return False


def _bale_path(ds: Any) -> str | None:
    from . import Dataset, IterableDataset, Loader

    if isinstance(ds, (Dataset, Loader)):
        return ds.path
    if isinstance(ds, IterableDataset):
        return ds.path
    return None


def _source_path(iterable: Any) -> str | None:
    """The dataset directory or file tree behind `iterable`, when visible."""
    for obj in (iterable, getattr(iterable, "dataset", None)):
        if obj is None:
            continue
        path = _bale_path(obj)
        if path is not None:
            return path
        root = getattr(obj, "root", None)
        if isinstance(root, (str, os.PathLike)):
            return os.fspath(root)
    return None


def _pre_resized(path: str) -> bool:
    import json

    try:
        with open(os.path.join(path, "bale.json"), encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return False
    image = ((m.get("created_by") or {}).get("options") or {}).get("image")
    return bool(image)


def _describe_dataset(ds: Any) -> tuple[str, list[str]]:
    """(what it is, remedies for a data-bound loop)."""
    path = _bale_path(ds)
    name = type(ds).__name__
    if path is not None:
        hints = []
        if not _pre_resized(path):
            hints.append(
                "if decoding full-size images is the cost, pack once with "
                "`bale pack --resize shorter:256` (fewer pixels per epoch)"
            )
        if not _on_ram(path):
            hints.append(
                "if reads are the cost (a slow or network disk), `bale stage` the dataset into RAM"
            )
        return f"bale dataset {path}", hints
    root = getattr(ds, "root", None)
    if root is not None and hasattr(ds, "samples"):
        # torchvision's ImageFolder / DatasetFolder: one file per sample.
        return f"{name} over loose files in {root}", [
            f"pack the tree once with `bale pack {root} -o DATASET` (one positioned read per "
            "sample instead of an open and a seek) and read it with bale.Dataset or bale.Loader"
        ]
    return name, []


def remedy(iterable: Any, share: float) -> str:
    """What to do, in plain words, from the wait share and what is visible of `iterable`."""
    if share < KEEPS_UP:
        return (
            f"the input keeps up (waiting under {KEEPS_UP:.0%}): the step's own compute bounds "
            "the loop; faster data will not help"
        )
    from . import Loader

    hints: list[str] = []
    what = type(iterable).__name__
    dataset = getattr(iterable, "dataset", None)
    n_cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if isinstance(iterable, Loader):
        what = f"bale.Loader over {iterable.path}"
        threads = iterable.threads
        if threads < n_cores:
            hints.append(f"raise threads= (it decodes on {threads}; this machine has {n_cores} cores)")
        _, more = _describe_dataset(iterable)
        hints += more
    elif dataset is not None and hasattr(iterable, "num_workers"):
        kind, more = _describe_dataset(dataset)
        what = f"DataLoader over {kind}"
        workers = iterable.num_workers
        if workers == 0:
            hints.append(
                f"num_workers=0 loads every batch in the training process: use "
                f"DataLoader(num_workers={n_cores}) (one per core), or bale.Loader, which decodes "
                "images in native threads"
            )
        elif workers < n_cores:
            hints.append(f"raise num_workers (now {workers}; this machine has {n_cores} cores)")
        # Workers busy on every core: cheaper samples, not more prefetching.
        hints += more
        if workers >= n_cores and _bale_path(dataset) is not None:
            hints.append(
                "for images, bale.Loader decodes only each crop's pixels in native threads "
                "(no worker processes, no pickling)"
            )
        pf = getattr(iterable, "prefetch_factor", None)
        if workers > 0 and pf is not None and pf < 4 and share < 0.3:
            hints.append(f"raise prefetch_factor (now {pf}) to smooth uneven batches")
        if workers > 0 and not getattr(iterable, "persistent_workers", False):
            hints.append(
                "persistent_workers=True keeps the workers between epochs (no start-up wait at "
                "each epoch)"
            )
        try:
            import torch

            if torch.cuda.is_available() and not getattr(iterable, "pin_memory", False):
                hints.append(
                    "pin_memory=True, then .cuda(non_blocking=True), overlaps the copy to the GPU"
                )
        except ImportError:
            pass
    else:
        kind, more = _describe_dataset(iterable)
        what = kind
        hints += more
    src = _source_path(iterable) or "DATASET"
    hints.append(f"`bale bench {src} --decode` measures storage and decode apart and names the bound")
    return f"the loop waits for data {share:.0%} of the time ({what}); try:" + "".join(
        f"\n  - {h}" for h in hints
    )


__all__ = ["timed", "format_report", "remedy", "KEEPS_UP"]
