"""Bad input to pretrain_mlm.py: its run folder, its text, its flags, --resume over a damaged
run, a fault, Ctrl-C (the promise and how a case is run: tests/commands/bad_input.py). Tests of
their own below: a batch with no masked token, and kill -9, Ctrl-C and SIGTERM followed by an
exact resume."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path

import pytest
import torch

import pretrain_mlm
from tests.commands.bad_input import (
    Case,
    Ctx,
    case_ids,
    check,
    checkpoint_copy,
    cut,
    disk_full,
    in_config,
    interrupt,
    mlm_argv,
    one_error_line,
    then,
)
from tests.commands.test_bad_input_train_multitask import fixed_events, old_events
from tests.helpers import signal_when_resumable

RUNS = ("run", "mlm")


def mlm(*extra: str, out: str = "{tmp}/m"):
    def argv(ctx: Ctx) -> list[str]:
        if "{mlm}" in out or any("{mlm}" in e for e in extra):
            ctx.copy("mlm")
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "mlm": ctx.tmp / "mlm"}
        names["run"] = ctx.tmp / "run"
        if any("{run}" in a for a in (out, *extra)):
            ctx.run()
        return mlm_argv(
            ctx.checkpoint,
            ctx.data,
            out.format(**names),
            *[e.format(**names) for e in extra],
        )

    return argv


def log_step_text(ctx: Ctx) -> None:
    path = ctx.copy("mlm") / "mlm_log.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:-1], json.dumps({"step": "two", "loss": 1.0})]) + "\n")


def short_text(ctx: Ctx) -> None:
    ctx.file("three.txt", "one line\ntwo lines\nthree lines\n")


CASES = [
    Case("m-out-driver-run", "mlm", mlm(out="{run}"), "train_multitask.py run folder"),
    Case(
        "m-out-driver-run-overwrite", "mlm", mlm("--overwrite", out="{run}"), "train_multitask.py"
    ),
    Case(
        "m-out-checkpoint",
        "mlm",
        then(checkpoint_copy, mlm("--overwrite", out="{tmp}/ckpt")),
        "checkpoint",
    ),
    Case(
        "m-out-user-files",
        "mlm",
        then(lambda c: c.folder("mine", "a.txt"), mlm("--overwrite", out="{tmp}/mine")),
        "--out_dir",
    ),
    Case("m-out-cwd", "mlm", mlm("--overwrite", out="."), "--out_dir"),
    Case(
        "m-overwrite-events-cannot-be-removed",
        "mlm",
        then(old_events("mlm"), mlm("--overwrite", out="{mlm}")),
        "Permission denied",
        code=1,
        patch=fixed_events,
    ),
    Case("m-out-empty", "mlm", mlm(out=""), "--out_dir"),
    Case("m-resume-out-empty", "mlm", mlm("--resume", out=""), "--out_dir"),
    Case("m-text-empty", "mlm", mlm("--text", ""), "--text"),
    Case("m-text-folder", "mlm", mlm("--text", "{tmp}"), "--text"),
    Case("m-text-short", "mlm", then(short_text, mlm("--text", "{tmp}/three.txt")), "three.txt"),
    Case("m-tasks-twice", "mlm", mlm("--tasks", "sst,sst"), "--tasks"),
    Case("m-seed-huge", "mlm", mlm("--seed", str(2**64)), "--seed"),
    Case("m-checkpoint-run", "mlm", mlm("--checkpoint", "{run}"), "--checkpoint"),
    Case("m-checkpoint-empty", "mlm", mlm("--checkpoint", ""), "--checkpoint"),
    Case("m-data-dir-empty", "mlm", mlm("--data_dir", ""), "--data_dir"),
    Case("m-max-length-2", "mlm", mlm("--max_length", "2"), "--max_length"),
    Case("m-bad-flag", "mlm", mlm("--stepz", "3"), "--stepz"),
    Case(
        "m-resume-steps-text",
        "mlm",
        then(in_config("steps", "abc", name="mlm"), mlm("--resume", out="{mlm}")),
        "corrupted",
    ),
    Case(
        "m-resume-no-seed",
        "mlm",
        then(in_config("seed", remove=True, name="mlm"), mlm("--resume", out="{mlm}")),
        "corrupted",
    ),
    Case(
        "m-resume-log-step", "mlm", then(log_step_text, mlm("--resume", out="{mlm}")), "corrupted"
    ),
    Case(
        "m-resume-last-cut",
        "mlm",
        then(cut("mlm", "last.pt"), mlm("--resume", out="{mlm}")),
        "corrupted",
    ),
    Case("m-resume-lr", "mlm", mlm("--resume", "--lr", "0.1", out="{mlm}"), "--lr"),
    Case("m-ctrl-c-setup", "mlm", mlm(), "interrupted", 130, interrupt(pretrain_mlm, "load_mlm")),
    Case("m-disk-full", "mlm", mlm(), "last.pt", 1, disk_full("torch"), output="m"),
    # -- text that holds nothing, and flags at their extremes --
    Case(
        "m-text-invisible",
        "mlm",
        then(
            lambda c: c.file("inv.txt", "\u200b\u200b\n\u0301\n\ufeff\n" * 8),
            mlm("--text", "{tmp}/inv.txt"),
        ),
        "--text",
    ),
    Case(
        "m-text-blank",
        "mlm",
        then(lambda c: c.file("blank.txt", " \n\t\n\n" * 6), mlm("--text", "{tmp}/blank.txt")),
        "--text",
    ),
    Case("m-threads-huge", "mlm", mlm("--threads", "100000"), "--threads"),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_a_batch_with_no_masked_token_is_drawn_again(tiny_checkpoint, tmp_path, capsys):
    """Sentences of one short word: most draws mask nothing, which is no "non-finite loss"."""
    (tmp_path / "short.txt").write_text("".join(f"{w}\n" for w in ["a", "b", "c", "d"] * 5))
    argv = ["--checkpoint", str(tiny_checkpoint), "--text", str(tmp_path / "short.txt")]
    argv += ["--out_dir", str(tmp_path / "m"), "--steps", "6", "--batch_size", "1"]
    assert pretrain_mlm.main([*argv, "--eval_every", "3", "--max_length", "8"]) == 0
    assert "non-finite" not in capsys.readouterr().err


THREADS = str(torch.get_num_threads())  # float sums depend on it; the same in every process
MLM_RESUME = ("--steps", "8", "--eval_every", "2", "--threads", THREADS)


@pytest.fixture(scope="module")
def mlm_reference(tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    """An uninterrupted pretrain_mlm.py run of MLM_RESUME."""
    reference = tmp_path_factory.mktemp("mlm") / "reference"
    assert pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, reference, *MLM_RESUME)) == 0
    return reference


def mlm_log(out: Path) -> list[dict]:
    """mlm_log.jsonl without the timing, which no two runs share."""
    rows = [json.loads(line) for line in (out / "mlm_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
def test_pretrain_mlm_resumes_exactly(stop, mlm_reference, tiny_checkpoint, tiny_data, tmp_path):
    """kill -9, Ctrl-C or SIGTERM as soon as last.pt exists, then --resume: mlm_log.jsonl and
    the weights equal an uninterrupted run's (Ctrl-C and SIGTERM end in one line, exit 130 and
    143)."""
    stopped = tmp_path / "stopped"
    argv = mlm_argv(tiny_checkpoint, tiny_data, stopped, *MLM_RESUME)
    cmd = [sys.executable, "pretrain_mlm.py", *argv]
    returncode, err = signal_when_resumable(cmd, stopped, stop)
    words = {signal.SIGINT: (130, "interrupted"), signal.SIGTERM: (143, "terminated (SIGTERM)")}
    assert returncode == words.get(stop, (-stop,))[0], err
    if stop in words:  # Ctrl-C and SIGTERM: one line naming the step on disk
        assert f"{words[stop][1]} at step" in one_error_line(err)
        assert "pretrain_mlm.py --out_dir" in one_error_line(err)
    (stopped / ".last.pt.x1y2.tmp").write_bytes(b"half a save")  # as a kill mid-save leaves
    assert pretrain_mlm.main(["--out_dir", str(stopped), "--resume", "--threads", THREADS]) == 0
    assert mlm_log(stopped) == mlm_log(mlm_reference)
    weights = "model.safetensors"
    assert (stopped / weights).read_bytes() == (mlm_reference / weights).read_bytes()
    assert not list(stopped.glob(".*.tmp"))
