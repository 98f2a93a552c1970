"""Length-grouped dynamic batches against fixed-length padding, on one multitask training epoch.

    python benchmarks/padding.py [--threads 1] [--steps 30] [--chunk 5] [--data_dir ../shared/data]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

import _common
import torch
from _common import Report, median, table

from minbert.optimizer import adamw_for
from minbert.sampling import TaskSampler
from minbert.tokenizer import Tokenizer
from multitask.batching import BatchStream, fixed_batches, length_grouped_batches
from multitask.collate import collate, token_lengths
from multitask.step import HostChecked, TrainingStep, train_step
from tasks import get_task

POOLS = (50, 10, 2, 1)  # --batch_pool sizes measured; the first is the driver's default
DEFAULT, FIXED = f"pool-{POOLS[0]}", "fixed"


def fixed_padding_batches(
    lengths: list[int], batch_size: int, g: torch.Generator
) -> list[list[int]]:
    """Plain shuffled batches (the fixed-padding baseline), in the driver's ``BatchStream``."""
    return fixed_batches(len(lengths), batch_size, g)


def batch_makers() -> dict:
    """Method name -> how ``BatchStream`` cuts a task's training set into batches."""
    makers = {
        f"pool-{pool}": functools.partial(length_grouped_batches, pool_factor=pool)
        for pool in POOLS
    }
    return {**makers, FIXED: fixed_padding_batches}


DESCRIPTIONS = {
    **{f"pool-{p}": f"length-grouped in pools of {p} batches + dynamic padding" for p in POOLS},
    DEFAULT: "length-grouped in pools of 50 batches + dynamic padding (the driver's default)",
    "pool-1": "plain shuffled batches + dynamic padding (`--batch_pool 1`)",
    FIXED: "plain shuffled batches padded to 128",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, checked; sets torch's thread count."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--steps", type=int, default=30, help="timed steps per method")
    p.add_argument("--chunk", type=int, default=5, help="steps per method in a row")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="folder of the data files")
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    if args.steps < 1 or args.chunk < 1:
        raise SystemExit("--steps and --chunk must be at least 1")
    return args


def start_report(steps: int, chunk: int) -> Report:
    """padding.md, with its introduction: what is measured, and how."""
    return Report(
        "padding",
        "Padding: length-grouped dynamic batches vs fixed max_length padding",
        "One epoch of the driver's default run (`train_multitask.py --option finetune "
        "--sampling annealed`: sst + para + sts, batch size 32, max_length 128, epoch 1) on the "
        "real training files. pool-N = `length_grouped_batches` with pools of N batches "
        "(`--batch_pool N`; 50 is the driver's default, 1 is plain shuffled batches), each batch "
        "padded to its longest sequence; fixed = `fixed_batches` (plain shuffled batches) padded "
        "to 128 tokens. Padding fractions are exact over the whole epoch; times are "
        f"{steps} measured steps per method (spread evenly over the epoch, interleaved in "
        f"chunks of {chunk}), each a full training step (tokenize, forward, backward, "
        f"AdamW) on the driver's model, extrapolated to the epoch.\n\n"
        + _common.SHARED_MACHINE_NOTE,
    )


@dataclass
class Epoch:
    """The driver's first epoch: its data, model and task schedule, and each method's batches."""

    cfg: Any  # the driver's resolved config (train_multitask.TrainConfig)
    data: dict  # task name -> split -> examples
    tokenizer: Tokenizer
    model: torch.nn.Module  # the driver's model, as it builds it
    sizes: dict[str, int]  # task name -> training examples
    steps: int  # steps in the epoch
    schedule: list[str]  # the task of each step
    lengths: dict[str, list[int]]  # task name -> token length of each training example
    plan: dict[str, list[tuple[str, list[int]]]]  # method -> the (task, batch) of each step


def plan_epoch(data_dir: str) -> Epoch:
    """Build the driver's default run and cut its first epoch into each method's batches, all
    on the same task schedule (the sampler's epoch 1)."""
    cfg = _common.driver_args("finetune", data_dir=data_dir)
    data = _common.driver_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, max_length=cfg.model.max_length)
    model, _ = _common.driver_model(cfg)
    sizes = {name: len(splits["train"]) for name, splits in data.items()}
    steps_per_epoch = math.ceil(sum(sizes.values()) / cfg.batch_size)
    schedule = TaskSampler(cfg.sampling, sizes, cfg.epochs, cfg.seed).schedule(1, steps_per_epoch)
    lengths = {}
    for name, splits in data.items():
        task = get_task(name)
        lengths[name] = token_lengths(
            task, splits["train"], tokenizer, model.encodes_separately(task)
        )
    plan = {}  # method -> the epoch's (task, batch) of each step, on the same task schedule
    for method, make in batch_makers().items():
        streams = {n: BatchStream(n, lengths[n], cfg.batch_size, cfg.seed, make) for n in data}
        plan[method] = [(name, streams[name].next()) for name in schedule]
    return Epoch(cfg, data, tokenizer, model, sizes, steps_per_epoch, schedule, lengths, plan)


def positions(epoch: Epoch, method: str) -> tuple[int, int]:
    """(positions computed, real tokens) of ``method`` over the whole epoch: exact, with the
    lengths truncated at max_length as the tokenizer does."""
    L = epoch.cfg.model.max_length
    total = real = 0
    for name, batch in epoch.plan[method]:
        b = [min(epoch.lengths[name][i], L) for i in batch]
        total += len(b) * (L if method == FIXED else max(b))
        real += sum(b)
    return total, real


