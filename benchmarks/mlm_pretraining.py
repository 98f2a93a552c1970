"""Further MLM pretraining on the tasks' sentences, then multitask fine-tuning, against the same
fine-tuning from the packaged checkpoint (does further MLM pretraining help?).

    python benchmarks/mlm_pretraining.py --mlm_steps 2000 -- --epochs 3

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import portable_words  # noqa: E402
from multitask_runs import ROOT, collect, git_commit, machine, versions  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "mlm-pretraining"


def command(script: str, *flags: str) -> list[str]:
    return [sys.executable, script, "--threads", "1", "--overwrite", *flags]


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """The command line: this script's flags, and the flags after ``--`` (for both
    fine-tunings)."""
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mlm_steps", type=int, default=2000, help="further pretraining steps")
    p.add_argument("--held_out", type=int, default=500, help="held-out dev sentences for MLM")
    p.add_argument("--data_dir", default="data", help="the course's data files")
    p.add_argument("--runs_dir", default="runs", help="where the three runs' folders go")
    p.add_argument(
        "--collect",
        action="store_true",
        help="only write the results from the "
        "run folders of an earlier invocation (its process times are not known)",
    )
    return p.parse_args(argv[: argv.index("--")] if "--" in argv else argv), extra


def stage_commands(args: argparse.Namespace, extra: list[str]) -> dict[str, list[str]]:
    """The three runs' commands: "baseline" (fine-tuning from the packaged checkpoint), "mlm"
    (further pretraining) and "further" (fine-tuning from the MLM output)."""
    runs = Path(args.runs_dir)
    data = ["--data_dir", args.data_dir]
    baseline = command("train_multitask.py", *data, "--out_dir", str(runs / "mlm-baseline"), *extra)
    mlm = command(
        "pretrain_mlm.py",
        *data,
        "--out_dir",
        str(runs / "mlm-pretrained"),
        "--steps",
        str(args.mlm_steps),
        "--held_out",
        str(args.held_out),
        "--eval_every",
        str(max(1, args.mlm_steps // 4)),
    )
    further = command(
        "train_multitask.py",
        *data,
        "--out_dir",
        str(runs / "mlm-finetune"),
        "--checkpoint",
        str(runs / "mlm-pretrained"),
        *extra,
    )
    return {"baseline": baseline, "mlm": mlm, "further": further}


class Stages:
    """Runs the stages' processes from the repository root and times each whole process."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}  # name -> start time, then wall-clock seconds

    def launch(self, name: str, cmd: list[str]) -> subprocess.Popen:
        """Start ``cmd`` (echoed as a shell line)."""
        print("$", shlex.join(cmd), flush=True)
        self.seconds[name] = time.time()
        return subprocess.Popen(cmd, cwd=ROOT)

    def wait(self, name: str, proc: subprocess.Popen) -> None:
        """Wait for ``proc``; a failed stage stops the benchmark."""
        if proc.wait() != 0:
            raise SystemExit(f"{name}: exit code {proc.returncode}")
        self.seconds[name] = round(time.time() - self.seconds[name], 1)

    def run(self, commands: dict[str, list[str]]) -> None:
        """Baseline and MLM pretraining in parallel, then fine-tuning from the MLM output as
        soon as the pretraining ends."""
        running = {
            "baseline": self.launch("baseline", commands["baseline"]),
            "mlm": self.launch("mlm", commands["mlm"]),
        }
        self.wait("mlm", running["mlm"])
        running["further"] = self.launch("further", commands["further"])
        self.wait("baseline", running["baseline"])
        self.wait("further", running["further"])


