"""Every test file has a tier (the top-level conftest.py's TIERS: fast, slow, by fixture or one
per exercise), so that a new file is placed in `make check` or out of it on purpose, and the
table names no file that is gone."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_top_conftest():
    """The top-level conftest.py (``import conftest`` may find tests/conftest.py)."""
    spec = importlib.util.spec_from_file_location("top_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = load_top_conftest()


def test_every_test_file_has_a_tier_and_every_tier_a_file():
    files = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")}
    untiered = sorted(files - set(conftest.TIERS))
    gone = sorted(set(conftest.TIERS) - files)
    assert not untiered, f"test files with no tier in conftest.py's TIERS: {untiered}"
    assert not gone, f"TIERS names files that are gone: {gone}"
    known = {conftest.FAST, conftest.SLOW, conftest.BY_FIXTURE, conftest.ONE_PER_EXERCISE}
    assert set(conftest.TIERS.values()) <= known


def test_the_grader_files_are_test_files():
    assert conftest.GRADER_FILES <= set(conftest.TIERS)


def test_the_installed_pytest_keeps_pytest_xdists_load_groups():
    """The class graders share runner user ids and lock folders: ``make test`` keeps them in one
    worker through ``--dist loadgroup``, which only works where pytest reads the node id that
    pytest-xdist rewrites (requirements-dev.txt pins such a pytest)."""
    assert conftest.load_groups_work()
