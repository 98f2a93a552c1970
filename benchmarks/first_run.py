"""The README's first training command, run and timed, so that the README's figures for it are
measured, not typed: the quick start's run of under a minute on 2 CPU cores (an adapter per task on
the frozen packaged checkpoint, 400 examples of each task, one epoch); with ``--student``, the
student README's (course/authoring/student_readme.md), in a student tree with every exercise solved.

Each repeat runs the command as the README shows it, in a fresh process, with its run folder a
scratch folder instead of ``runs/first``; it records the wall-clock, the CPU seconds (user +
system, of the process and its threads), the lines the run prints last and its dev scores. Writes
benchmarks/results/first-run.md (``--student``: student-first-run.md).

    python benchmarks/first_run.py                          # two repeats
    python benchmarks/first_run.py --student --threads 1    # on a machine shared with others
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

# The command of the README's quick start, as a reader types it from the repository root.
FIRST_RUN = (
    "train_multitask.py",
    *("--option", "adapter", "--limit", "400", "--epochs", "1", "--out_dir", "runs/first"),
)
# The student README's first command: what a student tree trains once exercises 1-4, 13 and 16
# are written. Every weight trains (no plug-in exercise), the tasks take turns (round-robin: no
# sampler exercise) and a pair is one sequence (no pair-head exercise).
STUDENT_FIRST_RUN = (
    "train_multitask.py",
    *("--option", "finetune", "--sampling", "round-robin", "--limit", "400", "--epochs", "1"),
    *("--out_dir", "runs/first"),
)
SCORES = ("sst", "para", "sts", "overall")


def readme_command(student: bool = False) -> str:
    return "python " + shlex.join(STUDENT_FIRST_RUN if student else FIRST_RUN)


def solved_student_tree(out: Path) -> Path:
    """A student tree with every exercise's solution in place, its data files fetched as the
    student README says (``scripts/get_data.py``, here from the shared data folder)."""
    from course.authoring import scaffold

    scaffold.write_student_tree(out, remove=[])
    fetch = [sys.executable, "scripts/get_data.py", "--from", str(_common.DATA_DIR)]
    subprocess.run(fetch, cwd=out, capture_output=True, check=True)
    return out


def run_once(out_dir: Path, student_tree: Path | None = None) -> dict:
    """One run of the command into ``out_dir`` (in ``student_tree`` when given): its seconds, CPU
    seconds, printed lines, scores."""
    argv = list(STUDENT_FIRST_RUN if student_tree else FIRST_RUN)
    argv[argv.index("--out_dir") + 1] = str(out_dir)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    cwd = student_tree or _common.ROOT
    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"the first run failed ({done.returncode}):\n{done.stderr[-2000:]}")
    lines = done.stdout.splitlines()
    metrics = json.loads((out_dir / "metrics.jsonl").read_text().splitlines()[-1])
    return {
        "seconds": seconds,
        "cpu_seconds": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "printed": [line for line in lines if line.startswith(("step ", "done: "))],
        "scores": {name: metrics[name] for name in SCORES},
    }


def report_runs(runs: list[dict], student: bool = False) -> str:
    header = ["run", "wall-clock s", "CPU s (user + sys)", "sst acc", "para acc", "sts r"]
    rows = [
        [i, f"{r['seconds']:.1f}", f"{r['cpu_seconds']:.1f}"]
        + [f"{r['scores'][name]:.4f}" for name in ("sst", "para", "sts")]
        for i, r in enumerate(runs, 1)
    ]
    seconds = [r["seconds"] for r in runs]
    printed = "\n".join(f"    {line}" for line in runs[0]["printed"])
    return "\n".join(
        [
            f"The command: `{readme_command(student)}` (each repeat with `--out_dir` a scratch "
            "folder).",
            "",
            _common.table(header, rows),
            "",
            f"Wall-clock: median {_common.median(seconds):.1f} s, "
            f"{min(seconds):.1f}–{max(seconds):.1f} s over {len(runs)} runs; overall "
            f"{runs[0]['scores']['overall']:.4f}. What run 1 printed last (its evaluation, then "
            "its summary):",
            "",
            printed,
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2, help="runs of the command (default 2)")
    parser.add_argument(
        "--student",
        action="store_true",
        help="the student README's first command, in a student tree with every exercise solved",
    )
    _common.add_threads_flag(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    _common.set_threads(args.threads)
    if args.threads is not None:  # the command stays as typed; torch reads its threads here
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    threads = "torch's default threads: one per core"
    if args.threads is not None:
        threads = f"{args.threads} torch thread(s), set through OMP_NUM_THREADS"
    whose = "the student README's" if args.student else "the quick start's"
    report = _common.Report(
        "student-first-run" if args.student else "first-run",
        "The student README's first run" if args.student else "The README's first run",
        f"{whose[0].upper()}{whose[1:]} first command, run as a reader runs it ({threads})"
        + (" in a student tree with every exercise solved" if args.student else "")
        + ". The machine may be shared with other jobs, so the wall-clock is noisy: the "
        "load average at the start and end is in the header. The CPU seconds are those of the "
        "run's process; its threads wait busily for a core another job holds, so they grow "
        "with the load too.",
    )
    runs = []
    with tempfile.TemporaryDirectory() as work:
        tree = solved_student_tree(Path(work) / "student") if args.student else None
        for i in range(args.repeats):
            with tempfile.TemporaryDirectory() as scratch:
                runs.append(run_once(Path(scratch) / "first", tree))
            print(f"run {i + 1}: {runs[-1]['seconds']:.1f} s {runs[-1]['scores']}", flush=True)
    report.add(report_runs(runs, args.student))
    report.write()


if __name__ == "__main__":
    main()
