"""One call on a GPU machine, each stage on its own within a time budget (470 s in all):

    python benchmarks/gpu_check.py                    # on the GPU machine, from the repository root
    python benchmarks/gpu_check.py --dry_run          # the same stages on the CPU, tiny (a test)

0. wheel: the packaged checkpoint's wheels from ``.whl/``, when there, on PYTHONPATH;
1. graphed: the default 3-epoch command, ``--cuda_graphs on`` (auto stays off until measured);
2. eager: the same with ``--cuda_graphs off``; 3. plain-loop: the plain Hugging Face loop at the
   driver's settings (one epoch); 4. profile-graphed: ten graphed steps (launches, GPU idle);
5. gpu-tests: ``tests/driver/test_gpu.py``; 6. compiled: the Inductor path, for reference, if time
   is left. A stage that fails is recorded and the next runs; one that would not fit is skipped.

Writes gpu-check.md and gpu-check.json (each command's whole wall-clock, examples/s, dev scores,
the ratios side by side) into --results_dir and $OUT, with the command, commit and machine.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import _common

ROOT = _common.ROOT
SITE = "/tmp/site"


@dataclass
class Stage:
    """One command of the check: its estimate and cap (seconds) and what it reads after."""

    name: str
    argv: list[str]  # as typed from the repository root, starting with "python"
    estimate: float
    cap: float
    run_dir: str | None = None  # a driver or plain-loop run folder to read
    profile: str | None = None  # a step_profile.py JSON to read
    only_if_failed: str | None = None  # runs only when this stage failed
    result: dict = field(default_factory=dict)


def driver_flags(args: argparse.Namespace) -> list[str]:
    """The run's settings: the default run on the GPU, or a tiny one on the CPU (--dry_run)."""
    if not args.dry_run:
        return ["--device", "cuda", "--bf16", "--no_plots"]
    tiny = ["--device", "cpu", "--no_plots", "--threads", "1", "--epochs", "1"]
    tiny += ["--steps_per_epoch", "2", "--batch_size", "4", "--max_length", "32"]
    return tiny + ["--checkpoint", args.checkpoint, "--data_dir", args.data_dir, "--limit", "8"]


def stages(args: argparse.Namespace) -> list[Stage]:
    """Every stage's command and budget; --dry_run shrinks them to seconds on the CPU."""
    work, flags, dry = args.work_dir, driver_flags(args), args.dry_run
    fast = ["--compile_mode", "aot_eager"] if dry else []  # no code generation on a CPU test
    static = ["--pad_multiple", "16", "--compile", "--eval_batch_size", "256"]
    compiled = [*static, *fast]
    driver = ["python", "train_multitask.py", *flags, "--overwrite"]
    steps = ["--steps", "2"] if dry else ["--steps", "10"]
    # three rounds of the ten steps before timing: each task's graph captured (after two eager
    # steps of its shape) and replayed before anything is measured
    rounds = ["--warmup", "1" if dry else "3"]
    # auto is off on a GPU until this call measures the graphed step; on is refused on a CPU
    graphed = ["--cuda_graphs", "auto" if dry else "on"]
    # one epoch: its examples/s is what the comparison reads, in a third of the device time
    plain = ["--device", "cuda", "--bf16", "--epochs", "1"]
    if dry:
        plain = ["--epochs", "1", "--limit", "8", "--batch_size", "4", "--max_length", "32"]
        plain += ["--checkpoint", args.checkpoint, "--data_dir", args.data_dir, "--threads", "1"]

    def run(name: str, flags: list[str], folder: str, estimate: float, cap: float) -> Stage:
        """A driver run into ``work/folder``."""
        argv = [*driver, *flags, "--out_dir", f"{work}/{folder}"]
        return Stage(name, argv, estimate, cap, run_dir=f"{work}/{folder}")

    def profile(kind: str, extra: list[str], warmup: list[str]) -> Stage:
        """step_profile.py on ten steps of the run with ``extra`` flags."""
        out = f"{work}/profile-{kind}.json"
        argv = ["python", "benchmarks/step_profile.py", "--out", out, *steps, *warmup]
        argv += ["--", *flags]
        argv += [*extra, "--overwrite", "--out_dir", f"{work}/p-{kind}"]
        return Stage(f"profile-{kind}", argv, 45, 120, profile=out)

    # In order of importance, each with its estimate and cap (seconds), 470 s in all: the
    # graphed default run on a cold machine first, the eager run, the plain loop, the graphed
    # step's profile and the GPU tests; the Inductor path last, for reference, if time is left.
    return [
        run("graphed", graphed, "graphed", 60, cap=120),
        run("eager", ["--cuda_graphs", "off"], "eager", 100, cap=150),
        Stage(
            "plain-loop",
            [
                "python",
                "benchmarks/plain_loop.py",
                *plain,
                "--overwrite",
                "--out_dir",
                f"{work}/plain-loop",
            ],
            60,
            120,
            run_dir=f"{work}/plain-loop",
        ),
        profile("graphed", graphed, rounds),
        Stage(
            "gpu-tests",
            ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/driver/test_gpu.py"],
            90,
            150,
        ),
        run("compiled", compiled, "compiled", 150, cap=200),
    ]


