"""Grade a class: one CSV row and one Gradescope results.json per student, computed where no
student code runs.

    python -m course.grading.grade SUBMISSIONS_DIR --out grades.csv [--only adamw] [--timeout 60]

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import resource
import shlex
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm

from course.authoring.scaffold import (
    PROJECT_ROOT,
    ScaffoldError,
    find_exercises,
    write_student_tree,
)
from course.checks import CHECKS
from course.fail_page import page
from course.gradescope import POINTS, read_points, results_json
from course.grading import landlock, sandbox, seccomp
from course.grading.inert import csv_cell
from course.grading.intake import COLLIDES, Submission, list_class
from course.grading.judge import Limits, judge_submission
from course.grading.report import GRADED, write_report
from course.registry import WITHHELD, Context, format_result, select
from minbert.checkpoint import atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command

OUTPUT_LIMIT = 64_000  # bytes of a submission's output kept in its log
REFERENCE = PROJECT_ROOT / "sanity_check_reference.pt"  # the judge's, never a submission's
# The judge's names for mistakes nobody listed (course/authoring/operator_mistakes.py): they quote
# the reference's code, so no runner and no student tree has them; graded without where missing.
OPERATOR_MISTAKES = PROJECT_ROOT / "course" / "authoring" / "operator_mistakes.pt"


@dataclass
class Graded:
    """One student's row."""

    student: str
    status: str = "graded"
    points: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    withheld: list[str] = field(default_factory=list)  # exercises the grader could not score


def exercise_files(root: Path = PROJECT_ROOT) -> list[str]:
    """The files that hold exercises, relative to the project root."""
    return sorted({r.path for regions in find_exercises(root).values() for r in regions})


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
        if not submission.problem.startswith(COLLIDES):  # both rows, no shared results file
            said = {"score": 0.0, "output": f"{row.status}: nothing graded", "tests": []}
            atomic_write_text(results_file, json.dumps(said, indent=2) + "\n")
        return row
    with tempfile.TemporaryDirectory(prefix="grade-") as scratch:
        tree = Path(scratch) / "tree"
        for rel, data in (pristine | submission.files).items():
            (tree / rel).parent.mkdir(parents=True, exist_ok=True)
            (tree / rel).write_bytes(data)
        limits = Limits(args.timeout, args.memory_gb, args.level, args.student_timeout)
        log = sandbox.Output(OUTPUT_LIMIT)
        verdict = judge_submission(tree, args.checks, args.ctx, args.private, limits, log)
        printed = log.text()
    width = max(len(c.name) for c in args.checks)
    lines = [(result, format_result(result, width)) for result in verdict.results]
    report = "\n".join(line for _, line in lines)
    results = results_json(lines, args.points_table)
    atomic_write_text(results_file, json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(args.results / f"{submission.name}.log", f"{printed}\n{report}\n")
    picture = page(verdict.results, f"{submission.name}: the checks")  # maps of the FAILs
    atomic_write_text(args.results / f"{submission.name}.html", picture)
    row.points = exercise_points(results)
    row.notes += verdict.notes + diagnoses_of(verdict.results)
    row.withheld = sorted(
        {e for r in verdict.results if r.status == WITHHELD for e in r.check.exercises}
    )
    if verdict.faults:
        row.status = f"grader fault: {verdict.faults[0]} (see {submission.name}.log)"
    return row


def diagnoses_of(results: list) -> list[str]:
    """ "<check's component>: <diagnosis>" for each failed check whose mistake the judge named,
    once each: the notes column says why, as the student's report does."""
    found = []
    for result in results:
        note = f"{result.check.component}: {result.diagnosis}"
        if result.diagnosis and note not in found:
            found.append(note)
    return found


def record_grading(args) -> None:
    """When, at which commit of the grader and with which points file the class was graded,
    beside its CSV (``report.GRADED``: the class report says it)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    said = {
        "graded_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit,
        "points": str(args.points),
    }
    atomic_write_text(args.out.with_name(args.out.stem + GRADED), json.dumps(said, indent=2) + "\n")


def header(exercises: list[str]) -> list[str]:
    """The first row of the grader's CSV."""
    return ["student", "status", "total", *exercises, "notes"]


def row_cells(row: Graded, exercises: list[str]) -> list[str]:
    """One student's row of the CSV, every text cell inert (``course/grading/inert.py``)."""
    points = ["withheld" if e in row.withheld else f"{row.points.get(e, 0.0):g}" for e in exercises]
    total = f"{sum(row.points.values()):g}"
    notes = csv_cell("; ".join(row.notes))
    return [csv_cell(row.student), csv_cell(row.status), total, *points, notes]


def write_grades(
    rows: list[Graded], exercises: list[str], out: Path, kept: Sequence[list[str]] = ()
) -> None:
    """The CSV, written whole and atomically (a temporary file beside it, then a rename): the
    ``kept`` rows of an earlier grading, each replaced by its student's new row where there is
    one, then the new rows of the others; a withheld exercise says so."""
    new = {cells[0]: cells for cells in (row_cells(row, exercises) for row in rows)}
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header(exercises))
    writer.writerows([new.pop(cells[0], cells) for cells in kept if cells])
    writer.writerows(new.values())
    atomic_write_text(out, text.getvalue())


