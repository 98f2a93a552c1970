"""The instructor's commands, run as the GUIDE says from a folder that holds a submission's own
``course/`` package, run the project's code, never the folder's: ``PYTHONPATH=<project> python -P
-m course...`` (Python 3.11+), or ``python /path/to/instructor.py COMMAND``. Run plainly with
``python -m`` from that folder, the folder's package is what runs, which is why the GUIDE says so;
started in a folder without one, a grading command refuses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (
    "course.grading.grade",
    "course.grading.autograder",
    "course.grading.leaderboard",
    "course.authoring.scaffold",
)
HOSTILE = "raise SystemExit('the folder\\'s own course/ ran')\n"

needs_safe_path = pytest.mark.skipif(sys.version_info < (3, 11), reason="-P is Python 3.11's")


def run_in(folder: Path, *argv: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = path
    return subprocess.run(
        [sys.executable, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def submission_folder(tmp_path: Path) -> Path:
    (tmp_path / "course").mkdir()
    (tmp_path / "course" / "__init__.py").write_text(HOSTILE, encoding="utf-8")
    return tmp_path


@needs_safe_path
@pytest.mark.parametrize("command", COMMANDS)
def test_the_guides_way_runs_the_projects_command(submission_folder, command):
    done = run_in(submission_folder, "-P", "-m", command, "--help", path=str(ROOT))
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"usage: python -m {command}" in done.stdout
    assert "ran" not in done.stderr


GRADING = [c for c in COMMANDS if c.startswith("course.grading")]


@pytest.mark.parametrize("command", GRADING)
def test_a_grading_command_started_in_a_foreign_folder_refuses_in_one_line(tmp_path, command):
    """A submission's folder holding ``minbert/`` (a student tree: its grader is packed, so it has
    no ``course/``) and a ``pathlib.py``: the project's command, found through PYTHONPATH, refuses
    before either can be imported; from the project's root, or with -P, it runs."""
    (tmp_path / "minbert").mkdir()
    (tmp_path / "minbert" / "__init__.py").write_text(HOSTILE, encoding="utf-8")
    (tmp_path / "pathlib.py").write_text(HOSTILE, encoding="utf-8")  # not loaded at start-up
    done = run_in(tmp_path, "-m", command, "--help", path=str(ROOT))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert str(tmp_path) in lines[0] and "ran" not in lines[0]
    said = lines[0].split(" as python ")[-1].split()
    assert said[:2] == [str(ROOT / "instructor.py"), command.rsplit(".", 1)[-1]], lines[0]
    done = run_in(ROOT, "-m", command, "--help")
    assert done.returncode == 0 and f"usage: python -m {command}" in done.stdout, done.stderr


def test_run_plainly_from_that_folder_its_own_course_runs(submission_folder):
    done = run_in(submission_folder, "-m", "course.grading.grade", "--help", path=str(ROOT))
    assert done.returncode == 1 and "the folder's own course/ ran" in done.stderr


@needs_safe_path
def test_safe_path_alone_finds_no_course(submission_folder):
    done = run_in(submission_folder, "-P", "-m", "course.grading.grade", "--help")
    assert done.returncode == 1 and "No module named 'course'" in done.stderr


def test_the_guide_says_the_way_that_works():
    guide = (ROOT / "GUIDE.md").read_text(encoding="utf-8")
    assert "`PYTHONPATH=/path/to/minbert python -P -m course.grading.grade ...`" in guide


INSTRUCTOR = str(ROOT / "instructor.py")


@pytest.mark.parametrize("command", ["grade", "report", "leaderboard", "autograder", "scaffold"])
def test_instructor_py_runs_the_projects_command_from_a_hostile_folder(tmp_path, command):
    """``python /path/to/instructor.py COMMAND``, started in a folder holding its own ``course/``,
    ``minbert/``, ``torch.py`` and ``pathlib.py``, with no PYTHONPATH and no -P: none of them is
    imported, the project's command runs."""
    for package in ("course", "minbert"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text(HOSTILE, encoding="utf-8")
    for module in ("torch.py", "pathlib.py", "importlib.py"):
        (tmp_path / module).write_text(HOSTILE, encoding="utf-8")
    done = run_in(tmp_path, INSTRUCTOR, command, "--help")
    assert done.returncode == 0, done.stderr[-2000:]
    # argparse breaks the usage line after the command where the path is long
    usage = re.search(rf"usage: python {re.escape(str(INSTRUCTOR))} {command}\s", done.stdout)
    assert usage and "ran" not in done.stderr


def test_instructor_py_names_its_commands(tmp_path):
    done = run_in(tmp_path, INSTRUCTOR, "grades")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "'grades'" in lines[0], done.stderr
    assert "grade, report, leaderboard, autograder, scaffold" in lines[0]
    done = run_in(tmp_path, INSTRUCTOR, "--help")
    assert done.returncode == 0 and "python /path/to/minbert/instructor.py COMMAND" in done.stdout
