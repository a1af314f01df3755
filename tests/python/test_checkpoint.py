"""Checkpoints of bale.IterableDataset and bale.Mix: state_dict / load_state_dict
inside torchdata's StatefulDataLoader (0 and 2 workers, fork and spawn) and
Lightning's Trainer, exact resumes, refusals, elastic resumes at another world
size, and mixes (proportions, sources, labels, resume)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import bale
from conftest import run_bale

torch = pytest.importorskip("torch")
from torchdata.stateful_dataloader import StatefulDataLoader  # noqa: E402

PLANS = ["sequential", "shuffled", "shard_shuffled"]


def write_tree(root: Path, n: int, classes: list[str], tag: str) -> None:
    for i in range(n):
        d = root / classes[i % len(classes)]
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{tag}{i:05d}.txt").write_text(f"{tag} {i}")


@pytest.fixture(scope="module")
def ds_a(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("ck")
    write_tree(base / "a", 230, ["cat", "dog", "eel"], "a")
    run_bale("pack", base / "a", "-o", base / "dsa", "--shard-samples", "11", "-q")
    return base / "dsa"


@pytest.fixture(scope="module")
def ds_b(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("ck")
    write_tree(base / "b", 90, ["dog", "fox"], "b")
    run_bale("pack", base / "b", "-o", base / "dsb", "--shard-samples", "8", "-q")
    return base / "dsb"


def keys(batch) -> list[str]:
    return [s["__key__"] for s in batch]


def make(path: Path, plan: str, **kw) -> bale.IterableDataset:
    return bale.IterableDataset(path, plan=plan, seed=5, epoch=1, buffer=16, **kw)


def run_loader(ds, workers: int, ctx: str | None, stop: int | None = None, state=None):
    """Batches of 4 keys, and the loader's state after `stop` batches."""
    loader = StatefulDataLoader(
        ds, batch_size=4, num_workers=workers, collate_fn=keys, multiprocessing_context=ctx if workers else None
    )
    if state is not None:
        loader.load_state_dict(state)
    out, saved = [], None
    for i, b in enumerate(loader):
        out.append(b)
        if stop is not None and i + 1 == stop:
            saved = loader.state_dict()
            break
    return out, saved


def test_the_state_is_small_versioned_json(ds_a: Path) -> None:
    it = make(ds_a, "shuffled", rank=1, world_size=4)
    x = iter(it)
    for _ in range(5):
        next(x)
    st = it.state_dict()
    text = json.dumps(st)
    assert len(text) < 400, text
    assert st["bale"] == "IterableDataset" and st["version"] == 1
    assert st["stages"] == [{"world_size": 4, "num_workers": 1, "even": False, "rank": 1, "consumed": [5]}]
    assert st["samples"] == 230 and len(st["dataset"]) == 16


@pytest.mark.parametrize("plan", PLANS)
def test_a_stateful_dataloader_without_workers_resumes_exactly(ds_a: Path, plan: str) -> None:
    whole, _ = run_loader(make(ds_a, plan), 0, None)
    for stop in [1, 7, len(whole) - 1]:
        head, state = run_loader(make(ds_a, plan), 0, None, stop)
        assert head == whole[:stop]
        state = json.loads(json.dumps(state))
        rest, _ = run_loader(make(ds_a, plan), 0, None, state=state)
        assert rest == whole[stop:], (plan, stop)


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
@pytest.mark.parametrize("plan", ["shuffled", "shard_shuffled"])
def test_a_stateful_dataloader_with_two_workers_resumes_exactly(ds_a: Path, plan: str, ctx: str) -> None:
    whole, _ = run_loader(make(ds_a, plan), 2, ctx)
    assert sorted(k for b in whole for k in b) == sorted(bale.Dataset(ds_a).key(i) for i in range(230))
    stop = 9
    head, state = run_loader(make(ds_a, plan), 2, ctx, stop)
    assert head == whole[:stop]
    state = json.loads(json.dumps(state))
    rest, _ = run_loader(make(ds_a, plan), 2, ctx, state=state)
    assert rest == whole[stop:]


def test_states_of_another_dataset_seed_plan_or_version_are_refused(ds_a: Path, ds_b: Path) -> None:
    it = make(ds_a, "shuffled")
    next(iter(it))
    st = it.state_dict()
    with pytest.raises(ValueError, match="another dataset"):
        make(ds_b, "shuffled").load_state_dict(st)
    with pytest.raises(ValueError, match="another seed: seed 5 in the state, 6 in"):
        bale.IterableDataset(ds_a, plan="shuffled", seed=6).load_state_dict(st)
    with pytest.raises(ValueError, match="another plan"):
        make(ds_a, "sequential").load_state_dict(st)
    with pytest.raises(ValueError, match="version 2"):
        make(ds_a, "shuffled").load_state_dict(dict(st, version=2))
    with pytest.raises(ValueError, match="not a bale state"):
        make(ds_a, "shuffled").load_state_dict({"epoch": 1})
    bad = dict(st, stages=[dict(st["stages"][0], consumed=[10**6])])
    it = make(ds_a, "shuffled")
    it.load_state_dict(bad)
    with pytest.raises(ValueError, match="share of 230"):
        iter(it)


