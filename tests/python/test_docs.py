"""The code blocks of README.md and docs/*.md run as written.

Blocks are found by their fence's language:

- ```python blocks run, those of one page in order in one interpreter and
  one namespace (a page's later blocks use what its first ones define);
- ```sh, ```console, ```shell and ```bash blocks run their `bale` lines
  (`bale ...`, or `VAR=$(bale ...)`; a console's `$ ` prompt is dropped), in
  order, in one shell; the other lines (cargo, pip, sudo, comments) do not run.

Each runs in a fresh directory holding small generated fixtures under the
paths the docs use (`/data/imagenet/train`, `/data/train-bale`, ...: absolute
`/data/` and `/tmp/` paths are moved into that directory), with the `bale`
under test ($BALE_BIN) first on PATH. A block that needs what this machine
has not (a GPU, a bucket, a cluster) or is only a fragment says so just before
its fence with `<!-- not run: reason -->`; every other block must run, so a
new example that does not run fails here. VARIANTS lists the few edits that
make a block quick on a CPU (fewer epochs, a smaller model, a shorter bench).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT, bale_bin

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py"}
SHELL = {"sh", "console", "shell", "bash"}
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(?P<why>.*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
# A `bale` command, alone or captured into a variable.
BALE_LINE = re.compile(r"^(?:[A-Za-z_]\w*=\"?\$\()?bale\s")

# CPU variants: (page, text in a block) -> the text the test runs instead.
# Each must match (test_every_variant_applies), so a doc edit cannot leave
# one silently unused.
VARIANTS = {
    # 90 epochs of ResNet-50 on 256-image batches is a GPU's work.
    ("loader.md", "for epoch in range(90):"): "for epoch in range(1):",
    ("loader.md", "torchvision.models.resnet50()"): "torchvision.models.resnet18()",
    ("loader.md", 'batch_size=256, crop="random_resized", size=224'): 'batch_size=4, crop="random_resized", size=224',
    # The pinned ring of `into`, on CPU: plain tensors, copies that clone, and
    # an event that is always done.
    ("loader.md", ".pin_memory()"): "",
    ("loader.md", ".cuda(non_blocking=True)"): ".clone()",
    ("loader.md", "torch.cuda.Event()"): "type('Event', (), {'record': lambda e: None, 'synchronize': lambda e: None})()",
    # A bench of a few seconds' budget per pass, on a tree of a dozen images.
    ("README.md", "--target 2560 --plot bench.svg"): "--target 2560 --plot bench.svg --budget 0.05",
    ("bench.md", "--target 2560 --plot bench.svg"): "--target 2560 --plot bench.svg --budget 0.05",
}

# Moves the docs' absolute paths into the block's directory.
ABSOLUTE = re.compile(r"(?<![\w.:/~-])/(data|tmp)/")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    not_run: str | None

    @property
    def name(self) -> str:
        return f"{self.page.name}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m["indent"]), i
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        body = textwrap.dedent("\n".join(ln[indent:] if ln[:indent].isspace() else ln for ln in lines[i + 1 : j]))
        k = start - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = NOT_RUN.match(lines[k]) if k >= 0 else None
        found.append(Block(page, start + 1, m["lang"], body, marker["why"] if marker else None))
        i = j + 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]


def variant(block: Block) -> str:
    code = block.code
    for (page, old), new in VARIANTS.items():
        if page == block.page.name:
            code = code.replace(old, new)
    return code


def moved(code: str, work: Path) -> str:
    return ABSOLUTE.sub(lambda m: f"{work}/{m[1]}/", code)


def shell_commands(code: str) -> list[str]:
    """The `bale` lines of a shell block, continuation lines joined."""
    joined, cur = [], ""
    for line in code.split("\n"):
        if line.startswith("$ "):
            line = line[2:]
        if cur:
            line = line.lstrip()
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1].rstrip() + " "
            continue
        joined.append(cur + line)
        cur = ""
    return [c.strip() for c in joined if BALE_LINE.match(c.strip())]


def runnable(block: Block) -> bool:
    if block.lang in PYTHON:
        return True
    return block.lang in SHELL and bool(shell_commands(block.code))


# Fixtures ------------------------------------------------------------------

CLASSES = ["n01440764", "n01443537"]


def image_tree(root: Path, per_class: int = 4) -> None:
    """An ImageFolder tree of small JPEGs, ImageNet's names (the README gets
    `n01440764/n01440764_10026`), every other image with a .json sidecar."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for c, cls in enumerate(CLASSES):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            stem = root / cls / f"{cls}_{10026 + i}"
            pixels = rng.integers(0, 256, (48 + 8 * i, 64, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(f"{stem}.jpg", quality=80)
            if i % 2:
                stem.with_suffix(".json").write_text(json.dumps({"class": c, "i": i}))


def tars(dir: Path, prefix: str, n: int) -> None:
    """`n` WebDataset tars `PREFIX-000000.tar`, ..., one small sample each."""
    dir.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        with tarfile.open(dir / f"{prefix}-{i:06d}.tar", "w", format=tarfile.USTAR_FORMAT) as t:
            for ext, data in ((".txt", f"sample {i}".encode()), (".cls", str(i % 2).encode())):
                info = tarfile.TarInfo(f"k{i:06d}{ext}")
                info.size = len(data)
                t.addfile(info, __import__("io").BytesIO(data))


def mds(dir: Path) -> None:
    from streaming import MDSWriter

    with MDSWriter(out=str(dir), columns={"txt": "str", "cls": "int"}) as w:
        for i in range(6):
            w.write({"txt": f"caption {i}", "cls": i % 2})


def litdata(dir: Path) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import litdata as ld
        from test_migrate import _lit_write as item  # items bale's LitData reader is tested on
        if __name__ == "__main__":
            ld.optimize(fn=item, inputs=list(range(6)), output_dir={str(dir)!r}, chunk_bytes="4KB",
                        num_workers=1, mode="overwrite")
    """)
    script = dir.parent / "_litdata_fixture.py"
    script.write_text(code)
    subprocess.run([sys.executable, str(script)], check=True, capture_output=True, cwd=dir.parent)
    script.unlink()


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """Inputs every block may read, made once: copied into each block's directory."""
    b = tmp_path_factory.mktemp("docs-base")
    image_tree(b / "tree")
    subprocess.run(
        [str(bale_bin()), "pack", b / "tree", "-o", b / "dataset", "--labels", "dir", "--quiet"],
        check=True,
    )
    return b


def fixtures(base: Path, work: Path, code: str, outputs: set[str]) -> None:
    """Puts in `work` the inputs `code` names and does not write itself."""
    trees = ["data/imagenet/train", "imagenet/train", "data/train"]
    datasets = ["data/train-bale", "imagenet"]

    def wanted(rel: str) -> bool:
        if rel in outputs:
            return False
        return re.search(rf"(?<![\w/-]){re.escape(rel)}(?![\w-])", code) is not None

    for rel in trees:
        if wanted(rel) and not (work / rel).exists():
            shutil.copytree(base / "tree", work / rel)
    for rel in datasets:
        if wanted(rel) and not (work / rel).exists():
            shutil.copytree(base / "dataset", work / rel)
    if "data/wds/train-" in code:
        tars(work / "data/wds", "train", 1000)
    if "shards/train-" in code:
        tars(work / "shards", "train", 1000)
    if "list.txt" in code:
        (work / "data").mkdir(exist_ok=True)
        files = sorted(p.relative_to(base / "tree") for p in (base / "tree").rglob("*.jpg"))
        (work / "list.txt").write_text("".join(f"imagenet/train/{f}\n" for f in files))
        if not (work / "data/imagenet/train").exists():
            shutil.copytree(base / "tree", work / "data/imagenet/train")
    if "labels.csv" in code:
        files = sorted(p.relative_to(base / "tree") for p in (base / "tree").rglob("*.jpg"))
        (work / "labels.csv").write_text(
            "path,label\n" + "".join(f"imagenet/train/{f},{f.parts[0]}\n" for f in files)
        )
    if "meta/wids.json" in code:
        tars(work / "shards", "train", 2)
        (work / "meta").mkdir()
        subprocess.run(
            [str(bale_bin()), "index", "shards/train-{000000..000001}.tar", "-o", "idx",
             "--wids-json", "meta/wids.json", "--quiet"],
            cwd=work,
            check=True,
        )
    if "data/mds-train" in code:
        mds(work / "data/mds-train")
    if "data/litdata-train" in code:
        litdata(work / "data/litdata-train")


def environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(bale_bin()).resolve().parent}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


# Python pages: one interpreter, the blocks in order. -------------------------

RUNNER = """
import json, sys, traceback
blocks = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for name, code in blocks:
    try:
        exec(compile(code, name, "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        print(f"the block at {name} failed", file=sys.stderr)
        sys.exit(1)
"""


def python_pages() -> list[Path]:
    return [p for p in PAGES if any(b.lang in PYTHON and not b.not_run for b in blocks(p))]


@pytest.mark.parametrize("page", python_pages(), ids=lambda p: p.name)
def test_the_python_blocks_of_each_page_run(page: Path, base: Path, tmp_path: Path) -> None:
    todo = [b for b in blocks(page) if b.lang in PYTHON and not b.not_run]
    code = "\n".join(moved(b.code, Path("/W")) for b in todo).replace("/W/", "")
    fixtures(base, tmp_path, code, set())
    (tmp_path / "tmp").mkdir(exist_ok=True)
    listing = tmp_path / "_blocks.json"
    listing.write_text(json.dumps([(b.name, moved(variant(b), tmp_path)) for b in todo]))
    r = subprocess.run(
        [sys.executable, "-c", RUNNER, str(listing)],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{page.name}:\n{r.stderr[-6000:]}\n{r.stdout[-2000:]}"


# Shell blocks: their `bale` lines, in one shell. ----------------------------

SHELL_BLOCKS = [b for b in ALL if b.lang in SHELL and not b.not_run and shell_commands(b.code)]


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.name)
def test_the_bale_lines_of_each_shell_block_run(block: Block, base: Path, tmp_path: Path) -> None:
    commands = shell_commands(moved(variant(block), Path("/W")))
    relative = [c.replace("/W/", "") for c in commands]
    outputs = {m for c in relative for m in re.findall(r"(?:-o|--to)\s+['\"]?([^\s'\"]+?)/?['\"]?(?:\s|$)", c)}
    fixtures(base, tmp_path, "\n".join(relative), outputs)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    script = "set -euxo pipefail\n" + "\n".join(c.replace("/W/", f"{tmp_path}/") for c in commands) + "\n"
    r = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, f"{block.name}:\n{r.stderr[-6000:]}"


# The rules themselves. -------------------------------------------------------


def test_every_block_that_is_not_run_says_why() -> None:
    """A marker gives a reason and stands before a block that would run."""
    for block in ALL:
        if block.not_run is not None:
            assert block.not_run, f"{block.name}: `<!-- not run: -->` without a reason"
            assert runnable(block), f"{block.name}: marked not run, but holds nothing this test would run"
    for page in PAGES:
        lines = page.read_text().split("\n")
        for i, line in enumerate(lines):
            if NOT_RUN.match(line):
                rest = [ln for ln in lines[i + 1 :] if ln.strip()]
                assert rest and FENCE.match(rest[0]), f"{page.name}:{i + 1}: a not-run marker before no code block"


def test_every_variant_applies() -> None:
    for (page, old), _ in VARIANTS.items():
        assert any(b.page.name == page and old in b.code for b in ALL), f"{page}: no block holds {old!r}"


def test_the_blocks_are_found() -> None:
    """The extraction sees the blocks it must: a broken parser would pass every test above."""
    names = {b.name for b in ALL}
    assert len(SHELL_BLOCKS) >= 8 and python_pages(), names
    readme = [b for b in ALL if b.page.name == "README.md" and b.lang == "sh" and "bale verify" in b.code]
    assert readme and "bale stat /data/train-bale" in "\n".join(shell_commands(readme[0].code))
    assert shell_commands("$ bale ls x | head\nDATA=$(bale stage d)\nsudo bale stage --mount d\ncargo x") == [
        "bale ls x | head",
        "DATA=$(bale stage d)",
    ]
    assert shell_commands("bale pack a \\\n    -o b") == ["bale pack a -o b"]
