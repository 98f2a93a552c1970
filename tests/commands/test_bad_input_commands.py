"""The driver's promise for every other command: predict, export, pretrain_mlm.py, --evaluate,
--add_to, the grader and the scaffold. A mistake, a fault or Ctrl-C ends in one line ``error:
...`` naming the flag or file, the documented exit code (2; 1 for a write fault; 130 for
Ctrl-C), no traceback, and every file that existed before (run folders, checkpoint folders, the
input file, the current directory) byte-identical afterwards, with nothing new left behind.

Each table case builds its situation in a fresh folder (copies of tiny finished runs where it
needs them), runs the command's ``main(argv)`` in-process (an uncaught exception, i.e. a
traceback, fails the test) from a current directory holding a file of the user's, and compares
every file under the case's folder and the tiny checkpoint before and after. Faults that need a
real process or file system (a read-only folder without root's permission bypass, a full tmpfs,
kill -9, Ctrl-C and SIGTERM of pretrain_mlm.py with exact resumes) are tests of their own below.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import minbert.checkpoint
import multitask.export
import multitask.predict
import multitask.run
import pretrain_mlm
import sanity_check
import train_multitask
from course.authoring import scaffold
from tests.helpers import driver_argv, run_driver, short_run, signal_when_resumable

ROOT = Path(__file__).resolve().parents[2]
SHORT = short_run(epochs=1, steps=2)
MAINS = {
    "predict": multitask.predict.main,
    "export": multitask.export.main,
    "mlm": pretrain_mlm.main,
    "driver": train_multitask.main,
    "grader": sanity_check.main,
    "scaffold": scaffold.main,
}


def mlm_argv(checkpoint: Path, data: Path, out: Path | str, *extra: str) -> list[str]:
    """pretrain_mlm.py on the tiny checkpoint and sst's tiny files: two steps of four."""
    return [
        *("--checkpoint", str(checkpoint), "--data_dir", str(data), "--out_dir", str(out)),
        *("--tasks", "sst", "--steps", "2", "--eval_every", "1", "--batch_size", "4"),
        *("--max_length", "32", *extra),
    ]


def make_runs(checkpoint: Path, data: Path, root: Path) -> dict[str, Path]:
    """Tiny finished runs: finetune, adapter (sst,para), and a pretrain_mlm.py run."""
    assert run_driver(checkpoint, data, root / "finetune", *SHORT) == 0
    adapter = ("--option", "adapter", "--tasks", "sst,para")
    assert run_driver(checkpoint, data, root / "adapter", *SHORT, *adapter) == 0
    assert pretrain_mlm.main(mlm_argv(checkpoint, data, root / "mlm")) == 0
    return {"run": root / "finetune", "adapter": root / "adapter", "mlm": root / "mlm"}


