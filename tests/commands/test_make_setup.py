"""The README's set-up commands work where the Python is a system one that refuses pip (PEP 668,
"externally-managed-environment", Debian and Ubuntu's): anywhere PYTHON is not already a virtual
environment, the Makefile makes the project environment .venv from it and runs every later step
(pip, the data, training, lint, the tests, the adapters environment) with .venv's Python, never
PYTHON's pip; where PYTHON is a virtual environment, it uses that one. Its first line says which.

Each test runs the repository's Makefile, copied into tmp_path, with ``make -n`` (the plan, with
nothing run but make's one look at PYTHON), except the one that makes venv fail for want of
ensurepip, which stops before anything is made, and those whose PYTHON or .venv make refuses
at that look (a Python before 3.10, an empty PYTHON or one with a space, a .venv of another
Python or whose Python is gone): one line each, nothing made.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The Python under the running one's virtual environment, if any: a Python that is not one.
BASE_PYTHON = Path(getattr(sys, "_base_executable", sys.executable))

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make")


def make(tree: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """make ARGS in ``tree``, as a user types it: not a sub-make of the make running the tests
    (whose MAKELEVEL would add "Entering directory" lines), with its own PYTHON only."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))}
    clean.pop("PYTHON", None)
    argv = ["make", "--no-print-directory", *args]
    return subprocess.run(argv, cwd=tree, env=clean | (env or {}), capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    return tmp_path


OPEN_TO_ALL = "umask 022 && "  # before each step that makes or installs into an environment


def plan(tree: Path, target: str, python: Path) -> list[str]:
    """The lines ``make -n`` prints, the umask of a step that makes or fills an environment
    left out (``test_every_environment_is_made_readable_by_every_user`` asserts it)."""
    done = make(tree, "-n", target, f"PYTHON={python}")
    assert done.returncode == 0, done.stderr
    return [line.removeprefix(OPEN_TO_ALL) for line in done.stdout.splitlines()]


def test_every_environment_is_made_readable_by_every_user(tree: Path) -> None:
    """The class grader's runners, users of their own, run Python from .venv: every step that
    makes an environment or installs into one runs under umask 022, whatever the user's (a
    umask of 077 would close .venv to them)."""
    done = make(tree, "-n", "test", "adapters-env", f"PYTHON={BASE_PYTHON}")
    assert done.returncode == 0, done.stderr
    commands, command = [], ""
    for line in done.stdout.splitlines():  # a command goes on past a line that ends in \\
        command += line
        if not line.endswith("\\"):
            commands.append(command)
            command = ""
    making = [c for c in commands if " -m venv " in c or " -m pip " in c]
    assert len(making) >= 5  # .venv, its three installs, .venv-adapters and its install
    assert all(line.startswith(OPEN_TO_ALL) for line in making), making


def steps_run_by(lines: list[str], word: str) -> list[str]:
    """The plan's lines that run ``word`` (pip, pytest, ruff, a script) with some Python."""
    return [line for line in lines if word in line and " -c " not in line]


def test_a_python_that_is_no_environment_gets_the_project_environment(tree: Path) -> None:
    lines = plan(tree, "test", BASE_PYTHON)
    made_from = subprocess.run(
        [BASE_PYTHON, "-c", "import sys; print(sys.executable)"], capture_output=True, text=True
    ).stdout.strip()
    assert lines[0] == f"using the project environment .venv (made from {made_from})"
    assert f"{BASE_PYTHON} -m venv .venv" in "\n".join(lines)
    assert lines.index("rm -rf .venv") < lines.index("touch .venv/.made")
    for word in ("-m pip install", "-m pytest", "-m ruff", "scripts/get_data.py", "sanity_check"):
        steps = steps_run_by(lines, word)
        assert steps, word
        for step in steps:
            assert step.removeprefix("ATEN_CPU_CAPABILITY=default ").startswith(
                (".venv/bin/python ", ".venv-adapters/bin/python ")
            ), step
    assert not [line for line in lines if line.startswith(f"{BASE_PYTHON} -m pip")]


def test_the_adapters_environment_takes_torch_from_the_project_environment(tree: Path) -> None:
    """Not --system-site-packages (the base Python's, without torch): a .pth file names the
    project environment's site-packages; it is made after the project environment's install."""
    lines = plan(tree, "adapters-env", BASE_PYTHON)
    text = "\n".join(lines)
    assert "--system-site-packages" not in text
    assert ".venv/bin/python -m venv .venv-adapters" in lines
    assert ".venv/bin/python -c 'import site; print(*site.getsitepackages()" in text
    assert "project-env.pth" in text
    first_adapters_pip = next(i for i, line in enumerate(lines) if "adapters==" in line)
    last_project_pip = max(i for i, line in enumerate(lines) if "-r requirements" in line)
    assert last_project_pip < first_adapters_pip


def test_an_active_environment_is_used_as_it_is(tree: Path, tmp_path: Path) -> None:
    env = tmp_path / "env"
    made = subprocess.run([BASE_PYTHON, "-m", "venv", "--without-pip", env], capture_output=True)
    assert made.returncode == 0, made.stderr
    python = env / "bin" / "python"
    lines = plan(tree, "test", python)
    first = lines[0].removeprefix("using the active environment ")
    assert first != lines[0] and Path(first).resolve() == env.resolve()
    assert not [line for line in lines if ".venv/" in line or line.endswith(" .venv")]
    assert any(line.startswith(f"{python} -m pip install") for line in lines)


def test_a_made_environment_is_kept_and_a_half_made_one_made_again(tree: Path) -> None:
    (tree / ".venv" / "bin").mkdir(parents=True)
    assert "rm -rf .venv" in plan(tree, "install", BASE_PYTHON)
    (tree / ".venv" / ".made").touch()
    assert not [line for line in plan(tree, "install", BASE_PYTHON) if "-m venv" in line]


def blocked(folder: Path, *modules: str) -> dict:
    """PYTHONPATH that makes each of ``modules`` fail to import (a Python shipped without it)."""
    folder.mkdir()
    for name in modules:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text("raise ImportError('not installed')\n")
        (folder / name / "__main__.py").write_text("raise SystemExit('not installed')\n")
    return {"PYTHONPATH": str(folder)}


def test_without_ensurepip_or_pip_it_says_what_to_install_and_stops(tree, tmp_path) -> None:
    """Debian and Ubuntu ship ensurepip in python3.X-venv and pip in python3-pip: without
    either, one line and no .venv."""
    env = blocked(tmp_path / "blocker", "ensurepip", "pip")
    (tree / ".venv" / "bin").mkdir(parents=True)  # a half-made one, from an earlier try
    done = make(tree, "install", f"PYTHON={BASE_PYTHON}", env=env)
    assert done.returncode != 0
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    said = [line for line in done.stderr.splitlines() if "apt install" in line]
    assert len(said) == 1 and f"python{version}-venv" in said[0], done.stderr
    assert not (tree / ".venv").exists()


def test_without_ensurepip_the_pythons_own_pip_gives_the_environment_pip(tree, tmp_path):
    """A Debian with python3-pip but not python3-venv: .venv is made without pip, and the
    system's pip installs pip into it (PEP 668 guards the system, not the new environment)."""
    env = blocked(tmp_path / "blocker", "ensurepip")
    done = make(tree, ".venv/.made", f"PYTHON={BASE_PYTHON}", env=env)
    assert done.returncode == 0, done.stderr
    assert "has no ensurepip" in done.stdout
    check = subprocess.run(
        [str(tree / ".venv/bin/python"), "-m", "pip", "--version"],
        capture_output=True,
        text=True,
        env={"PATH": os.environ["PATH"]},
    )
    assert check.returncode == 0 and ".venv" in check.stdout


# -- PYTHON and .venv that make cannot use: one line each, nothing made -------------------------


def refused(tree: Path, *args: str) -> str:
    """make install ARGS in ``tree`` stops with one line (make's own ``*** ...  Stop.``), having
    made nothing: that line."""
    done = make(tree, "install", *args)
    lines = done.stderr.splitlines()
    assert done.returncode != 0 and len(lines) == 1 and "***" in lines[0], done.stderr
    assert not done.stdout, done.stdout
    return lines[0]


def old_python(folder: Path, version: tuple[int, int] = (3, 9)) -> Path:
    """A Python that says it is ``version`` (the running one, its version_info replaced), as a
    python3.9 would to make's look at it."""
    folder.mkdir()
    fake = folder / f"python{version[0]}.{version[1]}"
    told = f"sys.version_info = ({version[0]}, {version[1]}, 0, 'final', 0)"
    fake.write_text(
        f'#!/bin/sh\nexec {BASE_PYTHON} -c "import sys; {told}; exec(sys.argv[2])" "$@"\n'
    )
    fake.chmod(0o755)
    return fake


def test_a_python_older_than_3_10_is_refused(tree: Path, tmp_path: Path) -> None:
    line = refused(tree, f"PYTHON={old_python(tmp_path / 'bin')}")
    assert "is Python 3.9" in line and "3.10 or newer" in line
    assert not (tree / ".venv").exists()


@pytest.mark.parametrize("python", ["", "my python/python3"])
def test_an_empty_python_or_one_with_a_space_is_one_line(tree: Path, python: str) -> None:
    line = refused(tree, f"PYTHON={python}")
    assert ("PYTHON is empty" if not python else f"PYTHON={python} holds a space") in line


def made_venv(tree: Path, version: str) -> Path:
    """A .venv that make made (its stamp), from a Python ``version`` as pyvenv.cfg says."""
    (tree / ".venv" / "bin").mkdir(parents=True)
    (tree / ".venv" / "pyvenv.cfg").write_text(f"home = /usr/bin\nversion = {version}.1\n")
    (tree / ".venv" / ".made").touch()
    return tree / ".venv"


def test_a_venv_of_another_python_is_named(tree: Path) -> None:
    """Not kept while the first line says it is made from PYTHON: its Python is named."""
    other = f"3.{sys.version_info[1] + 1}"
    made_venv(tree, other)
    line = refused(tree, f"PYTHON={BASE_PYTHON}")
    assert f"the .venv was made with Python {other}" in line
    assert "rm -rf .venv" in line and "PYTHON=" in line
    assert (tree / ".venv" / ".made").exists()


def test_a_venv_whose_python_is_gone_is_named(tree: Path) -> None:
    venv = made_venv(tree, f"{sys.version_info[0]}.{sys.version_info[1]}")
    (venv / "bin" / "python").symlink_to("/nonexistent/python3")
    line = refused(tree, f"PYTHON={BASE_PYTHON}")
    assert ".venv/bin/python" in line and "rm -rf .venv" in line
