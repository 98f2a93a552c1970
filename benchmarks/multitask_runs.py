"""Run train_multitask.py configurations (one after another, or --jobs at once), collect results.

    python benchmarks/multitask_runs.py multitask [--epochs 3] [--data_dir ../shared/data]
    python benchmarks/multitask_runs.py plugins --only adapter --seeds 1,2,3 -- --epochs 3
    python benchmarks/multitask_runs.py sampling-shared --seeds 1,2,3 --jobs 2 -- --threads 1

With --seeds, every configuration runs once per seed (rows ``<name>-seed-<s>``), and the results
file adds a table of mean ± standard deviation over the seeds of each configuration; a
configuration whose rows already differ only by ``-seed-<s>`` is aggregated the same way.

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import io
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common
from suite_results import markdown

from minbert.flags import ArgumentParser
from multitask.errors import UsageError

ROOT = _common.ROOT
STOPPING = threading.Event()  # set on Ctrl-C: rows that end now were stopped, not failed
STOP_GRACE_S = 60  # on Ctrl-C, how long a row's process may take to save its state and end

# What a configuration runs: the driver, unless its flags start with the plain loop's script.
DRIVER, PLAIN_LOOP, MLM = "train_multitask.py", "benchmarks/plain_loop.py", "pretrain_mlm.py"

# The adapter study's budget: 3 epochs (so annealing has epochs to anneal over) of 150 steps,
# about a sixth of an epoch of the three tasks each; what these 2 cores allow for 9 runs.
SHORT = ["--option", "adapter", "--epochs", "3", "--steps_per_epoch", "150"]
STUDY = [*SHORT, "--pair_encoding", "cross"]

# The distillation suite's teachers of the row's seed, as --teachers reads them.
TEACHER_SST = "sst={runs_dir}/distillation-teacher-sst-seed-{seed}"
TAUGHT = ("sst", "para")  # the tasks of the sharing suite's taught per-task stage
TEACHERS = ",".join(
    [TEACHER_SST]
    + [f"{t}={{runs_dir}}/distillation-teacher-{t}-seed-{{seed}}" for t in ("para", "sts")]
)

# The best SST-alone recipe of single-task.md, which the ceiling suite varies one flag at a time.
SST_TUNED = ["--tasks", "sst", "--lr", "1e-4", "--layer_decay", "0.8"]

# The smart-low-resource suite's setting: finetune on the same 10% of every training file.
TENTH = ["--option", "finetune", "--train_fraction", "0.1"]

SUITES: dict[str, list[tuple[str, list[str]]]] = {
    "defaults": [
        ("cross-mean", ["--pair_encoding", "cross", "--representation", "mean"]),
        ("cross-cls", ["--pair_encoding", "cross", "--representation", "cls"]),
        ("cross-pooler", ["--pair_encoding", "cross", "--representation", "pooler"]),
        ("separate-mean", ["--pair_encoding", "separate", "--representation", "mean"]),
    ],
    "pair-encoding": [
        ("sts-cross", ["--tasks", "sts", "--pair_encoding", "cross"]),
        ("sts-separate", ["--tasks", "sts", "--pair_encoding", "separate"]),
    ],
    "multitask": [
        ("finetune", ["--option", "finetune"]),
        ("pretrain", ["--option", "pretrain", "--pair_encoding", "cross"]),
        ("pretrain-separate", ["--option", "pretrain", "--pair_encoding", "separate"]),
    ],
    "tuning": [
        ("finetune-lr1e-4", ["--option", "finetune", "--lr", "1e-4"]),
        ("finetune-lr2e-5", ["--option", "finetune", "--lr", "2e-5"]),
        ("finetune-5-epochs", ["--option", "finetune", "--epochs", "5"]),
        (
            "finetune-lr1e-4-layer-decay-0.8",
            ["--option", "finetune", "--lr", "1e-4", "--layer_decay", "0.8"],
        ),
        ("finetune-seed-2", ["--option", "finetune", "--seed", "2"]),
    ],
    # Single-task teachers distilled into the multitask model (Clark et al. 2019, BAM!): each
    # task alone, the default finetune recipe, 3 epochs; meant for --seeds 1,2,3. A row's
    # "{seed}" and "{runs_dir}" are filled in with its seed and --runs_dir.
    "distillation": [
        ("teacher-sst", ["--option", "finetune", "--tasks", "sst"]),
        ("teacher-para", ["--option", "finetune", "--tasks", "para"]),
        ("teacher-sts", ["--option", "finetune", "--tasks", "sts"]),
        # The default multitask finetune run taught by the three teachers of its seed.
        ("student-annealed", ["--option", "finetune", "--teachers", TEACHERS]),
        (
            "student-mix-0.5",
            ["--option", "finetune", "--teachers", TEACHERS, "--teacher_weight", "0.5"],
        ),
        # Born-again control: SST alone taught by its own single-task teacher.
        ("born-again-sst", ["--option", "finetune", "--tasks", "sst", "--teachers", TEACHER_SST]),
    ],
    "single-task": [
        ("sst", ["--tasks", "sst"]),
        ("sst-lr1e-4-layer-decay-0.8", ["--tasks", "sst", "--lr", "1e-4", "--layer_decay", "0.8"]),
        ("para", ["--tasks", "para"]),
        ("para-swap-pairs", ["--tasks", "para", "--swap_pairs"]),
        ("sts", ["--tasks", "sts"]),
    ],
    "ceiling": [
        (
            "para-lr1e-4-layer-decay-0.8",
            ["--tasks", "para", "--lr", "1e-4", "--layer_decay", "0.8"],
        ),
        ("para-lr1e-4-5-epochs", ["--tasks", "para", "--lr", "1e-4", "--epochs", "5"]),
        ("para-seed-2", ["--tasks", "para", "--seed", "2"]),
        ("para-seed-3", ["--tasks", "para", "--seed", "3"]),
        ("sst-batch-16", ["--tasks", "sst", "--batch_size", "16"]),
        (
            "sst-lr1e-4-layer-decay-0.8-5-epochs",
            [*SST_TUNED, "--epochs", "5"],
        ),
        (
            "sst-batch-16-lr1e-4-layer-decay-0.8",
            ["--tasks", "sst", "--batch_size", "16", "--lr", "1e-4", "--layer_decay", "0.8"],
        ),
        ("sst-lr2e-4-layer-decay-0.7", ["--tasks", "sst", "--lr", "2e-4", "--layer_decay", "0.7"]),
        (
            "sst-lr1e-4-layer-decay-0.8-cls",
            [*SST_TUNED, "--representation", "cls"],
        ),
        (
            "sst-lr1e-4-layer-decay-0.8-dropout-0.2",
            [*SST_TUNED, "--dropout", "0.2"],
        ),
        (
            "sst-lr1e-4-layer-decay-0.8-seed-2",
            [*SST_TUNED, "--seed", "2"],
        ),
        (
            "sst-lr1e-4-layer-decay-0.8-seed-3",
            [*SST_TUNED, "--seed", "3"],
        ),
    ],
    "plugins": [
        ("adapter", ["--option", "adapter"]),
        ("lora", ["--option", "lora"]),
        ("pals", ["--option", "pals"]),
        ("lhuc", ["--option", "lhuc"]),
        # Levers for LHUC's Quora, below the pretrain floor with the scales alone
        # (per-task LayerNorms, the better one, became --option lhuc's default after this).
        ("lhuc-lr-3e-3", ["--option", "lhuc", "--lr", "3e-3"]),
        ("lhuc-layernorms", ["--option", "lhuc", "--train_layernorms"]),
    ],
    "smart": [
        ("finetune", ["--option", "finetune"]),
        ("finetune-smart", ["--option", "finetune", "--smart"]),
        # adapters cross-encoded, as both committed files ran them (the default then)
        ("adapter", ["--option", "adapter", "--pair_encoding", "cross"]),
        ("adapter-smart", ["--option", "adapter", "--pair_encoding", "cross", "--smart"]),
    ],
    # Each plug-in option's pair encoding chosen by measurement, against --option pretrain (pairs
    # encoded apart) as the floor, at the adapter study's short budget.
    # (Adapters cross-encoded at this budget: adapter-study's first row.)
    "option-encoding": [
        ("pretrain", ["--option", "pretrain", *SHORT[2:]]),
        ("adapter-separate", [*SHORT, "--pair_encoding", "separate"]),
        *[
            (f"{option}-{encoding}", ["--option", option, *SHORT[2:], "--pair_encoding", encoding])
            for option in ("lhuc", "lora", "pals")
            for encoding in ("cross", "separate")
        ],
    ],
    # The figures people quote, run with --seeds 1,2,3 (mean ± sd per task). The adapter rows
    # measured it cross-encoded, its default until pairs encoded apart were measured ahead (the
    # default adapter's seeds: plugins --only adapter with --results
    # benchmarks/results/adapter-separate-3-epochs).
    "error-bars": [
        ("finetune", ["--option", "finetune"]),
        ("adapter", ["--option", "adapter", "--pair_encoding", "cross"]),
    ],
    # Levers towards a shared model at least as good as each task alone, each one change from the
    # default finetune run; meant for --seeds 1,2,3 beside the single-task suite at the same budget.
    "transfer-levers": [
        ("two-layer-heads", ["--option", "finetune", "--head_hidden", "384"]),
        ("layer-decay-0.8", ["--option", "finetune", "--lr", "1e-4", "--layer_decay", "0.8"]),
        ("5-epochs", ["--option", "finetune", "--epochs", "5"]),
        ("smart", ["--option", "finetune", "--smart"]),
        # Gradient conflicts: a batch of every task in each step, gradients added (the baseline
        # of the change) or combined by PCGrad.
        ("all-tasks-summed", ["--option", "finetune", "--step_gradient", "summed"]),
        ("pcgrad", ["--option", "finetune", "--step_gradient", "pcgrad"]),
        # Per-task loss weights: STS, the task the shared model already does as well as alone,
        # at half weight (with Adam, about the same as SST and Quora at twice), and SST alone at
        # twice.
        ("loss-weights-sts-0.5", ["--option", "finetune", "--loss_weights", "sts=0.5"]),
        ("loss-weights-sst-2", ["--option", "finetune", "--loss_weights", "sst=2"]),
        # Pairs encoded apart, with the fitted cosine head: ahead for the adapter on every task
        # (for finetune it was not: Quora fell 2.6 points under seed 1).
        ("pairs-apart", ["--option", "finetune", "--pair_encoding", "separate"]),
        # The further-pretrained checkpoint (pretrain_mlm.py): first `python pretrain_mlm.py` at
        # its defaults (2000 steps of 32 of the tasks' training sentences, into runs/mlm, a
        # path relative to the project root, where the runs start).
        ("mlm-checkpoint", ["--option", "finetune", "--checkpoint", "runs/mlm"]),
    ],
    # SMART where data are scarce: the same 10% of every training file, SMART off, at the paper's
    # ε = 1e-5, at ε = η = 1e-3, and at ε = η = 1: mt-dnn's code divides δ + η·g by its per-token
    # max-norm after the ascent step instead of projecting it to the ε-ball, so its perturbation
    # has per-token ∞-norm 1; with ε = η = 1 the ascent step reaches that size and the projection
    # leaves it there. --seeds 1,2,3.
    "smart-low-resource": [
        ("finetune-10pct", TENTH),
        ("finetune-10pct-smart", [*TENTH, "--smart"]),
        *[
            (
                f"finetune-10pct-smart-eps-{size}",
                [*TENTH, "--smart", "--smart_epsilon", size, "--smart_step_size", size],
            )
            for size in ("1e-3", "1")
        ],
    ],
    # Batching schemes at one epoch: length grouping in pools of 50 batches (the default), 10 and 2,
    # and plain random batches (a pool of one batch). Beside them the plain Hugging Face loop
    # (benchmarks/plain_loop.py) at the same budget, its batches drawn at random every step or from
    # shuffled passes like pool-1.
    "batching": [
        *[
            (f"pool-{pool}", ["--option", "finetune", "--epochs", "1", "--batch_pool", str(pool)])
            for pool in (50, 10, 2, 1)
        ],
        *[
            (f"plain-loop-{draw}", [PLAIN_LOOP, "--epochs", "1", "--draw", draw])
            for draw in ("random", "passes")
        ],
    ],
    # Task sampling where the tasks compete for the same weights, as the PALs report compared it
    # (Stickland & Murray 2019: a shared encoder fine-tuned at 1e-5): the four samplers with the
    # encoder fine-tuned (finetune), and PALs with the encoder trained beside them at 1e-5;
    # 3 epochs, meant for --seeds 1,2,3 (on a GPU: 24 runs of 3 epochs).
    "sampling-shared": [
        (f"{option}-{sampling}", [*flags, "--sampling", sampling, "--epochs", "3"])
        for option, flags in (
            ("finetune", ["--option", "finetune", "--lr", "5e-5"]),
            ("pals", ["--option", "pals", "--train_encoder", "--encoder_lr", "1e-5"]),
        )
        for sampling in ("annealed", "round-robin", "proportional", "square-root")
    ],
    # Sharing that may beat each task trained alone (meant for --seeds 1,2,3; with --jobs 2 a row
    # waits for the row it starts from): the default multitask run, then each task
    # fine-tuned from it at the single-task recipe (MT-DNN), beside the distillation suite's
    # teacher rows (each task alone).
    "sharing": [
        ("multitask", ["--option", "finetune"]),
        *[
            (
                f"multitask-then-{task}",
                ["--init_from", "{runs_dir}/sharing-multitask-seed-{seed}", "--tasks", task],
            )
            for task in ("sst", "para", "sts")
        ],
        # The same, gentler: one epoch at 2e-5 (the task was already trained in the first stage;
        # three more epochs at 5e-5 took SST below the multitask run's own score, seed 1).
        *[
            (
                f"multitask-then-{task}-gentle",
                [
                    *["--init_from", "{runs_dir}/sharing-multitask-seed-{seed}", "--tasks", task],
                    *["--lr", "2e-5", "--epochs", "1"],
                ],
            )
            for task in ("sst", "para", "sts")
        ],
        # SST, the task that sharing costs, fine-tuned from the multitask model with layer-wise
        # learning-rate decay (each layer down moves at 0.8 times the rate of the one above;
        # Howard & Ruder 2018, Sun et al. 2019): the lower layers keep more of what all tasks share.
        (
            "multitask-then-sst-layer-decay",
            [
                *["--init_from", "{runs_dir}/sharing-multitask-seed-{seed}", "--tasks", "sst"],
                *["--layer_decay", "0.8"],
            ],
        ),
        # SST and Quora, the tasks that sharing costs, each fine-tuned from the multitask model
        # while its own single-task run teaches it (born-again distillation, Furlanello et al.
        # 2018, in the per-task stage): the task's run alone of the same seed, then the taught
        # fine-tuning.
        *[(f"{task}-alone", ["--option", "finetune", "--tasks", task]) for task in TAUGHT],
        *[
            (
                f"multitask-then-{task}-taught",
                [
                    *["--init_from", "{runs_dir}/sharing-multitask-seed-{seed}", "--tasks", task],
                    *["--teachers", f"{task}={{runs_dir}}/sharing-{task}-alone-seed-{{seed}}"],
                ],
            )
            for task in TAUGHT
        ],
        # MLM, multitask, then each task (the chain of the best CS224N default-project reports):
        # pretrain_mlm.py at its defaults (2000 steps of 32 of the tasks' training sentences),
        # the default multitask run from that checkpoint, then each task fine-tuned from it.
        ("mlm", [MLM]),
        (
            "mlm-multitask",
            ["--option", "finetune", "--checkpoint", "{runs_dir}/sharing-mlm-seed-{seed}"],
        ),
        *[
            (
                f"mlm-multitask-then-{task}",
                ["--init_from", "{runs_dir}/sharing-mlm-multitask-seed-{seed}", "--tasks", task],
            )
            for task in ("sst", "para", "sts")
        ],
        # AdapterFusion: stage 1, one adapter per task (the default adapter run); stage 2, every
        # task's fusion over the three fixed adapters (Pfeiffer et al. 2021).
        ("adapter", ["--option", "adapter"]),
        (
            "fusion",
            ["--option", "fusion", "--adapters_from", "{runs_dir}/sharing-adapter-seed-{seed}"],
        ),
    ],
    # Pairs cross-encoded, as every row of the committed study ran (the default then).
    "adapter-study": [
        ("adapter-annealed", STUDY),
        ("round-robin", [*STUDY, "--sampling", "round-robin"]),
        ("proportional", [*STUDY, "--sampling", "proportional"]),
        ("square-root", [*STUDY, "--sampling", "square-root"]),
        ("shared-in-each-layer", [*STUDY, "--adapter_share_sites"]),
        ("3-shared", [*STUDY, "--adapter_share_sites", "--adapter_share", "3"]),
        ("pfeiffer", [*STUDY, "--adapter_placement", "pfeiffer"]),
        ("after-layernorm", [*STUDY, "--adapter_placement", "after_layernorm"]),
        ("layernorms-per-task", [*STUDY, "--train_layernorms"]),
        # The adapter report's "not shared" row: adapters at both sites, per-task LayerNorms and
        # a two-layer tanh head per task (hidden 384, the packaged encoder's width).
        ("not-shared", [*STUDY, "--train_layernorms", "--head_hidden", "384"]),
    ],
}


def git_commit() -> str:
    """The commit the runs start from; results files being written do not make it dirty."""
    return _common.git_commit(untracked=False)


def versions() -> dict[str, str]:
    """The interpreter's and torch's versions, kept beside a row's command (which names the
    interpreter only as ``python``)."""
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__}


def machine() -> str:
    import torch

    gpu = "no GPU"
    if torch.cuda.is_available():
        gpu = f"GPU {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    return f"{platform.machine()}, {os.cpu_count()} CPU cores, torch {torch.__version__}, {gpu}"


def collect(run_dir: Path) -> dict:
    if (run_dir / "mlm_config.json").is_file():
        return collect_mlm(run_dir)
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    best = max(metrics, key=lambda m: m["overall"])
    summary = json.loads((run_dir / "summary.json").read_text())
    params = json.loads((run_dir / "parameters.json").read_text())
    sizes = {p.name: p.stat().st_size for p in run_dir.glob("task-*.safetensors")}
    return {
        # every setting the run trained with, so that a later change of a default cannot hide
        # what it ran (tests/benchmarks/test_suites.py compares each suite row with it)
        "settings": json.loads((run_dir / "config.json").read_text()),
        "best": best,
        "evaluations": metrics,
        "summary": summary,
        "parameters": params,
        "task_checkpoint_bytes": sizes,
    }


def collect_mlm(run_dir: Path) -> dict:
    """A further-pretraining row (pretrain_mlm.py): its settings and held-out MLM loss and
    accuracy at each evaluation; no task metrics (its tables print "-")."""
    log = [json.loads(x) for x in (run_dir / "mlm_log.jsonl").read_text().splitlines()]
    settings = json.loads((run_dir / "mlm_config.json").read_text())
    return {
        "settings": settings,
        "best": {},
        "evaluations": log,
        "summary": {"wall_clock_s": "-", "train_examples_per_s": "-"},
        "parameters": {"trainable": "-"},
        "task_checkpoint_bytes": {},
    }


def update_results(
    json_path: Path,
    change: Callable[[dict], None],
    render: Callable[[dict], None] | None = None,
) -> None:
    """Apply ``change`` to a results file (name -> row) and ``render`` what it then holds, under
    the lock every writer takes: several runners, and benchmarks/record_settings.py, may share
    one file."""
    with open(json_path.parent / f".{json_path.stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        results = json.loads(json_path.read_text()) if json_path.exists() else {}
        change(results)
        partial = json_path.with_name(f".{json_path.name}.partial")
        partial.write_text(json.dumps(results, indent=2) + "\n")
        os.replace(partial, json_path)  # whole or not at all, also when the runner is stopped
        if render is not None:
            render(results)


def write_markdown(md_path: Path, suite: str, results: dict) -> None:
    """The suite's results file (benchmarks/suite_results.py), its rows in the suite's order."""
    order = [name for name, _ in SUITES.get(suite, [])]
    md_path.write_text(markdown(suite, results, order, md_path.stem))


def filled(flags: list[str], runs_dir: str, seed: int | None = None) -> list[str]:
    """A row's flags as its run gets them: "{runs_dir}" and "{seed}" filled in, and with a seed
    (--seeds) ``--seed`` added."""
    flags = [flag.replace("{runs_dir}", runs_dir) for flag in flags]
    if seed is None:
        return flags
    return [flag.replace("{seed}", str(seed)) for flag in flags] + ["--seed", str(seed)]


def results_files(args: argparse.Namespace) -> tuple[Path, Path]:
    """The suite's results files: --results (a stem) or benchmarks/results/<suite>, .json and
    .md."""
    stem = Path(args.results) if args.results else _common.RESULTS_DIR / args.suite
    return stem.with_name(f"{stem.name}.json"), stem.with_name(f"{stem.name}.md")


def row_command(name: str, flags: list[str], args: argparse.Namespace, extra: list[str]) -> list:
    """The command that runs row ``name``: the driver (or the plain loop) on --data_dir, into
    ``<runs_dir>/<suite>-<name>``, with the row's flags and ``extra`` (the flags after --)."""
    out_dir = Path(args.runs_dir) / f"{args.suite}-{name}"
    script, flags = (flags[0], flags[1:]) if flags[0] in (PLAIN_LOOP, MLM) else (DRIVER, flags)
    cmd = [sys.executable, script, "--data_dir", args.data_dir, "--out_dir", str(out_dir)]
    return [*cmd, "--overwrite", *flags, *extra]


