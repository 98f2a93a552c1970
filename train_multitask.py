"""Multitask fine-tuning of one BERT on SST-5 sentiment, Quora paraphrase and STS-B similarity.

    python train_multitask.py --option finetune --sampling annealed
    python train_multitask.py --option adapter --sampling annealed
    python train_multitask.py --evaluate runs/finetune-annealed       # predictions from a saved run

The run: config (multitask/config.py: every flag, parsed and checked) -> data -> model ->
optimizer -> task sampler -> training loop -> evaluation.
Each step draws one task (round-robin, or p_i ∝ N_i^α, see minbert/sampling.py), takes that task's
next length-grouped batch, and updates the shared encoder (or only the plug-ins and heads) on that
task's loss (with --step_gradient: a batch of every task, minbert/pcgrad.py). The model layer
is multitask/model.py; everything the run writes goes through its RunFolder (multitask/run.py):
config.json, metrics.jsonl, train_log.jsonl, checkpoints, prediction files and learning-curve
plots; see README.md.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from minbert.optimizer import linear_warmup_decay
from minbert.plugins import format_parameter_report, parameter_report
from minbert.sampling import TaskSampler
from minbert.tokenizer import Tokenizer
from multitask.batching import BatchStream, length_grouped_batches, make_batch
from multitask.collate import EncodedSplit
from multitask.config import TrainConfig, build_parser, parse_args
from multitask.data import Data, encode_train, fingerprints, load_data, train_lengths
from multitask.devices import Distributed, autocast, pick_device, set_up_distributed
from multitask.distillation import gold_weight, parse_teachers, teacher_outputs
from multitask.errors import RunStopped, UsageError, run_command, stop_reason
from multitask.evaluation import calibrate_similarity_heads, evaluate
from multitask.model import MultitaskModel, build_model
from multitask.run import RunFolder
from multitask.step import (
    NonFiniteLoss,
    Smart,
    TrainingStep,
    loss_weights,
    optimizer_for,
    train_step_tasks,
)
from tasks import get_task

__all__ = ["TrainConfig", "build_parser", "main", "parse_args", "train"]


def read_data(cfg: TrainConfig) -> tuple[Data, str]:
    """The chosen tasks' files (multitask/data.py) and the report of their skipped rows."""
    explicit = [key for key, path in cfg.files.items() if path]
    return load_data(cfg.tasks, cfg.data_path, cfg.strict, cfg.limit, explicit, cfg.train_fraction)


