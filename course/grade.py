"""Grade a class: one CSV row and one Gradescope results.json per student, computed where no
student code runs.

    python -m course.grade SUBMISSIONS_DIR --out grades.csv [--only adamw ...] [--timeout 60]

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from course import sandbox
from course.checks import CHECKS
from course.gradescope import POINTS, read_points, results_json
from course.judge import Limits, judge_submission
from course.registry import Context, format_result, select
from course.scaffold import PROJECT_ROOT, ScaffoldError, find_exercises, write_student_tree
from minbert.checkpoint import atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command

OUTPUT_LIMIT = 64_000  # bytes of a submission's output kept in its log
REFERENCE = PROJECT_ROOT / "sanity_check_reference.pt"  # the judge's, never a submission's


@dataclass
class Graded:
    """One student's row."""

    student: str
    status: str = "graded"
    points: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Submission:
    """One entry of SUBMISSIONS_DIR: its printable name, its exercise files, or why none."""

    name: str
    files: dict[str, bytes]
    problem: str = ""
    note: str = ""


def exercise_files(root: Path = PROJECT_ROOT) -> list[str]:
    """The files that hold exercises, relative to the project root."""
    return sorted({r.path for regions in find_exercises(root).values() for r in regions})


def read_submission(entry: Path, wanted: list[str]) -> dict[str, bytes]:
    """The exercise files of one submission (a folder or a zip): at their relative path, or
    else by name anywhere in it; a file found twice by name only is not taken."""
    if entry.is_dir():
        found = {
            p.relative_to(entry).as_posix(): p.read_bytes()
            for p in entry.rglob("*.py")
            if p.is_file() and not p.is_symlink()
        }
    else:
        with zipfile.ZipFile(entry) as archive:
            found = {
                n: archive.read(n) for n in archive.namelist() if n.endswith(".py") and n[-1] != "/"
            }
    taken = {}
    for rel in wanted:
        exact = [k for k in found if k == rel or k.endswith("/" + rel)]
        named = [k for k in found if Path(k).name == Path(rel).name]
        if len(exact) == 1 or len(named) == 1:
            taken[rel] = found[(exact or named)[0]]
    return taken


def printable(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 escaped as \\xNN."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def read_class(folder: Path, wanted: list[str]) -> list[Submission]:
    """Every entry of SUBMISSIONS_DIR, read before anything runs, in name order; an entry that
    is not a submission gets a row that says what it is."""
    found = []
    for entry in sorted(folder.iterdir()):
        name = printable(entry.stem if entry.suffix == ".zip" else entry.name)
        if entry.is_symlink() or not (entry.is_dir() or entry.suffix == ".zip"):
            kind = "a link" if entry.is_symlink() else "a plain file"
            found.append(Submission(name, {}, f"not a folder or a .zip ({kind})"))
            continue
        try:
            found.append(Submission(name, read_submission(entry, wanted)))
        except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as err:
            found.append(Submission(name, {}, f"not readable ({type(err).__name__}: {err})"))
        if printable(entry.name) != entry.name:
            found[-1].note = "its name is not UTF-8 (shown with \\x escapes)"
    return found


def pristine_tree() -> dict[str, bytes]:
    """The student tree cut from this project, file by file (relative path -> bytes)."""
    with tempfile.TemporaryDirectory(prefix="grade-pristine-") as folder:
        tree = Path(folder) / "tree"
        try:
            write_student_tree(tree)
        except ScaffoldError as err:
            raise UsageError(f"the student tree cannot be cut from {PROJECT_ROOT}: {err}") from None
        return {
            p.relative_to(tree).as_posix(): p.read_bytes()
            for p in sorted(tree.rglob("*"))
            if p.is_file()
        }


def exercise_points(results: dict) -> dict[str, float]:
    """Each exercise's points from a results.json: the scores of its own checks."""
    exercise_of = {c.name: c.exercises[0] for c in CHECKS if len(c.exercises) == 1}
    points: dict[str, float] = {}
    for test in results.get("tests", []):
        if (exercise := exercise_of.get(test.get("name"))) is not None:
            points[exercise] = points.get(exercise, 0.0) + float(test.get("score", 0.0))
    return points


def grade_one(submission: Submission, pristine: dict[str, bytes], args) -> Graded:
    """One submission: its runner and the judge (see the module docstring); writes its
    results.json and log."""
    row = Graded(submission.name, notes=[submission.note] if submission.note else [])
    results_file = args.results / f"{submission.name}.json"
    if submission.problem or not submission.files:
        row.status = submission.problem or "no exercise files found"
        row.notes.append("nothing graded")
        said = {"score": 0.0, "output": f"{row.status}: nothing graded", "tests": []}
        atomic_write_text(results_file, json.dumps(said, indent=2) + "\n")
        return row
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        tree = Path(scratch) / "tree"
        for rel, data in (pristine | submission.files).items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
        output = Path(scratch) / "output"
        limits = Limits(args.timeout, args.memory_gb, args.level)
        with open(output, "wb") as log:
            verdict = judge_submission(tree, args.checks, args.ctx, args.private, limits, log)
        with open(output, "rb") as log:
            printed = log.read(OUTPUT_LIMIT).decode("utf-8", errors="replace")
    width = max(len(c.name) for c in args.checks)
    lines = [(result, format_result(result, width)) for result in verdict.results]
    report = "\n".join(line for _, line in lines)
    results = results_json(lines, args.points_table)
    atomic_write_text(results_file, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(args.results / f"{submission.name}.log", f"{printed}\n{report}\n")
    row.points = exercise_points(results)
    row.notes += verdict.notes
    if verdict.not_started:
        row.status = f"not graded: {verdict.not_started} (see {submission.name}.log)"
    return row


def write_grades(rows: list[Graded], exercises: list[str], out: Path) -> None:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["student", "status", "total", *exercises, "notes"])
    for row in rows:
        points = [f"{row.points.get(e, 0.0):g}" for e in exercises]
        total = f"{sum(row.points.values()):g}"
        writer.writerow([row.student, row.status, total, *points, "; ".join(row.notes)])
    atomic_write_text(out, text.getvalue())


def within(path: Path, folder: Path) -> bool:
    path, folder = path.resolve(), folder.resolve()
    return path == folder or folder in path.parents


def writable_folder(folder: Path, flag: str) -> None:
    """A UsageError unless a file can be created in ``folder`` (tried: a read-only mount or a
    full disk says so here, before anyone is graded)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".grade-probe-"):
            pass
    except OSError as err:
        raise UsageError(f"{flag} {folder}: cannot write there ({err.strerror or err})") from None


def check_paths(args) -> None:
    """--out and its results folder: a file path, writable, outside SUBMISSIONS_DIR."""
    if args.out.is_dir():
        raise UsageError(f"--out {args.out}: a folder; give the CSV file to write")
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: its folder {args.out.parent} does not exist")
    for path, what in ((args.out, "--out"), (args.results, "--out's results folder")):
        if within(path, args.submissions):
            raise UsageError(
                f"{what} {path} is inside SUBMISSIONS_DIR {args.submissions}: it would be "
                "read as a submission; write it elsewhere"
            )
    if args.results.exists() and not args.results.is_dir():
        raise UsageError(f"--out's results folder {args.results}: a file is in the way")
    writable_folder(args.out.parent, "--out")
    args.results.mkdir(exist_ok=True)
    writable_folder(args.results, "--out's results folder")


def positive(flag: str):
    """An argparse type: a finite number > 0, named by ``flag`` when it is not one."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} {text}: give a finite number > 0")
        return value

    return parse


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m course.grade", description=__doc__.split("\n")[0])
    p.add_argument("submissions", metavar="SUBMISSIONS_DIR", type=nonempty_path)
    p.add_argument("--out", type=nonempty_path, required=True, help="the CSV file to write")
    p.add_argument("--points", type=nonempty_path, default=POINTS, help="points per exercise")
    p.add_argument("--only", action="append", default=[], help="grade these checks only")
    p.add_argument("--timeout", default="60", help="seconds per check (finite, > 0)")
    p.add_argument("--memory_gb", default="8", help="GiB of address space per runner")
    p.add_argument(
        "--hide",
        metavar="FOLDER",
        action="append",
        type=nonempty_path,
        default=[],
        help="also keep FOLDER out of the runners' reach (beside this project, the submissions, "
        "the results, your home, the working folder and /tmp); repeatable",
    )
    p.add_argument(
        "--trusted",
        action="store_true",
        help="where the machine offers no containment, run the submissions as plain processes "
        "of your user (only for code you trust)",
    )
    return p