def recorded(cmd: list[str]) -> str:
    """A command as a results row records it: as a user types it (``python ...``)."""
    return shlex.join(_common.portable_words(cmd))


def run_child(cmd: list[str], out: Any) -> int:
    """Run one row's process to its end; on Ctrl-C (which the row's process, in the same
    process group, had too) wait until it has saved its state and ended, then stop."""
    stderr = subprocess.STDOUT if out else None
    with subprocess.Popen(cmd, cwd=ROOT, stdout=out, stderr=stderr) as child:
        try:
            return child.wait()
        except KeyboardInterrupt:
            try:
                child.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:  # the Ctrl-C reached the runner alone
                child.send_signal(signal.SIGINT)
                child.wait()
            raise


def run_one(
    name: str, flags: list[str], args: argparse.Namespace, extra: list[str], log: bool = False
) -> bool:
    """Run one configuration (``extra``: the flags given after --) and add its row to the
    results file; False when the run failed (nothing added). ``log``: its output goes to
    ``<runs_dir>/<suite>-<name>.log`` (several running at once), with a line here as it starts
    and ends."""
    if STOPPING.is_set():  # a queued row after a Ctrl-C: never started
        return False
    json_path, md_path = results_files(args)
    cmd = row_command(name, flags, args, extra)
    out_dir = Path(cmd[cmd.index("--out_dir") + 1])
    print("$", shlex.join(cmd), flush=True)
    commit = git_commit()  # the code the run starts from
    start = time.time()
    if log:
        log_path = out_dir.parent / f"{out_dir.name}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        print(f"{name}: started, output in {log_path}", flush=True)
        with open(log_path, "w") as out:
            rc = run_child(cmd, out)
    else:
        rc = run_child(cmd, None)
    if rc in (130, -signal.SIGINT):  # the row had the Ctrl-C: this thread starts no other row
        STOPPING.set()  # (the main thread, which the Ctrl-C also reached, may not have yet)
    if rc != 0:
        if not STOPPING.is_set():  # else the runner says
            print(f"{name}: exit code {rc}", file=sys.stderr, flush=True)
        return False
    row = {
        "command": recorded(cmd),
        "commit": commit,
        "machine": machine(),
        **versions(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "process_wall_clock_s": round(time.time() - start, 1),
        **collect(out_dir),
    }
    update_results(
        json_path,
        lambda results: results.__setitem__(name, row),
        lambda results: write_markdown(md_path, args.suite, results),
    )
    if log:
        print(f"{name}: done in {time.time() - start:.0f} s", flush=True)
    return True


def check_replaced(
    p: argparse.ArgumentParser,
    args: argparse.Namespace,
    chosen: list[tuple[str, list]],
    extra: list[str],
    results: dict,
) -> None:
    """A row already in the results file under the same name but recorded with another command
    (other flags, data or runs folder) is replaced only with --replace: one line otherwise."""
    if args.replace:
        return
    for name, flags in chosen:
        old = results.get(name, {}).get("command") if isinstance(results.get(name), dict) else None
        if old is not None and old != recorded(row_command(name, flags, args, extra)):
            p.error(
                f"row {name}: {results_files(args)[0]} already holds it, recorded with another "
                f"command ({old}); pass --replace to replace it, or give another --results"
            )


def chosen_runs(p: argparse.ArgumentParser, args: argparse.Namespace) -> list[tuple[str, list]]:
    """(name, flags) of each run: the suite's rows --only names (every row without it), once per
    --seeds seed. A row the suite does not have, or seeds malformed, repeated or empty, end the
    command in one line before anything runs."""
    rows = SUITES[args.suite]
    if args.only is not None:
        names, known = args.only.split(","), [name for name, _ in rows]
        if unknown := [name for name in names if name not in known]:
            p.error(
                f"--only {args.only}: the {args.suite} suite has no row {', '.join(unknown)}; "
                f"its rows: {', '.join(known)}"
            )
        rows = [row for row in rows if row[0] in names]
    if args.seeds is None:
        return [(name, filled(flags, args.runs_dir)) for name, flags in rows]
    words = args.seeds.split(",")
    seeds = [int(w) for w in words if w.strip().isdigit()]
    if not seeds or len(seeds) < len(words) or len(set(seeds)) < len(seeds):
        p.error(f"--seeds {args.seeds!r}: give distinct whole numbers, comma-separated (1,2,3)")
    return [(f"{n}-seed-{s}", filled(flags, args.runs_dir, s)) for n, flags in rows for s in seeds]


def script_flags(script: str, words: list[str]) -> None:
    """Read ``words`` (a row's flags) as ``script`` reads its command line, with its own parser
    and its settings' ranges: a UsageError or SystemExit for a flag it would refuse."""
    if script == PLAIN_LOOP:
        import plain_loop

        plain_loop.build_parser().parse_args(words)
    elif script == MLM:
        import pretrain_mlm
        from minbert.flags import unflatten

        try:
            unflatten(pretrain_mlm.MLMConfig, vars(pretrain_mlm.build_parser().parse_args(words)))
        except ValueError as err:
            raise UsageError(str(err)) from None
    else:
        from multitask import extras
        from multitask.config import TrainConfig, build_parser

        extras.refuse_absent({}, words)
        TrainConfig.from_flat(vars(build_parser().parse_args(words)))


def check_flags(
    p: argparse.ArgumentParser, chosen: list[tuple[str, list]], args: argparse.Namespace, extra
) -> None:
    """Every row's flags (and the flags after --), read by the parser of the script the row runs
    before any row starts: a flag the driver (or pretrain_mlm.py, the plain loop) would refuse
    is one line naming the row, never a row that fails after others ran."""
    for name, flags in chosen:
        cmd = row_command(name, flags, args, extra)
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                script_flags(cmd[1], cmd[2:])
        except UsageError as err:
            p.error(f"row {name}: {cmd[1]} refuses its flags: {err}")
        except SystemExit:  # the script's parser said why on its standard error
            lines = [line for line in said.getvalue().splitlines() if line.strip()]
            why = (lines[-1] if lines else "a bad flag").removeprefix("error: ")
            why = why.split(": error: ", 1)[-1]  # argparse's own "prog: error: ..."
            why = re.sub(r" \(see \S+ --help\)$", "", why)  # the runner's own --help follows
            p.error(f"row {name}: {cmd[1]} refuses its flags: {why}")


def check_paths(p: argparse.ArgumentParser, args: argparse.Namespace, json_path: Path) -> None:
    """The data folder exists, and the results go nowhere a run or an export lives."""
    from multitask.run import folder_kind

    if not args.render and not Path(args.data_dir).is_dir():
        p.error(f"--data_dir {args.data_dir}: no such folder; give the course's data folder")
    for folder in [json_path.parent, *json_path.parent.parents]:
        if kind := folder_kind(folder):
            p.error(f"--results {args.results}: {folder} is {kind}; put results elsewhere")


def check_writable(
    p: argparse.ArgumentParser, json_path: Path, md_path: Path, render: bool = False
) -> None:
    """Both results files, and the folder that holds them (or would), can be written, before any
    row runs: each finished row replaces the JSON file (by a rename in that folder) and then
    rewrites the Markdown one, so a read-only Markdown file would otherwise be found only after
    the JSON file had changed, leaving the two disagreeing. ``render`` writes the Markdown
    file alone."""
    folder = json_path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        p.error(f"--results {json_path.with_suffix('')}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        p.error(f"--results: {folder} is not writable; give --results in a folder you can write")
    for path in (md_path,) if render else (json_path, md_path):
        if path.exists() and (not path.is_file() or not os.access(path, os.W_OK)):
            p.error(
                f"--results: {path} is not a writable file (a row writes {json_path.name} and "
                f"{md_path.name} together); make it writable or give another --results"
            )


def main(argv: list[str] | None = None) -> int:
    STOPPING.clear()  # a new command: no Ctrl-C yet (tests call main several times)
    p = ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("suite", choices=sorted(SUITES))
    p.add_argument(
        "--render", action="store_true", help="only rewrite the Markdown file from the JSON one"
    )
    p.add_argument("--only", default=None, help="comma-separated configuration names to run")
    p.add_argument(
        "--seeds",
        default=None,
        help="comma-separated seeds: run every configuration once per seed and report the mean "
        "± standard deviation over them",
    )
    p.add_argument("--data_dir", default=str(_common.DATA_DIR))
    p.add_argument("--runs_dir", default=str(ROOT / "runs" / "bench"))
    p.add_argument(
        "--results", default=None, help="results file stem (default: benchmarks/results/<suite>)"
    )
    p.add_argument(
        "--replace",
        action="store_true",
        help="replace a row of the results file recorded with another command (other flags, "
        "data or runs folder) under the same name; without it such a row is refused in one "
        "line before anything runs (a row rerun with the same command is always replaced)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="how many configurations run at once, each its own process (1: one after another, "
        "output here); above 1 each run's output goes to <runs_dir>/<suite>-<name>.log, and a "
        "row that starts from another row's run (--init_from, --adapters_from, --checkpoint) "
        "waits for it. On these 2-core CPUs: --jobs 2 -- --threads 1; one GPU holds several "
        "small runs",
    )
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []  # flags after -- go to every run
    args = p.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.jobs < 1:
        p.error(f"--jobs must be at least 1, got {args.jobs}")
    chosen = chosen_runs(p, args)
    json_path, md_path = results_files(args)
    check_paths(p, args, json_path)
    check_writable(p, json_path, md_path, args.render)
    results = read_results(p, json_path)  # a cut-off file is named before anything runs
    if not args.render:
        check_replaced(p, args, chosen, extra, results)
        check_flags(p, chosen, args, extra)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    if args.render:
        write_markdown(md_path, args.suite, results)
        return 0
    try:
        done = run_rows(chosen, args, extra)
    except KeyboardInterrupt:
        print(
            f"error: interrupted (Ctrl-C); {json_path} holds every row finished before, each "
            "whole; no other row was started; a stopped row's own output (with --jobs, its log) "
            "says what its run folder holds",
            file=sys.stderr,
        )
        return 130
    if failed := [name for (name, _), ok in zip(chosen, done) if not ok]:
        print(f"error: {len(failed)} row(s) failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def run_rows(chosen: list[tuple[str, list]], args: argparse.Namespace, extra: list[str]) -> list:
    """Run the rows, one after another or --jobs at once (each output to its log; the results
    file shared under its lock); whether each succeeded. On Ctrl-C no queued row starts, the
    running ones end (they had the Ctrl-C too) and KeyboardInterrupt is raised again."""
    if args.jobs == 1:
        return [run_one(name, flags, args, extra) for name, flags in chosen]
    run_after = after_first_stages(chosen, args, extra)
    pool = ThreadPoolExecutor(args.jobs)
    try:
        return list(pool.map(lambda c: run_after(*c), chosen))
    except KeyboardInterrupt:
        STOPPING.set()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    finally:
        pool.shutdown(wait=False)


def folders_named(flag: str) -> list[str]:
    """What a flag's value may name as a folder: the value, or each DIR of a TASK=DIR,... list."""
    return [flag, *(entry.partition("=")[2] for entry in flag.split(",") if "=" in entry)]


def after_first_stages(
    chosen: list[tuple[str, list]], args: argparse.Namespace, extra: list[str]
) -> Callable[[str, list], bool]:
    """``run_one`` for rows run at once, each started only once the rows of this batch whose
    run folder it names (its first stage: --init_from, --adapters_from, --checkpoint) ended
    well; a row whose first stage failed is not started. The rows come in the suite's order,
    first stages first, so a row waits only on rows already taken by a worker. A teacher
    (--teachers TASK=DIR,...) is a first stage too."""
    folders = {f"{args.runs_dir}/{args.suite}-{name}": name for name, _ in chosen}
    needs = {
        name: [folders[f] for flag in flags for f in folders_named(flag) if f in folders]
        for name, flags in chosen
    }
    ended = {name: threading.Event() for name in needs}
    succeeded: dict[str, bool] = {}

    def run_after(name: str, flags: list) -> bool:
        try:
            for first in needs[name]:
                ended[first].wait()
            if failed := [first for first in needs[name] if not succeeded[first]]:
                print(f"{name}: not started: {', '.join(failed)} did not end well", flush=True)
                succeeded[name] = False
            else:
                succeeded[name] = run_one(name, flags, args, extra, log=True)
            return succeeded[name]
        finally:
            succeeded.setdefault(name, False)
            ended[name].set()

    return run_after


def read_results(p: argparse.ArgumentParser, json_path: Path) -> dict:
    """The results file's rows ({} when there is none); a file that is not JSON is named as
    corrupted in one line."""
    if not json_path.exists():
        return {}
    try:
        results = json.loads(json_path.read_text())
    except ValueError:
        p.error(f"{json_path} is corrupted (not JSON); move it away or give another --results")
    if not isinstance(results, dict):
        p.error(f"{json_path} is corrupted (not rows by name); move it away or give --results")
    return results


if __name__ == "__main__":
    sys.exit(main())
