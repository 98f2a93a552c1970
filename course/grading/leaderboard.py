"""The final project's leaderboard: test predictions scored on hidden labels, and ranked.

    python -m course.grading.leaderboard SUBMISSIONS_DIR --labels LABELS_DIR --out board.csv

SUBMISSIONS_DIR holds a folder per student with the driver's ``sst-test-output.csv``,
``para-test-output.csv`` and ``sts-test-output.csv``; LABELS_DIR the course's test files with
their labels (course/grading/predictions.py says which names). Writes the ranked CSV, ``board.html``
(one offline page) and ``board-results/<student>.json`` (Gradescope's format: scores only, never a
label) beside it. A bad file scores its task 0 and says why on the student's row; the
other tasks still count. The scores are the project's own metrics (``Task.metric``, what the
driver's evaluation uses, and ``tasks.metrics.overall_score``). Only data is read from a
submission: nothing of it runs.
"""

from __future__ import annotations

import csv
import html
import io
import json
import math
import sys
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

from course.grading.predictions import (
    SCORED_TASKS,
    Labels,
    LabelsError,
    floor,
    prediction_file,
    read_labels,
    score_folder,
)
from minbert.checkpoint import atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command
from tasks.metrics import overall_score

COLUMNS = ("rank", "student", "overall", *SCORED_TASKS, "problems")
FORMULA_START = ("=", "+", "-", "@")  # a spreadsheet reads a cell starting so as a formula
NAME_BYTES = 200  # a student's shown name, the stem of their results file (a file name <= 255)


@dataclass
class Standing:
    """One student's row: each task's metric (its floor where the file is bad), the overall
    score of those (``tasks.metrics.overall_score``), the problems, and the rank."""

    student: str
    metrics: dict[str, float] = field(default_factory=dict)
    overall: float = 0.0
    problems: list[str] = field(default_factory=list)
    rank: int = 0

    @property
    def problem_line(self) -> str:
        return "; ".join(self.problems)


def student_name(entry: str, taken: AbstractSet[str] = frozenset()) -> str:
    """A folder name as one line of text: what is not printable (controls, line and
    bidirectional marks, bytes that are not UTF-8) written as its escape, ``\\x1b``; at most
    ``NAME_BYTES`` bytes; a name already ``taken`` gets a number, so that no two students
    share a row's name or a results file."""
    name = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in entry)
    if len(name.encode()) > NAME_BYTES:
        while len(name.encode()) > NAME_BYTES - 3:
            name = name[:-1]
        name += "..."
    number, unique = 2, name
    while unique in taken:
        unique, number = f"{name} ({number})", number + 1
    return unique


def score_student(student: str, entry: Path, labels: dict[str, Labels]) -> Standing:
    """The standing of one entry of SUBMISSIONS_DIR (a folder, else every task at its floor)."""
    if entry.is_symlink() or not entry.is_dir():
        kind = "a symbolic link" if entry.is_symlink() else "a file"
        if kind == "a file" and entry.name.lower().endswith(".zip"):
            kind = f"{student}: a zip; unpack it into a folder of its own"
        standing = Standing(student, {t: floor(own.task) for t, own in labels.items()})
        standing.problems = [f"not a student folder ({kind}); every task scores 0"]
    else:
        scores = score_folder(entry, labels)
        standing = Standing(student, {t: s.metric for t, s in scores.items()})
        standing.problems = [s.problem for s in scores.values() if s.problem]
        standing.problems = zip_instead(entry, scores) or standing.problems
    standing.overall = overall_score(standing.metrics)
    return standing


def zip_instead(folder: Path, scores: dict) -> list[str]:
    """The problem of a folder holding no prediction file but a zip (the student's own, not
    unpacked), naming the zip; [] otherwise."""
    if any(not s.problem.startswith(f"{prediction_file(t)}: missing;") for t, s in scores.items()):
        return []
    try:
        zips = sorted(p.name for p in folder.iterdir() if p.name.lower().endswith(".zip"))
    except OSError:
        return []
    if not zips:
        return []
    found = student_name(zips[0])
    return [f"no prediction file, but found {found} in the folder: unpack it; every task scores 0"]