def make_model(cfg: TrainConfig, device: torch.device) -> MultitaskModel:
    """build_model with the config's settings; --add_to also loads the earlier runs."""
    try:
        model = build_model(cfg.model, cfg.tasks, cfg.dropout, cfg.base_tasks)
    except ValueError as err:
        raise UsageError(f"--option {cfg.model.option}: {err}") from err
    if cfg.add_to:
        RunFolder(cfg.add_to).load_into(model)
    return model.to(device)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What the training loop works with, built by ``set_up``; ``extra`` is the driver's part of
    last.pt (running losses, examples seen, seconds trained, the training files' fingerprints)."""

    cfg: TrainConfig
    folder: RunFolder
    dist: Distributed
    device: torch.device
    data: Data
    tokenizer: Tokenizer
    model: MultitaskModel
    step_module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    sampler: TaskSampler
    streams: dict[str, BatchStream]
    train: dict[str, EncodedSplit]  # each task's training split, tokenized once
    teachers: dict[str, torch.Tensor]  # a taught task's teacher outputs (N, C) on it
    smart: Smart | None
    steps_per_epoch: int
    extra: dict[str, Any]
    # Each task's losses since the last read, still on the device (see read_losses).
    pending: dict[str, list[torch.Tensor]] = field(default_factory=lambda: defaultdict(list))
    step: int = 0  # the step the loop is at, for the message of a run stopped in it

    def parts(self) -> dict[str, Any]:
        """What last.pt saves and restores besides the step (multitask/run.py: save_last)."""
        teacher = self.smart.teacher if self.smart else None
        return dict(
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            streams=self.streams,
            teacher=teacher,
        )


def set_up(cfg: TrainConfig) -> Run:
    """Everything is read and built before the run folder is touched; then folder, optimizer,
    sampler and batch streams."""
    dist, device = set_up_distributed(cfg.device, cfg.bf16, cfg.batch_size)
    if dist.world > 1 and cfg.step_gradient != "one-task":
        raise UsageError(f"--step_gradient {cfg.step_gradient} runs in one process only")
    folder = RunFolder(cfg.out_dir, writes=dist.rank == 0)
    folder.check_can_start(cfg.resume, cfg.overwrite)
    torch.manual_seed(cfg.seed)
    data, skipped = read_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, max_length=cfg.model.max_length)
    model = make_model(cfg, device)
    train = {name: splits["train"] for name, splits in data.items()}
    teachers = parse_teachers(cfg.teachers, cfg.tasks)
    if not cfg.resume:  # a resumed run restores its heads
        calibrate_similarity_heads(model, train, tokenizer, cfg.batch_size, device)
    folder.start(cfg.resume)
    if not cfg.resume:
        folder.write_config(cfg.to_flat())
    if skipped:
        print(f"every skipped row is listed in {folder.write_skipped_rows(skipped)}")
    if cfg.add_to:
        print(f"adding {cfg.tasks} to {cfg.add_to}, whose settings and tasks {cfg.base_tasks} stay")
    report = parameter_report(model.bert, dict(model.heads))
    print(format_parameter_report(report))
    folder.write_parameters(report)
    lengths = train_lengths(data, tokenizer, model.encodes_separately, cfg.model.max_length)
    sizes = {name: len(splits["train"]) for name, splits in data.items()}
    per_step = cfg.batch_size * (1 if cfg.step_gradient == "one-task" else len(sizes))
    steps_per_epoch = cfg.steps_per_epoch or math.ceil(sum(sizes.values()) / per_step)
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = optimizer_for(model, cfg.lr, cfg.weight_decay, cfg.layer_decay, cfg.encoder_lr)
    scheduler = linear_warmup_decay(optimizer, int(cfg.warmup * total_steps), total_steps)
    smart = Smart.for_model(cfg.smart_settings, model) if cfg.smart else None
    step_module: torch.nn.Module = TrainingStep(
        model, smart, loss_weights(cfg.loss_weights, cfg.tasks)
    )
    if dist.world > 1:  # other tasks' heads and plug-ins take no part in a step
        step_module = torch.nn.parallel.DistributedDataParallel(
            step_module, find_unused_parameters=True
        )
    grouping = functools.partial(length_grouped_batches, pool_factor=cfg.batch_pool)
    streams = {n: BatchStream(n, lengths[n], cfg.batch_size, cfg.seed, grouping) for n in data}
    sampler = TaskSampler(cfg.sampling, sizes, cfg.epochs, cfg.seed)
    train_files = [cfg.data_path(get_task(name), "train") for name in cfg.tasks]
    extra = {
        "running": {n: [] for n in data},
        "examples": 0,
        "seconds": 0.0,
        "train_files": fingerprints(train_files),
    }
    return Run(
        cfg,
        folder,
        dist,
        device,
        data,
        tokenizer,
        model,
        step_module,
        optimizer,
        scheduler,
        sampler,
        streams,
        encode_train(data, tokenizer, model.encodes_separately, cfg.swap_pairs),
        teacher_outputs(folder, teachers, train, device, cfg.resume),
        smart,
        steps_per_epoch,
        extra,
    )