def grades_rows(path: Path) -> list[list[str]] | None:
    """The rows of ``path`` (its header first) where it is a CSV this grader wrote: a header
    ``student,status,total,...,notes`` (a spreadsheet's byte-order mark allowed); else None."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if not rows or rows[0][:3] != ["student", "status", "total"] or rows[0][-1] != "notes":
        return None
    return rows


def check_out(args) -> None:
    """An existing --out: a CSV of this grader (its other students' rows kept when --student
    grades some again), or replaced with --overwrite; a UsageError otherwise."""
    args.kept = []
    if not (args.out.exists() or args.out.is_symlink()):
        return
    rows = grades_rows(args.out)
    if rows is None and not args.overwrite:
        raise UsageError(
            f"--out {args.out} exists and is not a grades CSV of python -m course.grading.grade; "
            "pass --overwrite to replace it, or give another name"
        )
    if rows is None or not args.student:
        return
    if rows[0] != header(args.exercises):
        raise UsageError(
            f"--out {args.out}: its columns ({', '.join(rows[0][3:-1])}) are not this grader's "
            "exercises; grade the whole class into it, or give another --out"
        )
    args.kept = rows[1:]


def choose_entries(args) -> None:
    """``args.entries``: the entries of SUBMISSIONS_DIR to grade (``--student``'s, each one
    found there); a UsageError for an empty class or a name it does not hold."""
    entries = list_class(args.submissions)
    if not entries:
        raise UsageError(
            f"SUBMISSIONS_DIR {args.submissions}: no submissions in it (it must hold a folder "
            "or a .zip per student)"
        )
    names = {entry.name for entry in entries}
    for name in args.student:
        if name in names:
            continue
        said = f"--student {shlex.quote(name)}"
        if not name.strip():
            raise UsageError(
                f"{said}: an empty name; give a student's name as SUBMISSIONS_DIR has it"
            )
        if name.lower().endswith(".zip") and name[:-4] in names:
            raise UsageError(f"{said}: a zip's file name; give the student's name, {name[:-4]}")
        some = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
        raise UsageError(
            f"{said}: no submission of that name in SUBMISSIONS_DIR {args.submissions} "
            f"(it holds {len(names)}: {some})"
        )
    args.entries = [e for e in entries if not args.student or e.name in args.student]


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
    """--out and its results folder: a file path, writable, outside SUBMISSIONS_DIR, never over
    a file of the user's (``check_out``); the students to grade (``choose_entries``)."""
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
    none_of_another_user(args)
    check_out(args)
    choose_entries(args)
    writable_folder(args.out.parent, "--out")
    args.results.mkdir(exist_ok=True)
    none_of_another_user(args)  # again: nobody put one there meanwhile
    writable_folder(args.results, "--out's results folder")