def score_class(submissions: Path, labels: dict[str, Labels]) -> list[Standing]:
    """Every entry of ``submissions``, ranked: the highest overall first, equal scores share a
    rank (1, 2, 2, 4), and among them the order is by name."""
    standings: list[Standing] = []
    for entry in sorted(submissions.iterdir()):
        name = student_name(entry.name, {s.student for s in standings})
        standings.append(score_student(name, entry, labels))
    standings.sort(key=lambda s: (-s.overall, s.student))
    for place, standing in enumerate(standings, start=1):
        tied = place > 1 and standing.overall == standings[place - 2].overall
        standing.rank = standings[place - 2].rank if tied else place
    return standings


# ----------------------------------------------------------------------------------------------
# What is written


def results_json(standing: Standing, points: float) -> dict:
    """Gradescope's results object for one student: ``score`` (the overall score times
    ``points``), the ``leaderboard`` entries (overall, then each task's metric) and the
    problems as ``output``. Scores only: no label, no other student."""
    entries = {"overall": standing.overall, **standing.metrics}
    said = ", ".join(f"{name} {value:.4f}" for name, value in entries.items())
    output = said + (f"\n{standing.problem_line}" if standing.problems else "")
    return {
        "score": standing.overall * points,
        "output": output,
        "leaderboard": [
            {"name": name, "value": value, "order": "desc"} for name, value in entries.items()
        ],
        "visibility": "visible",
    }


def plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def csv_text(text: str) -> str:
    """A text cell that a spreadsheet shows as text: a ``'`` before a would-be formula."""
    return "'" + text if text.lstrip(" ").startswith(FORMULA_START) else text


def write_csv(standings: list[Standing], path: Path) -> None:
    """The ranked board, one row per student; the numbers in full (``repr``) precision."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(COLUMNS)
    for s in standings:
        numbers = [repr(s.overall), *(repr(s.metrics[t]) for t in SCORED_TASKS)]
        writer.writerow([s.rank, csv_text(s.student), *numbers, csv_text(s.problem_line)])
    atomic_write_text(path, text.getvalue())


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Leaderboard</title>
<style>
body {{ font-family: sans-serif; margin: 2em; }}
table {{ border-collapse: collapse; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: left; }}
td.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.p {{ color: #a00; font-size: 0.9em; }}
</style></head><body>
<h1>Leaderboard</h1>
<p>{summary}</p>
<table>
<tr>{header}</tr>
{rows}
</table>
</body></html>
"""


def html_row(s: Standing) -> str:
    numbers = [s.overall, *(s.metrics[t] for t in SCORED_TASKS)]
    cells = [f'<td class="n">{s.rank}</td>', f"<td>{html.escape(s.student)}</td>"]
    cells += [f'<td class="n">{value:.4f}</td>' for value in numbers]
    cells.append(f'<td class="p">{html.escape(s.problem_line)}</td>')
    return "<tr>" + "".join(cells) + "</tr>"


def write_html(standings: list[Standing], labels: dict[str, Labels], path: Path) -> None:
    """The board as one offline page (no script, no link); every student's text escaped."""
    sizes = ", ".join(f"{name} {len(own.values)}" for name, own in labels.items())
    summary = (
        f"{plural(len(standings), 'student')}. Test rows: {sizes}. overall = (sst accuracy + para "
        "accuracy + (sts Pearson r + 1) / 2) / 3; a bad file scores its task 0."
    )
    header = "".join(f"<th>{html.escape(c)}</th>" for c in COLUMNS)
    rows = "\n".join(html_row(s) for s in standings)
    atomic_write_text(path, PAGE.format(summary=html.escape(summary), header=header, rows=rows))


def score_upload(
    submission: Path, labels_dir: Path, results: Path, points: float = 100.0
) -> Standing:
    """One upload scored as a class of one (Gradescope's autograder): the prediction files in
    the folder ``submission``, the labels of ``labels_dir`` (a ``LabelsError`` when they are
    unusable); writes Gradescope's results object to the file ``results``."""
    labels = read_labels(labels_dir)
    standing = score_student(student_name(submission.name), submission, labels)
    atomic_write_text(results, json.dumps(results_json(standing, points), indent=2) + "\n")
    return standing


