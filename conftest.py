"""What the full project's tests need beyond tests/conftest.py, which the student tree shares:
the lab's scripts importable by name, and the lab's fixtures.

This file is not in the student tree (course/authoring/student_tree.txt does not name it), so
nothing the student tree ships names benchmarks/ or the lab's test helpers. pytest loads it for
every test under this folder, before any test module is imported.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent
# The scripts of benchmarks/ import one another by name; the tests import them the same way.
BENCHMARKS = str(ROOT / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)


@pytest.fixture(scope="session")
def finished_run(tiny_checkpoint: Path, tiny_data: Path, tmp_path_factory) -> Path:
    """A finished tiny finetune run of the three tasks (``tiny_run``: 2 epochs of 3 steps), for
    tests that read a run and write nothing into it."""
    from tests.helpers import tiny_run

    out = tmp_path_factory.mktemp("finished") / "finetune"
    return tiny_run(tiny_checkpoint, tiny_data, out, "--option", "finetune")