def set_up(argv: list[str] | None) -> object:
    """The parsed flags, every one checked before anything runs (a UsageError otherwise)."""
    args = build_parser().parse_args(argv)
    args.timeout = positive("--timeout")(args.timeout)
    args.memory_gb = positive("--memory_gb")(args.memory_gb)
    if not args.submissions.is_dir():
        raise UsageError(f"SUBMISSIONS_DIR {args.submissions}: not a folder")
    exercises = sorted({e for c in CHECKS for e in c.exercises})
    try:
        args.points_table = read_points(args.points, exercises)
        args.checks = select(CHECKS, args.only) if args.only else CHECKS
    except ValueError as err:
        raise UsageError(f"{'--only' if args.only else '--points'}: {err}") from None
    args.results = args.out.parent / f"{args.out.stem}-results"
    check_paths(args)
    args.level = sandbox.containment()
    if args.level is None and not args.trusted:
        raise UsageError(
            "this machine offers no containment for submissions (not root, and no user "
            "namespaces): grade as root or where unshare works, or pass --trusted to run them "
            "as plain processes of your user"
        )
    args.exercises = exercises
    args.ctx = Context(None, REFERENCE)
    args.private = [
        PROJECT_ROOT,
        args.submissions,
        args.results,
        args.out.parent,
        args.points.parent,
        Path.home(),
        Path.cwd(),
        Path(tempfile.gettempdir()),
        *args.hide,
    ]
    return args


def grade(args) -> list[Graded]:
    """Every submission in name order; the CSV rewritten after each."""
    submissions = read_class(args.submissions, exercise_files())
    if args.level is None:
        print("warning: --trusted: submissions run uncontained", file=sys.stderr)
    pristine = pristine_tree()
    rows = []
    for submission in submissions:
        print(f"grading {submission.name}", file=sys.stderr, flush=True)
        rows.append(grade_one(submission, pristine, args))
        write_grades(rows, args.exercises, args.out)
    write_grades(rows, args.exercises, args.out)
    return rows


def main(argv: list[str] | None = None) -> int:
    def body() -> None:
        args = set_up(argv)
        rows = grade(args)
        print(f"wrote {args.out} ({len(rows)} students) and {args.results}/")

    return run_command(
        body, "every student graded so far has their row in --out and their results file"
    )


if __name__ == "__main__":
    sys.exit(main())
