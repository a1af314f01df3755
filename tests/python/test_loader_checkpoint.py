"""Checkpoints of bale.Loader: state_dict / load_state_dict, exact resumes
(the same sample indices, pixels and labels), refusals, elastic resumes at
another world size, and Lightning's Trainer resuming mid-epoch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale

N = 103
ORDERS = ["sequential", "shuffled", "shard_shuffled"]


@pytest.fixture(scope="module")
def pngs(tmp_path_factory) -> Path:
    """N small PNGs of varied sizes in 3 classes, packed in shards of 7."""
    base = tmp_path_factory.mktemp("lck")
    for i in range(N):
        rng = np.random.default_rng(i)
        w, h = 20 + (i * 7) % 23, 18 + (i * 11) % 19
        d = base / "tree" / ("ant", "bee", "cat")[i % 3]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{i:04d}.png")
    run_bale("pack", base / "tree", "-o", base / "ds", "--shard-samples", "7", "-q")
    return base / "ds"


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("lck")
    for i in range(20):
        d = base / "tree" / "dog"
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((9, 9, 3), i, dtype=np.uint8)).save(d / f"{i:04d}.png")
    run_bale("pack", base / "tree", "-o", base / "ds", "-q")
    return base / "ds"


def make(path: Path, order: str = "shuffled", **kw) -> bale.Loader:
    opts = dict(
        batch_size=8, crop="random_resized", size=12, flip=True, order=order, seed=7, buffer=9, threads=2,
        color_jitter=(0.4, 0.4, 0.4, 0.1),
    )
    opts.update(kw)
    loader = bale.Loader(path, **opts)
    loader.set_epoch(2)
    return loader


def run(loader: bale.Loader, stop: int | None = None) -> tuple[list[tuple], dict | None]:
    """(indices, images, labels) of each batch, and the state after `stop` batches."""
    out, state = [], None
    for images, labels in loader:
        out.append((loader.last_indices.tolist(), images.copy(), labels.copy()))
        if stop is not None and len(out) == stop:
            state = json.loads(json.dumps(loader.state_dict()))
            break
    return out, state


def assert_same(got: list[tuple], want: list[tuple]) -> None:
    assert [b[0] for b in got] == [b[0] for b in want]
    for (_, gi, gl), (_, wi, wl) in zip(got, want):
        np.testing.assert_array_equal(gi, wi)
        np.testing.assert_array_equal(gl, wl)


def indices(batches: list[tuple]) -> list[int]:
    return [i for b in batches for i in b[0]]


def test_the_state_is_small_versioned_json(pngs: Path) -> None:
    loader = make(pngs, rank=1, world_size=4)
    assert loader.state_dict()["stages"] == []
    _, st = run(loader, stop=2)
    text = json.dumps(st)
    assert len(text) < 400, text
    assert st["bale"] == "Loader" and st["version"] == 1 and st["epoch"] == 2
    assert st["samples"] == N and len(st["dataset"]) == 16 and len(st["augment"]) == 16
    assert st["plan"] == "shuffled" and st["seed"] == 7 and st["batch_size"] == 8
    assert st["stages"] == [{"world_size": 4, "num_workers": 1, "even": False, "rank": 1, "consumed": [16]}]
    # The state before an iteration is the one loaded, or resume()'s place.
    again = make(pngs, rank=1, world_size=4)
    again.load_state_dict(st)
    assert again.state_dict() == st
    again.resume(2, 24)
    assert again.state_dict()["stages"][0]["consumed"] == [24]


@pytest.mark.parametrize("order", ORDERS)
def test_a_resumed_loader_yields_the_batches_the_run_had_left(pngs: Path, order: str) -> None:
    whole, _ = run(make(pngs, order))
    assert sorted(indices(whole)) == list(range(N)) and len(whole) == 13
    for stop in [1, 6, len(whole) - 1]:
        head, state = run(make(pngs, order), stop)
        assert_same(head, whole[:stop])
        resumed = make(pngs, order)
        resumed.set_epoch(0)
        resumed.load_state_dict(state)
        assert resumed.epoch == 2
        rest, _ = run(resumed)
        assert_same(rest, whole[stop:])
    # A state taken after the last batch resumes an epoch with nothing left.
    done = make(pngs, order)
    run(done)
    after = make(pngs, order)
    after.load_state_dict(done.state_dict())
    assert run(after)[0] == []


def test_batch_mixing_and_a_rank_resume_exactly(pngs: Path) -> None:
    # MixUp / CutMix draws depend on the batch number: a resume keeps it.
    kw = dict(mixup_alpha=0.4, cutmix_alpha=1.0, num_classes=3, rank=1, world_size=2)
    whole, _ = run(make(pngs, **kw))
    assert whole[0][2].shape == (8, 3)
    head, state = run(make(pngs, **kw), 3)
    resumed = make(pngs, **kw)
    resumed.load_state_dict(state)
    rest, _ = run(resumed)
    assert_same(head + rest, whole)


def test_states_of_another_dataset_seed_order_batch_size_or_augment_are_refused(pngs: Path, other: Path) -> None:
    _, st = run(make(pngs), 2)
    with pytest.raises(ValueError, match="another dataset"):
        make(other).load_state_dict(st)
    with pytest.raises(ValueError, match="another seed: seed 7 in the state, 8 in bale.Loader"):
        make(pngs, seed=8).load_state_dict(st)
    with pytest.raises(ValueError, match="another plan"):
        make(pngs, "sequential").load_state_dict(st)
    with pytest.raises(ValueError, match="another batch_size: batch_size 8 in the state, 4"):
        make(pngs, batch_size=4).load_state_dict(st)
    for changed in [dict(flip=False), dict(size=14), dict(color_jitter=None), dict(crop="center")]:
        with pytest.raises(ValueError, match="other augmentation settings"):
            make(pngs, **changed).load_state_dict(st)
    with pytest.raises(ValueError, match="version 2"):
        make(pngs).load_state_dict(dict(st, version=2))
    with pytest.raises(ValueError, match="not a bale state"):
        make(pngs).load_state_dict({"epoch": 2})
    it = bale.IterableDataset(pngs, shuffle=True, seed=7)
    with pytest.raises(ValueError, match="state of a bale.IterableDataset, not of a bale.Loader"):
        make(pngs).load_state_dict(it.state_dict())
    # What a resume may change: threads, prefetch, the world size.
    make(pngs, threads=1, prefetch=5).load_state_dict(st)
    bad = make(pngs)
    bad.load_state_dict(dict(st, stages=[dict(st["stages"][0], consumed=[10**6])]))
    with pytest.raises(ValueError, match="share of 103"):
        run(bad)


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> Path:
    """30 PNGs, samples 5 and 6 not images."""
    base = tmp_path_factory.mktemp("lck")
    d = base / "tree" / "ant"
    d.mkdir(parents=True)
    for i in range(30):
        if i in (5, 6):
            (d / f"{i:04d}.png").write_bytes(b"not a png at all")
        else:
            Image.fromarray(np.full((10, 12, 3), i, dtype=np.uint8)).save(d / f"{i:04d}.png")
    run_bale("pack", base / "tree", "-o", base / "ds", "-q")
    return base / "ds"


@pytest.mark.filterwarnings("ignore:bale.Loader skipped sample")
def test_skipped_samples_count_in_the_state(damaged: Path) -> None:
    def mk():
        return make(damaged, "sequential", batch_size=4, on_error="skip")

    whole, _ = run(mk())
    assert [len(b[0]) for b in whole[:3]] == [4, 2, 4]
    head, state = run(mk(), 2)
    # Two batches are 8 samples of the epoch, two of them skipped.
    assert state["stages"][0]["consumed"] == [8]
    resumed = mk()
    resumed.load_state_dict(state)
    rest, _ = run(resumed)
    assert_same(head + rest, whole)
    assert resumed.skipped == 0


def lockstep(path: Path, order: str, world: int, steps: int, **kw) -> tuple[list[int], dict]:
    """Every rank of a run takes `steps` batches; the indices they saw and rank 0's state."""
    seen, state = [], None
    for r in range(world):
        got, st = run(make(path, order, rank=r, world_size=world, **kw), steps)
        seen += indices(got)
        if r == 0:
            state = st
    return seen, state


