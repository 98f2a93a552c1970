"""How long a student waits for the grader's feedback: ``python sanity_check.py --only EXERCISE``
for each exercise, then the whole ``python sanity_check.py``, each a fresh process in a student
tree with every exercise solved (so every check runs to PASS, as for a student who finished).

Each command runs ``--repeats`` times (its median and minimum wall clock are kept); a bare
``python -c "import torch"`` is timed before each, to say how much of a wait is the interpreter
and torch starting. Targets: 5 s per exercise, 30 s for the whole check. Writes
benchmarks/results/student-check-times.md. Run it on a quiet machine:

    python benchmarks/student_check_times.py                     # every exercise, twice each
    python benchmarks/student_check_times.py --only attention --repeats 1 --out /tmp/sct.md
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

EXERCISE_TARGET_S = 5.0
WHOLE_TARGET_S = 30.0
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
IMPORT_TORCH = ("-c", "import torch")


def solved_student_tree(out: Path) -> Path:
    """The scaffold's student tree with every exercise's solution kept (``--keep`` of them all),
    its Python compiled once by an untimed ``sanity_check.py --list``, as after a student's first
    run. No data files: the checks read the packaged checkpoint and sanity_check_reference.pt."""
    from course.authoring import scaffold

    scaffold.write_student_tree(out, remove=[])
    listed = subprocess.run(
        [sys.executable, "sanity_check.py", "--list"], cwd=out, capture_output=True, text=True
    )
    if listed.returncode != 0:
        raise SystemExit(f"sanity_check.py --list failed in the student tree:\n{listed.stderr}")
    return out


def exercise_ids(only: list[str]) -> list[str]:
    """The scaffold's exercise ids, in its order (those in ``only`` when given)."""
    from course.authoring import scaffold

    ids = list(dict.fromkeys(scaffold.find_exercises()))
    unknown = [name for name in only if name not in ids]
    if unknown:
        raise SystemExit(f"--only {unknown[0]}: unknown exercise; the exercises: {', '.join(ids)}")
    return [name for name in ids if name in only] if only else ids


def child_env(threads: int | None) -> dict[str, str]:
    """This process's environment; with ``threads``, every thread variable torch reads set."""
    env = dict(os.environ)
    if threads is not None:
        env.update({name: str(threads) for name in THREAD_VARIABLES})
    return env


