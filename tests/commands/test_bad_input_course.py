"""Bad input to the instructor's course commands: ``python -m course.grading.grade``,
``course.grading.report`` (a grades CSV or results file a person or a spreadsheet edited) and
``course.authoring.make_course_references`` (the promise and how a case is run:
tests/commands/bad_input.py). Tests of their own below: grading some students again keeps the
others' rows, an edit a spreadsheet makes is read, two classes in one folder keep both pages.
"""

from __future__ import annotations

import csv
import importlib.util
from pathlib import Path

import pytest
import torch

from course.grading import grade, report
from tests.commands.bad_input import (
    Case,
    Ctx,
    case_ids,
    check,
    files,
    plain,
    then,
)

HEADER = "student,status,total,adamw,sampler,notes"
GOOD = ["ada,graded,15,10,5,", "bob,graded,12.5,10,2.5,", "cy,graded,0,0,0,"]
SUBS = ("subs/alice/notes.txt", "subs/bob/notes.txt")
GRADE = ("{tmp}/subs", "--out", "{tmp}/grades.csv", "--trusted")

ROOT = Path(__file__).resolve().parents[2]


def grades(*rows: str, name: str = "grades.csv"):
    """A grades CSV of the grader's columns (adamw and sampler), ``rows`` under its header."""

    def make(ctx: Ctx) -> None:
        ctx.file(name, "\n".join([HEADER, *rows]) + "\n")

    return make


def results(student: str, text: str):
    """``student``'s results file beside grades.csv, holding ``text``."""

    def make(ctx: Ctx) -> None:
        (ctx.tmp / "grades-results").mkdir(exist_ok=True)
        ctx.file(f"grades-results/{student}.json", text)

    return make


def edited(cell: str, line: int = 3, column: int = 2) -> list[str]:
    """GOOD with one cell (of line ``line`` of the file) replaced by ``cell``."""
    rows = [row.split(",") for row in GOOD]
    rows[line - 2][column] = cell
    return [",".join(row) for row in rows]


def report_case(name: str, rows: list[str], words: str, *extra) -> Case:
    return Case(
        f"c-report-{name}",
        "report",
        then(lambda c: (grades(*rows)(c), *(e(c) for e in extra)), plain("{tmp}/grades.csv")),
        words,
    )