def none_of_another_user(args) -> None:
    """Nothing the grader writes goes through another user's hands. Where every user may write
    in --out's folder: it must be sticky (as /tmp: nobody replaces another's files there), and
    neither --out nor its results folder may be another user's file, nor the results folder a
    link (the grader makes that folder)."""
    folder = os.stat(args.out.parent)
    if not folder.st_mode & stat.S_IWOTH:
        return
    if not folder.st_mode & stat.S_ISVTX:
        raise UsageError(
            f"--out {args.out}: every user may write in {args.out.parent}; write the grades "
            "in a folder of your own"
        )
    for path, what in ((args.out, "--out"), (args.results, "--out's results folder")):
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            continue
        if found.st_uid != os.geteuid():
            raise UsageError(f"{what} {path} belongs to another user (uid {found.st_uid})")
        if stat.S_ISLNK(found.st_mode) and path == args.results:
            raise UsageError(f"{what} {path} is a link; the grader writes only a folder it made")


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
    p = ArgumentParser(prog="python -m course.grading.grade", description=__doc__.split("\n")[0])
    p.add_argument("submissions", metavar="SUBMISSIONS_DIR", type=nonempty_path)
    p.add_argument("--out", type=nonempty_path, required=True, help="the CSV file to write")
    p.add_argument("--points", type=nonempty_path, default=POINTS, help="points per exercise")
    p.add_argument("--only", action="append", default=[], help="grade these checks only")
    p.add_argument("--timeout", default="60", help="seconds per check (finite, > 0)")
    p.add_argument("--memory_gb", default="8", help="GiB of address space per runner")
    p.add_argument(
        "--student_timeout", default="600", help="seconds for all of one student's checks"
    )
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="students graded at once")
    p.add_argument(
        "--student",
        metavar="NAME",
        action="append",
        default=[],
        help="grade only this entry of SUBMISSIONS_DIR (repeatable): to grade some again",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out that is not a grades CSV of this grader",
    )
    p.add_argument(
        "--hide",
        metavar="FOLDER",
        action="append",
        type=nonempty_path,
        default=[],
        help="a folder of yours the runners must not read where the machine has no namespaces "
        "(with namespaces they see only Python, its packages and their copy); repeatable",
    )
    p.add_argument(
        "--trusted",
        action="store_true",
        help="run the submissions uncontained, as plain processes of your user, whatever the "
        "machine offers (only for code you trust); without it the grader refuses where it cannot "
        "contain them",
    )
    return p


PROBED_BELOW_GB = 2.0  # a --memory_gb under this is tried first: torch and the checks need ~1


def runner_fits(memory_gb: float) -> None:
    """A UsageError where ``memory_gb`` of address space is too little for a runner to start
    (Python, torch and the checks imported): every runner would fail to start, which reads as
    the grader's fault, and grading again the same way fails the same way. Tried only below
    ``PROBED_BELOW_GB`` (a few seconds)."""
    if memory_gb >= PROBED_BELOW_GB:
        return
    limit = int(memory_gb * 2**30)
    code = f"import sys; sys.path.insert(0, {str(PROJECT_ROOT)!r}); import torch, course.checks"
    tried = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code],
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    if tried.returncode != 0:
        said = (tried.stderr.strip().splitlines() or ["no message"])[-1][:200]
        raise UsageError(
            f"--memory_gb {memory_gb:g}: too little for a runner to start (Python, torch and "
            f"the checks: {said}); give {PROBED_BELOW_GB:g} or more (the default is 8)"
        )


