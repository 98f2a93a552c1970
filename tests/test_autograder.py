"""The Gradescope autograder (``python -m course.gradescope OUT.zip``): the zip unpacked into a
scratch folder laid out as Gradescope's ``/autograder`` (``AUTOGRADER_ROOT``), and its
``run_autograder`` run on a correct, a partly wrong, a hanging and a hostile submission, each
``results/results.json`` checked. Instructor-only (it copies the solution files)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from course import gradescope, sandbox

ROOT = Path(__file__).resolve().parents[1]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
ARGS = "--only adamw --only sampler --timeout 10"


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def autograder(tmp_path_factory) -> Path:
    """/autograder as Gradescope lays it out: source/ (the zip), run_autograder, results/."""
    root = tmp_path_factory.mktemp("autograder")
    assert gradescope.main([str(root / "autograder.zip")]) == 0
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        names = archive.namelist()
        archive.extractall(root / "source")
    assert {"setup.sh", "run_autograder", "sanity_check.py", "course/judge.py"} <= set(names)
    assert not [n for n in names if n.startswith(("benchmarks/", "docs/"))]
    assert [n for n in names if n.startswith("data/")] == ["data/README.md"]  # no data files
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    subprocess.run(["bash", "-n", str(root / "source" / "setup.sh")], check=True)
    return root


def run_autograder(root: Path, files: dict[str, str]) -> dict:
    """One submission's files (at the top of /autograder/submission, as students upload them)
    graded; its results.json."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    (root / "submission").mkdir()
    for rel, text in files.items():
        (root / "submission" / Path(rel).name).write_text(text, encoding="utf-8")
    env = os.environ | {"AUTOGRADER_ROOT": str(root), "AUTOGRADER_ARGS": ARGS}
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


@pytest.mark.skipif(sandbox.containment() is None, reason="no containment on this machine")
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
    judge = (autograder / "source" / "course" / "judge.py").read_bytes()
    results = run_autograder(autograder, {OPT: hostile, SAMPLING: solution(SAMPLING)})
    assert results["score"] == 5  # no AdamW: only the sampler's points
    assert (autograder / "source" / "course" / "judge.py").read_bytes() == judge
