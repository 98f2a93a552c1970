"""Bad input to ``python -m tools.predict``: the run, the input, the output, a fault,
Ctrl-C (the promise and how a case is run: tests/commands/bad_input.py). Tests of their own
below: an output through a symlink or /dev/stdout, a quoted field over lines, and a fusion run
whose stage-1 run was trained again."""

from __future__ import annotations

import json
import shutil
import sys

import pytest

import tools.predict
from tests.commands.bad_input import (
    INVISIBLE,
    Case,
    Ctx,
    case_ids,
    check,
    checkpoint_copy,
    config_cases,
    cut,
    disk_full,
    in_config,
    interrupt,
    then,
)

RUNS = ("run", "adapter", "mlm", "fusion", "adapter4")


def predict(*extra: str, task: str = "sst", input: str = "{tmp}/in.txt", run: str = "run"):
    """predict on a copy of a finished run (``run``: a ctx copy name or a path template)."""

    def argv(ctx: Ctx) -> list[str]:
        where = str(ctx.copy(run)) if run in ctx.made else run.format(tmp=ctx.tmp)
        if not (ctx.tmp / "in.txt").exists():
            ctx.file("in.txt", "a good film\nan awful one\n")
        names = [a.format(tmp=ctx.tmp, ckpt=ctx.checkpoint) for a in ("--input", input, *extra)]
        return [where, "--task", task, *names]

    return argv


def stdin_closed(monkeypatch, ctx) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # what Python gives a process started with <&-


def remove(name: str, file: str):
    return lambda ctx: (ctx.copy(name) / file).unlink()


def stage_one_replaced(ctx: Ctx) -> None:
    """A copy of the fusion run whose stage-1 folder now holds another adapter run (other
    sizes), as when that folder was trained again."""
    stage_one = ctx.copy("adapter4", "stage1")
    ctx.edit_json(
        ctx.copy("fusion") / "config.json",
        lambda c: c.__setitem__("adapters_from", str(stage_one)),
    )