def install_wheels(env: dict[str, str], dry_run: bool) -> dict:
    """Stage 1: the wheels of ``.whl/`` into /tmp/site, put on PYTHONPATH for later stages."""
    wheels = sorted(glob.glob(str(ROOT / ".whl" / "*.whl")))
    if not wheels:
        return {"status": "skipped", "detail": "no .whl/*.whl in the tree"}
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
    argv += ["--target", SITE, *wheels]
    if dry_run:  # a CPU test does not install anything
        return {"status": "skipped", "detail": f"dry run: would install {len(wheels)} wheel(s)"}
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        return {"status": "failed", "error": done.stderr[-2000:]}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SITE, env.get("PYTHONPATH")]))
    sys.path.insert(0, SITE)
    return {"status": "ok", "detail": ", ".join(Path(w).name for w in wheels)}


def run_command(stage: Stage, env: dict[str, str], timeout: float, log: Path) -> dict:
    """Run the stage's command (``python`` is this interpreter) in its own process group, killed
    whole at ``timeout``; its output goes to ``log``. Status ok, failed or timeout."""
    argv = [sys.executable, *stage.argv[1:]]
    started = time.time()
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
    seconds = round(time.time() - started, 1)
    status = "timeout" if code is None else ("ok" if code == 0 else "failed")
    result = {"status": status, "seconds": seconds, "exit_code": code}
    if status != "ok":
        result["error"] = log.read_text(encoding="utf-8", errors="replace")[-3000:]
    return result


def read_run(run_dir: Path) -> dict:
    """What a run folder says: its summary.json and its last evaluation."""
    found: dict = {}
    summary = run_dir / "summary.json"
    if summary.is_file():
        found["summary"] = json.loads(summary.read_text(encoding="utf-8"))
    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file() and (lines := metrics.read_text(encoding="utf-8").splitlines()):
        found["evaluations"] = [json.loads(line) for line in lines]
    return found


def run_stages(args: argparse.Namespace, env: dict[str, str], deadline: float) -> list[dict]:
    """Every stage in turn, each skipped when its estimate exceeds the time left, capped at
    what is left; the records in order."""
    work = ROOT / args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    records = [{"name": "wheel", "command": "pip install ... .whl/*.whl"}]
    records[0] |= install_wheels(env, args.dry_run)
    status = {"wheel": records[0]["status"]}
    scale = 0.05 if args.dry_run else 1.0  # the CPU's tiny stages take seconds
    for stage in stages(args):
        if args.only and stage.name not in args.only:
            continue
        record = {"name": stage.name, "command": shlex.join(stage.argv)}
        records.append(record)
        if stage.only_if_failed and status.get(stage.only_if_failed) != "failed":
            record |= {"status": "not needed", "detail": f"{stage.only_if_failed} did not fail"}
            continue
        left = deadline - time.time()
        if left < stage.estimate * scale:
            record |= {"status": "skipped", "detail": f"{left:.0f} s left, needs ~{stage.estimate}"}
            status[stage.name] = "skipped"
            continue
        print(f"[gpu_check] {stage.name}: {record['command']}", flush=True)
        record |= run_command(stage, env, min(stage.cap, left), work / f"{stage.name}.log")
        status[stage.name] = record["status"]
        if stage.run_dir:
            record |= read_run(ROOT / stage.run_dir)
        if stage.profile and (ROOT / stage.profile).is_file():
            record["profile"] = json.loads((ROOT / stage.profile).read_text(encoding="utf-8"))
        print(f"[gpu_check] {stage.name}: {record['status']} ({record['seconds']} s)", flush=True)
    return records


RUN_COLUMNS = (
    "wall_clock_s",
    "train_examples_per_s",
    "eval_s",
    "compiled_graphs",
    "compile_s",
)
PROFILE_COLUMNS = (
    "step_ms",
    "host_ms",
    "gpu_busy_ms",
    "gpu_idle_share",
    "kernels_per_step",
    "launches_per_step",
    "cpu_ops_per_step",
)