@pytest.mark.parametrize("order", ["shuffled", "shard_shuffled"])
@pytest.mark.parametrize(("world", "to"), [(4, 3), (2, 5)])
def test_elastic_resume_sees_every_sample_once(pngs: Path, order: str, world: int, to: int) -> None:
    seen, state = lockstep(pngs, order, world, 2)
    assert len(seen) == world * 16
    for r in range(to):
        resumed = make(pngs, order, rank=r, world_size=to)
        resumed.load_state_dict(state)
        got, _ = run(resumed)
        # Each sample's decisions are those of (seed, epoch, index): the
        # same pixels as the uninterrupted run gives it.
        if r == 0 and got:
            i = got[0][0][0]
            ref = make(pngs, order).sample_params(i)
            assert resumed.sample_params(i) == ref
        seen += indices(got)
    assert sorted(seen) == list(range(N))


def test_an_elastic_resume_keeps_each_samples_pixels(pngs: Path) -> None:
    # Sequential order, one rank to three: the samples the run had left,
    # each with the pixels it has in the uninterrupted run.
    whole, _ = run(make(pngs, "sequential"))
    pixels = {i: img for idx, imgs, _ in whole for i, img in zip(idx, imgs)}
    head, state = run(make(pngs, "sequential"), 4)
    seen = indices(head)
    for r in range(3):
        resumed = make(pngs, "sequential", rank=r, world_size=3)
        resumed.load_state_dict(state)
        for idx, imgs, _ in run(resumed)[0]:
            for i, img in zip(idx, imgs):
                np.testing.assert_array_equal(img, pixels[i])
            seen += idx
    assert sorted(seen) == list(range(N))


