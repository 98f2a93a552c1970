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
import inspect
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from minbert.optimizer import linear_warmup_decay
from minbert.plugins import format_parameter_report, parameter_report
from minbert.sampling import TaskSampler
from minbert.tokenizer import Tokenizer
from multitask.batching import BatchStream, length_grouped_batches, make_batch
from multitask.collate import EncodedSplit, to_device
from multitask.compiled import CompiledStep, compilations, mode_for
from multitask.config import TrainConfig, build_parser, parse_args
from multitask.data import (
    Data,
    encode_split,
    encode_train,
    fingerprints,
    load_data,
    on_device,
    train_lengths,
)
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
    train_step_unread,
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
    train: dict[str, EncodedSplit]  # each task's training split, tokenized once, on the device
    dev: dict[str, EncodedSplit]  # each task's dev split, tokenized once, on the device
    teachers: dict[str, torch.Tensor]  # a taught task's teacher outputs (N, C) on it
    smart: Smart | None
    steps_per_epoch: int
    extra: dict[str, Any]
    # On a GPU, "every loss so far was finite" as a flag on the device (see unread_flag); None:
    # each step checks its losses on the host.
    healthy: torch.Tensor | None = None
    # The steps since the last read: (step, task names, their losses still on the device, the
    # examples they trained on); see read_losses.
    pending: list[tuple[int, list[str], list[torch.Tensor], int]] = field(default_factory=list)
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
    if cfg.compile:
        compile_mode(cfg, dist, device)  # refused before anything is written
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
    step_module = make_step(cfg, model, smart, dist, device)
    grouping = functools.partial(length_grouped_batches, pool_factor=cfg.batch_pool)
    streams = {n: BatchStream(n, lengths[n], cfg.batch_size, cfg.seed, grouping) for n in data}
    sampler = TaskSampler(cfg.sampling, sizes, cfg.epochs, cfg.seed)
    train_files = [cfg.data_path(get_task(name), "train") for name in cfg.tasks]
    extra = {
        "running": {n: [] for n in data},
        "examples": 0,
        "seconds": 0.0,
        "train_files": fingerprints(train_files),
        "eval_seconds": 0.0,
    }
    separately = model.encodes_separately
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
        on_device(
            encode_train(data, tokenizer, separately, cfg.swap_pairs, cfg.pad_multiple), device
        ),
        on_device(encode_split(data, tokenizer, separately, "dev"), device),
        teacher_outputs(folder, teachers, train, device, cfg.resume),
        smart,
        steps_per_epoch,
        extra,
        unread_flag(cfg, device, optimizer),
    )


def make_step(
    cfg: TrainConfig,
    model: MultitaskModel,
    smart: Smart | None,
    dist: Distributed,
    device: torch.device,
) -> torch.nn.Module:
    """The loss of a step as a module: ``TrainingStep``, wrapped for several processes
    (DistributedDataParallel) or compiled (``--compile``, multitask/compiled.py)."""
    step: torch.nn.Module = TrainingStep(model, smart, loss_weights(cfg.loss_weights, cfg.tasks))
    if dist.world > 1:  # other tasks' heads and plug-ins take no part in a step
        step = torch.nn.parallel.DistributedDataParallel(step, find_unused_parameters=True)
    if cfg.compile:
        step = CompiledStep(step, compile_mode(cfg, dist, device))
    return step


def compile_mode(cfg: TrainConfig, dist: Distributed, device: torch.device) -> str:
    """torch.compile's mode for --compile here, or a UsageError where it cannot run."""
    try:
        return mode_for(cfg.compile_mode, device, dist.world)
    except ValueError as err:
        raise UsageError(str(err)) from None


# Device types on which a step reads nothing on the host (tests add "cpu" to try the path).
UNREAD_ON = ("cuda",)


def unread_flag(cfg: TrainConfig, device: torch.device, optimizer) -> torch.Tensor | None:
    """The run's device-side "every loss so far was finite" (True), where steps need not read
    their losses on the host (multitask.step.train_step_unread): on a GPU, with the
    multi-tensor AdamW (its step takes ``apply_if``), without SMART (its teacher counts updates
    on the host) or PCGrad (it projects gradients that may be NaN). Else None."""
    takes_flag = "apply_if" in inspect.signature(optimizer.step).parameters
    if device.type not in UNREAD_ON or not takes_flag or cfg.smart or cfg.step_gradient == "pcgrad":
        return None
    return torch.ones((), dtype=torch.bool, device=device)


def one_step(run: Run, names: list[str], step: int) -> list[torch.Tensor] | None:
    """Train on the next batch of each task in ``names`` (one, unless --step_gradient combines
    every task's); the losses, or None when a non-finite loss was skipped (found on the host;
    on a GPU it is found when the losses are read, see read_losses)."""
    cfg, batches = run.cfg, []
    for name in names:
        indices = run.dist.shard(run.streams[name].next())
        batch = make_batch(run.train[name], indices, run.device, cfg.swap_pairs)
        if name in run.teachers:  # the teacher's outputs on these examples, and λ
            batch["teacher"] = to_device(run.teachers[name][indices], run.device)
            total = run.steps_per_epoch * cfg.epochs
            batch["gold"] = gold_weight(step, total, cfg.teacher_weight)
        batches.append((get_task(name), batch))
    bf16, skip = autocast(cfg.bf16, run.device), cfg.nonfinite == "skip"
    if run.healthy is not None:
        losses = train_step_unread(
            run.step_module, batches, run.optimizer, run.healthy, run.scheduler, bf16, skip
        )
    else:
        pcgrad = cfg.seed * 1_000_003 + step if cfg.step_gradient == "pcgrad" else None
        try:
            losses = train_step_tasks(
                run.step_module, batches, run.optimizer, run.scheduler, bf16, skip, pcgrad
            )
        except NonFiniteLoss as err:
            raise RunStopped(nonfinite_message(run, step, err.task, err), 3) from None
    if losses is not None:  # read, with the examples counted, at the next read_losses
        run.pending.append((step, names, losses, sum(len(b["labels"]) for _, b in batches)))
    return losses


