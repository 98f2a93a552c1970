"""A plug-in kind whose file does not compile fails only its own --option: in a copy of the code
with ``minbert/plugins/pals.py`` broken, ``--option lora`` trains as before, ``--help`` still
lists every option, and ``--option pals`` ends in one line naming the file and the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import copy_of_the_code, driver_argv, driver_in, short_run, tiny_run

ROOT = Path(__file__).resolve().parents[2]
CODE = ("minbert", "tasks", "multitask", "train_multitask.py")
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


@pytest.mark.parametrize("broken", ["minbert/plugins/pals.py", "multitask/distillation.py"])
def test_predict_of_an_adapter_run_needs_no_other_part(
    broken, tiny_checkpoint, tiny_data, tmp_path
):
    """``python -m multitask.predict`` of an adapter run, in a copy whose other plug-in kind's
    (or extra's) file does not compile: the adapter's predictions, as in the whole tree."""
    run = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "adapter", "--option", "adapter")
    code, _ = broken_file(tmp_path / "code", broken)
    (tmp_path / "in.txt").write_text("a good film\na bad film\n", encoding="utf-8")
    predict = [sys.executable, "-m", "multitask.predict", str(run), "--task", "sst"]
    predict += ["--input", str(tmp_path / "in.txt")]
    here = subprocess.run(predict, cwd=ROOT, capture_output=True, text=True, timeout=600)
    there = subprocess.run(predict, cwd=code, capture_output=True, text=True, timeout=600)
    assert here.returncode == 0 and len(here.stdout.splitlines()) == 2, here.stderr
    assert (there.returncode, there.stdout) == (0, here.stdout), there.stderr


def test_a_broken_extra_fails_only_its_own_flags(tiny_checkpoint, tiny_data, tmp_path) -> None:
    """An extra whose file does not compile takes no part: ``--help`` lists the other extras'
    flags, not its own; a run without it trains; its flag is one line naming the file and line."""
    code, line = broken_file(tmp_path / "code", "multitask/distillation.py")

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
    assert said[0].startswith("error: --teachers needs multitask/distillation.py")
    assert f"multitask/distillation.py:{line}: SyntaxError" in said[0]
    assert not (tmp_path / "taught").exists()
