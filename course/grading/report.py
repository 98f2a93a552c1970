"""The instructor's view of a graded class: which mistakes the class made.

    python -m course.grading.report grades.csv     # rebuilds grades-report.html and .png beside it

``python -m course.grading.grade`` writes the same report beside its CSV. From the CSV (each
student's points per exercise) and ``<stem>-results/`` (each check's result and the mistake the
judge named, ``extra_data`` of results.json): the distribution of totals; per exercise the students
with full, partial and no marks; the named mistakes with how many students made each (and which: a
click opens the list); failures no mistake explains, unwritten exercises and grader faults counted
apart. One offline page (no script, no network; every name escaped: they come from submissions) and
a PNG of the same for a slide.
"""

from __future__ import annotations

import csv
import html
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from course.checks import CHECKS
from course.gradescope import POINTS, read_points
from minbert.checkpoint import atomic_write, atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command

UNNAMED = "a failure no known mistake explains"
NOT_WRITTEN = "not written yet (NOT IMPLEMENTED)"
FAULT = "grader fault (withheld, not scored)"
UNCOMPILED = "a file that does not compile"
TIMED_OUT = "timed out (the check did not finish in its time)"
KINDS = {"FAIL": UNNAMED, "NOT IMPLEMENTED": NOT_WRITTEN, "WITHHELD": FAULT}
NAMELESS = (*KINDS.values(), UNCOMPILED, TIMED_OUT)  # counted apart from the named mistakes
# What python -m course.grading.grade records of a grading, beside its CSV (``provenance``):
# <stem>-graded.json (not in the results folder, where a student could be named "graded").
GRADED = "-graded.json"


@dataclass
class Exercise:
    """One exercise across the class: who got full, partial and no marks, who made which
    mistake (a mistake's name, or one of ``KINDS``' texts -> students)."""

    name: str
    points: float
    full: list[str] = field(default_factory=list)
    partial: list[str] = field(default_factory=list)
    zero: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)
    mistakes: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class Summary:
    students: list[str]
    totals: dict[str, float]
    full_marks: float
    exercises: list[Exercise]
    provenance: str = ""  # when, at which commit and with which points file the class was graded


def provenance(grades: Path) -> str:
    """ "graded 2026-12-06 19:40 UTC at commit 1c7ba2c with points course/points.json" from the
    grading's record beside ``grades`` (``GRADED``); "" where there is none or it is unreadable."""
    try:
        said = json.loads(grades.with_name(grades.stem + GRADED).read_text(encoding="utf-8"))
        when, commit, points = (str(said[k]) for k in ("graded_at", "commit", "points"))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return ""
    return f"graded {when} at commit {commit} with points {points}"


def read_rows(grades: Path) -> list[tuple[int, list[str]]]:
    """The header and every row of ``grades`` with its line number; a spreadsheet's byte-order
    mark and CRLF line ends are read as the grader's own file."""
    rows: list[tuple[int, list[str]]] = []
    try:
        with grades.open(encoding="utf-8-sig", newline="") as f:
            reader = csv.reader(f, strict=True)
            rows += ((reader.line_num, cells) for cells in reader)
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{grades}: not a readable grades CSV ({err})") from None
    except csv.Error as err:  # a quoted cell cut by the end of the file
        raise UsageError(f"{grades}: line {reader.line_num}: not CSV ({err})") from None
    return rows


def points_in(grades: Path, line: int, column: str, cell: str) -> float:
    """A cell of points: a finite number >= 0, else a UsageError naming the line and column."""
    try:
        value = float(cell)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise UsageError(
            f"{grades}: line {line}, column {column}: {cell!r} is not a number of points "
            "(a finite number >= 0); correct it, or grade the class again"
        )
    return value


def read_grades(grades: Path) -> list[dict[str, str]]:
    """The students' rows of a grades CSV, each once (a row pasted twice is read once), each
    number checked; a UsageError naming the file, the line and the column otherwise."""
    lines = read_rows(grades)
    columns = lines[0][1] if lines else []
    if not {"student", "total"} <= set(columns):
        raise UsageError(f"{grades}: not a CSV written by python -m course.grading.grade")
    rows: dict[str, tuple[int, list[str]]] = {}
    for line, cells in lines[1:]:
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        if len(cells) != len(columns):
            how = "cut short" if len(cells) < len(columns) else "longer than its header"
            raise UsageError(f"{grades}: line {line}: {how} ({len(cells)} of {len(columns)} cells)")
        row = dict(zip(columns, cells, strict=True))
        for column in ("total", *(c for c in columns[3:-1] if row[c] not in ("", "withheld"))):
            points_in(grades, line, column, row[column])
        first = rows.setdefault(row["student"], (line, cells))
        if first[1] != cells:
            raise UsageError(
                f"{grades}: line {line}: {row['student']} again (first on line {first[0]}) with "
                "other cells; keep one of the two rows"
            )
    if not rows:
        raise UsageError(f"{grades}: no student's row in it")
    return [dict(zip(columns, cells, strict=True)) for _, cells in rows.values()]


