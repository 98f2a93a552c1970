"""A command that moved (tools/__init__.py: ``MOVED``) still answers at its old name: run as
``python -m multitask.<name>``, one line names the new command and it exits 2, having done
nothing else; the new name is a command of the tools' folder; imported, the old name does
nothing (every module of the project imports in a fresh interpreter)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tools import MOVED

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_command_name_says_the_new_one(old, tmp_path):
    new = MOVED[old]
    done = subprocess.run(
        [sys.executable, "-m", old, "runs/anything", "--out", str(tmp_path / "out")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"python -m {old} moved: run python -m {new}")
    assert done.stderr.count("\n") == 1 and list(tmp_path.iterdir()) == []
    assert new.startswith("tools.") and callable(importlib.import_module(new).main)
