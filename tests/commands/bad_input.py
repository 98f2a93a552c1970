"""What the bad-input tables share (``tests/commands/test_bad_input_<command>.py``, a table a
command): the promise they measure, the scene a case builds, and the one way a case is run.

The promise, for every command: a mistake, a fault or Ctrl-C ends in one line ``error: ...``
naming the flag or file (argparse's own mistakes too, with no usage block before it), the
documented exit code (2; 1 for a write fault; 3 for a numerical fault; 130 for Ctrl-C), no
traceback, and every file that existed before (run folders, checkpoint folders, the input file,
the current directory) byte-identical afterwards, with nothing new left behind.

A case builds its situation in a fresh folder (``Ctx``: copies of tiny finished runs, a current
directory holding a file of the user's), runs the command's ``main(argv)`` in-process (a
traceback fails the test) and compares every file under the case's folder and the tiny
checkpoint before and after (``check``). The tiny finished runs are made once a session, each
when a table first names it in ``RUNS`` (``RunStore``; ``made`` in conftest.py).
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import minbert.checkpoint
import pretrain_mlm
import sanity_check
import tools.attention
import tools.export
import tools.predict
import train_multitask
from course.authoring import scaffold
from course.grading import autograder, grade, report
from tests.helpers import run_driver, short_run
from tools import fusion_weights

ROOT = Path(__file__).resolve().parents[2]
SHORT = short_run(epochs=1, steps=2)
NEW = ("--out_dir", "{tmp}/new")
INVISIBLE = "only invisible characters"  # how an input that holds nothing is reported


def suite_runner(argv: list[str]) -> int:
    """benchmarks/multitask_runs.py's ``main``, imported when a case runs it: a process without
    benchmarks/ on its path (a test's own subprocess) can import this module."""
    import multitask_runs

    return multitask_runs.main(argv)


def references(argv: list[str]) -> int:
    """course/authoring/make_course_references.py's ``main``, imported when a case runs it (the
    student tree has no such file)."""
    from course.authoring import make_course_references

    return make_course_references.main(argv)


# Each command's ``main(argv)``, by the name a case gives it.
COMMANDS = {
    "predict": tools.predict.main,
    "export": tools.export.main,
    "mlm": pretrain_mlm.main,
    "driver": train_multitask.main,
    "grader": sanity_check.main,
    "scaffold": scaffold.main,
    "attention": tools.attention.main,
    "runner": suite_runner,
    "weights": fusion_weights.main,
    "gradescope": autograder.main,  # the zip: python -m course.grading.autograder
    "grade": grade.main,  # python -m course.grading.grade
    "report": report.main,  # python -m course.grading.report
    "references": references,  # python -m course.authoring.make_course_references
}


def mlm_argv(checkpoint: Path, data: Path, out: Path | str, *extra: str) -> list[str]:
    """pretrain_mlm.py on the tiny checkpoint and sst's tiny files: two steps of four."""
    return [
        *("--checkpoint", str(checkpoint), "--data_dir", str(data), "--out_dir", str(out)),
        *("--tasks", "sst", "--steps", "2", "--eval_every", "1", "--batch_size", "4"),
        *("--max_length", "32", *extra),
    ]


class RunStore:
    """The tiny finished runs the cases copy, each made on first use under ``root``: ``run``
    (finetune), ``adapter`` (sst, para), ``mlm`` (pretrain_mlm.py), ``fusion`` (over
    ``adapter``), ``adapter4`` (adapters of size 4, sst and para), ``peft`` (a LoRA run of sst
    exported as PEFT folders) and ``added`` (sts added to ``adapter``)."""

    def __init__(self, checkpoint: Path, data: Path, root: Path) -> None:
        self.checkpoint, self.data, self.root = checkpoint, data, root
        self.made: dict[str, Path] = {}

    def driver(self, name: str, *extra: str) -> Path:
        assert run_driver(self.checkpoint, self.data, self.root / name, *SHORT, *extra) == 0
        return self.root / name

    def make(self, name: str) -> Path:
        if name == "run":
            return self.driver("finetune")
        if name == "adapter":
            return self.driver("adapter", "--option", "adapter", "--tasks", "sst,para")
        if name == "mlm":
            assert pretrain_mlm.main(mlm_argv(self.checkpoint, self.data, self.root / "mlm")) == 0
            return self.root / "mlm"
        if name == "fusion":
            return self.driver("fusion", "--option", "fusion", "--adapters_from", self["adapter"])
        if name == "adapter4":
            sizes = ("--option", "adapter", "--adapter_size", "4", "--tasks", "sst,para")
            return self.driver("adapter4", *sizes)
        if name == "peft":
            lora = self.driver("lora", "--option", "lora", "--tasks", "sst")
            assert tools.export.main([str(lora), str(self.root / "peft"), "--format", "peft"]) == 0
            return self.root / "peft"
        if name == "added":
            return self.driver("added", "--add_to", self["adapter"], "--tasks", "sts")
        raise KeyError(name)

    def __getitem__(self, name: str) -> str:
        if name not in self.made:
            self.made[name] = self.make(name)
        return str(self.made[name])

    def runs(self, names: tuple[str, ...]) -> dict[str, Path]:
        """The runs ``names``, made now where they are not yet."""
        return {name: Path(self[name]) for name in names}


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
    ``words`` must be in the one error line (``{run}``: the copied run's folder);
    ``patch(monkeypatch, ctx)`` makes a fault."""

    name: str
    command: str
    argv: Callable[[Ctx], list[str]]
    words: str
    code: int = 2
    patch: Callable | None = None
    output: str | None = None  # a write fault: the command's own new folder may hold whole files


def case_ids(cases: list[Case]) -> list[str]:
    """The cases' ids, as pytest shows them."""
    return [case.name for case in cases]


# -- scenes and faults that several commands' tables build ---------------------------------------


def then(prepare: Callable[[Ctx], object], argv: Callable[[Ctx], list[str]]):
    """Prepare the scene, then build the arguments."""

    def both(ctx: Ctx) -> list[str]:
        prepare(ctx)
        return argv(ctx)

    return both


def plain(*extra: str):
    """The arguments as given (``{tmp}``, ``{ckpt}``: the case's folder, the tiny checkpoint)."""
    return lambda ctx: [e.format(tmp=ctx.tmp, ckpt=ctx.checkpoint) for e in extra]


def files(*names: str):
    """Files (and folders, named with a trailing /) of the user's under the case's folder."""

    def make(ctx: Ctx) -> None:
        for name in names:
            path = ctx.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith("/"):
                path.mkdir()
            else:
                path.write_text("the user's own\n")

    return make


def checkpoint_copy(ctx: Ctx) -> None:
    """A copy of the tiny checkpoint at {tmp}/ckpt."""
    shutil.copytree(ctx.checkpoint, ctx.tmp / "ckpt")


def in_config(key: str, value: object = None, remove: bool = False, name: str = "run"):
    """Change (or remove) ``key`` of a copied run's config.json."""

    def edit(ctx: Ctx) -> None:
        path = ctx.copy(name) / ("mlm_config.json" if name == "mlm" else "config.json")
        ctx.edit_json(path, lambda c: c.pop(key) if remove else c.__setitem__(key, value))

    return edit


def cut(name: str, file: str):
    """The second half of ``file`` of a copied run cut off."""

    def edit(ctx: Ctx) -> None:
        path = ctx.copy(name) / file
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return edit


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


# (key, value, the reason a command that opens a run gives in "config.json is corrupted (...)"):
# one reader of config.json, so what --evaluate refuses every command that opens a run refuses.
BAD_CONFIG = [
    ("max_grad_norm", "x", "--max_grad_norm 'x': must be a number"),
    ("report_to", "bogus", "--report_to 'bogus': must be one of none, tensorboard"),
    ("optimizer", "sgd", "--optimizer 'sgd': must be one of adamw, foreach, fused"),
    ("teachers", 5, "--teachers 5: must be a list of strings"),
]


def config_cases(command: str, run: str, argv: tuple[str, ...]) -> list[Case]:
    """``command`` (``argv``) on a copy of the run ``run`` named relative to the current
    directory (so that the line's "RUN_DIR: ../run/config.json" tells the run's own reader from
    a flag's), its config.json holding each value of ``BAD_CONFIG``."""
    return [
        Case(
            f"{command[0]}-config-{key}",
            command,
            then(
                lambda c, key=key, value=value: (
                    files("in.txt")(c),
                    in_config(key, value, name=run)(c),
                ),
                plain(*argv),
            ),
            f"error: RUN_DIR: ../{run}/config.json is corrupted ({reason})",
        )
        for key, value, reason in BAD_CONFIG
    ]


# -- running a case -----------------------------------------------------------------------------


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


def invoke(case: Case, ctx: Ctx, monkeypatch, capsys) -> dict[str, bytes | None]:
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
        code = COMMANDS[case.command](argv)
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


def check(case: Case, ctx: Ctx, monkeypatch, capsys) -> None:
    """``invoke`` the case, then: nothing under the case's folder or the tiny checkpoint
    changed, lost or left behind (a write fault's own new folder, ``case.output``, may hold
    whole files, never a temporary one)."""
    case = dataclasses.replace(case, words=case.words.replace("{run}", str(ctx.tmp / "run")))
    before = invoke(case, ctx, monkeypatch, capsys)
    after = snapshot(ctx.tmp, ctx.checkpoint)
    if case.output:
        own = str(ctx.tmp / case.output)
        new = [k for k in after if k not in before]
        assert all(k.startswith(own) and not k.endswith(".tmp") for k in new), new
        after = {k: v for k, v in after.items() if k in before}
    assert after == before


def one_error_line(err: str) -> str:
    """The one line ``error: ...`` of ``err`` (progress bars and warnings may stand beside it)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]