def one_step(run: Run, names: list[str], step: int) -> list[torch.Tensor] | None:
    """Train on the next batch of each task in ``names`` (one, unless --step_gradient combines
    every task's); the losses, or None when a non-finite loss was skipped."""
    cfg, batches = run.cfg, []
    for name in names:
        indices = run.dist.shard(run.streams[name].next())
        batch = make_batch(run.train[name], indices, run.device, cfg.swap_pairs)
        if name in run.teachers:  # the teacher's outputs on these examples, and λ
            batch["teacher"] = run.teachers[name][indices].to(run.device)
            total = run.steps_per_epoch * cfg.epochs
            batch["gold"] = gold_weight(step, total, cfg.teacher_weight)
        batches.append((get_task(name), batch))
    bf16, skip = autocast(cfg.bf16, run.device), cfg.nonfinite == "skip"
    pcgrad = cfg.seed * 1_000_003 + step if cfg.step_gradient == "pcgrad" else None  # its order
    try:
        losses = train_step_tasks(
            run.step_module, batches, run.optimizer, run.scheduler, bf16, skip, pcgrad
        )
    except NonFiniteLoss as err:
        raise RunStopped(
            f"{err} at step {step} on task {err.task}; the run stops before any "
            f"update from this step; {run.folder.on_disk()}",
            3,
        ) from None
    run.extra["examples"] += sum(len(b["labels"]) for _, b in batches) if losses else 0
    return losses


def train(cfg: TrainConfig) -> dict[str, Any]:
    try:
        run = set_up(cfg)
        step, best = run.folder.resume(run.parts(), run.extra) if cfg.resume else (0, -math.inf)
    except KeyboardInterrupt as err:  # nothing of this command's training is on disk yet
        (what, code), on_disk = stop_reason(err), RunFolder(cfg.out_dir).on_disk()
        raise RunStopped(f"{what} while setting up the run; {on_disk}", code) from None
    try:
        step, best = train_epochs(run, step, best)
    except KeyboardInterrupt as err:
        what, code = stop_reason(err)
        raise RunStopped(f"{what} at step {run.step}; {run.folder.on_disk()}", code) from None
    except OSError as err:  # a full disk, a folder that went away
        raise RunStopped(
            f"{err.strerror or err} while writing to {run.folder.path} at step "
            f"{run.step}; {run.folder.on_disk()}",
            1,
        ) from None
    return finish(run, step, best)


def train_epochs(run: Run, step: int, best: float) -> tuple[int, float]:
    """The loop: an epoch's task schedule, one batch a step, logs, evaluations and saves."""
    cfg, spe = run.cfg, run.steps_per_epoch
    one_task = cfg.step_gradient == "one-task"  # else every task's batch in every step
    total, start = spe * cfg.epochs, time.time() - run.extra["seconds"]
    run.step = step
    while step < total:
        epoch = step // spe + 1
        schedule = run.sampler.schedule(epoch, spe)
        if step % spe == 0 and one_task:
            steps = Counter(schedule)  # the epoch's drawn schedule: each task's share of steps
            shares = ", ".join(f"{k} {steps[k]} ({steps[k] / spe:.3f})" for k in run.data)
            print(f"epoch {epoch}/{cfg.epochs}: steps per task {shares}")
        run.model.train()
        with tqdm(
            total=spe,
            initial=step % spe,
            desc=f"epoch {epoch}/{cfg.epochs}",
            disable=run.dist.rank != 0,
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.1 if sys.stderr.isatty() else 60,
        ) as bar:  # closed also when the loop stops: an error line starts a line
            while step < epoch * spe:
                names = [schedule[step % spe]] if one_task else list(run.data)
                step += 1
                run.step = step
                if not take_step(run, names, step, epoch, bar):
                    continue
                run.extra["seconds"] = time.time() - start
                if step % spe == 0 or (cfg.eval_every and step % cfg.eval_every == 0):
                    best = evaluate_and_save(run, step, epoch, best)
                elif cfg.save_every and step % cfg.save_every == 0:
                    save_last(run, step, best)
    return step, best


def take_step(run: Run, names: list[str], step: int, epoch: int, bar: tqdm) -> bool:
    """One step of the loop: the update, its losses kept on the device, and every --log_every
    steps the log line; False when a non-finite loss was skipped."""
    losses = one_step(run, names, step)
    bar.update(1)
    if losses is None:
        message = f"non-finite loss at step {step} on task(s) {','.join(names)}: step skipped"
        tqdm.write(message, file=sys.stderr)
        return False
    for name, loss in zip(names, losses):
        run.pending[name].append(loss)  # stays on the device until the next read
    if step % run.cfg.log_every == 0 or step == run.steps_per_epoch * run.cfg.epochs:
        read_losses(run)
        logged = run.folder.log_training(step, epoch, run.extra["running"])
        bar.set_postfix(loss=", ".join(f"{k} {v:.3f}" for k, v in logged.items()), refresh=False)
    return True


