"""A plug-in kind whose file does not compile fails only its own --option: in a copy of the code
with ``minbert/plugins/pals.py`` broken, ``--option lora`` trains as before, ``--help`` still
lists every option, and ``--option pals`` ends in one line naming the file and the line. Predict,
export and attention maps of an adapter run work as in the whole tree; so does a broken extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import copy_of_the_code, driver_argv, driver_in, short_run, tiny_run

ROOT = Path(__file__).resolve().parents[2]
CODE = ("minbert", "tasks", "multitask", "extras", "tools", "train_multitask.py")
SHORT = short_run(1, 2)


def broken_file(folder: Path, name: str = "minbert/plugins/pals.py") -> tuple[Path, int]:
    """The driver's code in ``folder``, with a syntax error on a last line of the file ``name``
    (the PALs' file unless named); that line's number."""
    copy_of_the_code(folder, CODE)
    text = (folder / name).read_text(encoding="utf-8")
    (folder / name).write_text(text + "def broken(:\n", encoding="utf-8")
    return folder, len(text.splitlines()) + 1


def test_a_broken_kind_fails_only_its_own_option(tiny_checkpoint, tiny_data, tmp_path) -> None:
    code, line = broken_file(tmp_path / "code")

    helped = driver_in(code, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "pals" in helped.stdout
    assert "--lora_rank" in helped.stdout and "--pal_size" not in helped.stdout

    lora = driver_in(
        code,
        *driver_argv(tiny_checkpoint, tiny_data, tmp_path / "lora"),
        "--option",
        "lora",
        *short_run(1, 2),
    )
    assert lora.returncode == 0, lora.stderr
    assert (tmp_path / "lora" / "best.safetensors").is_file()

    pals = driver_in(
        code,
        *driver_argv(tiny_checkpoint, tiny_data, tmp_path / "pals"),
        "--option",
        "pals",
        *short_run(1, 2),
    )
    said = pals.stderr.strip().splitlines()
    assert pals.returncode == 2 and len(said) == 1, pals.stderr
    assert f"minbert/plugins/pals.py:{line}: SyntaxError" in said[0]
    assert not (tmp_path / "pals" / "best.safetensors").exists()


@pytest.mark.parametrize("broken", ["minbert/plugins/pals.py", "extras/distillation.py"])
def test_predict_of_an_adapter_run_needs_no_other_part(
    broken, tiny_checkpoint, tiny_data, tmp_path
):
    """``python -m tools.predict`` of an adapter run, in a copy whose other plug-in kind's
    (or extra's) file does not compile: the adapter's predictions, as in the whole tree."""
    run = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "adapter", "--option", "adapter")
    code, _ = broken_file(tmp_path / "code", broken)
    (tmp_path / "in.txt").write_text("a good film\na bad film\n", encoding="utf-8")
    predict = [sys.executable, "-m", "tools.predict", str(run), "--task", "sst"]
    predict += ["--input", str(tmp_path / "in.txt")]
    here = subprocess.run(predict, cwd=ROOT, capture_output=True, text=True, timeout=600)
    there = subprocess.run(predict, cwd=code, capture_output=True, text=True, timeout=600)
    assert here.returncode == 0 and len(here.stdout.splitlines()) == 2, here.stderr
    assert (there.returncode, there.stdout) == (0, here.stdout), there.stderr


FINISHED_RUN_COMMANDS = {  # what each writes into its OUT folder, from an adapter run
    "export adapters": ["tools.export", "{run}", "{out}", "--format", "adapters"],
    "attention": ["tools.attention", "{run}", "--task", "sst", "--input", "a film"]
    + ["--out", "{out}/film"],
}


def written(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its path there, with its bytes."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


@pytest.mark.parametrize("command", list(FINISHED_RUN_COMMANDS))
@pytest.mark.parametrize("broken", ["minbert/plugins/pals.py", "extras/distillation.py"])
def test_the_finished_run_commands_need_no_other_part(
    command, broken, tiny_checkpoint, tiny_data, tmp_path
):
    """Export and attention maps of an adapter run, in a copy whose other plug-in kind's (or
    extra's) file does not compile: the same files, byte for byte, as in the whole tree."""
    run = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "adapter", "--option", "adapter")
    code, _ = broken_file(tmp_path / "code", broken)
    found = {}
    for where, cwd in (("here", ROOT), ("there", code)):
        out = tmp_path / where
        argv = [a.format(run=run, out=out) for a in FINISHED_RUN_COMMANDS[command]]
        done = subprocess.run(
            [sys.executable, "-m", *argv], cwd=cwd, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, (where, done.stderr)
        found[where] = written(out)
    assert found["here"] and found["there"] == found["here"]


def test_a_broken_extra_fails_only_its_own_flags(tiny_checkpoint, tiny_data, tmp_path) -> None:
    """An extra whose file does not compile takes no part: ``--help`` lists the other extras'
    flags, not its own; a run without it trains; its flag is one line naming the file and line."""
    code, line = broken_file(tmp_path / "code", "extras/distillation.py")

    helped = driver_in(code, "--help")
    assert helped.returncode == 0, helped.stderr
    offered = [line.split()[0] for line in helped.stdout.splitlines() if line.startswith("  --")]
    assert "--report_to" in offered and "--teachers" not in offered

    plain = driver_in(code, *driver_argv(tiny_checkpoint, tiny_data, tmp_path / "plain"), *SHORT)
    assert plain.returncode == 0, plain.stderr
    assert (tmp_path / "plain" / "best.safetensors").is_file()

    teacher = tmp_path / "plain"
    taught = driver_in(
        code,
        *driver_argv(tiny_checkpoint, tiny_data, tmp_path / "taught"),
        *("--teachers", f"sst={teacher}", *SHORT),
    )
    said = taught.stderr.strip().splitlines()
    assert taught.returncode == 2 and len(said) == 1, taught.stderr
    assert said[0].startswith("error: --teachers needs extras/distillation.py")
    assert f"extras/distillation.py:{line}: SyntaxError" in said[0]
    assert not (tmp_path / "taught").exists()


def test_pretraining_with_a_broken_extra_fails_only_its_flag(tiny_checkpoint, tiny_data, tmp_path):
    """``pretrain_mlm.py`` in a copy whose TensorBoard reporter does not compile: ``--help`` works
    without ``--report_to``, a run without it pretrains, and ``--report_to tensorboard`` is one
    line naming the file and line."""
    code, line = broken_file(tmp_path / "code", "extras/tensorboard_report.py")
    copy_of_the_code(code, ("pretrain_mlm.py",))
    mlm = [sys.executable, "pretrain_mlm.py", "--threads", "1"]
    flags = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data), "--tasks", "sst"]
    flags += ["--steps", "2", "--eval_every", "2", "--batch_size", "4", "--max_length", "32"]
    flags += ["--held_out", "8"]

    def pretrain(*more: str) -> subprocess.CompletedProcess:
        argv = [*mlm, *flags, *more]
        return subprocess.run(argv, cwd=code, capture_output=True, text=True, timeout=600)

    helped = subprocess.run([*mlm, "--help"], cwd=code, capture_output=True, text=True)
    assert helped.returncode == 0 and "--report_to" not in helped.stdout, helped.stderr
    plain = pretrain("--out_dir", str(tmp_path / "plain"))
    assert plain.returncode == 0, plain.stderr
    reported = pretrain("--out_dir", str(tmp_path / "reported"), "--report_to", "tensorboard")
    said = reported.stderr.strip().splitlines()
    assert reported.returncode == 2 and len(said) == 1, reported.stderr
    assert f"extras/tensorboard_report.py:{line}: SyntaxError" in said[0]
    assert not (tmp_path / "reported").exists()
