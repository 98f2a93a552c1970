"""Do results move across a change? The same short real runs in two trees, compared byte for byte.

    python benchmarks/same_results.py --before 7719fbf                  # against the working tree
    python benchmarks/same_results.py --before 7719fbf --after HEAD     # two commits
    python benchmarks/same_results.py --before HEAD --only plain,lora   # a few runs, no file

A commit is checked out into a temporary ``git worktree`` (removed afterwards). Each tree runs
``RUNS`` (real runs of 96 examples a task for one epoch, and pretrain_mlm.py at its smallest) into
the same absolute folders, moved aside after each tree, so that every path a run records is the
same in both. Every file is compared as bytes, except those ``READERS`` and ``NOT_COMPARED`` name
(their clocks and process ids left out). One table (run, file, verdict) is printed; the exit
status is 1 when anything differs. A full run also writes benchmarks/results/same-results.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import _common
import torch

# Every run: a real run, short (96 examples a task, one epoch), logged and evaluated often so that
# train_log.jsonl and metrics.jsonl hold many lines; one thread, so that the sums add in one order.
COMMON = (
    *("--limit", "96", "--epochs", "1", "--eval_every", "2", "--log_every", "1"),
    *("--threads", "1", "--no_plots"),
)
# pretrain_mlm.py at its smallest: a few steps on one task's sentences.
MLM = (
    *("--tasks", "sst", "--steps", "4", "--batch_size", "8", "--eval_every", "2"),
    *("--held_out", "32", "--threads", "1"),
)
# name -> (script, flags); "{runs}" is the folder every run of a tree writes into. The default
# optimizer is the multi-tensor AdamW (--optimizer foreach), so "plain" runs it and "adamw" the
# hand-written loop. Runs named in another's flags come before it.
RUNS: dict[str, tuple[str, tuple[str, ...]]] = {
    "plain": ("train_multitask.py", COMMON),
    "adapter": ("train_multitask.py", (*COMMON, "--option", "adapter", "--swap_pairs")),
    "lora": ("train_multitask.py", (*COMMON, "--option", "lora")),
    "pals": ("train_multitask.py", (*COMMON, "--option", "pals")),
    "lhuc": ("train_multitask.py", (*COMMON, "--option", "lhuc")),
    "smart": ("train_multitask.py", (*COMMON, "--smart")),
    "pcgrad": ("train_multitask.py", (*COMMON, "--step_gradient", "pcgrad")),
    "fusion": (
        "train_multitask.py",
        (*COMMON, "--option", "fusion", "--adapters_from", "{runs}/adapter"),
    ),
    "teachers": ("train_multitask.py", (*COMMON, "--teachers", "sst={runs}/plain")),
    "adamw": ("train_multitask.py", (*COMMON, "--optimizer", "adamw")),
    "tensorboard": ("train_multitask.py", (*COMMON, "--report_to", "tensorboard")),
    "mlm": ("pretrain_mlm.py", MLM),
}
NEEDS = {"fusion": "adapter", "teachers": "plain"}

# What holds a clock: summary.json's timing keys; last.pt's wall-clock keys (the driver's under
# "extra", pretrain_mlm's at the top); each line's seconds in mlm_log.jsonl; TensorBoard event
# files, named by the clock, host and process, whose events each carry a wall_time. config.json
# is compared whole: its out_dir is the same folder in both trees.
TIMING_KEYS = ("wall_clock_s", "train_examples_per_s", "eval_s", "compile_s")
LAST_TIMING = (("extra", "seconds"), ("extra", "eval_seconds"), ("seconds",))
NOT_COMPARED = (".lock",)  # the process that held the run folder
EVENTS = "tensorboard/events.out.tfevents.*"


def git(*args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=_common.ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@contextmanager
def tree(commit: str | None, scratch: Path, label: str) -> Iterator[tuple[Path, str]]:
    """The folder to run in and what it is: the working tree for ``commit`` None, else a
    temporary git worktree of ``commit`` (with the working tree's data files linked in),
    removed when the block ends."""
    if commit is None:
        yield _common.ROOT, f"the working tree ({_common.git_commit()})"
        return
    full = git("rev-parse", "--verify", f"{commit}^{{commit}}")
    where = scratch / f"tree-{label}"
    git("worktree", "add", "--detach", str(where), full)
    try:
        for csv in sorted((_common.ROOT / "data").glob("*.csv")):
            (where / "data" / csv.name).symlink_to(csv)
        yield where, full
    finally:
        git("worktree", "remove", "--force", str(where))


def run_all(root: Path, runs: Path, names: list[str], log: Path) -> dict[str, float]:
    """Every run of ``names`` in the tree ``root``, into ``runs``; seconds each took. A run that
    fails stops the script, naming its log."""
    seconds = {}
    for name in names:
        script, flags = RUNS[name]
        words = [w.replace("{runs}", str(runs)) for w in flags]
        command = [sys.executable, script, *words, "--out_dir", str(runs / name)]
        started = time.time()
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"\n$ {' '.join(command)}\n")
            out.flush()
            done = subprocess.run(command, cwd=root, stdout=out, stderr=subprocess.STDOUT)
        seconds[name] = time.time() - started
        print(f"  {name}: {seconds[name]:.0f} s", flush=True)
        if done.returncode != 0:
            raise SystemExit(f"{name} failed in {root} (exit {done.returncode}); see {log}")
    return seconds


def without(value: Any, paths: tuple[tuple[str, ...], ...]) -> Any:
    """``value`` (a dict) with the nested keys ``paths`` removed, where present."""
    value = dict(value)
    for path in paths:
        holder = value
        for key in path[:-1]:
            holder = holder.get(key) if isinstance(holder, dict) else None
        if isinstance(holder, dict):
            holder.pop(path[-1], None)
    return value


def same(a: Any, b: Any) -> bool:
    """Exact equality of nested containers; tensors bit for bit (dtype, shape and bytes)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return bool(torch.equal(bits(a), bits(b)))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().cpu().contiguous().reshape(-1).view(torch.uint8)


def last_checkpoint(path: Path) -> Any:
    # last.pt is the project's own file (its RNG states and loader positions are plain objects)
    saved = torch.load(path, map_location="cpu", weights_only=False)
    return without(saved, LAST_TIMING)


def summary(path: Path) -> Any:
    return without(json.loads(path.read_text(encoding="utf-8")), tuple((k,) for k in TIMING_KEYS))


def mlm_log(path: Path) -> Any:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [without(json.loads(line), (("seconds",),)) for line in lines]


def events(folder: Path) -> Any:
    """The events of every event file in ``folder`` (in name order, i.e. by the clock), each
    serialized without its wall_time."""
    from tensorboard.compat.proto import event_pb2

    from extras.tensorboard_report import records

    out = []
    for path in sorted(folder.glob(EVENTS)):
        for record, _ in records(path.read_bytes()):
            event = event_pb2.Event.FromString(record[12:-4])
            event.wall_time = 0.0
            out.append(event.SerializeToString(deterministic=True))
    return out


READERS: dict[str, tuple[Callable[[Path], Any], str]] = {
    "summary.json": (summary, f"without {', '.join(TIMING_KEYS)}"),
    "last.pt": (last_checkpoint, "tensors bit for bit, without its seconds"),
    "mlm_log.jsonl": (mlm_log, "without each line's seconds"),
}


def files_of(folder: Path) -> set[str]:
    """The files of a run folder by their name inside it; a TensorBoard folder's event files as
    one entry (``tensorboard/events``), their names being the clock's."""
    names = set()
    for path in folder.rglob("*"):
        if not path.is_file() or path.name in NOT_COMPARED:
            continue
        name = path.relative_to(folder).as_posix()
        names.add("tensorboard/events" if path.match(EVENTS) else name)
    return names


def compare(before: Path, after: Path) -> list[tuple[str, str, str]]:
    """(file, verdict, how) for every file of either run folder."""
    rows = []
    for name in sorted(files_of(before) | files_of(after)):
        a, b = before / name, after / name
        if name == "tensorboard/events":
            read, how = events, "events without wall_time"
            a, b = before / "tensorboard", after / "tensorboard"
        elif not a.exists() or not b.exists():
            rows.append((name, f"only {'before' if a.exists() else 'after'}", ""))
            continue
        else:
            read, how = READERS.get(name, (Path.read_bytes, "bytes"))
        rows.append((name, "identical" if same(read(a), read(b)) else "DIFFERS", how))
    return rows


def chosen(only: str | None) -> list[str]:
    """The runs to make: ``--only``'s (with the runs they read), else all, in ``RUNS``' order."""
    if only is None:
        return list(RUNS)
    wanted = {name.strip() for name in only.split(",") if name.strip()}
    if unknown := sorted(wanted - set(RUNS)):
        raise SystemExit(f"--only: unknown run(s) {unknown}; known: {', '.join(RUNS)}")
    wanted |= {NEEDS[name] for name in wanted if name in NEEDS}
    return [name for name in RUNS if name in wanted]


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", required=True, help="the commit to compare against")
    parser.add_argument(
        "--after", default=None, help="a commit (default: the working tree, as it is)"
    )
    parser.add_argument("--only", default=None, help=f"comma-separated runs of {', '.join(RUNS)}")
    parser.add_argument(
        "--results",
        type=Path,
        default=_common.RESULTS_DIR / "same-results.md",
        help="the Markdown file a full run writes",
    )
    return parser.parse_args()


def stop(signum: int, frame: Any) -> None:
    """A kill (SIGTERM) ends the script as an error does: the run under way is killed, the
    temporary worktree and folder are removed."""
    raise SystemExit(128 + signum)


def main() -> int:
    args = parse()
    signal.signal(signal.SIGTERM, stop)
    names = chosen(args.only)
    intro = (
        "The same short real runs (`RUNS` in the script: each `--limit 96 --epochs 1 "
        "--eval_every 2 --log_every 1 --threads 1 --no_plots` plus its flags, and "
        "pretrain_mlm.py at its smallest) in the tree before and the tree after, into the same "
        "folders, and every file they write compared byte for byte, except: summary.json "
        f"without {', '.join(TIMING_KEYS)}; last.pt loaded and compared tensor by tensor, bit "
        "for bit, without its wall-clock keys (extra.seconds, extra.eval_seconds; "
        "pretrain_mlm's seconds); mlm_log.jsonl without each line's seconds; TensorBoard's "
        "event files as their events, each without its wall_time; .lock not compared. "
        "config.json is compared whole."
    )
    report = _common.Report("same-results", "Same results across a change", intro)
    scratch = Path(tempfile.mkdtemp(prefix="same-results-"))
    runs, log = scratch / "runs", scratch / "runs.log"
    described, seconds = {}, {}
    try:
        for label, commit in (("before", args.before), ("after", args.after)):
            with tree(commit, scratch, label) as (root, what):
                described[label] = what
                print(f"{label}: {what}", flush=True)
                seconds[label] = run_all(root, runs, names, log)
            runs.rename(scratch / label)
        rows = [
            (name, *row)
            for name in names
            for row in compare(scratch / "before" / name, scratch / "after" / name)
        ]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    differs = [row for row in rows if row[2] != "identical"]
    report.add(
        f"- Before: {described['before']}\n- After: {described['after']}\n"
        f"- Runs: {', '.join(names)} (seconds each, before/after: "
        + ", ".join(f"{n} {seconds['before'][n]:.0f}/{seconds['after'][n]:.0f}" for n in names)
        + ")"
    )
    report.add(_common.table(["run", "file", "verdict", "compared as"], rows))
    verdict = f"{len(differs)} of {len(rows)} files differ" if differs else "every file identical"
    report.add(f"Result: {verdict}.")
    if args.only is None:
        report.write(args.results)
    return 1 if differs else 0


if __name__ == "__main__":
    sys.exit(main())
