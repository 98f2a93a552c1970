"""Grade a class: every submission in its own process, one CSV row per student.

    python -m course.grade SUBMISSIONS_DIR --out grades.csv [--only adamw ...]

SUBMISSIONS_DIR holds one entry per student: a folder (a student tree, or just the files the
student wrote) or a ``.zip`` of one; the student's name is the entry's name. From each, only the
files that hold exercises (``minbert/bert.py``, ``minbert/optimizer.py``, ...; ``python -m
course.scaffold --list``) are taken, at the same relative path (or at the top of the folder or
zip). They are laid over a fresh student tree cut from this project (the instructor's grader, its
stored references and ``points.json``), and ``sanity_check.py --results-json`` runs there:

* in a process of its own, in a scratch folder of its own, killed after ``--timeout`` seconds and
  limited to ``--memory_gb`` of address space, its output kept to the first ``OUTPUT_LIMIT``
  bytes;
* every submission is read into memory before any runs, and the scratch tree is written afresh
  for each one, so what one submission's code writes, wherever it writes, cannot reach another
  submission's files or grade. The instructor's grader files and SUBMISSIONS_DIR are compared
  before and after each run; a change is undone from the copies held in memory and said in the
  offender's row.

Writes OUT (one row per student: status, total, each exercise's points) and beside it a folder
``<OUT stem>-results/`` with each student's Gradescope ``results.json`` (``<name>.json``) and the
first lines of their output (``<name>.log``). A submission that loops forever, exits the
interpreter, prints megabytes or raises at import gets a row that says so, and the others are
graded as if it were not there.
"""

from __future__ import annotations

import csv
import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from course.checks import CHECKS
from course.gradescope import POINTS, read_points
from course.scaffold import PROJECT_ROOT, find_exercises, write_student_tree
from minbert.checkpoint import atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path

OUTPUT_LIMIT = 64_000  # bytes of a submission's output kept in its log
GRADER = ("sanity_check.py", "sanity_check_reference.pt", "course")  # the instructor's


@dataclass
class Graded:
    """One student's row."""

    student: str
    status: str = "graded"
    points: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def exercise_files(root: Path = PROJECT_ROOT) -> list[str]:
    """The files that hold exercises, relative to the project root."""
    return sorted({r.path for regions in find_exercises(root).values() for r in regions})


def read_submission(entry: Path, wanted: list[str]) -> dict[str, bytes]:
    """The exercise files of one submission (a folder or a zip): at their relative path, or
    else by name anywhere in it; a file found twice by name only is not taken."""
    if entry.is_dir():
        found = {p.relative_to(entry).as_posix(): p.read_bytes() for p in entry.rglob("*.py")}
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


def snapshot(paths: list[Path]) -> dict[Path, bytes]:
    """Every file under ``paths``, by path, with its bytes."""
    files = {}
    for path in paths:
        for p in [path] if path.is_file() else sorted(path.rglob("*")):
            if p.is_file() and not p.is_symlink() and "__pycache__" not in p.parts:
                files[p] = p.read_bytes()
    return files


def restore(before: dict[Path, bytes], paths: list[Path]) -> list[str]:
    """Undo any change to the files of ``before`` under ``paths``; the paths that had changed."""
    now = snapshot(paths)
    changed = sorted(str(p) for p in before.keys() | now.keys() if before.get(p) != now.get(p))
    for p in now.keys() - before.keys():
        p.unlink()
    for p, data in before.items():
        if now.get(p) != data:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return changed


