"""The loader benchmark's workloads, one module each.

A module has `KEY` (its name for `--only`), `add_arguments(ap)` (its options,
in its own group) and `workloads(args) -> list[Workload]` (none when its inputs
were not given). To add a workload, write a module like `segmentation.py` and
append it to MODULES; to add a row to one, append a `Row` to its list.
"""

from . import augment, detection, plain, segmentation

MODULES = (plain, segmentation, detection, augment)
