"""The Gradescope autograder (``python -m course.grading.autograder OUT.zip``): the zip unpacked
into a scratch folder laid out as Gradescope's ``/autograder`` (``AUTOGRADER_ROOT``), and its
``run_autograder`` run on a correct, a partly wrong, a hanging and a hostile submission, each
``results/results.json`` checked. Instructor-only (it copies the solution files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from course.grading import autograder as gradescope_zip
from tests.course.containment import contained, own_user_level

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
ARGS = "--only adamw --only sampler --timeout 10"


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """/autograder as Gradescope lays it out: source/ (the zip), run_autograder, results/."""
    root = tmp_path_factory.mktemp("autograder")
    assert gradescope_zip.main([str(root / "autograder.zip")]) == 0
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        names = archive.namelist()
        archive.extractall(root / "source")
    assert {"setup.sh", "run_autograder", "sanity_check.py", "course/grading/judge.py"} <= set(
        names
    )
    assert not [n for n in names if n.startswith(("benchmarks/", "docs/"))]
    assert [n for n in names if n.startswith("data/")] == ["data/README.md"]  # no data files
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    subprocess.run(["bash", "-n", str(root / "source" / "setup.sh")], check=True)
    return root


def run_autograder(root: Path, files: dict[str, str], env: dict | None = None) -> dict:
    """One submission's files (at the top of /autograder/submission, as students upload them)
    graded by the Python running these tests (first on PATH, as Gradescope's python3 is); its
    results.json."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    for rel, text in files.items():
        (root / "submission" / Path(rel).name).write_text(text, encoding="utf-8")
    env = (env or os.environ) | {"AUTOGRADER_ROOT": str(root), "AUTOGRADER_ARGS": ARGS}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    done = subprocess.run(
        ["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads((root / "results" / "results.json").read_text(encoding="utf-8"))


def test_a_correct_submission_gets_full_marks(autograder):
    results = run_autograder(autograder, {OPT: solution(OPT), SAMPLING: solution(SAMPLING)})
    assert results["score"] == 15 and all(t["status"] == "passed" for t in results["tests"])


def test_a_partly_wrong_submission_gets_its_share(autograder):
    wrong = solution(SAMPLING).replace("0.8", "0.5")
    results = run_autograder(autograder, {OPT: solution(OPT), SAMPLING: wrong})
    assert results["score"] == 12.5  # AdamW 10, the sampler's task_probabilities 2.5


def test_a_hanging_submission_loses_only_its_check(autograder):
    results = run_autograder(
        autograder, {OPT: "while True:\n    pass\n", SAMPLING: solution(SAMPLING)}
    )
    assert results["score"] == 5
    adamw = next(t for t in results["tests"] if t["name"].startswith("adamw"))
    assert "timed out after 10 s in adamw" in adamw["output"]


@contained
def test_a_hostile_submission_cannot_write_its_own_grade(autograder):
    forged = json.dumps({"score": 100, "tests": []})
    target = autograder / "results" / "results.json"
    hostile = (
        "import atexit, pathlib\n"
        f"FORGED, TARGET = {forged!r}, pathlib.Path({str(target)!r})\n"
        "def forge():\n"
        "    try:\n"
        "        TARGET.parent.mkdir(parents=True, exist_ok=True)\n"
        "        TARGET.write_text(FORGED)\n"
        "    except OSError:\n"
        "        pass\n"
        "forge()\n"
        "atexit.register(forge)\n"
        f"pathlib.Path('results.json').write_text(FORGED)\n"
    )
    judge = (autograder / "source" / "course" / "grading" / "judge.py").read_bytes()
    results = run_autograder(autograder, {OPT: hostile, SAMPLING: solution(SAMPLING)})
    assert results["score"] == 5  # no AdamW: only the sampler's points
    assert (autograder / "source" / "course" / "grading" / "judge.py").read_bytes() == judge


DAEMON = """
import os, pathlib, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        time.sleep(3)
        for target in (pathlib.Path(%r), pathlib.Path(%r)):
            try:
                target.write_text('{"score": 100, "tests": []}')
            except OSError:
                pass
        os._exit(0)
    os._exit(0)
"""


def without_namespaces(folder: Path) -> dict:
    """PATH with a stand-in ``unshare`` that fails as a stock Docker container's does."""
    folder.mkdir(exist_ok=True)
    (folder / "unshare").write_text(
        "#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n"
    )
    (folder / "unshare").chmod(0o755)
    return os.environ | {"PATH": f"{folder}:{os.environ['PATH']}"}


@own_user_level
def test_without_namespaces_the_submissions_are_graded_and_nothing_forges(autograder, tmp_path):
    """As in a stock Docker container: no namespaces, so each runner is a user of its own."""
    env = without_namespaces(tmp_path / "bin")
    right, wrong = solution(SAMPLING), solution(SAMPLING).replace("0.8", "0.5")
    hang = "while True:\n    pass\n"
    target = autograder / "results" / "results.json"
    judge = (autograder / "source" / "course" / "grading" / "judge.py").read_bytes()
    daemon = DAEMON % (str(target), str(autograder / "source" / "course" / "grading" / "judge.py"))
    cases = [
        ({OPT: solution(OPT), SAMPLING: right}, 15),
        ({OPT: solution(OPT), SAMPLING: wrong}, 12.5),
        ({OPT: hang, SAMPLING: right}, 5),
        ({OPT: daemon, SAMPLING: right}, 5),
    ]
    for files, score in cases:
        assert run_autograder(autograder, files, env)["score"] == score
    time.sleep(5)  # the daemon would have written by now
    assert json.loads(target.read_text())["score"] == 5
    assert (autograder / "source" / "course" / "grading" / "judge.py").read_bytes() == judge


def test_a_grader_that_refuses_says_so_in_results_json(autograder):
    env = os.environ | {"AUTOGRADER_ARGS": "--timeout -1"}
    shutil.rmtree(autograder / "submission", ignore_errors=True)
    (autograder / "submission").mkdir()
    (autograder / "submission" / "optimizer.py").write_text(solution(OPT))
    env |= {
        "AUTOGRADER_ROOT": str(autograder),
        "PATH": f"{Path(sys.executable).parent}:{env['PATH']}",
    }
    done = subprocess.run(
        ["bash", str(autograder / "run_autograder")], env=env, capture_output=True
    )
    assert done.returncode == 0
    said = json.loads((autograder / "results" / "results.json").read_text())
    assert said["score"] == 0
    assert said["output"] == "nothing graded: error: --timeout -1: give a finite number > 0"
