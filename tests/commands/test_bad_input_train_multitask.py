"""Bad input to train_multitask.py, the driver: every flag out of range (none silently
reinterpreted), the files the user named and files that cannot be read, an existing run never
destroyed, --evaluate, --add_to, --resume, teachers, fusion's stage-1 run, PEFT folders given to
--init_lora, and a tree without an extra that a run used (the promise and how a case is run:
tests/commands/bad_input.py). Tests of their own below: a folder in use, non-finite weights, a
full disk, an --out_dir that is a file, --teachers given twice, a PEFT folder of another base
model, and the stage-1 check's words."""

from __future__ import annotations

import errno
import fcntl
import functools
import json
import os
import shutil
import types
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import train_multitask
from minbert.checkpoint import save_tensors
from multitask import extras
from tests.commands.bad_input import (
    NEW,
    SHORT,
    Case,
    Ctx,
    case_ids,
    check,
    in_config,
    interrupt,
    then,
)
from tests.helpers import driver_argv, run_driver, short_run

RUNS = ("run", "adapter", "mlm", "added", "peft")
HEADER = b"\tid\tsentence\tsentiment\n"
HUGE = str(10**9)
PEFT = "p/adapter_model.safetensors"


def driver_case(
    name: str,
    prepare: Callable[[Ctx], list[str]],
    words: str,
    code: int = 2,
    run_copy: str | None = None,
) -> Case:
    """The driver's tiny run into {tmp}/run (a copy of the finished run where ``run_copy``),
    with the flags ``prepare(ctx)`` returns (``{out}``: that folder)."""

    def argv(ctx: Ctx) -> list[str]:
        out = ctx.run() if run_copy else ctx.tmp / "run"
        extra = [arg.replace("{out}", str(out)) for arg in prepare(ctx)]
        return driver_argv(ctx.checkpoint, ctx.data, out, *SHORT, *extra)

    return Case(name, "driver", argv, words, code)


def flags(*extra: str) -> Callable[[Ctx], list[str]]:
    return lambda ctx: list(extra)


def write(name: str, content: bytes, flag: str) -> Callable[[Ctx], list[str]]:
    """A data file with ``content`` given as ``--<flag>``."""

    def prepare(ctx: Ctx) -> list[str]:
        path = ctx.tmp / name
        path.write_bytes(content)
        return [f"--{flag}", str(path)]

    return prepare


def checkpoint_without(name: str, replace: bytes | None = None) -> Callable[[Ctx], list[str]]:
    """A copy of the tiny checkpoint whose ``name`` is removed (or replaced by ``replace``)."""

    def prepare(ctx: Ctx) -> list[str]:
        copy = ctx.tmp / "ckpt"
        shutil.copytree(ctx.checkpoint, copy)
        (copy / name).unlink()
        if replace is not None:
            (copy / name).write_bytes(replace)
        return ["--checkpoint", str(copy)]

    return prepare


def in_run(edit: Callable[[Path], None], *extra: str) -> Callable[[Ctx], list[str]]:
    """Damage the copied run with ``edit``, then run with ``extra`` on it."""

    def prepare(ctx: Ctx) -> list[str]:
        edit(ctx.tmp / "run")
        return list(extra)

    return prepare


def cut_in_half(name: str) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])

    return edit


def other_runs_last_pt(ctx: Ctx) -> list[str]:
    """last.pt of an adapter run, in a finetune run's folder, then --resume."""
    shutil.copyfile(ctx.made["adapter"] / "last.pt", ctx.tmp / "run" / "last.pt")
    return ["--resume"]


