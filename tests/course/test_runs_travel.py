"""A run made in the full project is usable in the student tree once the student's exercises
pass: evaluated (``--evaluate``), resumed (``--resume``) and started from (``--init_from``),
whichever optimizer implementation it used (the default ``foreach`` and ``fused`` are extras the
student tree lacks, but the implementation is no part of a model: it is read as ``adamw``). A run
that used an extra changing the model or its outputs is still refused there, naming the extra.

Instructor-only (it writes a student tree with every solution in place)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course.authoring import scaffold
from multitask.extras import EXTRAS
from tests.helpers import driver_argv, driver_in, kill_when_resumable, short_run, tiny_run

# Each extra that changes only a run's speed or what it reports, and a config.json value that
# used it: a run with it is read in the student tree (which lacks every extra) as the core's.
SPEED_OR_REPORTS = {
    "compiled": ("compile", True),
    "optimizer_foreach": ("optimizer", "foreach"),
    "fused_adamw": ("optimizer", "fused"),
    "tensorboard": ("report_to", "tensorboard"),
    "cuda_graphs": ("cuda_graphs", "on"),
}


@pytest.fixture(scope="module")
def solved_tree(tmp_path_factory) -> Path:
    """The student tree with every solution in place: a student whose exercises all pass."""
    out = tmp_path_factory.mktemp("solved") / "tree"
    scaffold.write_student_tree(out, remove=[])
    return out


@pytest.mark.parametrize("optimizer", ["foreach", "fused"])
def test_a_full_project_run_is_evaluated_resumed_and_started_from_in_the_student_tree(
    optimizer, solved_tree, tiny_checkpoint, tiny_data, tmp_path
):
    flags = ("--optimizer", optimizer, "--epochs", "2", "--steps_per_epoch", "3", "--no_plots")
    cut = tmp_path / "cut"
    kill_when_resumable(tiny_checkpoint, tiny_data, cut, *flags, "--save_every", "1")
    assert json.loads((cut / "config.json").read_text())["optimizer"] == optimizer
    assert not (cut / "summary.json").exists()
    resumed = driver_in(solved_tree, "--out_dir", str(cut), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((cut / "summary.json").read_text())["steps"] == 6

    argv = driver_argv(tiny_checkpoint, tiny_data, tmp_path / "ev")
    evaluated = driver_in(solved_tree, *argv, "--evaluate", str(cut))
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert (tmp_path / "ev" / "sst-dev-output.csv").exists()

    argv = driver_argv(tiny_checkpoint, tiny_data, tmp_path / "new")
    started = driver_in(solved_tree, *argv, *short_run(1, 2), "--init_from", str(cut))
    assert started.returncode == 0, started.stderr[-3000:]
    assert json.loads((tmp_path / "new" / "config.json").read_text())["optimizer"] == "adamw"


def test_a_run_whose_extra_changes_the_model_is_refused_naming_it(
    solved_tree, tiny_checkpoint, tiny_data, tmp_path
):
    run = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "pcgrad", "--step_gradient", "pcgrad")
    argv = [*driver_argv(tiny_checkpoint, tiny_data, tmp_path / "ev"), "--evaluate", str(run)]
    refused = driver_in(solved_tree, *argv)
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-2000:]
    assert "--step_gradient pcgrad" in lines[0] and "minbert/pcgrad.py" in lines[0]


def test_every_extra_of_speed_or_reports_is_in_the_table():
    assert set(SPEED_OR_REPORTS) == {extra.name for extra in EXTRAS if extra.instead is not None}


def test_a_run_that_used_every_extra_of_speed_or_reports_is_evaluated_in_the_student_tree(
    solved_tree, tiny_checkpoint, tiny_data, tmp_path
):
    """One finished full-project run whose config.json says it used each of them (both
    optimizer implementations take turns: one run holds one): evaluated in the student tree."""
    run = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "run", epochs=1, steps=2)
    config = json.loads((run / "config.json").read_text())
    for optimizer in ("foreach", "fused"):
        used = dict(SPEED_OR_REPORTS.values()) | {"optimizer": optimizer}
        (run / "config.json").write_text(json.dumps(config | used))
        out = tmp_path / f"ev-{optimizer}"
        argv = [*driver_argv(tiny_checkpoint, tiny_data, out), "--evaluate", str(run)]
        evaluated = driver_in(solved_tree, *argv)
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        assert (out / "sst-dev-output.csv").exists()