def summarise(grades: Path, points: dict[str, float]) -> Summary:
    """The class as ``course.grading.grade`` left it: ``grades`` (its CSV) and its results
    folder."""
    rows = read_grades(grades)
    results = grades.parent / f"{grades.stem}-results"
    found = {row["student"]: graded_checks(results / f"{row['student']}.json") for row in rows}
    graded = {e for tests in found.values() for test in tests for e in exercise_of(test)}
    exercises = {
        name: Exercise(name, top)
        for name, top in points.items()
        if name in rows[0] and (name in graded or not graded)  # --only: the graded ones
    }
    for row in rows:
        student = row["student"]
        for exercise in exercises.values():
            place(exercise, student, row[exercise.name])
        for exercise, mistake in mistakes_of(found[student]):
            if exercise in exercises:
                exercises[exercise].mistakes.setdefault(mistake, []).append(student)
    totals = {row["student"]: float(row["total"]) for row in rows}  # checked: finite, >= 0
    full_marks = sum(e.points for e in exercises.values())
    exercises_seen = list(exercises.values())
    return Summary(list(totals), totals, full_marks, exercises_seen, provenance(grades))


def place(exercise: Exercise, student: str, cell: str) -> None:
    """The student among full, partial, no marks or withheld, by the CSV's cell."""
    if cell == "withheld":
        exercise.withheld.append(student)
        return
    got = float(cell or 0)
    if got >= exercise.points:
        exercise.full.append(student)
    elif got > 0:
        exercise.partial.append(student)
    else:
        exercise.zero.append(student)


def graded_checks(results: Path) -> list[dict]:
    """The tests of a student's results.json; [] where it is missing (a row refused before
    grading); a UsageError naming it where it is not the grader's (edited by hand)."""
    try:
        said = json.loads(results.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{results}: not readable ({err})") from None
    except ValueError as err:
        raise UsageError(f"{results}: not JSON ({err}); grade the student again") from None
    tests = said.get("tests", []) if isinstance(said, dict) else None
    if not isinstance(tests, list) or not all(
        isinstance(t, dict) and isinstance(t.get("extra_data") or {}, dict) for t in tests
    ):
        raise UsageError(
            f"{results}: not a results object of the grader (an object whose tests are "
            "objects); grade the student again"
        )
    return tests


def exercise_of(test: dict) -> list[str]:
    """The exercise a test grades alone ([] for the whole-model checks, which need several)."""
    check = next((c for c in CHECKS if c.name == test.get("name")), None)
    return list(check.exercises) if check is not None and len(check.exercises) == 1 else []


def mistakes_of(tests: list[dict]) -> list[tuple[str, str]]:
    """(exercise, mistake) of each check a student did not pass, once per exercise and mistake."""
    found = []
    for test in tests:
        extra = test.get("extra_data") or {}
        said = extra.get("diagnosis") or KINDS.get(str(extra.get("result")), "")
        said = said if isinstance(said, str) else ""
        if extra.get("uncompiled"):
            said = UNCOMPILED
        elif extra.get("timed_out"):
            said = TIMED_OUT
        for exercise in exercise_of(test):
            if said and (exercise, said) not in found:
                found.append((exercise, said))
    return found


STYLE = """
body{font:15px/1.4 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222}
table{border-collapse:collapse;width:100%}td,th{padding:.3em .6em;border-bottom:1px solid #ddd;
text-align:left;vertical-align:top}.bar{display:flex;height:1em;width:12em}.full{background:#2a7}
.partial{background:#eb3}.zero{background:#d54}.withheld{background:#999}
.hist{display:flex;align-items:flex-end;gap:3px;height:8em}.hist div{background:#47a;flex:1}
summary{cursor:pointer}.kind{color:#666}
"""


def histogram(summary: Summary, bins: int = 10) -> tuple[list[int], list[str]]:
    """Students per tenth of the full marks (the last bin holds full marks)."""
    counts = [0] * bins
    for total in summary.totals.values():
        share = total / summary.full_marks if summary.full_marks else 0.0
        counts[min(int(share * bins), bins - 1)] += 1
    labels = [f"{100 * i // bins}–{100 * (i + 1) // bins}%" for i in range(bins)]
    return counts, labels


def html_page(summary: Summary) -> str:
    """The report as one self-contained page; every student-derived text escaped."""
    counts, labels = histogram(summary)
    tallest = max(counts) or 1
    hist = "".join(
        f'<div style="height:{100 * c / tallest:.0f}%" title="{e}: {c}"></div>'
        for c, e in zip(counts, labels, strict=True)
    )
    rows = "".join(exercise_row(e, len(summary.students)) for e in summary.exercises)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>Class report</title>"
        f"<style>{STYLE}</style></head><body><h1>Class report</h1>"
        f"<p>{len(summary.students)} students; full marks {summary.full_marks:g}"
        f"{'; ' + html.escape(summary.provenance) if summary.provenance else ''}.</p>"
        f"<h2>Totals</h2><div class='hist'>{hist}</div>"
        f"<p class='kind'>{' · '.join(f'{e}: {c}' for c, e in zip(counts, labels, strict=True))}"
        f"</p><h2>Exercises</h2><table><tr><th>exercise</th><th>full / partial / none / "
        f"withheld</th><th>mistakes (students)</th></tr>{rows}</table></body></html>\n"
    )


