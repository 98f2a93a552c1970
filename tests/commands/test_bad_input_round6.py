"""Round six of the bad-input promise (tests/commands/test_bad_input_commands.py's table, same
assertions), a section of rows per command: the scaffold's --force over what a student changed
(symlinks, notes, finished exercises) and over a full disk; the driver's run folder with its
tensorboard/; --add_to over earlier weights that lack a task's tensors; the Gradescope zip over
a file of the user's. Each case ends in exactly one line ``error: ...`` naming the flag or file,
the documented exit code (1 for a write fault), no traceback, and every file that existed
before byte-identical, with nothing new left behind.

Tests of their own below: the scaffold into a read-only folder (a real process without root's
permission bypass), --force over the scaffold's own files and --overwrite of a zip, which are
replaced.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import multitask_runs
import pytest
from safetensors.torch import load_file, save_file

import multitask.attention
from course.authoring import scaffold
from course.grading import autograder
from multitask import extras, fusion_weights
from tests.commands.test_bad_input_commands import (
    MAINS,
    SHORT,
    Case,
    Ctx,
    disk_full,
    driver,
    in_config,
    invoke,
    make_runs,
    plain,
    snapshot,
    then,
)
from tests.commands.test_bad_input_round4 import EXERCISE, files, runner, source_tree
from tests.helpers import run_driver, short_run

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {
    **MAINS,
    "runner": multitask_runs.main,
    "gradescope": autograder.main,  # the zip: python -m course.grading.autograder
    "attention": multitask.attention.main,
    "weights": fusion_weights.main,
}
NO_RUNS = {"scaffold", "gradescope", "runner"}  # commands whose cases need no finished tiny run
NEW = ("--out_dir", "{tmp}/new")


@pytest.fixture(scope="module")
def made(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    """The tiny finished runs of tests/commands/test_bad_input_commands.py (asked for by the cases
    of commands that read a run)."""
    root = tmp_path_factory.mktemp("made6")
    made = make_runs(tiny_checkpoint, tiny_data, root)
    added = ("--add_to", str(made["adapter"]), "--tasks", "sts")
    assert run_driver(tiny_checkpoint, tiny_data, root / "added", *SHORT, *added) == 0
    fusion = ("--option", "fusion", "--adapters_from", str(made["adapter"]))
    assert run_driver(tiny_checkpoint, tiny_data, root / "fusion", *SHORT, *fusion) == 0
    return {**made, "added": root / "added", "fusion": root / "fusion"}


# -- the scaffold: a student tree of round four's small source, then the student's changes -----

FORCE = ("{tmp}/out", "--source", "{tmp}/src", "--force")


def scaffolded(change=None):
    """The student tree of round four's source in {tmp}/out, written by the scaffold, then
    ``change(ctx)``: what the student did to it."""

    def make(ctx: Ctx) -> None:
        source_tree()(ctx)
        assert scaffold.main([str(ctx.tmp / "out"), "--source", str(ctx.tmp / "src")]) == 0
        if change is not None:
            change(ctx)

    return make


def moved_out_and_linked(ctx: Ctx) -> None:
    """The exercise file moved to the student's own folder, finished there, and linked back."""
    mine = ctx.tmp / "mine"
    mine.mkdir()
    (mine / "geometry.py").write_text(EXERCISE)
    (ctx.tmp / "out" / "pkg" / "geometry.py").unlink()
    (ctx.tmp / "out" / "pkg" / "geometry.py").symlink_to(mine / "geometry.py")


def folder_linked(ctx: Ctx) -> None:
    """The package folder moved to the student's own place and linked back."""
    shutil.move(ctx.tmp / "out" / "pkg", ctx.tmp / "mine")
    (ctx.tmp / "mine" / "geometry.py").write_text(EXERCISE)
    (ctx.tmp / "out" / "pkg").symlink_to(ctx.tmp / "mine")


