"""Grading a class, timed: seconds per honest submission with every check, one student at a time
(``--jobs 1``) and several at once (``--jobs N``, the cores by default), and the speed-up, on the
machine it runs on. The class is N copies of this project's own solution (each exercise file
copied), graded with ``python -m course.grading.grade`` as an instructor runs it, at the best
containment this machine offers. Writes benchmarks/results/grade-class.md.

    python benchmarks/grade_class.py                   # a class of 4, --jobs 1 then the cores
    python benchmarks/grade_class.py --students 6 --jobs 3
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

sys.path.insert(0, str(_common.ROOT))

from course.grading import sandbox  # noqa: E402 (the project's modules, once its root is on the path)
from course.grading.grade import exercise_files  # noqa: E402


def honest_class(folder: Path, students: int) -> None:
    """``students`` folders, each holding this project's exercise files (the solution)."""
    for i in range(1, students + 1):
        for rel in exercise_files():
            target = folder / f"student{i:02d}" / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(_common.ROOT / rel, target)


def grade_once(folder: Path, jobs: int) -> tuple[float, dict[str, str]]:
    """Wall-clock seconds of grading the class with ``--jobs``, and each student's total."""
    out = folder.parent / f"grades-jobs{jobs}.csv"
    command = [sys.executable, "-m", "course.grading.grade", str(folder), "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(
        [*command, "--jobs", str(jobs)], cwd=_common.ROOT, capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"grading failed ({done.returncode}):\n{done.stderr[-2000:]}")
    totals = {r["student"]: r["total"] for r in csv.DictReader(out.open(encoding="utf-8"))}
    return seconds, totals


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=4, help="honest submissions (default 4)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="the parallel run")
    args = parser.parse_args(argv)
    if args.students < 1 or args.jobs < 1:
        raise SystemExit("--students and --jobs must be at least 1")
    report = _common.Report(
        "grade-class",
        "Grading a class",
        f"A class of {args.students} copies of the solution, every check, graded at the "
        f"containment level `{sandbox.containment()}`: first one student at a time, then "
        f"{args.jobs} at once. Each student's runner starts Python and torch anew; a fresh "
        "runner answers every check after one that failed (none here).",
    )
    rows, seconds = [], {}
    with tempfile.TemporaryDirectory(prefix="grade-class-") as scratch:
        folder = Path(scratch) / "class"
        honest_class(folder, args.students)
        for jobs in dict.fromkeys((1, args.jobs)):
            seconds[jobs], totals = grade_once(folder, jobs)
            per = seconds[jobs] / args.students
            rows.append([jobs, f"{seconds[jobs]:.1f}", f"{per:.1f}", sorted(set(totals.values()))])
            print(f"--jobs {jobs}: {seconds[jobs]:.1f} s, totals {totals}", flush=True)
    header = ["--jobs", "class wall-clock s", "s per submission", "totals"]
    speed_up = seconds[1] / seconds[args.jobs]
    report.add(_common.table(header, rows))
    report.add(f"Speed-up of `--jobs {args.jobs}` over `--jobs 1`: {speed_up:.2f}×.")
    report.write()


if __name__ == "__main__":
    main()
