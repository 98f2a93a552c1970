"""Grading a class (``python -m course.grading.grade``): a folder of seven submissions, each
computed by its own contained runner and judged by the grader, into the expected ``grades.csv`` and
per-student ``results.json``; one that hangs, one that tries to write into another's folder and
the instructor's points file, and one that reads the stored references change no other grade
and no file outside the submissions' own (tests/course/test_grade_hostile.py tries harder).

This file plants solution lines (the correct submissions copy the solution files), so it is
instructor-only (``INSTRUCTOR_ONLY`` of ``course/authoring/scaffold.py``)."""

from __future__ import annotations

import csv
import json
import zipfile
from pathlib import Path

from course.gradescope import POINTS
from course.grading import grade

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def snapshot(root: Path) -> dict[str, bytes]:
    """The grader's files and the model's, by path."""
    paths = [root / "sanity_check.py", *(root / "course").rglob("*.py"), root / "minbert/bert.py"]
    return {str(p): p.read_bytes() for p in paths}


def submit(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")


def test_a_class_is_graded_each_submission_alone(tmp_path, capsys):
    subs, points = tmp_path / "submissions", tmp_path / "points.json"
    points.write_bytes(POINTS.read_bytes())
    victim = subs / "zed" / OPT
    good = {OPT: solution(OPT), SAMPLING: solution(SAMPLING)}
    no_bias_correction = solution(OPT).replace(
        "bias_correction1 = 1 - beta1**t", "bias_correction1 = 1.0"
    )
    submit(subs / "alice", good)
    submit(subs / "bob", {OPT: no_bias_correction, SAMPLING: solution(SAMPLING)})
    submit(subs / "carol", {OPT: solution(OPT), SAMPLING: solution(SAMPLING).replace("0.8", "0.5")})
    submit(subs / "dave", {OPT: "while True:\n    pass\n", SAMPLING: solution(SAMPLING)})
    attack = f"\nfrom pathlib import Path\nPath({str(victim)!r}).write_text('broken')\n"
    attack += f"Path({str(points)!r}).write_text('{{}}')\n"
    submit(subs / "eve", {OPT: solution(OPT) + attack, SAMPLING: solution(SAMPLING)})
    peek = "\nimport io, torch, zipfile\n"  # the sealed references, read from the packed grader
    peek += "_ = zipfile.ZipFile('grader.pyz').read('course/reference_data.pt')\n"
    peek += "_ = torch.load(io.BytesIO(_), weights_only=False)\n"
    submit(subs / "frank", {OPT: solution(OPT) + peek, SAMPLING: solution(SAMPLING)})
    submit(subs / "zed", good)
    own_grader = {  # a course/ of the student's, beside the tree's packed grader: never used
        "course/__init__.py": "raise SystemExit('a course/ of the submission ran')\n",
        "course/checks/__init__.py": "CHECKS = []\n",
    }
    submit(subs / "gus", good | own_grader)
    with zipfile.ZipFile(subs / "yan.zip", "w") as archive:  # a zip, files at its top
        archive.writestr("optimizer.py", solution(OPT))
        archive.writestr("sampling.py", solution(SAMPLING))
    instructor = snapshot(ROOT)
    out = tmp_path / "grades.csv"
    argv = [str(subs), "--out", str(out), "--points", str(points), "--timeout", "20"]
    assert grade.main([*argv, "--only", "adamw", "--only", "sampler"]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    full = {"adamw": "10", "sampler": "5"}
    for student in ("alice", "frank", "gus", "yan", "zed"):
        assert rows[student]["status"] == "graded", rows[student]
        assert {e: rows[student][e] for e in full} == full and rows[student]["total"] == "15"
    assert (rows["bob"]["adamw"], rows["bob"]["sampler"]) == ("0", "5")
    assert (rows["carol"]["adamw"], rows["carol"]["sampler"]) == ("10", "2.5")
    assert (rows["dave"]["adamw"], rows["dave"]["sampler"]) == ("0", "5")  # the hang: one check
    assert "timed out after 20 s in adamw" in rows["dave"]["notes"]
    # eve's writes fail (the paths are out of her runner's reach), so her module does not import
    assert (rows["eve"]["adamw"], rows["eve"]["sampler"]) == ("0", "5")
    assert victim.read_text(encoding="utf-8") == solution(OPT)
    assert points.read_bytes() == POINTS.read_bytes()
    assert snapshot(ROOT) == instructor
    results = tmp_path / "grades-results"
    bob = json.loads((results / "bob.json").read_text(encoding="utf-8"))
    adamw = next(t for t in bob["tests"] if t["name"].startswith("adamw"))
    assert adamw["score"] == 0 and "FAIL" in adamw["output"]
    dave = json.loads((results / "dave.json").read_text(encoding="utf-8"))
    assert dave["score"] == 5 and (results / "dave.log").is_file()
    carol = (results / "carol.html").read_text(encoding="utf-8")  # the page of her checks
    assert "sampler" in carol and "FAIL" in carol and "<svg" in carol