def write(rel: str, text: str):
    def change(ctx: Ctx) -> None:
        (ctx.tmp / "out" / rel).write_text(text)

    return change


def no_record(ctx: Ctx) -> None:
    """A tree written before the scaffold kept its record, whose note the student changed."""
    (ctx.tmp / "out" / scaffold.RECORD).unlink()
    (ctx.tmp / "out" / "README.md").write_text("a course\nmy notes on it\n")


SCAFFOLD = [
    Case(
        "s-force-exercise-symlink",
        "scaffold",
        then(scaffolded(moved_out_and_linked), plain(*FORCE)),
        "pkg/geometry.py (a symlink)",
    ),
    Case(
        "s-force-folder-symlink",
        "scaffold",
        then(scaffolded(folder_linked), plain(*FORCE)),
        "pkg/geometry.py (via pkg)",
    ),
    Case(
        "s-force-note-changed",
        "scaffold",
        then(scaffolded(write("README.md", "a course\nmy notes\n")), plain(*FORCE)),
        "(README.md)",
    ),
    Case(
        "s-force-exercise-finished-as-reference",
        "scaffold",
        then(scaffolded(write("pkg/geometry.py", EXERCISE)), plain(*FORCE)),
        "(pkg/geometry.py)",
    ),
    Case(
        "s-force-new-file-of-the-students",
        "scaffold",
        then(
            scaffolded(lambda c: (write("NOTES.md", "mine\n")(c), files("src/NOTES.md")(c))),
            plain(*FORCE),
        ),
        "(NOTES.md)",
    ),
    Case(
        "s-force-no-record",
        "scaffold",
        then(scaffolded(no_record), plain(*FORCE)),
        "(README.md)",
    ),
    Case(
        "s-force-record-corrupted",
        "scaffold",
        then(scaffolded(write(scaffold.RECORD, "{not json")), plain(*FORCE)),
        f"out/{scaffold.RECORD}: corrupted",
    ),
    Case(
        "s-disk-full",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src")),
        ": cannot write: No space left on device",
        1,
        disk_full("fsync"),
    ),
    Case(
        "s-force-disk-full",
        "scaffold",
        then(scaffolded(), plain(*FORCE, "--keep", "area")),
        ": cannot write: No space left on device",
        1,
        disk_full("fsync"),
    ),
]


# -- the driver's run folder and --report_to tensorboard --------------------------------------


def in_run(name: str, folder: bool = False):
    """A file (or folder) of the user's inside a copy of the finished run."""

    def make(ctx: Ctx) -> None:
        path = ctx.run() / name
        path.mkdir() if folder else path.write_text("the user's own\n")

    return make


RUN_FOLDER = [
    Case(
        "d-overwrite-run-with-a-file-of-the-users",
        "driver",
        then(in_run("notes.txt"), driver("--out_dir", "{run}", "--overwrite")),
        "holds files no run of train_multitask.py writes (notes.txt)",
    ),
    Case(
        "d-tensorboard-is-a-file",
        "driver",
        then(
            in_run("tensorboard"),
            driver("--out_dir", "{run}", "--overwrite", "--report_to", "tensorboard"),
        ),
        "tensorboard is not a folder, and the run's events go there",
    ),
]


# -- --add_to: every tensor of the earlier runs' tasks ------------------------------------------


def without(name: str, prefix: str):
    """A copy of the run ``name`` whose best.safetensors lacks the tensors under ``prefix``."""

    def make(ctx: Ctx) -> None:
        path = ctx.copy(name) / "best.safetensors"
        kept = {k: v for k, v in load_file(str(path)).items() if not k.startswith(prefix)}
        assert len(kept) < len(load_file(str(path)))
        save_file(kept, str(path))

    return make


def added_to_the_copy(ctx: Ctx) -> None:
    """A copy of the run added to the adapter run, added to the adapter run's copy instead."""
    ctx.edit_json(
        ctx.copy("added") / "config.json",
        lambda c: c.__setitem__("add_to", str(ctx.tmp / "adapter")),
    )


