"""What every workload shares: rows, timing, interleaved rounds, the report.

A workload is one piece of work (a crop recipe on a corpus) and the rows that do
it: bale.Loader and its peers. Each row makes a fresh iterator of batches; each
round times every row once, in turn, so drift in the machine's load hits them
alike, and the median over the rounds counts.

Beside images/s each row reports the CPU time it spent per image: user + system
time of this process (all its threads: bale.Loader, DALI and FFCV work in
threads) and of every process under it (DataLoader workers), over the timed
batches, divided by the images made. The machine's load moves images/s a lot
and CPU per image little, so the ratio of CPU per image is the figure to read
when the load swings. On an idle machine a row that keeps every core busy makes
about cores / (CPU per image) images/s; one that does not (its workers wait on
each other or on the consumer) makes fewer, and its images/s ratio is then the
larger of the two. A row that fails (a peer that is
not installed, a pipeline it cannot build) is reported with its error and left
out of the later rounds; the others go on.
"""

from __future__ import annotations

import os
import resource
import statistics
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

# The row every ratio is taken against.
OURS = "bale.Loader"


def cores() -> int:
    return len(os.sched_getaffinity(0))


def load() -> float:
    """The 1-minute load average."""
    return os.getloadavg()[0]


def _tick() -> float:
    return 1.0 / os.sysconf("SC_CLK_TCK")