CASES = [
    # -- the run, the input, the output --
    Case("p-run-missing", "predict", predict(run="{tmp}/nope"), "nope"),
    Case("p-run-empty", "predict", predict(run=""), "RUN_DIR"),
    Case(
        "p-run-is-checkpoint",
        "predict",
        then(checkpoint_copy, predict(run="{tmp}/ckpt")),
        "checkpoint folder",
    ),
    Case("p-run-is-mlm", "predict", predict(run="mlm"), "MLM pretraining run folder"),
    Case("p-no-tasks", "predict", then(in_config("tasks", remove=True), predict()), "corrupted"),
    Case("p-batch-text", "predict", then(in_config("batch_size", "x"), predict()), "corrupted"),
    Case("p-option-number", "predict", then(in_config("option", 5), predict()), "corrupted"),
    Case("p-tasks-string", "predict", then(in_config("tasks", "sst"), predict()), "corrupted"),
    Case("p-input-missing", "predict", predict(input="{tmp}/none.txt"), "--input"),
    Case("p-input-empty", "predict", predict(input=""), "--input"),
    Case("p-input-folder", "predict", predict(input="{tmp}"), "--input"),
    Case("p-output-empty", "predict", predict("--output", ""), "--output"),
    Case("p-output-is-input", "predict", predict("--output", "{tmp}/in.txt"), "--output"),
    Case("p-output-in-run", "predict", predict("--output", "{tmp}/run/config.json"), "--output"),
    Case("p-output-in-ckpt", "predict", predict("--output", "{ckpt}/vocab.txt"), "--output"),
    Case("p-output-folder", "predict", predict("--output", "{tmp}/cwd"), "--output"),
    Case("p-output-no-parent", "predict", predict("--output", "{tmp}/no/o.txt"), "--output"),
    Case(
        "p-output-exists",
        "predict",
        then(lambda c: c.file("mine.txt", "my notes\n"), predict("--output", "{tmp}/mine.txt")),
        "mine.txt exists; pass --overwrite",
    ),
    Case(
        "p-output-other-run",
        "predict",
        then(lambda c: c.copy("adapter"), predict("--output", "{tmp}/adapter/metrics.jsonl")),
        "--output",
    ),
    Case("p-task-untrained", "predict", predict(task="cfimdb"), "--task"),
    Case(
        "p-cr-only",
        "predict",
        then(
            lambda c: c.file("cr.txt", "a good film\ran awful one\r"), predict(input="{tmp}/cr.txt")
        ),
        "CR",
    ),
    Case(
        "p-quoted-lines",
        "predict",
        then(
            lambda c: c.file("q.csv", 'id,sentence\n1,"a good\nfilm"\n2,fine\n'),
            predict("--strict", input="{tmp}/q.csv"),
        ),
        "q.csv:2",
    ),
    Case(
        "p-invisible",
        "predict",
        then(
            lambda c: c.file("z.txt", "a good film\n\u200b\u00a0\u200b\n"),
            predict("--strict", input="{tmp}/z.txt"),
        ),
        "z.txt:2",
    ),
    Case("p-stdin-closed", "predict", predict(input="-"), "standard input", patch=stdin_closed),
    Case("p-no-best", "predict", then(remove("run", "best.safetensors"), predict()), "best."),
    Case("p-best-cut", "predict", then(cut("run", "best.safetensors"), predict()), "corrupted"),
    Case(
        "p-base-gone",
        "predict",
        then(in_config("checkpoint", "/nonexistent/bert"), predict()),
        "/nonexistent/bert",
    ),
    Case("p-batch-zero", "predict", predict("--batch_size", "0"), "--batch_size"),
    Case("p-device", "predict", predict("--device", "gpu"), "--device"),
    Case(
        "p-ctrl-c",
        "predict",
        predict(),
        "interrupted",
        130,
        interrupt(tools.predict, "head_outputs"),
    ),
    Case(
        "p-disk-full",
        "predict",
        predict("--output", "{tmp}/o.txt"),
        "o.txt",
        1,
        disk_full("fsync"),
    ),
    # -- input that holds nothing, reported as the training reader reports such a row --
    Case(
        "p-combining-line",
        "predict",
        then(
            lambda c: c.file("m.txt", "a good film\n\u0301\u0301\n"),
            predict("--strict", input="{tmp}/m.txt"),
        ),
        f"m.txt:2: empty sentence ({INVISIBLE}",
    ),
    Case(
        "p-csv-invisible-sentence2",
        "predict",
        then(
            lambda c: c.file("q.csv", "sentence1,sentence2\na film,a movie\na film,\u200b\u200b\n"),
            predict("--strict", task="sts", input="{tmp}/q.csv"),
        ),
        f"q.csv:3: empty sentence2 ({INVISIBLE}",
    ),
    Case("p-threads-huge", "predict", predict("--threads", "100000"), "--threads"),
    # -- a fusion run whose stage-1 run no longer fits --
    Case(
        "p-fusion-stage-one-replaced",
        "predict",
        then(stage_one_replaced, predict(run="fusion")),
        "--adapters_from",
    ),
    # -- the run's config.json, one reader for all commands --
    *config_cases("predict", "run", ("../run", "--task", "sst", "--input", "{tmp}/in.txt")),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_predict_writes_through_a_symlink_and_dev_stdout(made, tmp_path, capfd):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    (tmp_path / "in.txt").write_text("a good film\n")
    argv = [str(made["run"]), "--task", "sst", "--input", str(tmp_path / "in.txt")]
    assert tools.predict.main([*argv, "--output", str(link)]) == 2  # a file of the user's
    assert target.read_text() == "old\n"
    assert tools.predict.main([*argv, "--output", str(link), "--overwrite"]) == 0
    assert link.is_symlink() and target.read_text() != "old\n"
    capfd.readouterr()
    assert tools.predict.main([*argv, "--output", "/dev/stdout"]) == 0
    assert capfd.readouterr().out == target.read_text()


def test_predict_reports_a_quoted_field_over_lines_and_keeps_the_count(made, tmp_path, capsys):
    (tmp_path / "q.csv").write_text('id,sentence\n1,"a good\nfilm"\n2,fine\n')
    argv = [str(made["run"]), "--task", "sst", "--input", str(tmp_path / "q.csv")]
    assert tools.predict.main(argv) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and "q.csv:2: a quoted field" in err and "q.csv:3" in err


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