@pytest.fixture(scope="module")
def made(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    return make_runs(tiny_checkpoint, tiny_data, tmp_path_factory.mktemp("made"))


class Ctx:
    """A case's scene under ``tmp``: copies of the finished runs on first use, the input file,
    the current directory (``cwd``, holding a file of the user's)."""

    def __init__(self, tmp: Path, made: dict[str, Path], checkpoint: Path, data: Path) -> None:
        self.tmp, self.made, self.checkpoint, self.data = tmp, made, checkpoint, data
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        (self.cwd / "notes.txt").write_text("the user's own file\n")

    def copy(self, name: str, as_name: str | None = None) -> Path:
        target = self.tmp / (as_name or name)
        if not target.exists():
            shutil.copytree(self.made[name], target)
        return target

    def run(self) -> Path:
        return self.copy("run")

    def file(self, name: str, content: bytes | str) -> Path:
        path = self.tmp / name
        path.write_bytes(content.encode() if isinstance(content, str) else content)
        return path

    def folder(self, name: str, *files: str) -> Path:
        """A folder of the user's unrelated files."""
        path = self.tmp / name
        path.mkdir()
        for f in files:
            (path / f).write_text("mine\n")
        return path

    def edit_json(self, path: Path, edit: Callable[[dict], object]) -> None:
        value = json.loads(path.read_text())
        edit(value)
        path.write_text(json.dumps(value))


@dataclass
class Case:
    """One bad invocation of ``command``: ``argv(ctx)`` builds the scene and the arguments;
    ``words`` must be in the one error line; ``patch(monkeypatch, ctx)`` makes a fault."""

    name: str
    command: str
    argv: Callable[[Ctx], list[str]]
    words: str
    code: int = 2
    patch: Callable | None = None
    output: str | None = None  # a write fault: the command's own new folder may hold whole files


def predict(*extra: str, task: str = "sst", input: str = "{tmp}/in.txt", run: str = "run"):
    """predict on a copy of a finished run (``run``: a ctx copy name or a path template)."""

    def argv(ctx: Ctx) -> list[str]:
        where = str(ctx.copy(run)) if run in ctx.made else run.format(tmp=ctx.tmp)
        if not (ctx.tmp / "in.txt").exists():
            ctx.file("in.txt", "a good film\nan awful one\n")
        names = [a.format(tmp=ctx.tmp, ckpt=ctx.checkpoint) for a in ("--input", input, *extra)]
        return [where, "--task", task, *names]

    return argv


def then(prepare: Callable[[Ctx], object], argv: Callable[[Ctx], list[str]]):
    """Prepare the scene, then build the arguments."""

    def both(ctx: Ctx) -> list[str]:
        prepare(ctx)
        return argv(ctx)

    return both


def export(run: str, out: str, *extra: str):
    def argv(ctx: Ctx) -> list[str]:
        where = str(ctx.copy(run)) if run in ctx.made else run.format(tmp=ctx.tmp)
        return [where, out.format(tmp=ctx.tmp, ckpt=ctx.checkpoint), *extra]

    return argv


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


def driver(*extra: str, runs: tuple[str, ...] = ("run",)):
    """The driver on the tiny checkpoint and data; ``{run}``, ``{adapter}``, ``{tmp}``..."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "data": ctx.data, "cwd": ctx.cwd}
        names |= {r: ctx.copy(r) for r in runs}
        base = ["--checkpoint", str(ctx.checkpoint), "--data_dir", str(ctx.data)]
        base += ["--batch_size", "4", "--max_length", "32", *SHORT]
        return base + [e.format(**names) for e in extra]

    return argv


def plain(*extra: str):
    return lambda ctx: [e.format(tmp=ctx.tmp, ckpt=ctx.checkpoint) for e in extra]


def interrupt(target: object, name: str):
    """Ctrl-C where ``target.name`` is called."""

    def patch(monkeypatch, ctx) -> None:
        def stop(*args, **kwargs):
            raise KeyboardInterrupt

        monkeypatch.setattr(target, name, stop)

    return patch


def disk_full(kind: str):
    """A full disk under the one atomic writer: ``fsync`` failing with ENOSPC, or ``torch.save``
    failing as torch reports it (a RuntimeError)."""

    def patch(monkeypatch, ctx) -> None:
        def no_space(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")

        def torch_full(*args, **kwargs):
            raise RuntimeError(
                "[enforce fail at inline_container.cc:778] . PytorchStreamWriter failed writing "
                "file data/0: file write failed"
            )

        if kind == "fsync":
            monkeypatch.setattr(minbert.checkpoint.os, "fsync", no_space)
        else:
            monkeypatch.setattr(minbert.checkpoint.torch, "save", torch_full)

    return patch


def stdin_closed(monkeypatch, ctx) -> None:
    monkeypatch.setattr(sys, "stdin", None)  # what Python gives a process started with <&-


def in_config(key: str, value: object = None, remove: bool = False, name: str = "run"):
    """Change (or remove) ``key`` of a copied run's config.json."""

    def edit(ctx: Ctx) -> None:
        path = ctx.copy(name) / ("mlm_config.json" if name == "mlm" else "config.json")
        ctx.edit_json(path, lambda c: c.pop(key) if remove else c.__setitem__(key, value))

    return edit


def add_to_loop(ctx: Ctx) -> None:
    """Two adapter runs, each saying it was added to the other."""
    a, b = ctx.copy("adapter", "a"), ctx.copy("adapter", "b")
    ctx.edit_json(a / "config.json", lambda c: c.__setitem__("add_to", str(b)))
    ctx.edit_json(b / "config.json", lambda c: c.__setitem__("add_to", str(a)))


def cut(name: str, file: str):
    def edit(ctx: Ctx) -> None:
        path = ctx.copy(name) / file
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return edit


def remove(name: str, file: str):
    return lambda ctx: (ctx.copy(name) / file).unlink()


def log_step_text(ctx: Ctx) -> None:
    path = ctx.copy("mlm") / "mlm_log.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join([*lines[:-1], json.dumps({"step": "two", "loss": 1.0})]) + "\n")


def short_text(ctx: Ctx) -> None:
    ctx.file("three.txt", "one line\ntwo lines\nthree lines\n")


def checkpoint_copy(ctx: Ctx) -> None:
    shutil.copytree(ctx.checkpoint, ctx.tmp / "ckpt")


CASES = [
    # -- predict: the run, the input, the output --
    Case("p-run-missing", "predict", predict(run="{tmp}/nope"), "nope"),
    Case("p-run-empty", "predict", predict(run=""), "RUN_DIR"),
    Case("p-run-is-checkpoint", "predict", predict(run="{tmp}/ckpt"), "checkpoint folder"),
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
        interrupt(multitask.predict, "head_outputs"),
    ),
    Case(
        "p-disk-full",
        "predict",
        predict("--output", "{tmp}/o.txt"),
        "o.txt",
        1,
        disk_full("fsync"),
    ),
    # -- export: never over a run, a checkpoint, the current directory or the user's files --
    Case("e-run-missing", "export", export("{tmp}/nope", "{tmp}/x"), "nope"),
    Case("e-run-is-checkpoint", "export", export("{tmp}/ckpt", "{tmp}/x"), "checkpoint folder"),
    Case("e-out-empty", "export", export("run", "", "--overwrite"), "OUT_DIR"),
    Case("e-out-cwd", "export", export("run", ".", "--overwrite"), "."),
    Case(
        "e-out-other-run",
        "export",
        then(lambda c: c.copy("adapter"), export("run", "{tmp}/adapter", "--overwrite")),
        "run folder",
    ),
    Case("e-out-checkpoint", "export", export("run", "{ckpt}", "--overwrite"), "checkpoint"),
    Case(
        "e-out-mlm-run",
        "export",
        then(lambda c: c.copy("mlm"), export("run", "{tmp}/mlm", "--overwrite")),
        "MLM pretraining run folder",
    ),
    Case(
        "e-out-user-files",
        "export",
        then(lambda c: c.folder("mine", "a.txt"), export("run", "{tmp}/mine", "--overwrite")),
        "mine",
    ),
    Case("e-out-in-run", "export", export("run", "{tmp}/run/exported"), "run"),
    Case("e-out-in-ckpt", "export", export("run", "{ckpt}/exported"), "checkpoint"),
    Case("e-out-holds-run", "export", export("run", "{tmp}", "--overwrite"), "run"),
    Case(
        "e-out-is-file",
        "export",
        then(lambda c: c.file("f.txt", "x"), export("run", "{tmp}/f.txt")),
        "f.txt",
    ),
    Case(
        "e-out-under-file",
        "export",
        then(lambda c: c.file("f.txt", "x"), export("run", "{tmp}/f.txt/sub")),
        "f.txt",
    ),
    Case("e-adapter", "export", export("adapter", "{tmp}/x"), "adapter"),
    Case(
        "e-no-option",
        "export",
        then(in_config("option", remove=True), export("run", "{tmp}/x")),
        "corrupted",
    ),
    Case(
        "e-ctrl-c",
        "export",
        export("run", "{tmp}/x"),
        "interrupted",
        130,
        interrupt(multitask.export, "write_head"),
    ),
    Case(
        "e-disk-full",
        "export",
        export("run", "{tmp}/x"),
        "x",
        1,
        disk_full("fsync"),
    ),
    # -- pretrain_mlm.py --
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
    # -- the driver: --evaluate, --add_to, extreme flags --
    Case("d-evaluate-checkpoint", "driver", driver("--evaluate", "{ckpt}"), "checkpoint folder"),
    Case(
        "d-evaluate-mlm",
        "driver",
        driver("--evaluate", "{mlm}", runs=("mlm",)),
        "MLM pretraining run folder",
    ),
    Case(
        "d-evaluate-other-data",
        "driver",
        driver("--evaluate", "{run}", "--sst_dev", "{data}/ids-sst-train.csv"),
        "--out_dir",
    ),
    Case("d-evaluate-limit", "driver", driver("--evaluate", "{run}", "--limit", "3"), "--out_dir"),
    Case(
        "d-evaluate-into-other-run",
        "driver",
        driver("--evaluate", "{run}", "--out_dir", "{adapter}", runs=("run", "adapter")),
        "--out_dir",
    ),
    Case(
        "d-evaluate-into-user-files",
        "driver",
        then(
            lambda c: c.folder("mine", "a.txt"),
            driver("--evaluate", "{run}", "--out_dir", "{tmp}/mine"),
        ),
        "--out_dir",
    ),
    Case(
        "d-evaluate-no-tasks",
        "driver",
        then(in_config("tasks", remove=True), driver("--evaluate", "{run}")),
        "corrupted",
    ),
    Case(
        "d-evaluate-option-list",
        "driver",
        then(in_config("option", ["x"]), driver("--evaluate", "{run}")),
        "corrupted",
    ),
    Case(
        "d-evaluate-ctrl-c",
        "driver",
        driver("--evaluate", "{run}"),
        "interrupted",
        130,
        interrupt(train_multitask, "dev_metrics"),
    ),
    Case(
        "d-add-to-loop",
        "driver",
        then(
            add_to_loop,
            driver("--add_to", "{tmp}/a", "--tasks", "sts", "--out_dir", "{tmp}/new", runs=()),
        ),
        "loop",
    ),
    Case(
        "d-add-to-checkpoint",
        "driver",
        driver("--add_to", "{ckpt}", "--tasks", "sts"),
        "checkpoint folder",
    ),
    Case(
        "d-add-to-no-tasks",
        "driver",
        then(
            in_config("tasks", remove=True, name="adapter"),
            driver(
                "--add_to",
                "{adapter}",
                "--tasks",
                "sts",
                "--out_dir",
                "{tmp}/new",
                runs=("adapter",),
            ),
        ),
        "corrupted",
    ),
    Case("d-seed-huge", "driver", driver("--seed", str(2**64), "--out_dir", "{tmp}/new"), "--seed"),
    Case(
        "d-seed-derived", "driver", driver("--seed", str(2**62), "--out_dir", "{tmp}/new"), "--seed"
    ),
    Case("d-limit-one", "driver", driver("--limit", "1", "--out_dir", "{tmp}/new"), "--limit"),
    Case(
        "d-data-dir-empty",
        "driver",
        driver("--data_dir", "", "--out_dir", "{tmp}/new"),
        "--data_dir",
    ),
    Case("d-out-dir-empty", "driver", driver("--out_dir", ""), "--out_dir"),
    Case(
        "d-checkpoint-empty",
        "driver",
        driver("--checkpoint", "", "--out_dir", "{tmp}/new"),
        "--checkpoint",
    ),
    Case(
        "d-train-file-empty",
        "driver",
        driver("--sst_train", "", "--out_dir", "{tmp}/new"),
        "--sst_train",
    ),
    Case(
        "d-checkpoint-run",
        "driver",
        driver("--checkpoint", "{run}", "--out_dir", "{tmp}/new"),
        "run folder",
    ),
    Case(
        "d-lora-dropout-one",
        "driver",
        driver("--option", "lora", "--lora_dropout", "1", "--out_dir", "{tmp}/new"),
        "--lora_dropout",
    ),
    Case(
        "d-out-user-files",
        "driver",
        then(lambda c: c.folder("mine", "a.txt"), driver("--out_dir", "{tmp}/mine", "--overwrite")),
        "--out_dir",
    ),
    Case("d-out-cwd", "driver", driver("--out_dir", ".", "--overwrite"), "--out_dir"),
    Case(
        "d-ctrl-c-setup",
        "driver",
        driver("--out_dir", "{tmp}/new"),
        "interrupted",
        130,
        interrupt(train_multitask, "read_data"),
    ),
    # -- the grader and the scaffold --
    Case("g-checkpoint-missing", "grader", plain("--checkpoint", "{tmp}/nope"), "--checkpoint"),
    Case("g-checkpoint-empty", "grader", plain("--checkpoint", ""), "--checkpoint"),
    Case("g-reference-missing", "grader", plain("--reference", "{tmp}/nope.pt"), "--reference"),
    Case("g-only-unknown", "grader", plain("--only", "nothing-like-this"), "--only"),
    Case("g-bad-flag", "grader", plain("--nope"), "--nope"),
    Case("s-source-missing", "scaffold", plain("{tmp}/out", "--source", "{tmp}/nope"), "--source"),
    Case("s-source-empty", "scaffold", plain("{tmp}/out", "--source", ""), "--source"),
    Case("s-no-out-dir", "scaffold", plain(), "OUT_DIR"),
    Case("s-unknown-exercise", "scaffold", plain("{tmp}/out", "--exercise", "nope"), "nope"),
    Case(
        "s-out-is-file",
        "scaffold",
        then(lambda c: c.file("f.txt", "x"), plain("{tmp}/f.txt")),
        "f.txt",
    ),
    Case("s-bad-flag", "scaffold", plain("--nope"), "--nope"),
]