def nonfinite_message(run: Run, step: int, task: str, what: object) -> str:
    return (
        f"{what} at step {step} on task {task}; the run stops before any update from this "
        f"step; {run.folder.on_disk()}"
    )


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


def steps_per_task(run: Run, schedule: list[str]) -> dict[str, int]:
    """How many steps of an epoch's drawn schedule train each task (a task it never draws: 0)."""
    counts = Counter(schedule)
    return {task: counts[task] for task in run.data}


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
            steps = steps_per_task(run, schedule)
            shares = ", ".join(f"{k} {n} ({n / spe:.3f})" for k, n in steps.items())
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
                take_step(run, names, step, epoch, bar)
                run.extra["seconds"] = time.time() - start
                if step % spe == 0 or (cfg.eval_every and step % cfg.eval_every == 0):
                    best = evaluate_and_save(run, step, epoch, best)
                elif cfg.save_every and step % cfg.save_every == 0:
                    save_last(run, step, best)
    return step, best


def take_step(run: Run, names: list[str], step: int, epoch: int, bar: tqdm) -> None:
    """One step of the loop: the update, its losses kept on the device, and every --log_every
    steps the log line."""
    losses = one_step(run, names, step)
    bar.update(1)
    if losses is None:
        skipped(step, names)
    if step % run.cfg.log_every == 0 or step == run.steps_per_epoch * run.cfg.epochs:
        read_losses(run)
        logged = run.folder.log_training(step, epoch, run.extra["running"])
        bar.set_postfix(loss=", ".join(f"{k} {v:.3f}" for k, v in logged.items()), refresh=False)


def skipped(step: int, names: list[str]) -> None:
    message = f"non-finite loss at step {step} on task(s) {','.join(names)}: step skipped"
    tqdm.write(message, file=sys.stderr)


def read_losses(run: Run) -> None:
    """Move the losses kept on the device since the last read into ``extra["running"]`` (their
    means over the processes, as Python numbers) and count the examples of their steps: one
    read of the device, a CPU-GPU sync point, made only at --log_every and before last.pt is
    written or an evaluation runs, never in every step. A step with a non-finite loss among
    them (possible only where steps do not read their losses, see unread_flag) took no update:
    with --nonfinite skip it is reported and left out; else the run stops here, naming it, with
    the weights as they were before it (no later step updated them either)."""
    if not run.pending:
        return
    values = iter(run.dist.means([loss for _, _, losses, _ in run.pending for loss in losses]))
    for step, names, losses, examples in run.pending:
        means = [next(values) for _ in losses]
        bad = [(name, v) for name, v in zip(names, means) if not math.isfinite(v)]
        if bad and run.cfg.nonfinite == "stop":
            name, value = bad[0]
            message = nonfinite_message(run, step, name, f"non-finite loss ({value})")
            raise RunStopped(f"{message} (found at step {run.step})", 3)
        if bad:
            skipped(step, names)
            continue
        for name, value in zip(names, means):
            run.extra["running"][name].append(value)
        run.extra["examples"] += examples
    run.pending.clear()


def save_last(run: Run, step: int, best: float) -> None:
    """last.pt, with every loss read from the device first so that a resume logs as the
    uninterrupted run does."""
    read_losses(run)
    run.folder.save_last(step, best, run.parts(), run.extra)


def evaluate_and_save(run: Run, step: int, epoch: int, best: float) -> float:
    """Evaluate on the dev sets, log, keep the best checkpoint, write last.pt; the new best."""
    read_losses(run)  # a run stopped by a non-finite loss stops before its evaluation
    run.folder.check_finite(run.model, step)  # no evaluation of a broken model
    started = time.time()
    metrics = dev_metrics(run.model, run.data, run.tokenizer, run.cfg, run.device, run.dev)
    run.extra["eval_seconds"] = run.extra.get("eval_seconds", 0.0) + time.time() - started
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


def dev_metrics(
    model, data: Data, tokenizer, cfg: TrainConfig, device, encoded=None
) -> dict[str, float]:
    """The dev metrics at --eval_batch_size, under bf16 autocast with --bf16; ``encoded``: the
    dev splits tokenized once (``Run.dev``)."""
    dev = {name: splits["dev"] for name, splits in data.items()}
    bf16 = autocast(cfg.bf16, device)
    return evaluate(model, dev, tokenizer, cfg.eval_batch_size, device, bf16, encoded)


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
        # seconds in dev evaluations (wall_clock_s holds all but the last, which follows it)
        "eval_s": round(run.extra.get("eval_seconds", 0.0), 1),
    }
    if cfg.compile:
        summary["compiled_graphs"] = compilations()
    if cfg.step_gradient == "one-task":  # the sampler's schedule, fixed by seed and epoch
        summary["steps_per_task"] = {
            str(e): steps_per_task(run, run.sampler.schedule(e, run.steps_per_epoch))
            for e in range(1, cfg.epochs + 1)
        }
    folder.write_predictions(
        run.model,
        run.data,
        run.tokenizer,
        cfg.eval_batch_size,
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
        model, data, tokenizer, cfg.eval_batch_size, device, bf16
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
