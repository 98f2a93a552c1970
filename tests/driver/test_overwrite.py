"""--overwrite (multitask/run.py's ``RunFolder.start``, the driver's and pretrain_mlm.py's) never
reaches out of the run folder: a ``tensorboard`` that is a link to a folder of the user's is
removed as a link, and the events and other files in that folder stay. (What it keeps when a file
of the old run cannot be removed: the bad-input tables' ``*-overwrite-events-cannot-be-removed``.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pretrain_mlm
from tests.commands.bad_input import mlm_argv
from tests.helpers import run_driver, short_run


def linked_events(run: Path, tmp_path: Path) -> dict[str, bytes]:
    """The finished ``run``'s tensorboard/ replaced by a link to a folder of the user's holding
    events of its own and a note; that folder's files, by name."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "events.out.tfevents.1.users-machine").write_bytes(b"the user's own events")
    (mine / "notes.txt").write_text("mine\n")
    shutil.rmtree(run / "tensorboard", ignore_errors=True)
    (run / "tensorboard").symlink_to(mine, target_is_directory=True)
    return {p.name: p.read_bytes() for p in mine.iterdir()}


def kept(tmp_path: Path, run: Path, files: dict[str, bytes]) -> None:
    """The user's folder as it was; the run's link to it gone, not followed."""
    mine = tmp_path / "mine"
    assert {p.name: p.read_bytes() for p in mine.iterdir()} == files
    assert not (run / "tensorboard").is_symlink()


def test_the_driver_removes_a_linked_tensorboard_as_a_link(tiny_checkpoint, tiny_data, tmp_path):
    run = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, run, *short_run(1, 2)) == 0
    files = linked_events(run, tmp_path)
    assert run_driver(tiny_checkpoint, tiny_data, run, *short_run(1, 2), "--overwrite") == 0
    kept(tmp_path, run, files)
    assert (run / "best.safetensors").is_file()


def test_pretrain_mlm_removes_a_linked_tensorboard_as_a_link(tiny_checkpoint, tiny_data, tmp_path):
    run = tmp_path / "mlm"
    assert pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, run)) == 0
    files = linked_events(run, tmp_path)
    assert pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, run, "--overwrite")) == 0
    kept(tmp_path, run, files)
    assert (run / "model.safetensors").is_file()