CASES = [
    Case(
        "c-grade-out-not-grades",
        "grade",
        then(files(*SUBS, "roster.csv"), plain("{tmp}/subs", "--out", "{tmp}/roster.csv")),
        "roster.csv exists and is not a grades CSV of python -m course.grading.grade; "
        "pass --overwrite",
    ),
    Case(
        "c-grade-student-nosuch",
        "grade",
        then(files(*SUBS), plain(*GRADE, "--student", "nosuch")),
        "--student nosuch: no submission of that name in SUBMISSIONS_DIR",
    ),
    Case(
        "c-grade-student-empty",
        "grade",
        then(files(*SUBS), plain(*GRADE, "--student", "")),
        "--student '': an empty name",
    ),
    Case(
        "c-grade-student-zip",
        "grade",
        then(files(*SUBS, "subs/carol.zip"), plain(*GRADE, "--student", "carol.zip")),
        "--student carol.zip: a zip's file name; give the student's name, carol",
    ),
    Case(
        "c-grade-empty-class",
        "grade",
        then(files("subs/"), plain(*GRADE)),
        "subs: no submissions in it",
    ),
    Case(
        "c-refs-out-exists",
        "references",
        plain("--out", "../cwd/notes.txt"),
        "--out ../cwd/notes.txt exists and is not a file of",
    ),
    Case(
        "c-refs-out-folder",
        "references",
        then(files("refs/"), plain("--out", "{tmp}/refs")),
        "refs: a folder; give the file to write",
    ),
    Case(
        "c-refs-out-no-folder",
        "references",
        plain("--out", "{tmp}/nowhere/refs.pt"),
        "its folder",
    ),
    Case("c-refs-out-empty", "references", plain("--out", ""), "--out: an empty path"),
    report_case("total-abc", edited("abc"), "grades.csv: line 3, column total: 'abc'"),
    report_case("total-late", edited("9.5 (late)"), "line 3, column total: '9.5 (late)'"),
    report_case("total-nan", edited("nan"), "line 3, column total: 'nan'"),
    report_case("total-inf", edited("inf", 4), "line 4, column total: 'inf'"),
    report_case("total-negative", edited("-3"), "line 3, column total: '-3'"),
    report_case("cell-late", edited("9.5 (late)", 2, 3), "line 2, column adamw: '9.5 (late)'"),
    report_case("row-cut", [*GOOD[:2], "cy,graded,0"], "line 4: cut short"),
    report_case("cell-cut", [*GOOD[:2], 'cy,graded,0,0,0,"cut'], "not CSV (unexpected end"),
    report_case("row-twice", [*GOOD, "ada,graded,3,3,0,"], "line 5: ada again (first on line 2)"),
    report_case("results-not-json", GOOD, "ada.json: not JSON", results("ada", "{'tests': [")),
    report_case("results-a-list", GOOD, "bob.json: not a results object", results("bob", "[]")),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def fake_grading(monkeypatch, marks: dict[str, float]) -> None:
    """Grading without runners: each student gets ``marks[name]`` points for adamw."""

    def grade_one(submission, pristine, args):
        return grade.Graded(submission.name, points={"adamw": marks[submission.name]})

    monkeypatch.setattr(grade, "grade_one", grade_one)
    monkeypatch.setattr(grade, "pristine_tree", dict)


def rows_of(path: Path) -> dict[str, dict]:
    with path.open(encoding="utf-8", newline="") as f:
        return {row["student"]: row for row in csv.DictReader(f)}


def test_grading_some_again_keeps_every_other_row(tmp_path, monkeypatch, capsys):
    """``--student bob`` over the class's CSV updates bob's row and keeps the others'."""
    for name in ("alice", "bob", "carol"):
        (tmp_path / "subs" / name).mkdir(parents=True)
    out = tmp_path / "grades.csv"
    argv = [str(tmp_path / "subs"), "--out", str(out), "--trusted"]
    fake_grading(monkeypatch, {"alice": 10.0, "bob": 3.0, "carol": 7.0})
    assert grade.main(argv) == 0
    before = rows_of(out)
    fake_grading(monkeypatch, {"bob": 9.0})
    assert grade.main([*argv, "--student", "bob"]) == 0, capsys.readouterr().err
    after = rows_of(out)
    assert list(after) == ["alice", "bob", "carol"]
    assert after["bob"]["total"] == "9" and after["bob"]["adamw"] == "9"
    assert {k: after[k] for k in ("alice", "carol")} == {k: before[k] for k in ("alice", "carol")}
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_a_full_disk_while_grading_again_leaves_the_class_csv_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """The CSV is written whole to a temporary file, then renamed: a write that fails half-way
    (fsync: no space left) is one line, and the class's CSV is byte for byte as it was."""
    import errno

    import minbert.checkpoint

    for name in ("alice", "bob"):
        (tmp_path / "subs" / name).mkdir(parents=True)
    out = tmp_path / "grades.csv"
    argv = [str(tmp_path / "subs"), "--out", str(out), "--trusted"]
    fake_grading(monkeypatch, {"alice": 10.0, "bob": 3.0})
    assert grade.main(argv) == 0
    before = out.read_bytes()
    capsys.readouterr()

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    fake_grading(monkeypatch, {"bob": 9.0})
    monkeypatch.setattr(minbert.checkpoint.os, "fsync", no_space)
    assert grade.main([*argv, "--student", "bob"]) == 1
    said = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in said if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0], said
    assert out.read_bytes() == before
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_overwrite_replaces_a_file_that_is_not_a_grades_csv(tmp_path, monkeypatch):
    (tmp_path / "subs" / "alice").mkdir(parents=True)
    out = tmp_path / "roster.csv"
    out.write_text("name,email\n")
    fake_grading(monkeypatch, {"alice": 10.0})
    assert grade.main([str(tmp_path / "subs"), "--out", str(out), "--trusted", "--overwrite"]) == 0
    assert list(rows_of(out)) == ["alice"]


def points() -> dict[str, float]:
    return {"adamw": 10.0, "sampler": 5.0}


def test_a_spreadsheets_edit_is_read(tmp_path):
    """A byte-order mark, CRLF line ends and a row pasted twice: each student counted once."""
    path = tmp_path / "grades.csv"
    text = "\r\n".join([HEADER, *GOOD, GOOD[1]]) + "\r\n"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    summary = report.summarise(path, points())
    assert summary.students == ["ada", "bob", "cy"]
    assert summary.totals == {"ada": 15.0, "bob": 12.5, "cy": 0.0}
    counts, _ = report.histogram(summary)
    assert sum(counts) == 3 and counts[-1] == 1 and counts[0] == 1
    adamw = next(e for e in summary.exercises if e.name == "adamw")
    assert (adamw.full, adamw.zero) == (["ada", "bob"], ["cy"])


def test_two_classes_in_one_folder_keep_both_pages(tmp_path, capsys):
    for name in ("morning", "evening"):
        (tmp_path / f"{name}.csv").write_text("\n".join([HEADER, *GOOD]) + "\n")
        assert report.main([str(tmp_path / f"{name}.csv")]) == 0
    for name in ("morning", "evening"):
        assert (tmp_path / f"{name}-report.html").is_file()
        assert (tmp_path / f"{name}-report.png").is_file()


