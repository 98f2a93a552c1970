"""The README's first training command, run and timed: the quick start's run of under a minute on
2 CPU cores (an adapter per task on the frozen packaged checkpoint, trained on 400 examples of
each task for one epoch), so that the README's figures for it are measured, not typed.

Each repeat runs the command as the README shows it, in a fresh process, with its run folder a
scratch folder instead of ``runs/first`` (which a reader's own first run writes); it records the
wall-clock, the CPU seconds (user + system, of the process and its threads), the evaluation line
and the ``done: {...}`` line the run prints, and the dev scores of its metrics.jsonl. Writes
benchmarks/results/first-run.md.

    python benchmarks/first_run.py                 # two repeats
    python benchmarks/first_run.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
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
SCORES = ("sst", "para", "sts", "overall")


def readme_command() -> str:
    return "python " + shlex.join(FIRST_RUN)


def run_once(out_dir: Path) -> dict:
    """One run of the command into ``out_dir``: its seconds, CPU seconds, printed lines, scores."""
    argv = list(FIRST_RUN)
    argv[argv.index("--out_dir") + 1] = str(out_dir)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *argv], cwd=_common.ROOT, capture_output=True, text=True, check=False
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


def report_runs(runs: list[dict]) -> str:
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
            f"The command: `{readme_command()}` (each repeat with `--out_dir` a scratch folder).",
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
    args = parser.parse_args(argv)
    if args.repeats < 1:
        raise SystemExit("--repeats must be at least 1")
    report = _common.Report(
        "first-run",
        "The README's first run",
        "The quick start's first command, run as a reader runs it (torch's default threads: one "
        "per core). The machine may be shared with other jobs, so the wall-clock is noisy: the "
        "load average at the start and end is in the header. The CPU seconds are those of the "
        "run's process; its threads wait busily for a core another job holds, so they grow "
        "with the load too.",
    )
    runs = []
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as scratch:
            runs.append(run_once(Path(scratch) / "first"))
        print(f"run {i + 1}: {runs[-1]['seconds']:.1f} s {runs[-1]['scores']}", flush=True)
    report.add(report_runs(runs))
    report.write()


if __name__ == "__main__":
    main()