def read_losses(run: Run) -> None:
    """Move the losses kept on the device since the last read into ``extra["running"]`` (their
    means over the processes, as Python numbers): one read of the device, a CPU-GPU sync point,
    made only at --log_every and before last.pt is written, never in every step."""
    for name, losses in run.pending.items():
        if losses:
            run.extra["running"][name] += run.dist.means(losses)
            losses.clear()


def save_last(run: Run, step: int, best: float) -> None:
    """last.pt, with every loss read from the device first so that a resume logs as the
    uninterrupted run does."""
    read_losses(run)
    run.folder.save_last(step, best, run.parts(), run.extra)


def evaluate_and_save(run: Run, step: int, epoch: int, best: float) -> float:
    """Evaluate on the dev sets, log, keep the best checkpoint, write last.pt; the new best."""
    run.folder.check_finite(run.model, step)  # no evaluation of a broken model
    metrics = dev_metrics(run.model, run.data, run.tokenizer, run.cfg, run.device)
    run.model.train()
    run.folder.log_metrics(step, epoch, metrics)
    tqdm.write(
        f"step {step} epoch {epoch}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
        file=sys.stdout,
    )
    if metrics["overall"] > best:
        best = metrics["overall"]
        run.folder.save_best(run.model, step)
    save_last(run, step, best)
    return best


def dev_metrics(model, data: Data, tokenizer, cfg: TrainConfig, device) -> dict[str, float]:
    dev = {name: splits["dev"] for name, splits in data.items()}
    return evaluate(model, dev, tokenizer, 2 * cfg.batch_size, device, autocast(cfg.bf16, device))


def finish(run: Run, step: int, best: float) -> dict[str, Any]:
    """Reload the best checkpoint, write predictions, task files, summary and plots."""
    cfg, folder, seconds = run.cfg, run.folder, run.extra["seconds"]
    examples = round(run.dist.mean(torch.tensor(float(run.extra["examples"]))) * run.dist.world)
    if run.dist.world > 1:
        torch.distributed.barrier()  # rank 0's best checkpoint is on disk before anyone reads it
    folder.load_best(run.model)
    summary = {
        "best_overall": best,
        "wall_clock_s": round(seconds, 1),
        "train_examples_per_s": round(examples / max(seconds, 1e-9), 2),
        "steps": step,
        "train_examples": examples,
        "processes": run.dist.world,
    }
    folder.write_predictions(
        run.model,
        run.data,
        run.tokenizer,
        2 * cfg.batch_size,
        run.device,
        autocast(cfg.bf16, run.device),
    )
    if cfg.model.option != "finetune":
        folder.save_task_checkpoints(run.model)
    folder.write_summary(summary)
    if not cfg.no_plots:
        folder.plot_learning_curves(cfg.tasks)
    print(f"done: {summary}")
    if run.dist.world > 1:
        torch.distributed.destroy_process_group()
    return summary


def evaluate_only(cfg: TrainConfig) -> dict[str, float]:
    """Rebuild the model from RUN_DIR/config.json, load its best checkpoint, evaluate, predict."""
    device = pick_device(cfg.device)
    data, _ = read_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, max_length=cfg.model.max_length)
    model = make_model(cfg, device)
    RunFolder(cfg.evaluate).load_best(model)
    metrics = dev_metrics(model, data, tokenizer, cfg, device)
    print("dev: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    bf16 = autocast(cfg.bf16, device)
    RunFolder(cfg.out_dir).write_predictions(
        model, data, tokenizer, 2 * cfg.batch_size, device, bf16
    )
    return metrics


def main(argv: list[str] | None = None) -> int:
    def body() -> None:
        cfg = parse_args(argv)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        evaluate_only(cfg) if cfg.evaluate else train(cfg)

    return run_command(body)


if __name__ == "__main__":
    sys.exit(main())