def figure(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 10 else f"{value:,.1f}"
    return "–" if value is None else str(value)


COMPARED = ("graphed", "eager", "plain-loop")


def ratio(a: object, b: object) -> str:
    """a / b to two decimals, or – where either is missing."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b:
        return f"{a / b:.2f}"
    return "–"


def comparison(records: list[dict]) -> list[str]:
    """The graphed default run, the eager run and the plain loop side by side: each whole
    command's seconds (set-up, training, evaluation and predictions) and its examples/s, with
    ratios to the graphed run's command time and to the plain loop's examples/s."""
    found = {r["name"]: r for r in records if r["name"] in COMPARED and r.get("status") == "ok"}
    if not found:
        return []
    graphed_s = found.get("graphed", {}).get("seconds")
    plain = found.get("plain-loop", {}).get("summary", {}).get("train_examples_per_s")
    lines = ["", "## The graphed default run against the eager run and the plain loop", ""]
    lines += ["| run | command s | command s / graphed | wall_clock_s | examples/s |"]
    lines[-1] += " examples/s / plain loop |"
    lines += ["|---|---|---|---|---|---|"]
    for name in COMPARED:
        if name not in found:
            continue
        r, summary = found[name], found[name].get("summary", {})
        rate = summary.get("train_examples_per_s")
        cells = [figure(r.get("seconds")), ratio(r.get("seconds"), graphed_s)]
        cells += [figure(summary.get("wall_clock_s")), figure(rate), ratio(rate, plain)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def markdown(report: dict) -> str:
    """The results file: header, one row per stage, the runs' figures, the profiles, errors."""
    lines = [
        "# One GPU call: the default run eager and compiled, the plain loop, a step's profile",
        "",
        "Written by `benchmarks/gpu_check.py`; do not edit by hand, run it again.",
        "",
        f"- Command: `{report['command']}`",
        f"- Commit: `{report['commit']}`",
        f"- Date: {report['date']}, run time {report['seconds']:.0f} s of a "
        f"{report['budget_s']:.0f} s budget",
        "- Machine: " + ", ".join(f"{k} {v}" for k, v in report["machine"].items()),
        "",
        "## Stages",
        "",
        "| stage | status | seconds | command |",
        "|---|---|---|---|",
    ]
    for r in report["stages"]:
        detail = r.get("detail", "")
        lines.append(
            f"| {r['name']} | {r['status']}{' (' + detail + ')' if detail else ''} | "
            f"{figure(r.get('seconds'))} | `{r['command']}` |"
        )
    runs = [r for r in report["stages"] if "summary" in r or "evaluations" in r]
    if runs:
        lines += ["", "## Runs (from each run folder)", ""]
        header = ["run", *RUN_COLUMNS, "best_overall", "last dev: sst, para, sts, overall"]
        lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in runs:
            summary, last = r.get("summary", {}), (r.get("evaluations") or [{}])[-1]
            scores = ", ".join(figure(last.get(k)) for k in ("sst", "para", "sts", "overall"))
            cells = [figure(summary.get(k)) for k in (*RUN_COLUMNS, "best_overall")]
            lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {scores} |")
    lines += comparison(report["stages"])
    profiles = [r for r in report["stages"] if "profile" in r]
    if profiles:
        lines += ["", "## Profiles (per training step, after warm-up)", ""]
        lines += ["| profile | " + " | ".join(PROFILE_COLUMNS) + " |"]
        lines += ["|" + "---|" * (len(PROFILE_COLUMNS) + 1)]
        for r in profiles:
            cells = [figure(r["profile"].get(k)) for k in PROFILE_COLUMNS]
            lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    for r in report["stages"]:
        if r.get("error"):
            tail = "\n".join(r["error"].strip().splitlines()[-15:])
            lines += ["", f"## {r['name']}: {r['status']}, the end of its output", "", "```"]
            lines += [tail, "```"]
    return "\n".join(lines) + "\n"


def write_results(report: dict, name: str, folders: list[Path]) -> list[Path]:
    written = []
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n", "utf-8")
        (folder / f"{name}.md").write_text(markdown(report), "utf-8")
        written += [folder / f"{name}.md", folder / f"{name}.json"]
    return written


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--budget", type=float, default=470, help="seconds for every stage together")
    p.add_argument("--dry_run", action="store_true", help="the stages on the CPU, tiny")
    p.add_argument("--only", default="", help="comma-separated stages to run (default: all)")
    p.add_argument("--work_dir", default="runs/gpu-check", help="run folders and logs")
    p.add_argument("--results_dir", default=str(_common.RESULTS_DIR), help="where results go")
    p.add_argument("--checkpoint", default="default", help="with --dry_run: the checkpoint")
    p.add_argument("--data_dir", default="data", help="with --dry_run: the data files")
    args = p.parse_args(argv)
    args.only = [s for s in args.only.split(",") if s]
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    started = time.time()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if args.dry_run:
        env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU, even where a GPU is visible
    records = run_stages(args, env, started + args.budget - 10)
    report = {
        "command": shlex.join(["python", "benchmarks/gpu_check.py", *argv]),
        "commit": _common.git_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "machine": _common.machine(),
        "budget_s": args.budget,
        "seconds": round(time.time() - started, 1),
        "dry_run": args.dry_run,
        "stages": records,
    }
    folders = [Path(args.results_dir)] + (
        [Path(os.environ["OUT"])] if os.environ.get("OUT") else []
    )
    name = "gpu-check-dry-run" if args.dry_run else "gpu-check"
    for path in write_results(report, name, folders):
        print(f"[gpu_check] wrote {path}")
    if os.environ.get("OUT"):  # each stage's whole output, for a failure's full story
        logs = Path(os.environ["OUT"]) / f"{name}-logs"
        logs.mkdir(parents=True, exist_ok=True)
        for log in (ROOT / args.work_dir).glob("*.log"):
            shutil.copyfile(log, logs / log.name)
    for r in records:
        print(f"[gpu_check] {r['name']}: {r['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
