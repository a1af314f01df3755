"""The ``bale`` command of the wheel (its ``bale`` entry point and ``python -m bale``).

It runs the same Rust code as the cargo-installed ``bale`` binary, in the extension
module: the same output, the same exit codes (0, 1 when problems were found, 2 for
errors and usage errors, 130 after Ctrl-C).
"""

from __future__ import annotations

import sys


def main() -> int:
    """Runs ``bale`` with this process's arguments; returns its exit code."""
    from bale import _native

    return _native.cli_main(["bale", *sys.argv[1:]])
