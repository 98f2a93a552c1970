"""The bad-input tables' tiny finished runs (tests/commands/bad_input.py's ``RunStore``): made
once a session, each the first time a table asks for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.commands.bad_input import RunStore


@pytest.fixture(scope="session")
def run_store(tiny_checkpoint, tiny_data, tmp_path_factory) -> RunStore:
    return RunStore(tiny_checkpoint, tiny_data, tmp_path_factory.mktemp("made"))


@pytest.fixture(scope="module")
def made(run_store: RunStore, request) -> dict[str, Path]:
    """The runs the module's table names in ``RUNS``, made before its first test."""
    return run_store.runs(getattr(request.module, "RUNS", ()))
