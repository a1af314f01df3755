"""The Kubernetes recipe of docs/distributed.md: both manifests are valid
objects of the Kubernetes API (strict JSON schemas of the `kubernetes-validate`
package; `kubectl --dry-run=client` needs a cluster to reach), and the pack
Job's `--part I/N` agrees with its number of completions. The Slurm recipe
runs for real in tests/e2e/slurm.rs.
"""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

DOC = Path(__file__).resolve().parents[2] / "docs" / "distributed.md"
VERSIONS = ["1.29", "1.37"]


def manifests() -> dict[str, dict]:
    text = DOC.read_text()
    found = {}
    for name, body in re.findall(r"`([\w-]+\.yaml)`:\s*\n\s*```yaml\n(.*?)```", text, re.S):
        found[name] = yaml.safe_load(body)
    return found


def test_the_doc_holds_the_pack_and_merge_jobs() -> None:
    assert sorted(manifests()) == ["merge-job.yaml", "pack-job.yaml"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("name", ["pack-job.yaml", "merge-job.yaml"])
def test_each_manifest_is_a_valid_kubernetes_object(name: str, version: str) -> None:
    kubernetes_validate.validate(manifests()[name], version, strict=True)


def test_the_validator_refuses_a_broken_manifest() -> None:
    bad = manifests()["pack-job.yaml"]
    bad["spec"]["completions"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)
    unknown = manifests()["merge-job.yaml"]
    unknown["spec"]["template"]["spec"]["containers"][0]["comand"] = ["sh"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(unknown, VERSIONS[-1], strict=True)


def test_the_indexed_job_packs_one_part_per_completion() -> None:
    job = manifests()["pack-job.yaml"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    args = " ".join(spec["template"]["spec"]["containers"][0]["args"])
    parts = re.findall(r"--part \$\{JOB_COMPLETION_INDEX\}/(\d+)", args)
    assert parts == [str(spec["completions"])], args