def lockstep(path: Path, plan: str, world: int, workers: int, k: int) -> tuple[list[str], dict]:
    """Every (rank, worker) of a run yields k samples; returns them and the
    state rank 0 saves (its workers' states merged)."""
    seen, states = [], []
    for r in range(world):
        for w in range(workers):
            it = make(path, plan, rank=r, world_size=world, worker=w, num_workers=workers)
            x = iter(it)
            for _ in range(k):
                s = next(x, None)
                if s is not None:
                    seen.append(s["__key__"])
            if r == 0:
                states.append(it.state_dict())
    return seen, bale.merge_states(states)


@pytest.mark.parametrize("plan", ["shuffled", "shard_shuffled"])
@pytest.mark.parametrize(("world", "to"), [(4, 3), (2, 5)])
@pytest.mark.parametrize("workers", [1, 2])
def test_elastic_resume_sees_every_sample_once(ds_a: Path, plan: str, world: int, to: int, workers: int) -> None:
    seen, state = lockstep(ds_a, plan, world, workers, 13)
    state = json.loads(json.dumps(state))
    for r in range(to):
        for w in range(3):
            it = make(ds_a, plan, rank=r, world_size=to, worker=w, num_workers=3)
            it.load_state_dict(state)
            seen += [s["__key__"] for s in it]
    ds = bale.Dataset(ds_a)
    assert sorted(seen) == sorted(ds.key(i) for i in range(len(ds)))


@pytest.mark.parametrize("plan", ["shuffled", "shard_shuffled"])
def test_elastic_resume_with_even_gives_every_rank_as_many_samples(ds_a: Path, plan: str) -> None:
    seen, states = [], []
    for r in range(4):
        it = make(ds_a, plan, rank=r, world_size=4, even=True)
        x = iter(it)
        seen += [next(x)["__key__"] for _ in range(20)]
        if r == 0:
            states.append(it.state_dict())
    counts = []
    for r in range(3):
        it = make(ds_a, plan, rank=r, world_size=3, even=True)
        it.load_state_dict(states[0])
        got = [s["__key__"] for s in it]
        counts.append(len(got))
        seen += got
    assert len(set(counts)) == 1, counts
    ds = bale.Dataset(ds_a)
    assert set(seen) == {ds.key(i) for i in range(len(ds))}
    # 230 + 2 padded (4 ranks), 150 left, cut in 3: no padding needed.
    assert len(seen) - len(ds) <= 3 + 2


@pytest.mark.parametrize("ctx", ["fork", "spawn"])
def test_a_stateful_dataloaders_state_resumes_at_another_world_size(ds_a: Path, ctx: str) -> None:
    # Two ranks in lockstep, 2 workers each, 5 batches; rank 0 saves.
    seen, state = [], None
    for r in range(2):
        got, st = run_loader(make(ds_a, "shuffled", rank=r, world_size=2), 2, ctx, stop=5)
        seen += [k for b in got for k in b]
        if r == 0:
            state = json.loads(json.dumps(st))
    # Three ranks: the loader's state goes into the dataset, not the new loader.
    for r in range(3):
        it = make(ds_a, "shuffled", rank=r, world_size=3)
        it.load_state_dict(state)
        got, _ = run_loader(it, 2, ctx)
        seen += [k for b in got for k in b]
    ds = bale.Dataset(ds_a)
    assert sorted(seen) == sorted(ds.key(i) for i in range(len(ds)))


def test_a_workers_own_state_names_what_an_elastic_resume_needs(ds_a: Path) -> None:
    it = make(ds_a, "shuffled", rank=0, world_size=2, worker=1, num_workers=2)
    next(iter(it))
    st = it.state_dict()
    other = make(ds_a, "shuffled", rank=0, world_size=3)
    other.load_state_dict(st)
    with pytest.raises(ValueError, match="every worker's count"):
        iter(other)


