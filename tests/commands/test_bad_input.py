"""Every bad flag, file and run folder ends in one line and exit code 2 (3 or 130 where the README
says so), with no traceback, the flag or file named, and no file of an existing run changed.

Each case builds its situation in a fresh folder (a copy of one finished tiny run where it needs
a run), runs the driver in-process (an uncaught exception, i.e. a traceback, fails the test),
and compares every file of the run folder before and after."""

from __future__ import annotations

import fcntl
import shutil
import types
from collections.abc import Callable
from pathlib import Path

import pytest

import train_multitask
from tests.helpers import driver_argv, run_driver, short_run

SHORT = short_run(epochs=1, steps=2)


@pytest.fixture(scope="module")
def finished_run(tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    """A finished tiny finetune run (config, logs, last.pt, best checkpoint, predictions)."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT) == 0
    return out


@pytest.fixture(scope="module")
def adapter_run(tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("adapter") / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT, "--option", "adapter") == 0
    return out


def snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


class Case:
    """One bad invocation: ``prepare(ctx)`` sets the scene and returns the extra arguments."""

    def __init__(
        self,
        name: str,
        prepare: Callable[[dict], list[str]],
        words: str,
        code: int = 2,
        run_copy: str | None = None,
    ) -> None:
        self.name, self.prepare, self.words, self.code, self.run_copy = (
            name,
            prepare,
            words,
            code,
            run_copy,
        )


def flags(*extra: str) -> Callable[[dict], list[str]]:
    return lambda ctx: list(extra)


def write(name: str, content: bytes, flag: str) -> Callable[[dict], list[str]]:
    """A data file with ``content`` given as ``--<flag>``."""

    def prepare(ctx: dict) -> list[str]:
        path = ctx["tmp"] / name
        path.write_bytes(content)
        return [f"--{flag}", str(path)]

    return prepare


def checkpoint_without(name: str, replace: bytes | None = None) -> Callable[[dict], list[str]]:
    """A copy of the tiny checkpoint whose ``name`` is removed (or replaced by ``replace``)."""

    def prepare(ctx: dict) -> list[str]:
        copy = ctx["tmp"] / "ckpt"
        shutil.copytree(ctx["checkpoint"], copy)
        (copy / name).unlink()
        if replace is not None:
            (copy / name).write_bytes(replace)
        return ["--checkpoint", str(copy)]

    return prepare


def in_run(edit: Callable[[Path], None], *extra: str) -> Callable[[dict], list[str]]:
    """Damage the copied run with ``edit``, then run with ``extra`` on it."""

    def prepare(ctx: dict) -> list[str]:
        edit(ctx["out"])
        return list(extra)

    return prepare


def cut_in_half(name: str) -> Callable[[Path], None]:
    def edit(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: len(data) // 2])

    return edit


def other_runs_last_pt(ctx_run: Path) -> None:
    """last.pt of an adapter run, in a finetune run's folder."""
    shutil.copyfile(ADAPTER_RUN[0] / "last.pt", ctx_run / "last.pt")


ADAPTER_RUN: list[Path] = []

HEADER = b"\tid\tsentence\tsentiment\n"

CASES = [
    # -- flags out of range (and none silently reinterpreted) --
    Case("lr-zero", flags("--lr", "0"), "--lr"),
    Case("lr-nan", flags("--lr", "nan"), "--lr"),
    Case("lr-negative", flags("--lr=-1e-3"), "--lr"),
    Case("lr-huge", flags("--lr", "1e30"), "--lr"),
    Case("weight-decay", flags("--weight_decay", "-0.1"), "--weight_decay"),
    Case("dropout-one", flags("--dropout", "1"), "--dropout"),
    Case("dropout-negative", flags("--dropout", "-0.1"), "--dropout"),
    Case("max-length-1", flags("--max_length", "1"), "--max_length"),
    Case("max-length-4-pairs", flags("--max_length", "4"), "--max_length"),
    Case("max-length-past-positions", flags("--max_length", "100000"), "--max_length"),
    Case("threads-zero", flags("--threads", "0"), "--threads"),
    Case("seed-negative", flags("--seed", "-1"), "--seed"),
    Case("steps-per-epoch-zero", flags("--steps_per_epoch", "0"), "--steps_per_epoch"),
    Case("eval-every-negative", flags("--eval_every", "-1"), "--eval_every"),
    Case("save-every-negative", flags("--save_every", "-5"), "--save_every"),
    Case("log-every-zero", flags("--log_every", "0"), "--log_every"),
    Case("epochs-zero", flags("--epochs", "0"), "--epochs"),
    Case("batch-size-zero", flags("--batch_size", "0"), "--batch_size"),
    Case("limit-zero", flags("--limit", "0"), "--limit"),
    Case("warmup-one", flags("--warmup", "1"), "--warmup"),
    Case("layer-decay-zero", flags("--layer_decay", "0"), "--layer_decay"),
    Case("train-fraction-zero", flags("--train_fraction", "0"), "--train_fraction"),
    Case("train-fraction-above-one", flags("--train_fraction", "1.5"), "--train_fraction"),
    Case("batch-pool-zero", flags("--batch_pool", "0"), "--batch_pool"),
    Case("head-hidden-negative", flags("--head_hidden", "-1"), "--head_hidden"),
    Case("tasks-twice", flags("--tasks", "sst,sst"), "--tasks"),
    Case("tasks-spelling", flags("--tasks", "SST"), "--tasks"),
    Case("tasks-empty", flags("--tasks", ","), "--tasks"),
    Case("device-cuda", flags("--device", "cuda"), "--device"),
    Case("device-unknown", flags("--device", "gpu"), "--device"),
    Case("adapter-size", flags("--option", "adapter", "--adapter_size", "0"), "--adapter_size"),
    Case("lora-targets", flags("--option", "lora", "--lora_targets", "nope"), "--lora_targets"),
    Case(
        "pal-size", flags("--option", "pals", "--pal_size", "10", "--pal_heads", "3"), "--pal_size"
    ),
    Case("smart-sigma", flags("--smart", "--smart_sigma", "-1"), "--smart_sigma"),
    Case("smart-momentum", flags("--smart", "--smart_momentum", "2"), "--smart_momentum"),
    Case("smart-steps", flags("--smart", "--smart_steps", "-1"), "--smart_steps"),
    # -- files the user named, and files that cannot be read --
    Case("train-file-missing", flags("--sst_train", "/nonexistent/sst.csv"), "--sst_train"),
    Case("test-file-named-missing", flags("--sst_test", "/nonexistent/t.csv"), "--sst_test"),
    Case("data-dir-missing", flags("--data_dir", "/nonexistent"), "not found"),
    Case("train-file-empty", write("e.csv", b"", "sst_train"), "e.csv: empty file"),
    Case("train-file-header-only", write("h.csv", HEADER, "sst_train"), "h.csv: no rows"),
    Case("train-file-nul", write("n.csv", b"\x00" * 256, "sst_train"), "NUL"),
    Case(
        "train-file-utf16", write("u.csv", HEADER.decode().encode("utf-16"), "sst_train"), "UTF-16"
    ),
    Case(
        "train-file-cr-only",
        write("c.csv", HEADER.replace(b"\n", b"\r") + b"0\ta\tgood\t1\r", "sst_train"),
        "CR alone",
    ),
    Case("train-file-a-folder", lambda ctx: ["--sst_train", str(ctx["tmp"])], "--sst_train"),
    Case("checkpoint-missing", flags("--checkpoint", "/nonexistent/bert"), "--checkpoint"),
    Case("checkpoint-no-vocab", checkpoint_without("vocab.txt"), "vocab.txt"),
    Case("checkpoint-bad-config", checkpoint_without("config.json", b'{"hidden'), "JSON"),
    Case(
        "checkpoint-bad-weights", checkpoint_without("model.safetensors", b"\x00" * 99), "corrupted"
    ),
    Case("out-dir-is-checkpoint", lambda ctx: ["--out_dir", str(ctx["checkpoint"])], "--out_dir"),
    Case(
        "out-dir-in-checkpoint",
        lambda ctx: ["--out_dir", str(ctx["checkpoint"] / "r")],
        "--out_dir",
    ),
    # -- an existing run is never destroyed --
    Case("run-exists", flags(), "already holds a run", run_copy="finished"),
    Case(
        "overwrite-with-a-typo",
        flags("--overwrite", "--sst_dev", "/nonexistent/dev.csv"),
        "--sst_dev",
        run_copy="finished",
    ),
    Case("overwrite-bad-flag", flags("--overwrite", "--lr", "-1"), "--lr", run_copy="finished"),
    Case(
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
    Case(
        "resume-config-cut",
        in_run(cut_in_half("config.json"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    Case(
        "resume-last-cut",
        in_run(cut_in_half("last.pt"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    Case(
        "resume-metrics-cut",
        in_run(cut_in_half("metrics.jsonl"), "--resume"),
        "corrupted",
        run_copy="finished",
    ),
    Case(
        "resume-other-runs-last",
        in_run(other_runs_last_pt, "--resume"),
        "does not belong",
        run_copy="finished",
    ),
    Case("resume-changes-lr", flags("--resume", "--lr", "1e-2"), "--lr", run_copy="finished"),
    Case(
        "resume-changes-option",
        flags("--resume", "--option", "lora"),
        "--option",
        run_copy="finished",
    ),
    Case("evaluate-missing", flags("--evaluate", "/nonexistent/run"), "--evaluate"),
    Case(
        "evaluate-no-best",
        in_run(lambda r: (r / "best.safetensors").unlink(), "--evaluate", "{out}"),
        "best.safetensors",
        run_copy="finished",
    ),
    Case(
        "add-to-finetune-run",
        lambda ctx: [
            "--add_to",
            str(ctx["out"]),
            "--tasks",
            "cfimdb",
            "--out_dir",
            str(ctx["tmp"] / "x"),
        ],
        "--add_to",
        run_copy="finished",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_invocation(
    case, tiny_checkpoint, tiny_data, finished_run, adapter_run, tmp_path, capsys
):
    ADAPTER_RUN[:] = [adapter_run]
    out = tmp_path / "run"
    if case.run_copy:
        shutil.copytree(finished_run, out)
    ctx = {"tmp": tmp_path, "out": out, "checkpoint": tiny_checkpoint}
    extra = [arg.replace("{out}", str(out)) for arg in case.prepare(ctx)]
    before = snapshot(out)
    capsys.readouterr()
    code = train_multitask.main(driver_argv(tiny_checkpoint, tiny_data, out, *SHORT, *extra))
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == case.code, err
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert case.words in lines[0], lines[0]
    assert "Traceback" not in err
    after = snapshot(out)
    assert {k: v for k, v in after.items() if k in before} == before  # nothing changed or lost


def test_at_least_forty_cases():
    assert len(CASES) >= 40


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
