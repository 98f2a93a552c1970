"""The class report (``course/grading/report.py``) of a class of six graded by ``python -m
course.grading.grade``: one correct, two different named mistakes of the sampler, a syntax error, a
hang, and one untouched (the student tree's stubs) whose name holds markup. Its counts equal the
CSV's, its mistake names are the grader's, every name is escaped, ``python -m
course.grading.report`` rebuilds it byte for byte, and a headless browser (where one is installed)
renders it. Instructor-only (it copies the solution files)."""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from course.checks import CHECKS
from course.gradescope import POINTS, read_points
from course.grading import grade, report
from tests.course.containment import LEVEL

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
UNTOUCHED = "frank<img src=x onerror=alert(1)>"
ENDS_AT_ZERO = "α goes from 1 to 0 instead of from 1 to 0.2"
NOT_NORMALISED = "the weights N_i^α are not divided by their sum"


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def mutated(rel: str, old: str, new: str) -> str:
    text = solution(rel)
    assert old in text
    return text.replace(old, new, 1)


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> Path:
    if LEVEL is None:
        pytest.skip("no containment on this machine (not root, and no user namespaces)")
    folder = tmp_path_factory.mktemp("report")
    stubs = grade.pristine_tree()
    right = {OPT: solution(OPT), SAMPLING: solution(SAMPLING)}
    students = {
        "alice": right,
        "bob": right | {SAMPLING: mutated(SAMPLING, "1.0 - 0.8 *", "1.0 - 1.0 *")},
        "carol": right | {SAMPLING: mutated(SAMPLING, "weight / total for", "weight for")},
        "dave": right | {SAMPLING: solution(SAMPLING) + "\ndef broken(:\n"},
        "erin": right | {OPT: "while True:\n    pass\n"},
        UNTOUCHED: {OPT: stubs[OPT].decode(), SAMPLING: stubs[SAMPLING].decode()},
    }
    for name, files in students.items():
        for rel, text in files.items():
            (folder / "class" / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / "class" / name / rel).write_text(text, encoding="utf-8")
    out = folder / "grades.csv"
    flags = ["--only", "adamw", "--only", "sampler", "--timeout", "10"]
    assert grade.main([str(folder / "class"), "--out", str(out), *flags]) == 0
    return out


def test_the_counts_are_the_csvs(graded):
    points = read_points(POINTS, sorted({e for c in CHECKS for e in c.exercises}))
    summary = report.summarise(graded, points)
    rows = list(csv.DictReader(graded.open(encoding="utf-8")))
    assert summary.totals == {r["student"]: float(r["total"]) for r in rows}
    for exercise in summary.exercises:
        cells = {r["student"]: float(r[exercise.name]) for r in rows}
        assert sorted(exercise.full) == sorted(s for s, c in cells.items() if c >= exercise.points)
        assert sorted(exercise.zero) == sorted(s for s, c in cells.items() if c == 0)
        partial = [s for s, c in cells.items() if 0 < c < exercise.points]
        assert sorted(exercise.partial) == sorted(partial)
    sampler = next(e for e in summary.exercises if e.name == "sampler")
    assert (sorted(sampler.full), sorted(sampler.partial)) == (["alice", "erin"], ["bob", "carol"])
    assert sampler.mistakes[ENDS_AT_ZERO] == ["bob"]
    assert sampler.mistakes[NOT_NORMALISED] == ["carol"]
    assert sampler.mistakes[report.NOT_WRITTEN] == [UNTOUCHED]
    adamw = next(e for e in summary.exercises if e.name == "adamw")
    assert sorted(adamw.zero) == sorted(["erin", UNTOUCHED])
    assert adamw.mistakes[report.TIMED_OUT] == ["erin"]  # the hang: its own row
    assert sampler.mistakes[report.UNCOMPILED] == ["dave"]
    assert [e.name for e in summary.exercises] == ["adamw", "sampler"]  # graded with --only
    assert summary.full_marks == 15
    assert re.fullmatch(
        r"graded \d{4}-\d\d-\d\d \d\d:\d\d UTC at commit \S+.* with points \S+points\.json",
        summary.provenance,
    ), summary.provenance


def test_the_notes_say_each_named_mistake(graded):
    notes = {r["student"]: r["notes"] for r in csv.DictReader(graded.open(encoding="utf-8"))}
    assert f"sampler: {ENDS_AT_ZERO}" in notes["bob"]
    assert f"sampler: {NOT_NORMALISED}" in notes["carol"]
    assert notes["alice"] == ""


def test_the_page_names_the_mistakes_escaped_and_is_rebuilt_the_same(graded):
    page = graded.with_name("grades-report.html")
    text = page.read_text(encoding="utf-8")
    assert f"{ENDS_AT_ZERO}: 1</summary>bob</details>" in text
    assert f"{NOT_NORMALISED}: 1</summary>carol</details>" in text
    assert "<img" not in text and "frank&lt;img src=x onerror=alert(1)&gt;" in text
    assert graded.with_name("grades-report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    first = page.read_bytes()
    page.unlink()
    assert report.main([str(graded)]) == 0
    assert page.read_bytes() == first


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no headless Chromium here")
def test_a_browser_renders_the_page(graded, tmp_path):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    flags += ["--disable-background-networking", f"--user-data-dir={tmp_path}"]
    page = graded.with_name("grades-report.html").as_uri()
    done = subprocess.run(
        ["chromium", *flags, "--dump-dom", page], capture_output=True, text=True, timeout=120
    )
    assert "<h1>Class report</h1>" in done.stdout
    assert "Uncaught" not in done.stderr