def exercise_row(exercise: Exercise, students: int) -> str:
    groups = [("full", exercise.full), ("partial", exercise.partial), ("zero", exercise.zero)]
    groups.append(("withheld", exercise.withheld))
    bar = "".join(
        f'<div class="{kind}" style="width:{100 * len(who) / max(students, 1):.1f}%"></div>'
        for kind, who in groups
    )
    counts = " / ".join(str(len(who)) for _, who in groups)
    named = sorted(exercise.mistakes.items(), key=lambda m: (m[0] in NAMELESS, -len(m[1])))
    mistakes = "".join(
        f"<details><summary{' class=kind' if m in NAMELESS else ''}>{html.escape(m)}: "
        f"{len(who)}</summary>{html.escape(', '.join(who))}</details>"
        for m, who in named
    )
    return (
        f"<tr><td>{html.escape(exercise.name)} ({exercise.points:g})</td>"
        f"<td><div class='bar'>{bar}</div>{counts}</td><td>{mistakes or '—'}</td></tr>"
    )


def write_png(summary: Summary, path: Path) -> None:
    """The totals and each exercise's marks, for a slide."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts, labels = histogram(summary)
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    left.bar(range(len(counts)), counts, color="#47a")
    left.set_xticks(range(len(counts)), labels, rotation=45, fontsize=8)
    left.set_title("totals (share of full marks)")
    names = [e.name for e in summary.exercises]
    start = [0] * len(names)
    for kind, colour in (("full", "#2a7"), ("partial", "#eb3"), ("zero", "#d54")):
        widths = [len(getattr(e, kind)) for e in summary.exercises]
        right.barh(names, widths, left=start, color=colour, label=kind)
        start = [s + w for s, w in zip(start, widths, strict=True)]
    right.invert_yaxis()
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=3)
    right.set_title("students per exercise")
    figure.tight_layout()
    atomic_write(path, lambda stream: figure.savefig(stream, format="png", dpi=100))
    plt.close(figure)


def report_paths(grades: Path) -> tuple[Path, Path]:
    """The page and the picture of the class of ``grades``: ``<stem>-report.html`` and
    ``.png`` beside it (two classes graded into one folder keep both)."""
    return grades.with_name(f"{grades.stem}-report.html"), grades.with_name(
        f"{grades.stem}-report.png"
    )


def write_report(grades: Path, points: dict[str, float]) -> tuple[Path, Path]:
    """The page and the picture (``report_paths``) of the class of ``grades``."""
    summary = summarise(grades, points)
    page, picture = report_paths(grades)
    atomic_write_text(page, html_page(summary))
    write_png(summary, picture)
    return page, picture


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m course.grading.report", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "grades",
        metavar="GRADES.csv",
        type=nonempty_path,
        help="the CSV python -m course.grading.grade wrote (its results folder beside it)",
    )
    parser.add_argument(
        "--points",
        type=nonempty_path,
        default=POINTS,
        help="the points per exercise it was graded with",
    )

    def body() -> None:
        args = parser.parse_args(argv)
        exercises = sorted({e for c in CHECKS for e in c.exercises})
        try:
            points = read_points(args.points, exercises)
        except ValueError as err:
            raise UsageError(f"--points: {err}") from None
        page, picture = write_report(args.grades, points)
        print(f"wrote {page} and {picture}")

    return run_command(body, "no report was written")


if __name__ == "__main__":
    sys.exit(main())