def padding_section(epoch: Epoch) -> str:
    """The report's padding table: each method's padding fraction over the epoch."""
    L = epoch.cfg.model.max_length
    pos = {m: positions(epoch, m) for m in epoch.plan}
    rows = [
        [
            f"{m}: {DESCRIPTIONS[m]}",
            f"{total:,}",
            f"{real:,}",
            f"**{(total - real) / total:.1%}**",
        ]
        for m, (total, real) in pos.items()
    ]
    per_task = []
    for name in epoch.data:
        task_lengths = epoch.lengths[name]
        per_task.append(
            f"{name} {epoch.sizes[name]:,} examples, mean "
            f"{sum(task_lengths) / len(task_lengths):.1f} "
            f"tokens, {sum(x > L for x in task_lengths)} longer than {L} (truncated)"
        )
    return (
        f"## Padding over one epoch ({epoch.steps} steps: "
        + ", ".join(f"{n} {epoch.schedule.count(n)}" for n in epoch.data)
        + ")\n\n"
        + table(["method", "positions computed", "real tokens", "padding fraction"], rows)
        + "\n\nTraining data: "
        + "; ".join(per_task)
        + f". Positions ratio fixed / {DEFAULT}: {pos[FIXED][0] / pos[DEFAULT][0]:.2f}."
    )


class Trainers:
    """Each method's own copy of the driver's model and optimizer (the default method trains the
    original), taking the epoch's training steps in that method's batches."""

    def __init__(self, epoch: Epoch) -> None:
        cfg = epoch.cfg
        self.epoch = epoch
        self.models = {
            m: epoch.model if m == DEFAULT else copy.deepcopy(epoch.model) for m in epoch.plan
        }
        self.optimizers = {
            m: adamw_for(self.models[m], cfg.lr, cfg.weight_decay, cfg.layer_decay)
            for m in self.models
        }
        self.step_modules = {m: TrainingStep(self.models[m]) for m in self.models}

    def run_step(self, method: str, step: int) -> float:
        """Seconds of one full driver step (collate = tokenize, forward, loss, backward, AdamW)
        of step ``step`` of the epoch in ``method``'s batches."""
        epoch = self.epoch
        name, indices = epoch.plan[method][step]
        task, train = get_task(name), epoch.data[name]["train"]
        start = time.perf_counter()
        separate = epoch.model.encodes_separately(task)
        batch = collate(task, [train[i] for i in indices], epoch.tokenizer, separate)
        if method == FIXED:
            batch = _common.pad_batch(batch, epoch.cfg.model.max_length)
        step, optimizer = self.step_modules[method], self.optimizers[method]
        train_step(step, [(task, batch)], optimizer, HostChecked())[0].item()
        return time.perf_counter() - start


def measured_steps(epoch: Epoch, steps: int) -> list[int]:
    """The ``steps`` steps of the epoch that are timed, spread evenly over it."""
    return [int((k + 0.5) * epoch.steps / steps) for k in range(steps)]


def time_methods(epoch: Epoch, chosen: list[int], chunk: int) -> dict[str, list[float]]:
    """Seconds of each method's steps at ``chosen``, after one warm-up step each; the methods
    interleaved in chunks of ``chunk`` steps, their order reversed every other round."""
    trainers = Trainers(epoch)
    for m in trainers.models:
        trainers.models[m].train()
        trainers.run_step(m, chosen[0])  # warm-up, not counted
    times: dict[str, list[float]] = {m: [] for m in trainers.models}
    order = list(trainers.models)
    for c, start in enumerate(range(0, len(chosen), chunk)):
        for method in order if c % 2 == 0 else order[::-1]:
            for step in chosen[start : start + chunk]:
                times[method].append(trainers.run_step(method, step))
        means = ", ".join(f"{m} {sum(t) / len(t):.3f}" for m, t in times.items())
        print(f"chunk {c + 1}: s/step {means}", flush=True)
    return times


def timing_section(epoch: Epoch, chosen: list[int], times: dict[str, list[float]]) -> str:
    """The report's timing table: each method's step time and extrapolated epoch time."""
    mean = {m: sum(t) / len(t) for m, t in times.items()}
    ratio = mean[FIXED] / mean[DEFAULT]
    rows = [
        [
            m,
            len(times[m]),
            f"{mean[m]:.3f}",
            f"{median(times[m]):.3f}",
            f"{mean[m] * epoch.steps / 60:.1f}",
            f"{mean[m] / mean[DEFAULT]:.2f}",
        ]
        for m in times
    ]
    return (
        "## Training time\n\n"
        + table(
            [
                "method",
                "measured steps",
                "mean s / step",
                "median s / step",
                "epoch (min, extrap.)",
                f"time / {DEFAULT}",
            ],
            rows,
        )
        + f"\n\nEpoch time ratio fixed / {DEFAULT}: **{ratio:.2f}×** "
        f"(target ≥ 2×: {'met' if ratio >= 2 else 'NOT met'}). The steps measured are steps "
        f"{chosen[0]}, {chosen[1]}, ..., {chosen[-1]} of the epoch's {epoch.steps}, the same "
        f"for every method (each method's own batches at those steps). Dev scores of the pool "
        f"sizes: gpu-batching.md (seeds 1-3) and batching.md."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = start_report(args.steps, args.chunk)
    epoch = plan_epoch(args.data_dir)
    report.add(padding_section(epoch))
    # Timed steps: the same steps of the epoch for every method, interleaved in chunks.
    chosen = measured_steps(epoch, args.steps)
    report.add(timing_section(epoch, chosen, time_methods(epoch, chosen, args.chunk)))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
