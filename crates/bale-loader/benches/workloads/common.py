"""What every workload shares: rows, timing, interleaved rounds, the report.

A workload is one piece of work (a crop recipe on a corpus) and the rows that do
it: bale.Loader and its peers. Each row makes a fresh iterator of batches; each
round times every row once, in turn, so drift in the machine's load hits them
alike, and the median over the rounds counts. A row that fails (a peer that is
not installed, a pipeline it cannot build) is reported with its error and left
out of the later rounds; the others go on.
"""

from __future__ import annotations

import os
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


def timed(row: Row, check: Callable[[Any], int], warmup: int, batches: int) -> float:
    """Images/s of `batches` batches after `warmup` untimed ones."""
    it = row.make()
    try:
        for _ in range(warmup):
            check(next(it))
        images = 0
        t0 = time.perf_counter()
        for _ in range(batches):
            images += check(next(it))
        dt = time.perf_counter() - t0
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
        del it
    return images / dt


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
                rate = timed(row, w.check, warmup, batches)
            except Exception as e:  # a peer's failure is a row's result, not the run's end
                errors[row.name] = f"{type(e).__name__}: {e}"
                print(f"  [{w.key}] round {r + 1}: {row.name}: FAILED: {errors[row.name]}", flush=True)
                traceback.print_exc()
                continue
            rates[row.name].append(rate)
            loads[row.name].append(load())
            print(
                f"  [{w.key}] round {r + 1}: {row.name}: {rate:,.1f} images/s "
                f"(load {loads[row.name][-1]:.2f})",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in rates.items() if v}
    ours = med.get(OURS)
    print(f"\n{w.title}:")
    print(f"  {'row':<44} {'images/s':>10} {'range':>15} {'bale.Loader is':>15}")
    for name in rates:
        if name not in med:
            print(f"  {name:<44} {'failed' if name in errors else '-':>10}   {errors.get(name, '')}")
            continue
        rate = med[name]
        lo, hi = min(rates[name]), max(rates[name])
        ratio = "" if name == OURS or ours is None else f"{ours / rate:.2f}x"
        print(f"  {name:<44} {fmt(rate):>10} {f'{fmt(lo)}-{fmt(hi)}':>15} {ratio:>15}")
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