def limits(memory_gb: float):
    """The child's set-up: its own process group, and at most ``memory_gb`` of address space."""

    def apply() -> None:
        os.setsid()
        size = int(memory_gb * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return apply


def run_one(tree: Path, argv: list[str], timeout: float, memory_gb: float, log: Path) -> str:
    """Run ``sanity_check.py`` in ``tree``; "" when it finished, else what happened."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env |= {"HOME": str(tree), "TMPDIR": str(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    with open(tree / ".output", "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "sanity_check.py", *argv],
            cwd=tree,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=limits(memory_gb),
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    with open(tree / ".output", "rb") as out:
        text = out.read(OUTPUT_LIMIT).decode("utf-8", errors="replace")
    log.write_text(text, encoding="utf-8")
    if code is None:
        return f"timeout after {timeout:g} s"
    return "" if code in (0, 1) else f"exited with code {code}"


def exercise_points(results: dict) -> dict[str, float]:
    """Each exercise's points from a results.json: the scores of its own checks."""
    exercise_of = {c.name: c.exercises[0] for c in CHECKS if len(c.exercises) == 1}
    points: dict[str, float] = {}
    for test in results.get("tests", []):
        if (exercise := exercise_of.get(test.get("name"))) is not None:
            points[exercise] = points.get(exercise, 0.0) + float(test.get("score", 0.0))
    return points


def grade_one(name: str, files: dict[str, bytes], pristine: dict[str, bytes], args) -> Graded:
    """One submission, in a scratch tree of its own (see the module docstring)."""
    row = Graded(name)
    if not files:
        row.status, row.notes = "no exercise files found", ["nothing graded"]
        return row
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        tree = Path(scratch) / "tree"
        for rel, data in (pristine | files).items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
        argv = ["--results-json", "results.json", "--points", str(args.points)]
        argv += [f"--only={component}" for component in args.only]
        log = args.results / f"{name}.log"
        row.status = run_one(tree, argv, args.timeout, args.memory_gb, log) or "graded"
        results_file = tree / "results.json"
        if row.status == "graded" and not results_file.is_file():
            row.status = "no results (the grader did not finish)"
        if results_file.is_file() and row.status == "graded":
            results = json.loads(results_file.read_text(encoding="utf-8"))
            row.points = exercise_points(results)
            shutil.copyfile(results_file, args.results / f"{name}.json")
    return row


def grade(args) -> list[Graded]:
    """Every submission, in name order."""
    wanted = exercise_files()
    entries = sorted(p for p in args.submissions.iterdir() if p.is_dir() or p.suffix == ".zip")
    submissions = {}
    for entry in entries:  # everything read before anything runs
        try:
            submissions[entry.stem] = read_submission(entry, wanted)
        except (OSError, zipfile.BadZipFile) as err:
            submissions[entry.stem] = {}
            print(f"{entry}: not readable ({err})", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="grade-pristine-") as folder:
        write_student_tree(Path(folder) / "tree")
        pristine = {
            p.relative_to(Path(folder) / "tree").as_posix(): data
            for p, data in snapshot([Path(folder) / "tree"]).items()
        }
    watched = [PROJECT_ROOT / g for g in GRADER] + [args.submissions, args.points]
    before = snapshot(watched)
    rows = []
    for name, files in submissions.items():
        print(f"grading {name}", file=sys.stderr, flush=True)
        row = grade_one(name, files, pristine, args)
        if changed := restore(before, watched):
            row.notes.append(f"wrote outside its folder (undone): {changed[0]}")
        rows.append(row)
    return rows


def write_grades(rows: list[Graded], exercises: list[str], out: Path) -> None:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["student", "status", "total", *exercises, "notes"])
    for row in rows:
        points = [f"{row.points.get(e, 0.0):g}" for e in exercises]
        total = f"{sum(row.points.values()):g}"
        writer.writerow([row.student, row.status, total, *points, "; ".join(row.notes)])
    atomic_write_text(out, text.getvalue())


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(prog="python -m course.grade", description=__doc__.split("\n")[0])
    p.add_argument("submissions", metavar="SUBMISSIONS_DIR", type=nonempty_path)
    p.add_argument("--out", type=nonempty_path, required=True, help="the CSV to write")
    p.add_argument("--points", type=nonempty_path, default=POINTS, help="points per exercise")
    p.add_argument("--only", action="append", default=[], help="grade these checks only")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per submission")
    p.add_argument("--memory_gb", type=float, default=8.0, help="address space per submission")
    args = p.parse_args(argv)
    if not args.submissions.is_dir():
        p.error(f"SUBMISSIONS_DIR {args.submissions}: not a folder")
    exercises = sorted({e for c in CHECKS for e in c.exercises})
    try:
        read_points(args.points, exercises)
    except ValueError as err:
        p.error(f"--points: {err}")
    args.points = args.points.resolve()
    args.results = args.out.parent / f"{args.out.stem}-results"
    args.results.mkdir(parents=True, exist_ok=True)
    rows = grade(args)
    write_grades(rows, exercises, args.out)
    print(f"wrote {args.out} ({len(rows)} students) and {args.results}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