def set_up(argv: list[str] | None) -> object:
    """The parsed flags, every one checked before anything runs (a UsageError otherwise)."""
    args = build_parser().parse_args(argv)
    args.timeout = positive("--timeout")(args.timeout)
    args.memory_gb = positive("--memory_gb")(args.memory_gb)
    runner_fits(args.memory_gb)
    args.student_timeout = positive("--student_timeout")(args.student_timeout)
    if args.jobs < 1:
        raise UsageError(f"--jobs {args.jobs}: give a whole number >= 1")
    if not args.submissions.is_dir():
        raise UsageError(f"SUBMISSIONS_DIR {args.submissions}: not a folder")
    for folder in args.hide:
        if not folder.is_dir():
            raise UsageError(f"--hide {folder}: not a folder")
    exercises = args.exercises = sorted({e for c in CHECKS for e in c.exercises})
    try:
        args.points_table = read_points(args.points, exercises)
    except ValueError as err:
        raise UsageError(f"--points: {err}") from None
    if any(not name.strip() for name in args.only):
        raise UsageError("--only '': give a check or an exercise (python sanity_check.py --list)")
    try:
        args.checks = select(CHECKS, args.only) if args.only else CHECKS
    except ValueError as err:
        raise UsageError(f"--only: {err}") from None
    args.results = args.out.parent / f"{args.out.stem}-results"
    check_paths(args)
    args.level = None if args.trusted else sandbox.containment()
    if args.level is None and not args.trusted:
        raise UsageError(
            "this machine offers no containment for submissions (not root, and no user "
            "namespaces): grade as root or where unshare works, or pass --trusted to run them "
            "as plain processes of your user"
        )
    if args.level in (sandbox.ROOT, sandbox.OWN_USER):
        try:
            sandbox.UserIds()
        except sandbox.NoUserId as err:
            raise UsageError(f"the runners cannot have user ids of their own: {err}") from None
    args.ctx = Context(None, REFERENCE, OPERATOR_MISTAKES if OPERATOR_MISTAKES.is_file() else None)
    mine = [PROJECT_ROOT, args.submissions, args.out.parent, args.points.parent, *args.hide]
    if args.level == sandbox.OWN_USER:
        must_be_private(mine)
        runnable_by_others(mine)
    elif args.level == sandbox.ROOT:
        python_for_runners(mine, sandbox.ROOT)
    if args.level in (sandbox.ROOT, sandbox.USER_NAMESPACE):
        system_v_ipc_closes(args.level)
    args.private = [*mine, args.results, Path.home(), Path.cwd()]
    return args


def system_v_ipc_closes(level: str) -> None:
    """With namespaces the jail closes System V IPC in each runner's IPC namespace, so that no
    memory kept there escapes the watch; a kernel that will not let it is refused (fail closed)
    here, once, rather than as a runner that never starts for every student."""
    if (refused := sandbox.system_v_ipc_refused(level)) is not None:
        raise UsageError(
            f"the kernel will not close System V IPC in a runner's own IPC namespace ({refused}): "
            "memory a runner kept there would escape --memory_gb; grade as root without "
            "namespaces (MINBERT_CONTAINMENT='own user'), or pass --trusted to run the "
            "submissions uncontained"
        )


def runnable_by_others(private: list[Path]) -> None:
    """Without namespaces the runners, users of their own, must reach Python and its packages;
    without Landlock they could also read every file other users may: refused (fail closed)."""
    python_for_runners(private, sandbox.OWN_USER)
    if (refused := seccomp.works()) is not None:
        raise UsageError(
            f"no namespaces here, and the seccomp filter that closes a runner's sockets, System V "
            f"IPC and memfd cannot be installed ({refused}); grade where unshare works, or pass "
            "--trusted to run the submissions uncontained"
        )
    if landlock.abi() < 1:
        raise UsageError(
            "no namespaces and no Landlock here: a runner, a user of its own, could read every "
            "file every user may read; grade where either works, or pass --trusted to run the "
            "submissions uncontained"
        )


