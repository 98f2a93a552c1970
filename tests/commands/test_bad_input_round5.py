"""Round five of the bad-input promise (tests/commands/test_bad_input_commands.py's table, same
assertions): the fusion-weights command's --out and --limit, a fusion run inside or without its
stage-1 run, PEFT folders given to --init_lora, the scaffold over a student's work and its
exercise ids, and the device check beside --smart.

Tests of their own below: the missing-run line of the fusion-weights command, a PEFT folder of
another base model (a warning, not an error), the scaffold run again once the student's file is
moved away, and the suite runner beside a read-only results file (a real process without root's
permission bypass).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

import multitask.export
import train_multitask
from course.authoring import scaffold
from multitask import fusion_weights
from tests.commands.test_bad_input_commands import (
    MAINS,
    SHORT,
    Case,
    Ctx,
    disk_full,
    driver,
    invoke,
    make_runs,
    plain,
    predict,
    snapshot,
    then,
)
from tests.commands.test_bad_input_round4 import files, source_tree
from tests.helpers import run_driver, short_run

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {**MAINS, "weights": fusion_weights.main}
NEW = ("--out_dir", "{tmp}/new")
PEFT = "p/adapter_model.safetensors"


@pytest.fixture(scope="module")
def made(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    """The tiny finished runs of round four, and: a fusion run over the adapter run (sst, para),
    another adapter run of other sizes, a LoRA run of sst and its PEFT export."""
    root = tmp_path_factory.mktemp("made5")
    made = make_runs(tiny_checkpoint, tiny_data, root)
    fusion = ("--option", "fusion", "--adapters_from", str(made["adapter"]))
    assert run_driver(tiny_checkpoint, tiny_data, root / "fusion", *SHORT, *fusion) == 0
    sizes = ("--option", "adapter", "--adapter_size", "4", "--tasks", "sst,para")
    assert run_driver(tiny_checkpoint, tiny_data, root / "adapter4", *SHORT, *sizes) == 0
    lora = ("--option", "lora", "--tasks", "sst")
    assert run_driver(tiny_checkpoint, tiny_data, root / "lora", *SHORT, *lora) == 0
    out = [str(root / "lora"), str(root / "peft"), "--format", "peft"]
    assert multitask.export.main(out) == 0
    return {**made, "fusion": root / "fusion", "adapter4": root / "adapter4", "peft": root / "peft"}


def weights(*extra: str, run: str = "fusion"):
    """The fusion-weights command on a copy of a finished run (``run``: its name in ``made``)."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint}
        return [str(ctx.copy(run)), "--limit", "4", *[e.format(**names) for e in extra]]

    return argv


def run_file(name: str, file: str):
    """A file the run ``name`` (a copy) holds as its own, e.g. its learning curves."""

    def make(ctx: Ctx) -> None:
        (ctx.copy(name) / file).write_bytes(b"\x89PNG the run's own figure")

    return make


def stage_one_replaced(ctx: Ctx) -> None:
    """A copy of the fusion run whose stage-1 folder now holds another adapter run (other
    sizes), as when that folder was trained again."""
    stage_one = ctx.copy("adapter4", "stage1")
    ctx.edit_json(
        ctx.copy("fusion") / "config.json",
        lambda c: c.__setitem__("adapters_from", str(stage_one)),
    )


def peft_folder(change):
    """The LoRA run's exported PEFT folder of sst, copied to {tmp}/p, then ``change(folder)``."""

    def make(ctx: Ctx) -> None:
        folder = ctx.tmp / "p"
        shutil.copytree(ctx.made["peft"] / "sst", folder)
        change(folder)

    return make


def cut_weights(folder: Path) -> None:
    path = folder / "adapter_model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def config_with(**changes):
    def change(folder: Path) -> None:
        path = folder / "adapter_config.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | changes))

    return change


def rank_four(folder: Path) -> None:
    """The tensors of a rank-4 LoRA, under a config that still says r 8."""
    path = folder / "adapter_model.safetensors"
    tensors = load_file(str(path))
    cut = {k: (v[:4] if "lora_A" in k else v[:, :4]).contiguous() for k, v in tensors.items()}
    save_file(cut, str(path))


def init_lora(*extra: str):
    return driver("--option", "lora", "--tasks", "sst", "--init_lora", "sst={tmp}/p", *NEW, *extra)