def driver(*extra: str, runs: tuple[str, ...] = ("run",)):
    """The driver on the tiny checkpoint and data; ``{run}``, ``{adapter}``, ``{tmp}``..."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "data": ctx.data, "cwd": ctx.cwd}
        names |= {r: ctx.copy(r) for r in runs}
        base = ["--checkpoint", str(ctx.checkpoint), "--data_dir", str(ctx.data)]
        base += ["--batch_size", "4", "--max_length", "32", *SHORT]
        return base + [e.format(**names) for e in extra]

    return argv


def add_to_loop(ctx: Ctx) -> None:
    """Two adapter runs, each saying it was added to the other."""
    a, b = ctx.copy("adapter", "a"), ctx.copy("adapter", "b")
    ctx.edit_json(a / "config.json", lambda c: c.__setitem__("add_to", str(b)))
    ctx.edit_json(b / "config.json", lambda c: c.__setitem__("add_to", str(a)))


def taught_run(ctx: Ctx) -> None:
    """A copy of the adapter run (sst, para) whose config says sst and para were taught, with a
    teacher cache that holds sst's outputs only."""
    run = ctx.copy("adapter", "taught")
    teacher = str(ctx.copy("adapter"))
    ctx.edit_json(
        run / "config.json",
        lambda c: c.__setitem__("teachers", [f"sst={teacher}", f"para={teacher}"]),
    )
    save_tensors({"sst": torch.zeros(3, 5)}, run / "teacher-outputs.safetensors")


def cut_teacher(ctx: Ctx) -> None:
    path = ctx.copy("adapter") / "task-sst.safetensors"
    path.write_bytes(path.read_bytes()[:100])


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


def users_in_run(name: str, folder: bool = False):
    """A file (or folder) of the user's inside a copy of the finished run."""

    def make(ctx: Ctx) -> None:
        path = ctx.run() / name
        path.mkdir() if folder else path.write_text("the user's own\n")

    return make


def old_events(name: str = "run"):
    """An events file of the copied run ``name``'s earlier TensorBoard report in its
    tensorboard/ (what an --overwrite of it removes)."""

    def make(ctx: Ctx) -> None:
        folder = ctx.copy(name) / "tensorboard"
        folder.mkdir()
        (folder / "events.out.tfevents.1.host").write_bytes(b"the old run's events")

    return make


def fixed_events(monkeypatch, ctx: Ctx) -> None:
    """A tensorboard/ whose entries cannot be removed or renamed (a read-only folder, for a
    process without root's permission bypass): unlink and rename there fail, EACCES."""

    def refused(real: Callable, *args, **kwargs):
        if Path(args[0]).parent.name == "tensorboard":
            raise PermissionError(errno.EACCES, "Permission denied", str(args[0]))
        return real(*args, **kwargs)

    for name in ("unlink", "remove", "rename", "replace"):
        monkeypatch.setattr(os, name, functools.partial(refused, getattr(os, name)))


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


# -- a tree without an extra (the student tree) reads no run that used one changing its results --


def absent(name: str):
    """This tree without the extra ``name`` (as the student tree is without its file)."""

    def patch(monkeypatch, ctx) -> None:
        present = extras.Extra.present
        monkeypatch.setattr(extras.Extra, "present", lambda e: e.name != name and present(e))

    return patch


# (the extra, the config.json key and a value that uses it, the flag and file the line names)
USES = [
    ("distillation", "teachers", ["sst=elsewhere"], "--teachers needs extras/distillation.py"),
    ("fusion", "option", "fusion", "--option fusion needs extras/fusion.py"),
    ("pcgrad", "step_gradient", "pcgrad", "--step_gradient pcgrad needs minbert/pcgrad.py"),
    ("peft_format", "init_lora", ["sst=elsewhere"], "--init_lora needs extras/peft_format.py"),
]  # an extra of speed or reports only is read without it: tests/course/test_runs_travel.py
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