def python_for_runners(private: list[Path], level: str) -> None:
    """The runners, users of their own, run this Python: refused in one line where one of its
    folders is closed to other users (a .venv made under a umask of 077, one inside /root)."""
    closed = sandbox.python_closed_to_runners(private, level)
    if closed is None:
        return
    if level == sandbox.OWN_USER:
        raise UsageError(
            f"{closed} is closed to other users, and this machine has no namespaces: the "
            "runners (users of their own) cannot run Python from there; grade with a Python "
            "every user can reach (a venv outside /root, the system's)"
        )
    raise UsageError(
        f"{closed} is closed to other users, and the runners (users of their own) run Python "
        f"from there: open it (chmod -R o+rX {closed}), or make the .venv again with make "
        "(it makes one every user can read, whatever the umask)"
    )


def must_be_private(paths: list[Path]) -> None:
    """Without namespaces a runner is just another user: what it must not read has to be
    closed to other users (the Gradescope autograder closes its own)."""
    for path in paths:
        if not sandbox.unreachable(path):
            raise UsageError(
                f"{path} is readable by every user, and this machine has no namespaces (the "
                f"runners run as users of their own): close it (chmod o-rwx {path}) or grade "
                "where unshare works"
            )


class Class:
    """The rows of a class graded so far, in name order, the CSV rewritten after each."""

    def __init__(self, size: int, args) -> None:
        self.rows: list[Graded | None] = [None] * size
        self.args = args
        self.lock = threading.Lock()

    def add(self, index: int, row: Graded) -> None:
        with self.lock:
            self.rows[index] = row
            write_grades(self.done(), self.args.exercises, self.args.out, self.args.kept)

    def done(self) -> list[Graded]:
        return [row for row in self.rows if row is not None]


def grade(args) -> list[Graded]:
    """Every submission, ``--jobs`` at once, each read only when it is graded; a progress bar
    over the class; the CSV rewritten after each."""
    entries = args.entries
    if args.level is None:
        print("warning: --trusted: submissions run uncontained", file=sys.stderr)
    pristine, wanted = pristine_tree(), exercise_files()
    graded = Class(len(entries), args)
    sandbox.STOPPING.clear()  # a grading before this one in the process may have been stopped

    def one(index: int) -> None:
        graded.add(index, grade_one(entries[index].read(wanted), pristine, args))

    bar = tqdm(total=len(entries), unit="student", desc="grading", file=sys.stderr)
    with ThreadPoolExecutor(max_workers=min(args.jobs, max(len(entries), 1))) as pool:
        try:
            for future in as_completed([pool.submit(one, i) for i in range(len(entries))]):
                future.result()
                bar.update()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            sandbox.stop_all()
            raise
        finally:
            bar.close()
    write_grades(graded.done(), args.exercises, args.out, args.kept)
    return graded.done()


def refusal_of_faults(rows: list[Graded], args) -> str:
    """What to re-run when the grader lost runners (a withheld check), or ""."""
    faulted = [r.student for r in rows if r.withheld]
    if not faulted:
        return ""
    again = " ".join(f"--student {shlex.quote(name)}" for name in faulted)
    return (
        f"grader fault for {len(faulted)} student(s) ({', '.join(faulted)}): their withheld "
        f"checks are not scored; grade them again with: python -m course.grading.grade "
        f"{shlex.quote(str(args.submissions))} --out {shlex.quote(str(args.out))} {again}"
    )


def main(argv: list[str] | None = None) -> int:
    faults = []

    def body() -> None:
        args = set_up(argv)
        rows = grade(args)
        record_grading(args)
        page, _ = write_report(args.out, args.points_table)
        print(f"wrote {args.out} ({len(rows)} students), {args.results}/ and {page}")
        faults.append(refusal_of_faults(rows, args))

    code = run_command(
        body, "every student graded so far has their row in --out and their results file"
    )
    if code == 0 and faults and faults[0]:
        print(f"error: {faults[0]}", file=sys.stderr)
        return 3
    return code


if __name__ == "__main__":
    sys.exit(main())
