"""A plug-in kind whose file does not compile fails only its own --option: in a copy of the code
with ``minbert/plugins/pals.py`` broken, ``--option lora`` trains as before, ``--help`` still
lists every option, and ``--option pals`` ends in one line naming the file and the line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import copy_of_the_code, driver_argv, short_run

CODE = ("minbert", "tasks", "multitask", "train_multitask.py")


def broken_copy(folder: Path) -> tuple[Path, int]:
    """The driver's code in ``folder``, with a syntax error on a last line of the PALs' file;
    that line's number."""
    copy_of_the_code(folder, CODE)
    pals = folder / "minbert/plugins/pals.py"
    text = pals.read_text(encoding="utf-8")
    pals.write_text(text + "def broken(:\n", encoding="utf-8")
    return folder, len(text.splitlines()) + 1


def driver(code: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train_multitask.py", *argv],
        cwd=code,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_broken_kind_fails_only_its_own_option(tiny_checkpoint, tiny_data, tmp_path) -> None:
    code, line = broken_copy(tmp_path / "code")

    helped = driver(code, "--help")
    assert helped.returncode == 0, helped.stderr
    assert "pals" in helped.stdout
    assert "--lora_rank" in helped.stdout and "--pal_size" not in helped.stdout

    lora = driver(
        code,
        *driver_argv(tiny_checkpoint, tiny_data, tmp_path / "lora"),
        "--option",
        "lora",
        *short_run(1, 2),
    )
    assert lora.returncode == 0, lora.stderr
    assert (tmp_path / "lora" / "best.safetensors").is_file()

    pals = driver(
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
