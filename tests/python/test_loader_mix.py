"""bale.Loader over a weighted mix of datasets: the order is bale.Mix's
(the same (source, index) list, cut by rank), the proportions are the
weights', each batch says each sample's source, labels stay per source or
map onto one class list, pixels are those of each dataset read alone, and
checkpoints resume exactly, at another world size too."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import bale
from conftest import run_bale


def pack_pngs(base: Path, n: int, classes: tuple[str, ...], seed: int, ext: str = "png") -> Path:
    for i in range(n):
        rng = np.random.default_rng(seed * 1000 + i)
        w, h = 14 + (i * 7) % 19, 12 + (i * 11) % 17
        d = base / "tree" / classes[i % len(classes)]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(d / f"{seed}-{i:04d}.{ext}")
    run_bale("pack", base / "tree", "-o", base / "ds", "--shard-samples", "9", "-q")
    return base / "ds"


@pytest.fixture(scope="module")
def ds_a(tmp_path_factory) -> Path:
    return pack_pngs(tmp_path_factory.mktemp("mixa"), 61, ("ant", "bee", "cat"), 1)


@pytest.fixture(scope="module")
def ds_b(tmp_path_factory) -> Path:
    return pack_pngs(tmp_path_factory.mktemp("mixb"), 23, ("bee", "dog"), 2)


OPTS = dict(batch_size=8, crop="random_resized", size=10, flip=True, seed=5, threads=2,
            color_jitter=(0.4, 0.4, 0.4, 0.1))


def make(a: Path, b: Path, wa: float = 0.7, wb: float = 0.3, **kw) -> bale.Loader:
    opts = dict(OPTS, shuffle=True)
    opts.update(kw)
    loader = bale.Loader([(a, wa), (b, wb)], **opts)
    loader.set_epoch(1)
    return loader


def run(loader: bale.Loader, stop: int | None = None) -> tuple[list[dict], dict | None]:
    """Each batch (copied), and the state after `stop` batches."""
    out, state = [], None
    for batch in loader:
        out.append({k: v.copy() for k, v in batch.items() if isinstance(v, np.ndarray)})
        if stop is not None and len(out) == stop:
            state = json.loads(json.dumps(loader.state_dict()))
            break
    return out, state


def pairs(batches: list[dict]) -> list[tuple[int, int]]:
    return [(int(s), int(i)) for b in batches for s, i in zip(b["sources"], b["indices"])]


def assert_same(got: list[dict], want: list[dict]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in g:
            np.testing.assert_array_equal(g[k], w[k], err_msg=k)


@pytest.mark.parametrize("plan", ["shuffled", "sequential"])
def test_the_order_is_the_mix_s_cut_by_rank_whatever_the_threads(ds_a: Path, ds_b: Path, plan: str) -> None:
    for world in (1, 3):
        for rank in range(world):
            mix = bale.Mix([(ds_a, 0.7), (ds_b, 0.3)], samples=50, plan=plan, seed=5, epoch=1,
                           rank=rank, world_size=world, worker=0, num_workers=1, fields=["cls"])
            want = [(s["__source__"], s["__index__"]) for s in mix]
            kw = dict(samples=50, rank=rank, world_size=world, order=plan)
            one = run(make(ds_a, ds_b, **kw, threads=1))[0]
            three = run(make(ds_a, ds_b, **kw, threads=3))[0]
            assert pairs(one) == want
            assert_same(three, one)


def test_each_rank_gets_its_own_share_of_the_epoch(ds_a: Path, ds_b: Path) -> None:
    mix = bale.Mix([(ds_a, 0.7), (ds_b, 0.3)], samples=200, replacement=True, shuffle=True, seed=5)
    epoch = Counter(mix.pairs(1))
    seen: Counter = Counter()
    lengths = []
    for r in range(4):
        got = pairs(run(make(ds_a, ds_b, samples=200, replacement=True, rank=r, world_size=4))[0])
        lengths.append(len(got))
        seen.update(got)
    # The ranks' shares together are the epoch's list: no draw twice, none left out.
    assert seen == epoch
    assert sum(lengths) == 200 and max(lengths) - min(lengths) <= 1


def test_the_proportions_follow_the_weights(ds_a: Path, ds_b: Path) -> None:
    loader = make(ds_a, ds_b, 0.8, 0.2, samples=400, size=4, flip=False, color_jitter=None)
    assert loader.counts == [320, 80]
    got = pairs(run(loader)[0])
    assert Counter(s for s, _ in got) == {0: 320, 1: 80}
    # Any prefix of the shuffled epoch: within 4 binomial sigmas of the weight.
    for n in (40, 100, 200):
        a = sum(1 for s, _ in got[:n] if s == 0)
        sigma = math.sqrt(n * 0.8 * 0.2)
        assert abs(a - 0.8 * n) <= 4 * sigma, (n, a)
    # Without replacement, source 1 (23 samples, 80 draws) gives each sample 3 or 4 times.
    per = Counter(i for s, i in got if s == 1)
    assert set(per) == set(range(23)) and set(per.values()) <= {3, 4}


def test_sources_labels_and_pixels_are_those_of_each_dataset_alone(ds_a: Path, ds_b: Path) -> None:
    loader = make(ds_a, ds_b, samples=60)
    alone = [bale.Loader(p, **OPTS, shuffle=True) for p in (ds_a, ds_b)]
    for a in alone:
        a.set_epoch(1)
    pixels = [{}, {}]
    for s, a in enumerate(alone):
        for images, _ in a:
            for i, img in zip(a.last_indices.tolist(), images):
                pixels[s][i] = img.copy()
    datasets = [bale.Dataset(ds_a), bale.Dataset(ds_b)]
    for b in run(loader)[0]:
        for img, s, i, label in zip(b["images"], b["sources"], b["indices"], b["labels"]):
            s, i = int(s), int(i)
            assert label == datasets[s][i]["cls"]
            np.testing.assert_array_equal(img, pixels[s][i])
            assert loader.sample_params(i, source=s) == alone[s].sample_params(i)


def test_merged_classes_map_each_source_s_labels_onto_one_list(ds_a: Path, ds_b: Path) -> None:
    loader = make(ds_a, ds_b, classes="merged", samples=40)
    assert loader.classes == ["ant", "bee", "cat", "dog"]
    datasets = [bale.Dataset(ds_a), bale.Dataset(ds_b)]
    for b in run(loader)[0]:
        for s, i, label in zip(b["sources"], b["indices"], b["labels"]):
            ds = datasets[int(s)]
            assert loader.classes[label] == ds.classes[ds[int(i)]["cls"]]
    named = make(ds_a, ds_b, classes=["dog", "cat", "bee", "ant", "eel"], samples=16)
    for b in run(named)[0]:
        for s, i, label in zip(b["sources"], b["indices"], b["labels"]):
            ds = datasets[int(s)]
            assert named.classes[label] == ds.classes[ds[int(i)]["cls"]]
    with pytest.raises(ValueError, match="not all in the class list"):
        make(ds_a, ds_b, classes=["ant", "bee"])


@pytest.fixture(scope="module")
def unnamed(tmp_path_factory) -> Path:
    """Samples with a .cls label and no class names in the manifest."""
    base = tmp_path_factory.mktemp("mixu")
    (base / "tree").mkdir()
    for i in range(5):
        Image.new("RGB", (9, 9), (i * 40, 0, 0)).save(base / "tree" / f"{i:03d}.png")
        (base / "tree" / f"{i:03d}.cls").write_text(str(7 + i))
    run_bale("pack", base / "tree", "-o", base / "ds", "-q")
    return base / "ds"


def test_a_label_without_a_place_in_the_merged_list_is_an_error(ds_a: Path, unnamed: Path) -> None:
    assert bale.Dataset(unnamed).classes is None
    mix = bale.Mix([(ds_a, 0.5), (unnamed, 0.5)], shuffle=True, seed=1, classes="merged")
    with pytest.raises(ValueError, match=r"source 1 \(.*\) has label \d+"):
        list(mix)
    loader = bale.Loader([(ds_a, 0.5), (unnamed, 0.5)], batch_size=4, size=8, classes="merged")
    with pytest.raises(bale.FormatError, match=r"label \d+ of source 1"):
        list(loader)
    # Labels per source: the label as it is.
    per = bale.Loader([(ds_a, 0.5), (unnamed, 0.5)], batch_size=4, size=8, samples=10)
    got = {(int(s), int(i)): int(y) for b in per for s, i, y in zip(b["sources"], b["indices"], b["labels"])}
    assert {y for (s, i), y in got.items() if s == 1} <= set(range(7, 12))


def test_into_copies_a_mix_s_batches(ds_a: Path, ds_b: Path) -> None:
    want = run(make(ds_a, ds_b, samples=20))[0]
    images = np.zeros_like(want[0]["images"])
    labels = np.zeros_like(want[0]["labels"])
    for k, n in enumerate(make(ds_a, ds_b, samples=20).into(images, labels)):
        np.testing.assert_array_equal(images[:n], want[k]["images"])
        np.testing.assert_array_equal(labels[:n], want[k]["labels"])
    assert k == len(want) - 1


def test_datasets_of_another_image_layout_are_refused(ds_a: Path, tmp_path: Path) -> None:
    jpgs = pack_pngs(tmp_path, 6, ("ant",), 3, ext="jpg")
    with pytest.raises(ValueError, match=r"dataset .* \(source 1\) has its images in jpg"):
        bale.Loader([(ds_a, 0.5), (jpgs, 0.5)], batch_size=4, size=8)
    with pytest.raises(ValueError, match=f'no member "png" in the dataset {jpgs}'):
        bale.Loader([(ds_a, 0.5), (jpgs, 0.5)], batch_size=4, size=8, image="png")
    with pytest.raises(ValueError, match="shard_shuffled"):
        bale.Loader([(ds_a, 0.5), (ds_a, 0.5)], batch_size=4, size=8, order="shard_shuffled")
    with pytest.raises(ValueError, match="samples, replacement and classes are a mix's"):
        bale.Loader(ds_a, batch_size=4, size=8, classes="merged")


def test_a_resumed_mix_yields_the_batches_the_run_had_left(ds_a: Path, ds_b: Path) -> None:
    whole, _ = run(make(ds_a, ds_b, samples=70))
    head, state = run(make(ds_a, ds_b, samples=70), 3)
    assert state["datasets"] and len(json.dumps(state)) < 600
    resumed = make(ds_a, ds_b, samples=70)
    resumed.load_state_dict(state)
    rest, _ = run(resumed)
    assert_same(head + rest, whole)


def test_states_of_another_mix_are_refused(ds_a: Path, ds_b: Path) -> None:
    _, state = run(make(ds_a, ds_b, samples=40), 1)
    for other, what in [
        (make(ds_a, ds_b, 0.6, 0.4, samples=40), "another weights"),
        (make(ds_a, ds_b, samples=40, seed=6), "another seed"),
        (make(ds_b, ds_a, 0.7, 0.3, samples=40), "other datasets"),
        (make(ds_a, ds_b, samples=41), "another number of samples"),
        (make(ds_a, ds_b, samples=40, classes="merged"), "other augmentation settings"),
    ]:
        with pytest.raises(ValueError, match=what):
            other.load_state_dict(state)
    alone = bale.Loader(ds_a, **OPTS)
    with pytest.raises(ValueError, match="other datasets|another dataset"):
        make(ds_a, ds_b).load_state_dict(alone.state_dict())
    with pytest.raises(ValueError, match="another dataset"):
        alone.load_state_dict(state)


@pytest.mark.parametrize(("world", "to"), [(4, 3), (2, 5)])
def test_an_elastic_resume_reads_what_the_epoch_had_left_once(ds_a: Path, ds_b: Path, world: int, to: int) -> None:
    epoch = Counter(bale.Mix([(ds_a, 0.7), (ds_b, 0.3)], samples=150, shuffle=True, seed=5).pairs(1))
    seen: Counter = Counter()
    state = None
    for r in range(world):
        got, st = run(make(ds_a, ds_b, samples=150, rank=r, world_size=world), 2)
        seen.update(pairs(got))
        state = st if r == 0 else state
    assert sum(seen.values()) == world * 16
    for r in range(to):
        resumed = make(ds_a, ds_b, samples=150, rank=r, world_size=to)
        resumed.load_state_dict(state)
        seen.update(pairs(run(resumed)[0]))
    assert seen == epoch


def test_an_epoch_too_long_for_memory_is_a_clear_error_not_an_abort(ds_a: Path, ds_b: Path) -> None:
    # 12 TB of epoch list: before, the allocation aborted the process.
    for make_it in (
        lambda: iter(make(ds_a, ds_b, samples=10**12)),
        lambda: iter(bale.Mix([(str(ds_a), 0.7), (str(ds_b), 0.3)], samples=10**12)),
    ):
        with pytest.raises(ValueError, match="ask for fewer samples"):
            next(make_it())