def test_two_classes_graded_into_one_folder_keep_every_file(tmp_path, monkeypatch):
    """Each file of a class's grading is named by its CSV's stem: the evening class graded into
    the morning class's folder leaves the morning's CSV, results, record and report as they were."""
    marks = {"alice": 10.0, "bob": 3.0}
    for name in marks:
        (tmp_path / "subs" / name).mkdir(parents=True)
    fake_grading(monkeypatch, marks)
    out = tmp_path / "grades"
    out.mkdir()
    assert grade.main([str(tmp_path / "subs"), "--out", str(out / "morning.csv"), "--trusted"]) == 0
    morning = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert grade.main([str(tmp_path / "subs"), "--out", str(out / "evening.csv"), "--trusted"]) == 0
    files = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert {k: files[k] for k in morning} == morning
    evening = {k for k in files if k not in morning}
    assert {k.parts[0] for k in evening} >= {
        "evening.csv",
        "evening-report.html",
    }
    assert all(k.parts[0].startswith("evening") for k in evening), evening


def test_the_references_replace_their_own_file_or_one_given_overwrite(tmp_path, monkeypatch):
    """make_course_references (its computation stubbed) writes over its own earlier file without
    --overwrite and over a file of the user's with it, atomically: no temporary file left."""
    from course.authoring import make_course_references
    from course.registry import COURSE_DATA

    monkeypatch.setattr(
        make_course_references, "make", lambda: {"seed": 1, "exercise functions": {}}
    )
    own, notes = tmp_path / "refs.pt", tmp_path / "notes.txt"
    own.write_bytes(COURSE_DATA.read_bytes())
    notes.write_text("the user's own\n")
    assert make_course_references.main(["--out", str(own)]) == 0
    assert make_course_references.main(["--out", str(notes), "--overwrite"]) == 0
    assert make_course_references.written_here(own) and make_course_references.written_here(notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "refs.pt"]


@pytest.mark.parametrize(
    "out, said",
    [
        ("notes.txt", "exists and is not a file of stored cases this script wrote"),
        (".", "a folder; give the file to write"),
        ("nowhere/refs.pt", "its folder nowhere does not exist"),
        ("", "an empty path"),
    ],
)
def test_the_references_refuse_a_bad_out_before_computing(out, said, tmp_path, monkeypatch, capsys):
    """A file of the user's, a folder, a missing folder or '' is one line before the twenty
    seconds of computing (stubbed here to fail the test if it runs); the file is as it was."""
    from course.authoring import make_course_references

    def computed():
        raise AssertionError("the stored cases were computed before --out was checked")

    monkeypatch.setattr(make_course_references, "make", computed)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the user's own\n")
    try:
        code = make_course_references.main(["--out", out])
    except SystemExit as stop:  # argparse's own refusal (the empty path)
        code = stop.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert (tmp_path / "notes.txt").read_text() == "the user's own\n"


def test_the_sanity_reference_replaces_only_its_own_file_unless_told(tmp_path, monkeypatch, capsys):
    """scripts/make_reference.py (transformers' run stubbed) refuses a file of the user's in one
    line before computing anything, and leaves it as it was; it writes over its own earlier
    file, and over the user's with --overwrite, atomically: no temporary file left."""
    spec = importlib.util.spec_from_file_location(
        "make_reference", ROOT / "scripts/make_reference.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    reference = {"single": {}, "pair": {}, "meta": {"checkpoint": "stub"}}
    monkeypatch.setattr(script, "reference_outputs", lambda _: reference)
    own, notes = tmp_path / "reference.pt", tmp_path / "notes.txt"
    torch.save(reference, own)
    notes.write_text("the user's own\n")
    assert script.main(["--out", str(notes)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "notes.txt exists and is not a reference file" in said[0], said
    assert notes.read_text() == "the user's own\n"
    assert script.main(["--out", str(own)]) == 0
    assert script.main(["--out", str(notes), "--overwrite"]) == 0
    assert script.is_reference(own) and script.is_reference(notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "reference.pt"]


def test_the_operator_mistakes_replace_their_own_file_and_refuse_another(
    tmp_path, monkeypatch, capsys
):
    """operator_mistakes (its computation stubbed) writes over its own earlier file, refuses a
    file of the user's in one line before computing, and replaces it with --overwrite."""
    from course.authoring import operator_mistakes

    made = {"operator mistakes": {("lhuc", "eval"): {}}, "made from": "a digest"}
    monkeypatch.setattr(operator_mistakes, "make", lambda: made)
    own, notes = tmp_path / "ops.pt", tmp_path / "notes.txt"
    own.write_bytes(operator_mistakes.OUT.read_bytes())
    notes.write_text("the user's own\n")
    assert operator_mistakes.main(["--out", str(own)]) == 0
    assert operator_mistakes.written_here(own)
    capsys.readouterr()
    assert operator_mistakes.main(["--out", str(notes)]) == 2
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and "is not a file of operator mistakes this script wrote" in said[0]
    assert notes.read_text() == "the user's own\n"
    assert operator_mistakes.main(["--out", str(notes), "--overwrite"]) == 0
    assert operator_mistakes.written_here(notes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "ops.pt"]