def test_lightning_resumes_mid_epoch_from_its_checkpoint(ds_a: Path, tmp_path: Path) -> None:
    L = pytest.importorskip("lightning.pytorch")

    class Model(L.LightningModule):
        def __init__(self, path: str, ckpt: Path | None = None, at: int = -1) -> None:
            super().__init__()
            self.path, self.ckpt, self.at = path, ckpt, at
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.seen: list[list[str]] = []

        def train_dataloader(self):
            ds = bale.IterableDataset(self.path, shuffle=True, seed=3)
            # 115 samples a worker, 23 batches each: as many as len() says.
            return StatefulDataLoader(ds, batch_size=5, num_workers=2, collate_fn=keys)

        def training_step(self, batch, idx):
            self.seen.append(batch)
            return (self.w * 0).sum() + self.w.sum() ** 2

        def on_train_batch_end(self, outputs, batch, idx):
            if idx == self.at and self.ckpt is not None:
                self.trainer.save_checkpoint(self.ckpt)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer():
        return L.Trainer(
            max_epochs=1, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )

    ckpt = tmp_path / "mid.ckpt"
    first = Model(str(ds_a), ckpt, at=10)
    trainer().fit(first)
    assert sum(map(len, first.seen)) == 230 and ckpt.exists()
    again = Model(str(ds_a))
    trainer().fit(again, ckpt_path=ckpt)
    assert again.seen == first.seen[11:]


def test_mix_proportions_sources_and_labels(ds_a: Path, ds_b: Path) -> None:
    mix = bale.Mix([(ds_a, 0.7), (ds_b, 0.3)], samples=2000, shuffle=True, seed=1, classes="merged", replacement=True)
    assert mix.counts == [1400, 600] and len(mix) == 2000
    assert mix.classes == ["cat", "dog", "eel", "fox"]
    a, b = bale.Dataset(ds_a), bale.Dataset(ds_b)
    got = list(mix)
    for s in got:
        src = (a, b)[s["__source__"]]
        assert s["__key__"] == src.key(s["__index__"])
        assert mix.classes[s["cls"]] == s["__key__"].split("/")[0]
    # Each rank's share holds the weights within a binomial tolerance.
    for r in range(4):
        part = list(bale.Mix([(ds_a, 0.7), (ds_b, 0.3)], samples=2000, shuffle=True, seed=1, rank=r, world_size=4))
        p = sum(s["__source__"] == 0 for s in part) / len(part)
        assert abs(p - 0.7) < 4 * math.sqrt(0.7 * 0.3 / len(part)), (r, p)


@pytest.mark.parametrize("plan", ["sequential", "shuffled"])
def test_mix_ranks_are_disjoint_and_resume_exactly_and_elsewhere(ds_a: Path, ds_b: Path, plan: str) -> None:
    def mk(**kw):
        return bale.Mix([(ds_a, 2), (ds_b, 1)], plan=plan, seed=4, epoch=2, **kw)

    pairs = mk().pairs()
    got = []
    for r in range(3):
        got += [(s["__source__"], s["__index__"]) for s in mk(rank=r, world_size=3)]
    assert sorted(got) == sorted(pairs) and len(got) == 320
    # Exact resume, and an elastic one (3 ranks of 2 workers to 2 ranks).
    whole, _ = run_loader(mk(rank=1, world_size=3), 0, None)
    head, st = run_loader(mk(rank=1, world_size=3), 0, None, stop=6)
    rest, _ = run_loader(mk(rank=1, world_size=3), 0, None, state=json.loads(json.dumps(st)))
    assert rest == whole[6:]
    seen, states = [], []
    for r in range(3):
        for w in range(2):
            m = mk(rank=r, world_size=3, worker=w, num_workers=2)
            x = iter(m)
            seen += [(s["__source__"], s["__index__"]) for s in (next(x) for _ in range(17))]
            if r == 0:
                states.append(m.state_dict())
    state = bale.merge_states(states)
    for r in range(2):
        m = mk(rank=r, world_size=2)
        m.load_state_dict(state)
        seen += [(s["__source__"], s["__index__"]) for s in m]
    assert sorted(seen) == sorted(pairs)
    with pytest.raises(ValueError, match="another weights"):
        bale.Mix([(ds_a, 1), (ds_b, 1)], plan=plan, seed=4).load_state_dict(state)


def test_a_map_style_dataset_resumes_through_the_loaders_own_sampler(ds_a: Path) -> None:
    # bale.Dataset needs no sampler of its own: StatefulDataLoader's
    # RandomSampler holds the order's state (a torch generator's, not JSON).
    def loader():
        torch.manual_seed(0)
        return StatefulDataLoader(bale.Dataset(ds_a), batch_size=4, shuffle=True, num_workers=2, collate_fn=keys)

    whole = list(loader())
    first = loader()
    for i, _ in enumerate(first):
        if i == 6:
            state = first.state_dict()
            break
    again = loader()
    again.load_state_dict(state)
    assert list(again) == whole[7:]