ADD_TO = [
    Case(
        "d-add-to-best-lacks-a-head",
        "driver",
        then(
            without("adapter", "heads.para."),
            driver("--add_to", "{tmp}/adapter", "--tasks", "sts", *NEW, runs=()),
        ),
        "adapter/best.safetensors lacks 2 tensors of the tasks",
    ),
    Case(
        "d-add-to-best-lacks-plugins",
        "driver",
        then(
            without("adapter", "bert.plugins"),
            driver("--add_to", "{tmp}/adapter", "--tasks", "sts", *NEW, runs=()),
        ),
        "adapter/best.safetensors lacks",
    ),
    Case(
        "d-evaluate-added-run-whose-base-lacks-a-head",
        "driver",
        then(
            lambda c: (without("adapter", "heads.sst.")(c), added_to_the_copy(c)),
            driver("--evaluate", "{tmp}/added", runs=()),
        ),
        "e.g. heads.sst.",
    ),
]


# -- the Gradescope zip: never over a file of the user's without --overwrite ---------------------

GRADESCOPE = [
    Case(
        "g-zip-exists",
        "gradescope",
        then(files("autograder.zip"), plain("{tmp}/autograder.zip")),
        "autograder.zip exists; pass --overwrite",
    ),
    Case(
        "g-zip-is-a-link",
        "gradescope",
        then(
            lambda c: (files("mine.zip")(c), (c.tmp / "a.zip").symlink_to(c.tmp / "mine.zip")),
            plain("{tmp}/a.zip"),
        ),
        "a.zip exists; pass --overwrite",
    ),
    Case(
        "g-leaderboard-zip-exists",
        "gradescope",
        then(
            files("autograder.zip", "labels/"),
            plain("{tmp}/autograder.zip", "--leaderboard", "--labels", "{tmp}/labels"),
        ),
        "autograder.zip exists; pass --overwrite",
    ),
]


# -- one reader of config.json: what --evaluate refuses, every command that opens a run refuses --

# (key, value, the reason --evaluate gives in "config.json is corrupted (...)")
BAD_CONFIG = [
    ("max_grad_norm", "x", "--max_grad_norm 'x': must be a number"),
    ("report_to", "bogus", "--report_to 'bogus': must be one of none, tensorboard"),
    ("optimizer", "sgd", "--optimizer 'sgd': must be one of adamw, foreach, fused"),
    ("teachers", 5, "--teachers 5: must be a list of strings"),
]
# Each command on a copy of a finished run, named relative to the current directory (so that the
# line's "RUN_DIR: ../run/config.json" tells the run's own reader from a flag's).
READERS = {
    "predict": ("run", ("../run", "--task", "sst", "--input", "{tmp}/in.txt")),
    "export": ("run", ("../run", "{tmp}/exported")),
    "attention": ("run", ("../run", "--task", "sst", "--input", "a good film", "--out", "a.html")),
    "weights": ("fusion", ("../fusion", "--limit", "4", "--out", "{tmp}/w.png")),
}
CONFIG_READER = [
    Case(
        f"{command[0]}-config-{key}",
        command,
        then(
            lambda c, key=key, value=value, run=run: (
                files("in.txt")(c),
                in_config(key, value, name=run)(c),
            ),
            plain(*argv),
        ),
        f"error: RUN_DIR: ../{run}/config.json is corrupted ({reason})",
    )
    for command, (run, argv) in READERS.items()
    for key, value, reason in BAD_CONFIG
]


# -- a tree without an extra (the student tree) reads no run that used it, every extra alike ----


def absent(name: str):
    """This tree without the extra ``name`` (as the student tree is without its file)."""

    def patch(monkeypatch, ctx) -> None:
        present = extras.Extra.present
        monkeypatch.setattr(extras.Extra, "present", lambda e: e.name != name and present(e))

    return patch