def scaffolded_then_edited(ctx: Ctx) -> None:
    """A student tree written by the scaffold, whose exercise file the student then filled in."""
    source_tree()(ctx)
    assert scaffold.main([str(ctx.tmp / "out"), "--source", str(ctx.tmp / "src")]) == 0
    (ctx.tmp / "out" / "pkg" / "geometry.py").write_text("def area(w, h):\n    return w * h\n")


FORCE = ("{tmp}/out", "--source", "{tmp}/src", "--force")

CASES = [
    # -- the fusion-weights command: --out as the attention command checks it, --limit --
    Case(
        "w-out-run-own-file-overwrite",
        "weights",
        then(
            run_file("fusion", "learning_curves.png"),
            weights("--out", "{tmp}/fusion/learning_curves.png", "--overwrite"),
        ),
        "--out",
    ),
    Case("w-out-in-run", "weights", weights("--out", "{tmp}/fusion/w.png"), "--out"),
    Case(
        "w-out-in-other-run",
        "weights",
        then(lambda c: c.copy("run"), weights("--out", "{tmp}/run/w.png", "--overwrite")),
        "--out",
    ),
    Case("w-out-under-run", "weights", weights("--out", "{tmp}/fusion/a/w.png"), "--out"),
    Case("w-out-in-checkpoint", "weights", weights("--out", "{ckpt}/w.png"), "--out"),
    Case(
        "w-out-stem-png-exists",
        "weights",
        then(files("fig.png"), weights("--out", "{tmp}/fig")),
        "fig.png",
    ),
    Case(
        "w-out-folder-overwrite",
        "weights",
        then(files("figs/", "figs.png"), weights("--out", "{tmp}/figs", "--overwrite")),
        "--out",
    ),
    Case("w-out-slash", "weights", weights("--out", "{tmp}/new/"), "--out"),
    Case("w-out-empty", "weights", weights("--out", ""), "--out"),
    Case("w-out-txt", "weights", weights("--out", "{tmp}/w.txt"), "--out"),
    Case("w-limit-zero", "weights", weights("--out", "{tmp}/w", "--limit", "0"), "--limit 0"),
    Case("w-limit-negative", "weights", weights("--out", "{tmp}/w", "--limit", "-5"), "--limit -5"),
    Case("w-bad-flag", "weights", weights("--out", "{tmp}/w", "--nope"), "--nope"),
    Case("w-run-missing", "weights", plain("{tmp}/nope", "--out", "{tmp}/w"), "RUN_DIR"),
    Case("w-run-not-fusion", "weights", weights("--out", "{tmp}/w", run="run"), "RUN_DIR"),
    Case(
        "w-disk-full",
        "weights",
        weights("--out", "{tmp}/w.png"),
        "w.png: cannot write",
        1,
        disk_full("fsync"),
    ),
    # -- a fusion run and its stage-1 run --
    Case(
        "d-fusion-out-in-stage-one",
        "driver",
        driver(
            "--option",
            "fusion",
            "--adapters_from",
            "{adapter}",
            "--out_dir",
            "{adapter}/fusion",
            runs=("adapter",),
        ),
        "--adapters_from",
    ),
    Case(
        "d-fusion-overwrite-stage-one",
        "driver",
        driver(
            "--option",
            "fusion",
            "--adapters_from",
            "{adapter}",
            "--out_dir",
            "{adapter}",
            "--overwrite",
            runs=("adapter",),
        ),
        "--adapters_from",
    ),
    Case(
        "p-fusion-stage-one-replaced",
        "predict",
        then(stage_one_replaced, predict(run="fusion")),
        "--adapters_from",
    ),
    # -- the device check and the flag that needs the host's --
    Case(
        "d-smart-device-check",
        "driver",
        driver("--smart", "--nonfinite_check", "device", *NEW),
        "--nonfinite_check device with --smart",
    ),
    Case(
        "d-pcgrad-device-check",
        "driver",
        driver("--step_gradient", "pcgrad", "--nonfinite_check", "device", *NEW),
        "--nonfinite_check device with --step_gradient pcgrad",
    ),
    # -- PEFT folders given to --init_lora --
    Case(
        "d-init-lora-cut-weights",
        "driver",
        then(peft_folder(cut_weights), init_lora()),
        f"{PEFT}: corrupted",
    ),
    Case(
        "d-init-lora-rank-text",
        "driver",
        then(peft_folder(config_with(r="eight")), init_lora()),
        "p/adapter_config.json: r 'eight' is not a rank",
    ),
    Case(
        "d-init-lora-rank-four-tensors",
        "driver",
        then(peft_folder(rank_four), init_lora()),
        "rank 4, but adapter_config.json says r 8",
    ),
    Case(
        "d-init-lora-config-not-object",
        "driver",
        then(peft_folder(lambda f: (f / "adapter_config.json").write_text("[8]")), init_lora()),
        "p/adapter_config.json: corrupted",
    ),
    # -- the scaffold --
    Case(
        "s-force-over-students-work",
        "scaffold",
        then(scaffolded_then_edited, plain(*FORCE)),
        "pkg/geometry.py",
    ),
    Case(
        "s-exercise-unknown",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src", "--exercise", "nosuch")),
        "--exercise nosuch",
    ),
    Case(
        "s-keep-unknown",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src", "--keep", "nosuch")),
        "--keep nosuch",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    ctx = Ctx(tmp_path, made, tiny_checkpoint, tiny_data)
    before = invoke(case, ctx, COMMANDS, monkeypatch, capsys)
    assert snapshot(tmp_path, tiny_checkpoint) == before  # nothing changed, lost or left behind


def test_the_exercise_ids_are_listed_with_the_flag(tmp_path, capsys):
    """The one line names the flag and every valid id, so the user can correct it at once."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    source_tree()(ctx)
    argv = [str(tmp_path / "out"), "--source", str(tmp_path / "src")]
    for flag in ("--exercise", "--keep"):
        assert scaffold.main([*argv, flag, "area", flag, "nosuch"]) == 2
        assert f"{flag} nosuch: unknown exercise; the exercises: area" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_missing_run_line_names_the_folder_not_resume(tmp_path, capsys):
    """The fusion-weights command reads a finished run: the missing one is RUN_DIR's mistake,
    never a flag the user did not give (the driver's --resume, which it reads the run with)."""
    assert fusion_weights.main([str(tmp_path / "nope"), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert f"RUN_DIR: {tmp_path / 'nope'}" in err and "--resume" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_name_without_suffix_is_checked_and_written_as_png(made, tmp_path, capsys):
    """``--out fig`` writes fig.png, atomically (no temporary file stays), and the same name is
    the one that needs --overwrite the second time."""
    argv = [str(made["fusion"]), "--limit", "4", "--out", str(tmp_path / "fig")]
    assert fusion_weights.main(argv) == 0
    assert f"wrote {tmp_path / 'fig.png'}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert fusion_weights.main(argv) == 2
    assert f"{tmp_path / 'fig.png'} exists; pass --overwrite" in capsys.readouterr().err
    assert fusion_weights.main([*argv, "--overwrite"]) == 0


def test_a_peft_folder_of_another_base_model_is_loaded_with_a_warning(
    made, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """Its shapes fit, so it starts the run, but the user is told the folder names another base
    model than the run's checkpoint; the run's own export names the checkpoint: no warning."""
    folder = tmp_path / "p"
    shutil.copytree(made["peft"] / "sst", folder)
    config_with(base_model_name_or_path="bert-base-uncased")(folder)
    base = ["--option", "lora", "--tasks", "sst", *short_run(1, 1)]
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data), *base]
    argv += ["--batch_size", "4", "--max_length", "32"]
    capsys.readouterr()
    assert train_multitask.main([*argv, "--out_dir", str(tmp_path / "a")]) == 0
    assert "warning" not in capsys.readouterr().err
    line = [*argv, "--out_dir", str(tmp_path / "b"), "--init_lora", f"sst={folder}"]
    assert train_multitask.main(line) == 0
    warned = [x for x in capsys.readouterr().err.splitlines() if x.startswith("warning:")]
    assert len(warned) == 1 and f"--init_lora sst={folder}" in warned[0], warned
    assert "'bert-base-uncased'" in warned[0] and str(tiny_checkpoint) in warned[0]
    own = [*argv, "--out_dir", str(tmp_path / "c"), "--init_lora", f"sst={made['peft'] / 'sst'}"]
    assert train_multitask.main(own) == 0
    assert "warning" not in capsys.readouterr().err


def test_force_writes_again_once_the_students_file_is_moved_away(tmp_path, capsys):
    """The refusal says how to go on, and going on works: the student's file moved out, the
    tree is written again; an unchanged tree, or another choice of exercises, needs no move."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    scaffolded_then_edited(ctx)
    argv = [str(tmp_path / "out"), "--source", str(tmp_path / "src"), "--force"]
    work = (tmp_path / "out" / "pkg" / "geometry.py").read_bytes()
    assert scaffold.main(argv) == 2
    assert "move them out of it" in capsys.readouterr().err
    assert (tmp_path / "out" / "pkg" / "geometry.py").read_bytes() == work
    (tmp_path / "out" / "pkg" / "geometry.py").rename(tmp_path / "mine.py")
    assert scaffold.main(argv) == 0
    assert "NotImplementedError" in (tmp_path / "out" / "pkg" / "geometry.py").read_text()
    assert scaffold.main([*argv, "--keep", "area"]) == 0  # the full source: still the scaffold's
    assert scaffold.main(argv) == 0


READ_ONLY_RESULTS = """
import contextlib, io, json, sys
import multitask_runs
checkpoint, data, runs, stem = sys.argv[1:5]
tiny = ["--checkpoint", checkpoint, "--batch_size", "4", "--max_length", "32", "--epochs", "1",
        "--steps_per_epoch", "1", "--no_plots"]
multitask_runs.SUITES["tiny"] = [("good", tiny)]
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        code = multitask_runs.main(["tiny", "--data_dir", data, "--runs_dir", runs,
                                    "--results", stem])
    except SystemExit as exit:
        code = exit.code
print(json.dumps([code, err.getvalue()]))
"""


@pytest.mark.parametrize("read_only", ["tiny.md", "tiny.json", "."])
def test_the_runner_checks_its_results_files_are_writable_before_a_row_runs(
    read_only, tiny_checkpoint, tiny_data, tmp_path
):
    """Root's permission bypass dropped (setpriv): a read-only results file (the Markdown one
    beside the JSON one, or the JSON one) or folder is one line naming it, exit 2, before any
    row runs, and both files stay as they were (never the JSON file changed and not the other)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    res, runs = tmp_path / "res", tmp_path / "runs"
    res.mkdir()
    (res / "tiny.json").write_text(json.dumps({"old": {"command": "python x.py"}}))
    (res / "tiny.md").write_text("# the old table\n")
    before = snapshot(res)
    (res / read_only).chmod(0o555 if read_only == "." else 0o444)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c"]
    command += [READ_ONLY_RESULTS, str(tiny_checkpoint), str(tiny_data), str(runs)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    try:
        done = subprocess.run(
            [*command, str(res / "tiny")], cwd=ROOT, capture_output=True, text=True, env=env
        )
    finally:
        (res / read_only).chmod(0o755 if read_only == "." else 0o644)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    assert done.returncode == 0, done.stderr
    code, err = json.loads(done.stdout.splitlines()[-1])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --results"), err
    named = res if read_only == "." else res / read_only
    assert str(named) in lines[0] and "Traceback" not in err
    assert snapshot(res) == before
    assert not runs.exists()  # no row ran


def test_the_stage_one_check_is_the_one_of_init_from_and_add_to(made, tmp_path):
    """--adapters_from is refused where --out_dir lies inside it as --init_from and --add_to
    are, in the same words."""
    from multitask.errors import UsageError

    line = ["--option", "fusion", "--adapters_from", str(made["adapter"])]
    line += ["--out_dir", str(made["adapter"] / "deep" / "fusion")]
    with pytest.raises(UsageError, match="must differ from --adapters_from and lie outside it"):
        train_multitask.parse_args(line)
    assert not (made["adapter"] / "deep").exists()


def test_a_replaced_stage_one_is_named_when_the_model_is_built(made, tmp_path):
    """The one line names --adapters_from and the folder, and says what does not fit."""
    from multitask.errors import UsageError
    from multitask.trained import TrainedRun

    fusion, stage_one = tmp_path / "fusion", tmp_path / "stage1"
    shutil.copytree(made["fusion"], fusion)
    shutil.copytree(made["adapter4"], stage_one)
    config = json.loads((fusion / "config.json").read_text())
    (fusion / "config.json").write_text(json.dumps(config | {"adapters_from": str(stage_one)}))
    with pytest.raises(UsageError) as raised:
        TrainedRun(fusion).task_model("sst")
    message = str(raised.value)
    assert message.startswith(f"--adapters_from {stage_one}: ") and "\n" not in message
    assert "size mismatch" in message