def timed(args: tuple[str, ...], tree: Path, env: dict[str, str]) -> float:
    """Wall-clock seconds of ``python ARGS`` run in ``tree``; a failure stops the benchmark."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0 or (args[0] == "sanity_check.py" and ", 0 failed" not in done.stdout):
        output = (done.stdout + done.stderr)[-2000:]
        raise SystemExit(f"python {' '.join(args)} failed ({done.returncode}):\n{output}")
    return seconds


def measure(label: str, args: tuple[str, ...], tree: Path, env: dict, repeats: int) -> dict:
    """One bare torch import, then ``repeats`` runs of ``python ARGS``: the seconds of each."""
    torch_s = timed(IMPORT_TORCH, tree, env)
    runs = [timed(args, tree, env) for _ in range(repeats)]
    row = {"label": label, "runs": runs, "torch": torch_s}
    row.update(median=_common.median(runs), min=min(runs))
    print(
        f"{label}: median {row['median']:.2f} s, min {row['min']:.2f} s over {repeats} run(s); "
        f"import torch {torch_s:.2f} s",
        file=sys.stderr,
        flush=True,
    )
    return row


def exercise_table(rows: list[dict]) -> str:
    header = ["exercise", "median s", "min s", f"over the {EXERCISE_TARGET_S:.0f} s target?"]
    cells = [
        [f"`{r['label']}`", f"{r['median']:.2f}", f"{r['min']:.2f}"]
        + ["yes" if r["median"] > EXERCISE_TARGET_S else "no"]
        for r in rows
    ]
    over = sum(r["median"] > EXERCISE_TARGET_S for r in rows)
    return (
        "## Each exercise: `python sanity_check.py --only EXERCISE`\n\n"
        + _common.table(header, cells)
        + f"\n\n{over} of {len(rows)} exercise(s) over the {EXERCISE_TARGET_S:.0f} s target "
        "(by the median)."
    )


def whole_line(whole: dict) -> str:
    verdict = "over" if whole["median"] > WHOLE_TARGET_S else "within"
    return (
        "## The whole check: `python sanity_check.py`\n\n"
        f"Median {whole['median']:.2f} s, min {whole['min']:.2f} s over {len(whole['runs'])} "
        f"run(s): {verdict} the {WHOLE_TARGET_S:.0f} s target."
    )


def torch_line(rows: list[dict], whole: dict) -> str:
    imports = [r["torch"] for r in rows + [whole]]
    start = _common.median(imports)
    shares = [100 * min(start, r["median"]) / r["median"] for r in rows]
    low, high = (f"{x:.0f}" for x in (min(shares), max(shares)))
    share = f"{low}%" if low == high else f"{low}–{high}%"
    return (
        "## Where the time goes: the interpreter and torch starting\n\n"
        f'A bare `python -c "import torch"`, timed once before each item above: median '
        f"{start:.2f} s, {min(imports):.2f}–{max(imports):.2f} s over {len(imports)} import(s). "
        f"That start-up is {share} of an exercise's median wait and "
        f"{100 * min(start, whole['median']) / whole['median']:.0f}% of the whole check's; "
        "the rest is the checks' own imports, loading the checkpoint and running the checks."
    )


def cpu_model() -> str:
    """The CPU's model name (``lscpu``, else /proc/cpuinfo), or platform.processor()."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def short_commit() -> str:
    """``git rev-parse --short HEAD``, plus " + changes" when the working tree is dirty."""
    if "MINBERT_COMMIT" in os.environ:
        return f"{os.environ['MINBERT_COMMIT']} (a copy of the tree)"

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=_common.ROOT, capture_output=True, text=True, check=True
        )
        return done.stdout.strip()

    try:
        head, status = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + (" + changes" if status else "")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="EXERCISE",
        help="time only this exercise (repeatable; default: every exercise of the scaffold)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        metavar="N",
        help="runs of each command, median and min kept (2)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="set OMP_NUM_THREADS and the like for each run (default: torch's own threads)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="FILE",
        default=_common.RESULTS_DIR / "student-check-times.md",
        help="the Markdown results file (default: benchmarks/results/student-check-times.md)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be at least 1")
    args.only = list(dict.fromkeys(args.only))
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    threads = "torch's default threads (one per core), as a student gets"
    if args.threads is not None:
        threads = f"{args.threads} thread(s), set through {', '.join(THREAD_VARIABLES)}"
    report = _common.Report(
        "student-check-times",
        "How long a student waits for the grader",
        "The wall clock of `python sanity_check.py --only EXERCISE` for each exercise, then of "
        "the whole `python sanity_check.py`, each a fresh process of the same interpreter, run "
        "in a student tree written by the scaffold with every exercise's solution kept (every "
        "check passes, as for a student who finished) and compiled once by an untimed "
        f"`python sanity_check.py --list`; {args.repeats} run(s) of each, {threads}. "
        'A bare `python -c "import torch"` is timed once before each item. '
        f"CPU model: {cpu_model()}.",
    )
    report.commit = short_commit()
    env = child_env(args.threads)
    exercises = exercise_ids(args.only)
    with tempfile.TemporaryDirectory(prefix="student-check-times-") as scratch:
        tree = solved_student_tree(Path(scratch) / "student")
        rows = [
            measure(name, ("sanity_check.py", "--only", name), tree, env, args.repeats)
            for name in exercises
        ]
        whole = measure("whole check", ("sanity_check.py",), tree, env, args.repeats)
    report.add(exercise_table(rows))
    report.add(whole_line(whole))
    report.add(torch_line(rows, whole))
    report.write(args.out)


if __name__ == "__main__":
    main()