@pytest.mark.parametrize("order", ["shuffled", "shard_shuffled"])
def test_an_elastic_resume_with_even_gives_every_rank_as_many_batches(pngs: Path, order: str) -> None:
    seen, state = lockstep(pngs, order, 4, 2, even=True)
    counts = []
    for r in range(3):
        resumed = make(pngs, order, rank=r, world_size=3, even=True)
        resumed.load_state_dict(state)
        got, _ = run(resumed)
        counts.append((len(got), len(indices(got))))
        seen += indices(got)
    assert len(set(counts)) == 1, counts
    assert set(seen) == set(range(N))
    # 103 + 1 padded at 4 ranks; 104 - 64 = 40 left, cut in 3: 2 padded.
    assert len(seen) == N + 1 + 2


def test_a_second_elastic_resume_goes_on_from_the_first(pngs: Path) -> None:
    seen, state = lockstep(pngs, "shuffled", 4, 1)
    # Three ranks take one batch each from the rest, rank 0 saves; two finish.
    for r in range(3):
        resumed = make(pngs, rank=r, world_size=3)
        resumed.load_state_dict(state)
        got, st = run(resumed, 1)
        seen += indices(got)
        if r == 0:
            second = st
    assert [s["world_size"] for s in second["stages"]] == [4, 3]
    for r in range(2):
        resumed = make(pngs, rank=r, world_size=2)
        resumed.load_state_dict(second)
        seen += indices(run(resumed)[0])
    assert sorted(seen) == list(range(N))


def lightning(path: Path):
    """A tiny LightningModule over a Loader of `path` (rank and world size
    given: one Trainer per simulated rank), recording (epoch, indices,
    pixel sum) of each batch it trains on, and a Trainer factory."""
    torch = pytest.importorskip("torch")
    L = pytest.importorskip("lightning.pytorch")

    class Model(L.LightningModule):
        def __init__(self, ckpt: Path | None = None, at: tuple[int, int] = (-1, -1), rank: int = 0, world: int = 1):
            super().__init__()
            self.ckpt, self.at, self.cut = ckpt, at, (rank, world)
            self.w = torch.nn.Parameter(torch.zeros(1))
            self.seen: list[tuple[int, list[int], float]] = []
            self.loader: bale.Loader | None = None

        def train_dataloader(self):
            self.loader = make(path, seed=3, rank=self.cut[0], world_size=self.cut[1])
            return self.loader

        def on_train_epoch_start(self):
            self.loader.set_epoch(self.current_epoch)

        def training_step(self, batch, idx):
            images, labels = (torch.from_numpy(a) for a in batch)
            self.seen.append((self.current_epoch, self.loader.last_indices.tolist(), float(images.float().sum())))
            return (self.w * images.float().mean()).sum() + self.w.sum() ** 2

        def on_train_batch_end(self, outputs, batch, idx):
            if (self.current_epoch, idx) == self.at and self.ckpt is not None:
                self.trainer.save_checkpoint(self.ckpt)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    def trainer(epochs: int):
        return L.Trainer(
            max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False,
        )

    return torch, Model, trainer


def test_lightning_resumes_mid_epoch_from_its_checkpoint(pngs: Path, tmp_path: Path) -> None:
    torch, Model, trainer = lightning(pngs)
    ckpt = tmp_path / "mid.ckpt"
    first = Model(ckpt, at=(0, 5))
    trainer(2).fit(first)
    assert len(first.seen) == 26 and ckpt.exists()
    assert sorted(i for e, idx, _ in first.seen if e == 1 for i in idx) == list(range(N))
    saved = torch.load(ckpt, weights_only=False)["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    assert saved[0]["bale"] == "Loader" and saved[0]["stages"][0]["consumed"] == [48]
    again = Model()
    trainer(2).fit(again, ckpt_path=ckpt)
    assert again.seen == first.seen[6:]


@pytest.mark.parametrize(("world", "to"), [(2, 5), (4, 3)])
def test_lightning_resumes_a_checkpoint_at_another_world_size(pngs: Path, tmp_path: Path, world: int, to: int) -> None:
    # One Trainer per simulated rank; rank 0 saves after its third batch,
    # every rank having trained on three.
    _, Model, trainer = lightning(pngs)
    ckpt = tmp_path / "rank0.ckpt"
    seen: list[int] = []
    for r in range(world):
        m = Model(ckpt if r == 0 else None, at=(0, 2), rank=r, world=world)
        trainer(1).fit(m)
        seen += [i for _, idx, _ in m.seen[:3] for i in idx]
    for r in range(to):
        m = Model(rank=r, world=to)
        trainer(1).fit(m, ckpt_path=ckpt)
        seen += [i for _, idx, _ in m.seen for i in idx]
    assert sorted(seen) == list(range(N))