def _descendants_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each live process under this one, by pid."""
    me = os.getpid()
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        # The command name (field 2) may hold spaces and parentheses: split after it.
        fields = stat[stat.rindex(b")") + 2 :].split()
        pid = int(entry.name)
        parent[pid] = int(fields[1])
        cpu[pid] = (int(fields[11]) + int(fields[12])) * _tick()
    out = {}
    for pid in cpu:
        p = parent.get(pid)
        seen = 0
        while p is not None and p != me and p > 1 and seen < 64:
            p, seen = parent.get(p), seen + 1
        if p == me:
            out[pid] = cpu[pid]
    return out


@dataclass(frozen=True)
class CpuClock:
    """A reading of the CPU time of this process and everything under it."""

    own: float  # this process, all threads
    reaped: float  # children (and theirs) that ended and were waited for
    live: dict[int, float]  # each live descendant, by pid

    @staticmethod
    def now() -> "CpuClock":
        s = resource.getrusage(resource.RUSAGE_SELF)
        c = resource.getrusage(resource.RUSAGE_CHILDREN)
        return CpuClock(s.ru_utime + s.ru_stime, c.ru_utime + c.ru_stime, _descendants_cpu())

    def since(self, start: "CpuClock") -> float:
        """CPU seconds spent between `start` and this reading. A worker that
        ended in between is counted in `reaped` whole, so what it had spent by
        `start` is taken off; one that started in between counts whole."""
        ended_before = sum(v for pid, v in start.live.items() if pid not in self.live)
        live = sum(v - start.live.get(pid, 0.0) for pid, v in self.live.items())
        return (self.own - start.own) + (self.reaped - start.reaped - ended_before) + live


@dataclass
class Row:
    """One subject of a workload: `make()` gives a fresh iterator of batches.

    The iterator may have a `close()` (DALI's generator, FFCV's epoch iterator):
    it is called after the timed batches, so no prefetching thread goes on
    working through the next row's time.
    """

    name: str
    make: Callable[[], Iterator[Any]]
    # Set when the row cannot run at all (a peer missing): reported, not timed.
    unavailable: str | None = None
    # Run once before the first round (writing a peer's own dataset format).
    prepare: Callable[[], None] | None = None


@dataclass
class Workload:
    """A piece of work and its rows; `check(batch)` asserts a batch is the work's
    output and returns the images it holds."""

    key: str
    title: str
    about: str
    batch: int
    check: Callable[[Any], int]
    rows: list[Row]
    batches: int = 40
    warmup: int = 4
    # Strings, or callables of the medians per row that return one.
    notes: list[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Timing:
    images_per_s: float
    cpu_ms_per_image: float


def timed(row: Row, check: Callable[[Any], int], warmup: int, batches: int) -> Timing:
    """Images/s and CPU ms per image of `batches` batches after `warmup` untimed ones."""
    it = row.make()
    try:
        for _ in range(warmup):
            check(next(it))
        images = 0
        c0 = CpuClock.now()
        t0 = time.perf_counter()
        for _ in range(batches):
            images += check(next(it))
        dt = time.perf_counter() - t0
        cpu = CpuClock.now().since(c0)
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        del it
    return Timing(images / dt, 1000.0 * cpu / images)


def run(w: Workload, rounds: int, warmup: int | None, batches: int | None) -> dict:
    """Runs the workload's rows in interleaved rounds; prints and returns the results."""
    warmup = w.warmup if warmup is None else warmup
    batches = w.batches if batches is None else batches
    print(f"\n== {w.title}", flush=True)
    print(f"   {w.about}", flush=True)
    print(
        f"   batches of {w.batch}, {batches} timed after {warmup}, median of {rounds} rounds",
        flush=True,
    )
    load0 = load()
    print(f"   load average at start: {load0:.2f}", flush=True)
    rates: dict[str, list[float]] = {r.name: [] for r in w.rows}
    cpus: dict[str, list[float]] = {r.name: [] for r in w.rows}
    loads: dict[str, list[float]] = {r.name: [] for r in w.rows}
    errors: dict[str, str] = {r.name: r.unavailable for r in w.rows if r.unavailable}
    for name, why in errors.items():
        print(f"  [{w.key}] {name}: not run: {why}", flush=True)
    for row in w.rows:
        if row.prepare is None or row.name in errors:
            continue
        try:
            row.prepare()
        except Exception as e:
            errors[row.name] = f"preparing: {type(e).__name__}: {e}"
            print(f"  [{w.key}] {row.name}: FAILED: {errors[row.name]}", flush=True)
            traceback.print_exc()
    for r in range(rounds):
        for row in w.rows:
            if row.name in errors:
                continue
            try:
                t = timed(row, w.check, warmup, batches)
            except Exception as e:  # a peer's failure is a row's result, not the run's end
                errors[row.name] = f"{type(e).__name__}: {e}"
                print(f"  [{w.key}] round {r + 1}: {row.name}: FAILED: {errors[row.name]}", flush=True)
                traceback.print_exc()
                continue
            rates[row.name].append(t.images_per_s)
            cpus[row.name].append(t.cpu_ms_per_image)
            loads[row.name].append(load())
            print(
                f"  [{w.key}] round {r + 1}: {row.name}: {t.images_per_s:,.1f} images/s, "
                f"{t.cpu_ms_per_image:.2f} CPU ms/image (load {loads[row.name][-1]:.2f})",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    cpu_med = {k: statistics.median(v) for k, v in cpus.items() if v}
    ours = med.get(OURS)
    ours_cpu = cpu_med.get(OURS)
    print(f"\n{w.title}:")
    print(
        f"  {'row':<40} {'images/s':>9} {'range':>13} {'CPU ms/img':>10} {'range':>11}"
        f" {'bale.Loader is: faster':>23} {'less CPU':>9}"
    )
    for name in rates:
        if name not in med:
            print(f"  {name:<40} {'failed' if name in errors else '-':>9}   {errors.get(name, '')}")
            continue
        rate, cpu = med[name], cpu_med[name]
        lo, hi = min(rates[name]), max(rates[name])
        clo, chi = min(cpus[name]), max(cpus[name])
        mine = name == OURS or ours is None
        ratio = "" if mine else f"{ours / rate:.2f}x"
        cratio = "" if mine or not ours_cpu else f"{cpu / ours_cpu:.2f}x"
        print(
            f"  {name:<40} {fmt(rate):>9} {f'{fmt(lo)}-{fmt(hi)}':>13} {cpu:>10.2f}"
            f" {f'{clo:.2f}-{chi:.2f}':>11} {ratio:>23} {cratio:>9}"
        )
    load1 = load()
    print(f"  load average: {load0:.2f} at start, {load1:.2f} at end")
    # A note may be computed from the medians (a callable).
    notes = [note(med) if callable(note) else note for note in w.notes]
    for note in notes:
        print(f"  note: {note}")
    return {
        "title": w.title,
        "about": w.about,
        "batch": w.batch,
        "timed_batches": batches,
        "warmup_batches": warmup,
        "images_per_s": med,
        "rounds": rates,
        "cpu_ms_per_image": cpu_med,
        "cpu_rounds": cpus,
        "cpu_ratios": {k: v / ours_cpu for k, v in cpu_med.items() if ours_cpu and k != OURS},
        "load_per_round": loads,
        "ratios": {k: ours / v for k, v in med.items() if ours and k != OURS},
        "errors": errors,
        "load_start": load0,
        "load_end": load1,
        "notes": notes,
    }


def epochs(loader: Iterable[Any]) -> Iterator[Any]:
    """The batches of `loader` (a DataLoader, a bale.Loader), epoch after epoch, so
    a small corpus serves any number of batches (each new epoch costs the row what
    it costs in training: a DataLoader starts its workers again)."""
    while True:
        yield from loader


def fmt(rate: float) -> str:
    """Images/s: whole numbers from 100 up, one decimal below."""
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:,.1f}"


def import_error(module: str) -> str | None:
    """None when `module` imports, else why it does not (for a row's `unavailable`)."""
    try:
        __import__(module)
    except Exception as e:
        return f"`import {module}` fails: {type(e).__name__}: {e}"
    return None