# ----------------------------------------------------------------------------------------------
# The command


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m course.grading.leaderboard",
        description=__doc__.split("\n")[0] + " A bad file scores its task 0; the others count.",
    )
    p.add_argument(
        "submissions",
        metavar="SUBMISSIONS_DIR",
        type=nonempty_path,
        help="a folder per student holding sst-, para- and sts-test-output.csv",
    )
    p.add_argument(
        "--labels",
        metavar="LABELS_DIR",
        type=nonempty_path,
        required=True,
        help="the test files with their labels: ids-sst-test.csv, quora-test.csv, sts-test.csv "
        "(or the -test-student names), with the dev files' columns",
    )
    p.add_argument(
        "--out",
        type=nonempty_path,
        required=True,
        help="the ranked CSV to write; beside it <stem>.html (the page) and <stem>-results/ "
        "(Gradescope JSON)",
    )
    p.add_argument(
        "--points", default="100", help="Gradescope score of a perfect overall score (default: 100)"
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier board (CSV, page, results files; a departed student's removed)",
    )
    return p


def within(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def check_outputs(args) -> None:
    """--out, its page and its results folder: outside SUBMISSIONS_DIR, and new unless
    --overwrite; a UsageError before anything is written otherwise."""
    out = args.out
    if out.suffix == ".html":
        raise UsageError(f"--out {out}: give the CSV file; the page is written beside it")
    if out.is_dir():
        raise UsageError(f"--out {out}: a folder; give the CSV file to write")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: its folder {out.parent} does not exist")
    if within(out.parent, args.submissions) or within(args.labels, args.submissions):
        which = "--labels" if within(args.labels, args.submissions) else "--out"
        raise UsageError(f"{which} is inside SUBMISSIONS_DIR: it would be read as a student")
    if args.results.exists() and not args.results.is_dir():
        raise UsageError(f"--out: a file is in the way of the results folder {args.results}")
    written = [p for p in (out, args.page) if p.exists()]
    if args.results.is_dir() and any(args.results.iterdir()):
        written.append(args.results)
    if written and not args.overwrite:
        raise UsageError(
            f"--out: {', '.join(map(str, written))} already there; pass --overwrite to replace"
        )


def set_up(argv: list[str] | None):
    """The parsed flags and the labels, every one checked before anyone is scored."""
    args = build_parser().parse_args(argv)
    try:
        points = float(args.points)
    except ValueError:
        points = math.nan
    if not 0 < points < math.inf:
        raise UsageError(f"--points {args.points}: give a finite number > 0")
    args.points = points
    if not args.submissions.is_dir():
        raise UsageError(f"SUBMISSIONS_DIR {args.submissions}: not a folder")
    try:
        args.label_sets = read_labels(args.labels)
    except LabelsError as err:
        raise UsageError(f"--labels {args.labels}: {err}") from None
    args.page = args.out.with_suffix(".html")
    args.results = args.out.parent / f"{args.out.stem}-results"
    check_outputs(args)
    return args


def main(argv: list[str] | None = None) -> int:
    def body() -> None:
        args = set_up(argv)
        standings = score_class(args.submissions, args.label_sets)
        args.results.mkdir(exist_ok=True)
        for s in standings:
            record = json.dumps(results_json(s, args.points), indent=2, ensure_ascii=False)
            atomic_write_text(args.results / f"{s.student}.json", record + "\n")
        written = {f"{s.student}.json" for s in standings}
        for departed in sorted(args.results.glob("*.json")):  # --overwrite: no longer in the class
            if departed.name not in written:
                departed.unlink()
        write_html(standings, args.label_sets, args.page)
        write_csv(standings, args.out)
        count = plural(len(standings), "student")
        print(f"wrote {args.out}, {args.page} and {args.results}/ ({count})")

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