def gather(
    runs: Path, commands: dict[str, list[str]], commit: str, started: float, seconds: dict
) -> dict:
    """The results: the runs' commands, timings, MLM log and best dev metrics, with the commit
    and the machine."""
    log_file = runs / "mlm-pretrained" / "mlm_log.jsonl"
    log = [json.loads(line) for line in log_file.read_text().splitlines()]
    return {
        "commit": commit,
        "machine": machine(),
        **versions(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)),
        "commands": {name: shlex.join(portable_words(cmd)) for name, cmd in commands.items()},
        "process_wall_clock_s": seconds or "not recorded (results collected with --collect)",
        "mlm_seconds": log[-1].get("seconds", "not recorded"),
        "mlm_before": log[0],
        "mlm_after": log[-1],
        "baseline": collect(runs / "mlm-baseline"),
        "further": collect(runs / "mlm-finetune"),
    }


def write_results(results: dict, runs: Path) -> None:
    """mlm-pretraining.json and .md, and the MLM loss curve beside them; prints the .md."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    RESULTS.with_suffix(".md").write_text(markdown(results))
    shutil.copyfile(runs / "mlm-pretrained" / "mlm_loss.png", f"{RESULTS}-loss.png")
    print(RESULTS.with_suffix(".md").read_text())


def main(argv: list[str] | None = None) -> int:
    args, extra = parse_args(sys.argv[1:] if argv is None else argv)
    commands = stage_commands(args, extra)
    commit, started = git_commit(), time.time()
    stages = Stages()
    if not args.collect:
        stages.run(commands)
    runs = Path(args.runs_dir)
    write_results(gather(runs, commands, commit, started, stages.seconds), runs)
    return 0


def markdown(r: dict) -> str:
    rows = []
    for name, label in (("baseline", "packaged checkpoint"), ("further", "MLM-pretrained one")):
        b, s = r[name]["best"], r[name]["summary"]
        cells = " | ".join(f"{b[k]:.4f}" for k in ("sst", "para", "sts", "overall"))
        rows.append(f"| fine-tuned from the {label} | {cells} | {s['wall_clock_s']} |")
    before, after = r["mlm_before"], r["mlm_after"]
    seconds = r["process_wall_clock_s"]
    if isinstance(seconds, dict):
        timing = (
            f"Wall-clock (whole processes, s): baseline {seconds['baseline']}, MLM "
            f"pretraining {seconds['mlm']}, fine-tuning after MLM {seconds['further']}."
        )
    else:
        timing = (
            f"Process wall-clock: {seconds}; MLM training seconds: {r['mlm_seconds']}; the "
            "fine-tunings' training seconds are in the table."
        )
    return "\n".join(
        [
            "# Results: further MLM pretraining before multitask fine-tuning",
            "",
            "Written by `benchmarks/mlm_pretraining.py` from real runs; do not edit by hand. Dev "
            "metrics are of the best evaluation (by overall score). The Quora dev file here is a "
            "fixed split of the course's Quora dev file (see data/README.md), so para "
            "accuracy is not comparable one-to-one with published Quora dev figures. The two "
            "fine-tunings share every flag but --checkpoint; every process ran with --threads 1, "
            "two at a time on the 2 cores.",
            "",
            "| run | sst acc | para acc | sts r | overall | training s |",
            "|---|---|---|---|---|---|",
            *rows,
            "",
            "Masked-token prediction on the dev sentences of sst, para and sts (the same masks "
            "before and after):",
            "",
            "| checkpoint | masked-token accuracy | perplexity | loss |",
            "|---|---|---|---|",
            f"| packaged (before) | {before['accuracy']:.4f} | {before['perplexity']:.2f} | "
            f"{before['loss']:.4f} |",
            f"| after {after['step']} MLM steps | {after['accuracy']:.4f} | "
            f"{after['perplexity']:.2f} "
            f"| {after['loss']:.4f} |",
            "",
            f"{timing} Loss curve: [mlm-pretraining-loss.png](mlm-pretraining-loss.png).",
            "",
            *[f"- {k}: `{v}`" for k, v in r["commands"].items()],
            f"- commit `{r['commit']}`, {r['machine']}, {r['date']}",
            "",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