# (the extra, the config.json key and a value that uses it, the flag and file the line names)
USES = [
    ("distillation", "teachers", ["sst=elsewhere"], "--teachers needs multitask/distillation.py"),
    ("fusion", "option", "fusion", "--option fusion needs multitask/fusion.py"),
    ("pcgrad", "step_gradient", "pcgrad", "--step_gradient pcgrad needs minbert/pcgrad.py"),
    ("compiled", "compile", True, "--compile needs multitask/compiled.py"),
    (
        "optimizer_foreach",
        "optimizer",
        "foreach",
        "--optimizer foreach needs minbert/optimizer_foreach.py",
    ),
    ("fused_adamw", "optimizer", "fused", "--optimizer fused needs multitask/fused_adamw.py"),
    ("peft_format", "init_lora", ["sst=elsewhere"], "--init_lora needs multitask/peft_format.py"),
    (
        "tensorboard",
        "report_to",
        "tensorboard",
        "--report_to needs multitask/tensorboard_report.py",
    ),
    ("cuda_graphs", "cuda_graphs", "on", "--cuda_graphs needs multitask/cuda_graphs.py"),
]
WITHOUT_EXTRA = [
    Case(
        f"d-evaluate-without-{name}",
        "driver",
        then(in_config(key, value), driver("--evaluate", "{run}")),
        f"error: --evaluate: {{run}}/config.json: {words}",
        patch=absent(name),
    )
    for name, key, value, words in USES
] + [
    Case(
        "d-add-to-without-pcgrad",
        "driver",
        then(
            in_config("step_gradient", "pcgrad", name="adapter"),
            driver("--add_to", "{adapter}", "--tasks", "sts", *NEW, runs=("adapter",)),
        ),
        "adapter/config.json: --step_gradient pcgrad needs minbert/pcgrad.py",
        patch=absent("pcgrad"),
    ),
    Case(
        "d-resume-without-pcgrad",
        "driver",
        then(
            in_config("step_gradient", "pcgrad"),
            driver("--out_dir", "{run}", "--resume"),
        ),
        "--resume: {run}/config.json: --step_gradient pcgrad needs minbert/pcgrad.py",
        patch=absent("pcgrad"),
    ),
]


# -- the suite runner: every row's flags read by its script's parser before any row starts ------


def suite_with(bad: list[str], script: str | None = None):
    """A tiny suite: a good row, then a row with the flags ``bad`` (of ``script``, else the
    driver's)."""

    def patch(monkeypatch, ctx) -> None:
        tiny = ["--checkpoint", str(ctx.checkpoint), "--max_length", "32"]
        rows = [("good", [*tiny, "--batch_size", "4", *short_run(1, 1)])]
        if script == multitask_runs.MLM:
            rows.append(("bad", [script, *tiny, "--steps", "1", "--tasks", "sst", *bad]))
        elif script == multitask_runs.PLAIN_LOOP:
            rows.append(("bad", [script, *tiny, "--epochs", "1", "--limit", "4", *bad]))
        else:
            rows.append(("bad", [*tiny, "--batch_size", "4", *short_run(1, 1), *bad]))
        monkeypatch.setitem(multitask_runs.SUITES, "tiny", rows)

    return patch


RUNNER = [
    Case(
        f"r-{label}",
        "runner",
        runner(*after),
        f"row bad: {script or 'train_multitask.py'} refuses its flags: {words}",
        patch=suite_with(bad, script),
    )
    for label, bad, after, script, words in [
        ("unknown-flag", ["--nope"], (), None, "unrecognized arguments: --nope"),
        ("value-out-of-range", ["--lr", "-1"], (), None, "--lr"),
        ("choice-unknown", ["--sampling", "bogus"], (), None, "argument --sampling: invalid"),
        ("value-not-a-number", ["--epochs", "x"], (), None, "argument --epochs: invalid int"),
        ("mlm-unknown-flag", ["--nope"], (), multitask_runs.MLM, "unrecognized arguments"),
        ("mlm-out-of-range", ["--warmup", "1"], (), multitask_runs.MLM, "--warmup"),
        (
            "plain-loop-choice",
            ["--draw", "bogus"],
            (),
            multitask_runs.PLAIN_LOOP,
            "argument --draw: invalid choice",
        ),
    ]
] + [
    Case(
        "r-flags-after-dashes",
        "runner",
        runner("--", "--nope"),
        "row good: train_multitask.py refuses its flags: unrecognized arguments: --nope",
        patch=suite_with([]),
    ),
]