def snapshot(*folders: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``folders``; symlinks as their target."""
    seen: dict[str, bytes | None] = {}
    for folder in folders:
        for p in sorted(folder.rglob("*")):
            if p.is_symlink():
                seen[str(p)] = os.readlink(p).encode()
            else:
                seen[str(p)] = p.read_bytes() if p.is_file() else None
    return seen


def invoke(case: Case, ctx: Ctx, mains: dict, monkeypatch, capsys) -> dict[str, bytes | None]:
    """Run the case's command and assert what every case asserts: its exit code, exactly one
    line on standard error, ``error: `` and the case's words (no usage block before it), no
    traceback. The snapshot of the files from before the command."""
    argv = case.argv(ctx)
    monkeypatch.chdir(ctx.cwd)
    if case.patch:
        case.patch(monkeypatch, ctx)
    before = snapshot(ctx.tmp, ctx.checkpoint)
    capsys.readouterr()
    try:
        code = mains[case.command](argv)
    except SystemExit as exit:  # argparse's own exit
        code = exit.code
    err = capsys.readouterr().err
    lines = [
        line
        for line in err.replace("\r", "\n").splitlines()
        if line.strip() and not line.startswith("MLM:")  # pretrain_mlm.py's progress bar
    ]
    assert code == case.code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert case.words in lines[0], lines[0]
    assert "Traceback" not in err
    return before


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    ctx = Ctx(tmp_path, made, tiny_checkpoint, tiny_data)
    if case.name.endswith("is-checkpoint"):
        checkpoint_copy(ctx)
    before = invoke(case, ctx, MAINS, monkeypatch, capsys)
    after = snapshot(tmp_path, tiny_checkpoint)
    if case.output:  # whole files of the command's own new folder, no temporary file
        own = str(tmp_path / case.output)
        new = [k for k in after if k not in before]
        assert all(k.startswith(own) and not k.endswith(".tmp") for k in new), new
        after = {k: v for k, v in after.items() if k in before}
    assert after == before  # nothing changed, lost or left behind


def test_at_least_sixty_cases():
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


# -- faults in real processes and file systems ---------------------------------------------------

READ_ONLY_SCRIPT = """
import contextlib, io, json, sys
import multitask.export, multitask.predict, pretrain_mlm, train_multitask
from tests.commands.test_bad_input_commands import mlm_argv
run, ckpt, data, ro, text = sys.argv[1:6]
driver = ["--checkpoint", ckpt, "--data_dir", data, "--batch_size", "4", "--max_length", "32"]
calls = {
    "predict": (multitask.predict.main, [run, "--task", "sst", "--input", text, "--output",
                                         ro + "/o.txt"]),
    "export": (multitask.export.main, [run, ro + "/exported"]),
    "mlm": (pretrain_mlm.main, mlm_argv(ckpt, data, ro + "/mlm")),
    "evaluate": (train_multitask.main, [*driver, "--evaluate", run, "--out_dir", ro + "/ev"]),
    "driver": (train_multitask.main, [*driver, "--epochs", "1", "--steps_per_epoch", "2",
                                      "--out_dir", ro + "/new"]),
}
found = {}
for name, (main, argv) in calls.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    found[name] = [code, err.getvalue()]
print(json.dumps(found))
"""


def one_error_line(err: str) -> str:
    """The one line ``error: ...`` of ``err`` (progress bars and warnings may stand beside it)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_read_only_folder_is_one_line_for_every_command(
    made, tiny_checkpoint, tiny_data, tmp_path
):
    """Root's permission bypass dropped (setpriv), every command that writes into a read-only
    folder ends in one line naming what it could not write, exit 1, and the folder stays empty."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    ro = tmp_path / "ro"
    ro.mkdir()
    text = tmp_path / "in.txt"
    text.write_text("a good film\n")
    ro.chmod(0o555)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable]
    command += ["-c", READ_ONLY_SCRIPT, str(made["run"]), str(tiny_checkpoint), str(tiny_data)]
    command += [str(ro), str(text)]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        ro.chmod(0o755)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    assert done.returncode == 0, done.stderr
    for name, (code, err) in json.loads(done.stdout.splitlines()[-1]).items():
        line = one_error_line(err)
        assert code == 1 and str(ro) in line and "Permission denied" in line, (name, err)
    assert list(ro.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs (skipped where mount is not allowed), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(
    made, tiny_checkpoint, tiny_data, small_disk, tmp_path, capsys
):
    """A real full file system: export (a 4 MB encoder), pretrain_mlm.py (last.pt) and predict
    (into a disk already full) end in one line, exit 1, with no temporary file left."""
    assert multitask.export.main([str(made["run"]), str(small_disk / "exported")]) == 1
    assert "exported" in one_error_line(capsys.readouterr().err)
    assert list(small_disk.iterdir()) == []
    assert pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, small_disk / "mlm")) == 1
    assert "last.pt" in one_error_line(capsys.readouterr().err)
    assert not [p for p in (small_disk / "mlm").iterdir() if p.name.endswith(".tmp")]
    filler = small_disk / "filler"
    with open(filler, "wb") as f, pytest.raises(OSError):
        f.write(b"\0" * 1024 * 1024)
    text = tmp_path / "in.txt"
    text.write_text("a good film\n" * 20)
    argv = [str(made["run"]), "--task", "sst", "--input", str(text)]
    assert multitask.predict.main([*argv, "--output", str(small_disk / "o.txt")]) == 1
    assert "o.txt" in one_error_line(capsys.readouterr().err)
    assert not (small_disk / "o.txt").exists()
    assert not [p for p in small_disk.iterdir() if p.name.endswith(".tmp")]


def test_an_interrupted_exports_temporary_folder_is_removed(made, tmp_path, capsys):
    """What kill -9 in the middle of an export leaves (its temporary folder beside OUT_DIR) is
    removed by the next export to OUT_DIR, which then holds the export and its export.json."""
    stale = tmp_path / ".exported.export-k1ll3d" / "export"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    assert multitask.export.main([str(made["run"]), str(tmp_path / "exported")]) == 0
    assert "left by an interrupted export" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]
    assert json.loads((tmp_path / "exported" / "export.json").read_text())["option"] == "finetune"
    again = [str(made["run"]), str(tmp_path / "exported"), "--overwrite"]
    assert multitask.export.main(again) == 0  # an earlier export is replaced with --overwrite


# An export whose files are all written, held before the rename that makes it OUT_DIR.
HELD_EXPORT = """
import sys, time
import multitask.export as export
write_export = export.write_export
def write_and_hold(*args, **kwargs):
    written = write_export(*args, **kwargs)
    print("written", flush=True)
    time.sleep(120)
    return written
export.write_export = write_and_hold
sys.exit(export.main(sys.argv[1:]))
"""


def test_kill_9_mid_export_leaves_no_out_dir_and_the_next_export_cleans_up(made, tmp_path):
    """A real export process killed with SIGKILL after writing its files, before the rename:
    OUT_DIR does not exist (nothing half-made is taken for an export), and the next export
    removes the temporary folder and leaves OUT_DIR alone beside the run."""
    out = tmp_path / "exported"
    command = [sys.executable, "-c", HELD_EXPORT, str(made["run"]), str(out)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "written\n"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and list(tmp_path.glob(".exported.export-*/export"))
    assert multitask.export.main([str(made["run"]), str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]


@pytest.mark.parametrize("command", ["driver", "mlm"])
def test_a_run_folder_removed_mid_run_is_one_line_and_not_made_again(
    command, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys
):
    """The run folder deleted under a running command (just after its first log line): the next
    write fails with one line naming the folder, exit 1, and nothing is written back."""
    out, append_log = tmp_path / "run", multitask.run.RunFolder.append_log

    def append_then_vanish(folder, name, records):
        append_log(folder, name, records)
        shutil.rmtree(folder.path)

    monkeypatch.setattr(multitask.run.RunFolder, "append_log", append_then_vanish)
    if command == "driver":
        argv = driver_argv(tiny_checkpoint, tiny_data, out, "--epochs", "1", "--no_plots")
        code = train_multitask.main([*argv, "--log_every", "2"])
    else:
        code = pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, out, "--eval_every", "2"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and str(out) in line and "No such file or directory" in line, line
    assert not out.exists()


def test_predict_writes_through_a_symlink_and_dev_stdout(made, tmp_path, capfd):
    target, link = tmp_path / "target.txt", tmp_path / "link.txt"
    target.write_text("old\n")
    link.symlink_to(target)
    (tmp_path / "in.txt").write_text("a good film\n")
    argv = [str(made["run"]), "--task", "sst", "--input", str(tmp_path / "in.txt")]
    assert multitask.predict.main([*argv, "--output", str(link)]) == 0
    assert link.is_symlink() and target.read_text() != "old\n"
    capfd.readouterr()
    assert multitask.predict.main([*argv, "--output", "/dev/stdout"]) == 0
    assert capfd.readouterr().out == target.read_text()


def test_predict_reports_a_quoted_field_over_lines_and_keeps_the_count(made, tmp_path, capsys):
    (tmp_path / "q.csv").write_text('id,sentence\n1,"a good\nfilm"\n2,fine\n')
    argv = [str(made["run"]), "--task", "sst", "--input", str(tmp_path / "q.csv")]
    assert multitask.predict.main(argv) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 4 and "q.csv:2: a quoted field" in err and "q.csv:3" in err


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