CASES = [
    # -- flags out of range (and none silently reinterpreted) --
    driver_case("lr-zero", flags("--lr", "0"), "--lr"),
    driver_case("lr-nan", flags("--lr", "nan"), "--lr nan: must be a finite number in (0, 10]"),
    driver_case(
        "max-grad-norm-inf",
        flags("--max_grad_norm", "inf"),
        "--max_grad_norm inf: must be a finite number at least 0",
    ),
    driver_case(
        "warmup-minus-inf", flags("--warmup=-inf"), "--warmup -inf: must be a finite number in"
    ),
    driver_case("lr-negative", flags("--lr=-1e-3"), "--lr"),
    driver_case("lr-huge", flags("--lr", "1e30"), "--lr"),
    driver_case("weight-decay", flags("--weight_decay", "-0.1"), "--weight_decay"),
    driver_case("dropout-one", flags("--dropout", "1"), "--dropout"),
    driver_case("dropout-negative", flags("--dropout", "-0.1"), "--dropout"),
    driver_case("max-length-1", flags("--max_length", "1"), "--max_length"),
    driver_case("max-length-4-pairs", flags("--max_length", "4"), "--max_length"),
    driver_case("max-length-past-positions", flags("--max_length", "100000"), "--max_length"),
    driver_case("threads-zero", flags("--threads", "0"), "--threads"),
    driver_case("seed-negative", flags("--seed", "-1"), "--seed"),
    driver_case("steps-per-epoch-zero", flags("--steps_per_epoch", "0"), "--steps_per_epoch"),
    driver_case("eval-every-negative", flags("--eval_every", "-1"), "--eval_every"),
    driver_case("save-every-negative", flags("--save_every", "-5"), "--save_every"),
    driver_case("log-every-zero", flags("--log_every", "0"), "--log_every"),
    driver_case("epochs-zero", flags("--epochs", "0"), "--epochs"),
    driver_case("batch-size-zero", flags("--batch_size", "0"), "--batch_size"),
    driver_case("limit-zero", flags("--limit", "0"), "--limit"),
    driver_case("warmup-one", flags("--warmup", "1"), "--warmup"),
    driver_case("layer-decay-zero", flags("--layer_decay", "0"), "--layer_decay"),
    driver_case("train-fraction-zero", flags("--train_fraction", "0"), "--train_fraction"),
    driver_case("train-fraction-above-one", flags("--train_fraction", "1.5"), "--train_fraction"),
    driver_case("batch-pool-zero", flags("--batch_pool", "0"), "--batch_pool"),
    driver_case("head-hidden-negative", flags("--head_hidden", "-1"), "--head_hidden"),
    driver_case("tasks-twice", flags("--tasks", "sst,sst"), "--tasks"),
    driver_case("tasks-spelling", flags("--tasks", "SST"), "--tasks"),
    driver_case("tasks-empty", flags("--tasks", ","), "--tasks"),
    driver_case("device-cuda", flags("--device", "cuda"), "--device"),
    driver_case("device-unknown", flags("--device", "gpu"), "--device"),
    driver_case(
        "adapter-size", flags("--option", "adapter", "--adapter_size", "0"), "--adapter_size"
    ),
    driver_case(
        "lora-targets", flags("--option", "lora", "--lora_targets", "nope"), "--lora_targets"
    ),
    driver_case(
        "pal-size", flags("--option", "pals", "--pal_size", "10", "--pal_heads", "3"), "--pal_size"
    ),
    driver_case("smart-sigma", flags("--smart", "--smart_sigma", "-1"), "--smart_sigma"),
    driver_case("smart-momentum", flags("--smart", "--smart_momentum", "2"), "--smart_momentum"),
    driver_case("smart-steps", flags("--smart", "--smart_steps", "-1"), "--smart_steps"),
    # -- files the user named, and files that cannot be read --
    driver_case("train-file-missing", flags("--sst_train", "/nonexistent/sst.csv"), "--sst_train"),
    driver_case("test-file-named-missing", flags("--sst_test", "/nonexistent/t.csv"), "--sst_test"),
    driver_case("data-dir-missing", flags("--data_dir", "/nonexistent"), "not found"),
    driver_case("train-file-empty", write("e.csv", b"", "sst_train"), "e.csv: empty file"),
    driver_case("train-file-header-only", write("h.csv", HEADER, "sst_train"), "h.csv: no rows"),
    driver_case("train-file-nul", write("n.csv", b"\x00" * 256, "sst_train"), "NUL"),
    driver_case(
        "train-file-utf16", write("u.csv", HEADER.decode().encode("utf-16"), "sst_train"), "UTF-16"
    ),
    driver_case(
        "train-file-cr-only",
        write("c.csv", HEADER.replace(b"\n", b"\r") + b"0\ta\tgood\t1\r", "sst_train"),
        "CR alone",
    ),
    driver_case("train-file-a-folder", lambda ctx: ["--sst_train", str(ctx.tmp)], "--sst_train"),
    driver_case("checkpoint-missing", flags("--checkpoint", "/nonexistent/bert"), "--checkpoint"),
    driver_case("checkpoint-no-vocab", checkpoint_without("vocab.txt"), "vocab.txt"),
    driver_case("checkpoint-bad-config", checkpoint_without("config.json", b'{"hidden'), "JSON"),
    driver_case(
        "checkpoint-bad-weights", checkpoint_without("model.safetensors", b"\x00" * 99), "corrupted"
    ),
    driver_case(
        "out-dir-is-checkpoint", lambda ctx: ["--out_dir", str(ctx.checkpoint)], "--out_dir"
    ),
    driver_case(
        "out-dir-in-checkpoint",
        lambda ctx: ["--out_dir", str(ctx.checkpoint / "r")],
        "--out_dir",
    ),
    # -- an existing run is never destroyed --
    driver_case("run-exists", flags(), "already holds a run", run_copy="finished"),
    driver_case(
        "overwrite-with-a-typo",
        flags("--overwrite", "--sst_dev", "/nonexistent/dev.csv"),
        "--sst_dev",
        run_copy="finished",
    ),
    driver_case(
        "overwrite-bad-flag", flags("--overwrite", "--lr", "-1"), "--lr", run_copy="finished"
    ),
    driver_case(
        "stopped-before-evaluation",
        in_run(
            lambda r: [
                (r / n).unlink()
                for n in ("metrics.jsonl", "train_log.jsonl", "best.safetensors", "summary.json")
            ]
        ),
        "already holds a run",
        run_copy="finished",
    ),
    driver_case(
        "resume-config-cut",
        in_run(cut_in_half("config.json"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    driver_case(
        "resume-last-cut",
        in_run(cut_in_half("last.pt"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    driver_case(
        "resume-metrics-cut",
        in_run(cut_in_half("metrics.jsonl"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    driver_case(
        "resume-other-runs-last",
        other_runs_last_pt,
        "does not belong",
        run_copy="finished",
    ),
    driver_case(
        "resume-changes-lr", flags("--resume", "--lr", "1e-2"), "--lr", run_copy="finished"
    ),
    driver_case(
        "resume-changes-option",
        flags("--resume", "--option", "lora"),
        "--option",
        run_copy="finished",
    ),
    driver_case("evaluate-missing", flags("--evaluate", "/nonexistent/run"), "--evaluate"),
    driver_case(
        "evaluate-no-best",
        in_run(lambda r: (r / "best.safetensors").unlink(), "--evaluate", "{out}"),
        "best.safetensors",
        run_copy="finished",
    ),
    driver_case(
        "add-to-finetune-run",
        lambda ctx: [
            "--add_to",
            str(ctx.tmp / "run"),
            "--tasks",
            "cfimdb",
            "--out_dir",
            str(ctx.tmp / "x"),
        ],
        "--add_to",
        run_copy="finished",
    ),
    # -- --evaluate, --add_to, extreme flags --
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
    # -- extremes, a flag given twice, teachers --
    Case("d-threads-huge", "driver", driver("--threads", "100000", *NEW), "--threads"),
    Case(
        "d-adapter-size-huge",
        "driver",
        driver("--option", "adapter", "--adapter_size", HUGE, *NEW),
        "--adapter_size",
    ),
    Case(
        "d-lora-rank-huge",
        "driver",
        driver("--option", "lora", "--lora_rank", HUGE, *NEW),
        "--lora_rank",
    ),
    Case(
        "d-pal-size-huge",
        "driver",
        driver("--option", "pals", "--pal_size", HUGE, *NEW),
        "--pal_size",
    ),
    Case("d-head-hidden-huge", "driver", driver("--head_hidden", HUGE, *NEW), "--head_hidden"),
    Case(
        "d-teachers-twice-first-kept",
        "driver",
        driver("--teachers", "sst={tmp}/nope", "--teachers", "para={run}", *NEW),
        "--teachers sst=",
    ),
    Case(
        "d-teachers-twice-equals-first-kept",
        "driver",
        driver("--teachers=sst={tmp}/nope", "--teachers=para={run}", *NEW),
        "--teachers sst=",
    ),
    Case(
        "d-teachers-twice-one-task-two-runs",
        "driver",
        driver(
            "--teachers", "sst={run}", "--teachers", "sst={adapter}", *NEW, runs=("run", "adapter")
        ),
        "--teachers",
    ),
    Case(
        "d-teacher-is-overwritten-run",
        "driver",
        driver("--out_dir", "{run}", "--overwrite", "--tasks", "sst", "--teachers", "sst={run}"),
        "--teachers",
    ),
    Case(
        "d-teacher-is-new-out-dir",
        "driver",
        driver("--out_dir", "{tmp}/new", "--tasks", "sst", "--teachers", "sst={tmp}/new", runs=()),
        "--teachers",
    ),
    Case(
        "d-teacher-inside-out-dir",
        "driver",
        driver("--out_dir", "{tmp}", "--overwrite", "--tasks", "sst", "--teachers", "sst={run}"),
        "--teachers",
    ),
    Case(
        "d-overwrite-teacher-missing",
        "driver",
        driver("--out_dir", "{run}", "--overwrite", "--teachers", "sst={tmp}/nope"),
        "--teachers",
    ),
    Case(
        "d-overwrite-teacher-cut",
        "driver",
        then(
            cut_teacher,
            driver("--out_dir", "{run}", "--overwrite", "--teachers", "sst={tmp}/adapter"),
        ),
        "task-sst.safetensors",
    ),
    Case(
        "d-resume-cache-lacks-a-task",
        "driver",
        then(taught_run, driver("--out_dir", "{tmp}/taught", "--resume", runs=())),
        "--teachers",
    ),
    # -- a fusion run and its stage-1 run, the device check, PEFT folders given to --init_lora --
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
    # -- the run folder with a file of the user's or its tensorboard/; --add_to over earlier
    # weights that lack a task's tensors --
    Case(
        "d-overwrite-run-with-a-file-of-the-users",
        "driver",
        then(users_in_run("notes.txt"), driver("--out_dir", "{run}", "--overwrite")),
        "holds files no run of train_multitask.py writes (notes.txt)",
    ),
    Case(
        "d-overwrite-events-cannot-be-removed",
        "driver",
        then(old_events(), driver("--out_dir", "{run}", "--overwrite")),
        "run/tensorboard/events.out.tfevents.1.host: Permission denied",
        code=1,
        patch=fixed_events,
    ),
    Case(
        "d-overwrite-a-folder-where-a-file-goes",
        "driver",
        then(
            users_in_run("x-output.csv", folder=True), driver("--out_dir", "{run}", "--overwrite")
        ),
        "x-output.csv is a folder where train_multitask.py writes a file",
    ),
    Case(
        "d-tensorboard-is-a-file",
        "driver",
        then(
            users_in_run("tensorboard"),
            driver("--out_dir", "{run}", "--overwrite", "--report_to", "tensorboard"),
        ),
        "tensorboard is not a folder, and the run's events go there",
    ),
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
    *WITHOUT_EXTRA,
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_a_folder_in_use_is_refused(tiny_checkpoint, tiny_data, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        code = run_driver(tiny_checkpoint, tiny_data, out, *SHORT)
    err = capsys.readouterr().err
    assert code == 2 and "in use" in err and "Traceback" not in err
    assert not (out / "config.json").exists()


def test_non_finite_weights_never_reach_a_checkpoint(
    tiny_checkpoint, tiny_data, tmp_path, capsys, monkeypatch
):
    """An update that overflows a weight while the loss stays finite (as a too-large step would):
    the run stops before saving anything of that step, and says truly what is on disk."""
    real_optimizer_for, steps = train_multitask.optimizer_for, []

    def overflowing_optimizer_for(*args, **kwargs):  # the driver's optimizer, either path
        optimizer = real_optimizer_for(*args, **kwargs)
        real_step = type(optimizer).step

        def overflowing_step(self, closure=None):
            result = real_step(self, closure)
            steps.append(1)
            if len(steps) == 2:  # the step right before the evaluation
                self.param_groups[0]["params"][0].data.fill_(float("inf"))
            return result

        optimizer.step = types.MethodType(overflowing_step, optimizer)
        return optimizer

    monkeypatch.setattr(train_multitask, "optimizer_for", overflowing_optimizer_for)
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT, "--option", "finetune") == 3
    err = capsys.readouterr().err
    assert "non-finite weights after step 2" in err and "no resumable state" in err
    assert not (out / "last.pt").exists() and not (out / "best.safetensors").exists()


def test_a_full_disk_ends_in_one_line_with_the_state_on_disk(
    tiny_checkpoint, tiny_data, tmp_path, capsys, monkeypatch
):
    import errno

    import multitask.run

    def no_space(state, path):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(multitask.run, "atomic_save", no_space)
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT) == 1
    err = capsys.readouterr().err
    message = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(message) == 1 and "No space left on device" in message[0], err
    assert "no resumable state" in message[0] and "Traceback" not in err


@pytest.mark.parametrize("script", ["train_multitask", "pretrain_mlm"])
def test_an_out_dir_that_is_a_file_is_named_and_left_alone(
    script, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """--out_dir naming an existing file: one line naming --out_dir, exit 2, the file as it was
    (not the operating system's "File exists")."""
    import pretrain_mlm

    path = tmp_path / "notes.txt"
    path.write_text("the user's own file\n")
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data)]
    argv += ["--out_dir", str(path)]
    main = train_multitask.main if script == "train_multitask" else pretrain_mlm.main
    assert (
        main([*argv, *(["--limit", "8"] if script == "train_multitask" else ["--steps", "1"])]) == 2
    )
    err = capsys.readouterr().err
    assert f"error: --out_dir {path} is a file, not a folder" in err and "Traceback" not in err
    assert path.read_text() == "the user's own file\n"


def test_teachers_given_twice_are_merged(made, tiny_checkpoint, tiny_data, tmp_path):
    """Both --teachers count (documented in --help); the same entry twice counts once."""
    run = made["run"]
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data)]
    argv += ["--max_length", "32", "--out_dir", str(tmp_path / "new")]
    argv += ["--teachers", f"sst={run}", "--teachers", f"para={run},sst={run}"]
    teachers = train_multitask.parse_args(argv).extras["distillation"].teachers
    assert teachers == [f"sst={run}", f"para={run}"]
    assert "merged" in train_multitask.build_parser().format_help()


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


def test_the_stage_one_check_is_the_one_of_init_from_and_add_to(made, tmp_path):
    """--adapters_from is refused where --out_dir lies inside it as --init_from and --add_to
    are, in the same words."""
    from multitask.errors import UsageError

    line = ["--option", "fusion", "--adapters_from", str(made["adapter"])]
    line += ["--out_dir", str(made["adapter"] / "deep" / "fusion")]
    with pytest.raises(UsageError, match="must differ from --adapters_from and lie outside it"):
        train_multitask.parse_args(line)
    assert not (made["adapter"] / "deep").exists()