CASES = [
    *SCAFFOLD,
    *RUN_FOLDER,
    *ADD_TO,
    *GRADESCOPE,
    *CONFIG_READER,
    *WITHOUT_EXTRA,
    *RUNNER,
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_invocation(case, request, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    made = {} if case.command in NO_RUNS else request.getfixturevalue("made")
    ctx = Ctx(tmp_path, made, tiny_checkpoint, tiny_data)
    case = dataclasses.replace(case, words=case.words.format(run=tmp_path / "run"))
    before = invoke(case, ctx, COMMANDS, monkeypatch, capsys)
    assert snapshot(tmp_path, tiny_checkpoint) == before  # nothing changed, lost or left behind


# -- the scaffold: what it replaces, and a folder it may not write -------------------------------


def test_force_replaces_exactly_its_own_files_and_keeps_the_record(tmp_path, capsys):
    """--force writes over the files the scaffold wrote (another choice of exercises) and
    records the new bytes; a file the student added beside them stays untouched."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    scaffolded(write("mine.txt", "not the scaffold's\n"))(ctx)
    out = tmp_path / "out"
    argv = [str(out), "--source", str(tmp_path / "src"), "--force"]
    assert scaffold.main([*argv, "--keep", "area"]) == 0
    assert (out / "pkg" / "geometry.py").read_text() == EXERCISE
    assert (out / "mine.txt").read_text() == "not the scaffold's\n"
    assert scaffold.main(argv) == 0  # the full source it wrote goes back to the stub
    assert "NotImplementedError" in (out / "pkg" / "geometry.py").read_text()
    assert scaffold.read_record(out).keys() == {"README.md", "pkg/geometry.py"}
    assert not [p for p in out.rglob("*.tmp")]


READ_ONLY = [sys.executable, "-m", "course.authoring.scaffold"]


@pytest.mark.parametrize("where", ["parent", "out"])
def test_a_read_only_folder_is_one_line_naming_it(where, tmp_path):
    """Root's permission bypass dropped (setpriv): a read-only parent of a new OUT_DIR, or a
    read-only OUT_DIR under --force, is one line naming the file or folder, exit 1, nothing
    changed and no traceback."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    source_tree()(ctx)
    parent = tmp_path / "p"
    parent.mkdir()
    argv = [str(parent / "out"), "--source", str(tmp_path / "src")]
    if where == "out":
        assert scaffold.main(argv) == 0
        argv += ["--force", "--keep", "area"]
    locked = parent / "out" if where == "out" else parent
    before = snapshot(parent)
    locked.chmod(0o555)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *READ_ONLY, *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    finally:
        locked.chmod(0o755)
    if "Operation not permitted" in done.stderr and "setpriv" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {locked}") and "Permission denied" in lines[0], lines
    assert snapshot(parent) == before


def test_overwrite_replaces_an_earlier_zip(tmp_path, capsys):
    """With --overwrite the zip is written over the earlier one, whole."""
    out = tmp_path / "autograder.zip"
    out.write_bytes(b"an earlier zip")
    assert autograder.main([str(out), "--overwrite"]) == 0
    with zipfile.ZipFile(out) as archive:
        assert {"setup.sh", "run_autograder"} <= set(archive.namelist())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autograder.zip"]
