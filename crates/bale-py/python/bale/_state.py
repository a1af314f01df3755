"""The checkpoint state of :class:`bale.IterableDataset`, :class:`bale.Mix`
and :class:`bale.Loader`.

A state is a small JSON-serialisable dict::

    {"bale": "IterableDataset", "version": 1,
     "dataset": "9f2c...", "samples": 1281167,
     "plan": "shuffled", "seed": 1, "buffer": 1024, "epoch": 3,
     "stages": [{"world_size": 4, "num_workers": 2, "even": False,
                 "rank": 0, "consumed": [20480, 20416]}]}

``stages`` holds, for each cut of the epoch (a cut is a world size and a
worker count; an epoch resumed at another one has a stage per cut), the
rank that saved the state and how many samples each of its workers had
yielded (``None`` for a worker the saving process did not see: a
DataLoader worker knows only its own count). Its size depends on the
number of workers and of resumes, never on the dataset's.

A :class:`bale.Loader`'s state is the same with ``"bale": "Loader"``,
``num_workers`` 1 in each stage, and two more keys it must match:
``batch_size`` and ``augment`` (a digest of the options that change what
a batch holds).
"""

from __future__ import annotations

import operator
from typing import Any, Mapping, Sequence

#: The state format this bale writes and reads.
VERSION = 1


def make(kind: str, ident: Mapping[str, Any], epoch: int, stages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A state of ``kind`` for the dataset ``ident`` names."""
    state: dict[str, Any] = {"bale": kind, "version": VERSION}
    state.update(ident)
    state["epoch"] = epoch
    state["stages"] = [dict(s, consumed=list(s["consumed"])) for s in stages]
    return state


def stage(world_size: int, num_workers: int, even: bool, rank: int, consumed: Sequence[int | None]) -> dict[str, Any]:
    """One stage of a state."""
    return {"world_size": world_size, "num_workers": num_workers, "even": even, "rank": rank, "consumed": list(consumed)}


def _count(v: Any, what: str) -> int:
    if isinstance(v, bool):
        raise ValueError(f"bale state: {what} must be an int, not {v!r}")
    try:
        n = operator.index(v)
    except TypeError:
        raise ValueError(f"bale state: {what} must be an int, not {v!r}") from None
    if not 0 <= n < 2**64:
        raise ValueError(f"bale state: {what} must be from 0 to 2**64 - 1, not {n}")
    return n


def check(state: Any, kind: str, ident: Mapping[str, Any], where: str) -> tuple[int, list[dict[str, Any]]]:
    """The epoch and stages of ``state``, refused with a ValueError saying
    why unless it is a state of ``kind`` for the dataset ``ident`` names
    (``where`` names it in messages)."""
    if isinstance(state, Mapping) and ("_snapshot" in state or "dataset_state" in state):
        state = from_loader(state)
    if not isinstance(state, Mapping) or "bale" not in state:
        raise ValueError(f"not a bale state: {type(state).__name__} without the key 'bale' (a dict from state_dict())")
    if state["bale"] != kind:
        raise ValueError(f"this is the state of a bale.{state['bale']}, not of a bale.{kind}")
    version = state.get("version")
    if version != VERSION:
        raise ValueError(
            f"bale state version {version!r}: this bale reads version {VERSION} (the state was saved by another bale release)"
        )
    for key, mine in ident.items():
        theirs = state.get(key)
        if key == "buffer" and ident.get("plan") != "shard_shuffled":
            continue
        if theirs != mine:
            what = {
                "dataset": "from another dataset (another content fingerprint)",
                "datasets": "from other datasets (other content fingerprints)",
                "samples": "for another number of samples",
                "augment": "with other augmentation settings (crop, size, flips, pixel stages, targets or outputs)",
            }.get(key, f"with another {key}")
            raise ValueError(f"this state was saved {what}: {key} {theirs!r} in the state, {mine!r} in {where}")
    epoch = _count(state.get("epoch"), "epoch")
    stages = state.get("stages")
    if not isinstance(stages, list):
        raise ValueError("bale state: stages must be a list")
    out = []
    for i, s in enumerate(stages):
        if not isinstance(s, Mapping):
            raise ValueError(f"bale state: stage {i} is not a dict")
        try:
            world, workers = _count(s["world_size"], "world_size"), _count(s["num_workers"], "num_workers")
            rank, even, consumed = _count(s["rank"], "rank"), s["even"], s["consumed"]
        except KeyError as e:
            raise ValueError(f"bale state: stage {i} lacks {e}") from None
        if not isinstance(even, bool) or not isinstance(consumed, list):
            raise ValueError(f"bale state: stage {i} has a bad even or consumed")
        if world < 1 or workers < 1 or rank >= world or len(consumed) != workers:
            raise ValueError(
                f"bale state: stage {i} is rank {rank} of {world} with {len(consumed)} counts for {workers} workers"
            )
        counts = [None if k is None else _count(k, "a consumed count") for k in consumed]
        out.append(stage(world, workers, even, rank, counts))
    return epoch, out


def merge(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One state from the states of a rank's workers (each knows its own
    count): what a resume at another world size or worker count needs."""
    if not states:
        raise ValueError("no state to merge")
    first = dict(states[0])
    stages = [dict(s, consumed=list(s["consumed"])) for s in first["stages"]]
    for other in states[1:]:
        same = {k: v for k, v in other.items() if k != "stages"} == {k: v for k, v in first.items() if k != "stages"}
        if not same or len(other["stages"]) != len(stages):
            raise ValueError("the states merged are of different datasets, epochs or resumes")
        for mine, theirs in zip(stages, other["stages"]):
            if {k: v for k, v in mine.items() if k != "consumed"} != {k: v for k, v in theirs.items() if k != "consumed"}:
                raise ValueError("the states merged were saved by different ranks or cuts")
            for w, k in enumerate(theirs["consumed"]):
                if k is not None:
                    if mine["consumed"][w] is not None and mine["consumed"][w] != k:
                        raise ValueError(f"two states give worker {w} different counts ({mine['consumed'][w]} and {k})")
                    mine["consumed"][w] = k
    first["stages"] = stages
    return first


def from_loader(loader_state: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset state inside a ``torchdata.stateful_dataloader.StatefulDataLoader``'s
    ``state_dict()``: with workers, their states merged into one."""
    if "_snapshot" not in loader_state:
        ds = loader_state.get("dataset_state")
        if ds is None:
            raise ValueError("the StatefulDataLoader state holds no dataset state")
        return dict(ds)
    if loader_state.get("_steps_since_snapshot", 0):
        raise ValueError(
            "the StatefulDataLoader state was taken between snapshots (snapshot_every_n_steps > 1): "
            "its workers' states are behind the batches it yielded; use snapshot_every_n_steps=1"
        )
    workers = loader_state["_snapshot"].get("_worker_snapshots", {})
    states = [w.get("dataset_state") for _, w in sorted(workers.items(), key=lambda kv: int(kv[0].split("_")[-1]))]
    if not states or any(s is None for s in states):
        raise ValueError("the StatefulDataLoader state lacks a worker's dataset state")
    return merge(states)
