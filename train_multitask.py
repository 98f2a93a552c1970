"""Multitask fine-tuning of one BERT on SST-5 sentiment, Quora paraphrase and STS-B similarity.

    python train_multitask.py --option finetune --sampling annealed
    python train_multitask.py --option adapter --sampling annealed
    python train_multitask.py --evaluate runs/finetune-annealed       # predictions from a saved run

The run: config (multitask/config.py: every flag, parsed and checked) -> data -> model ->
optimizer -> task sampler -> training loop -> evaluation. Each step draws one task (round-robin,
or p_i ∝ N_i^α: minbert/sampling.py), takes its next length-grouped batch, and updates the shared
encoder (or only the plug-ins and heads) on its loss (multitask/step.py). Everything the run
writes goes through its RunFolder (multitask/run.py); see README.md.
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm import tqdm

from minbert.plugins import format_parameter_report, parameter_report
from minbert.sampling import TaskSampler
from minbert.tokenizer import Tokenizer
from multitask import extras
from multitask.batching import BatchStream, derived_seed, length_grouped_batches, make_batch
from multitask.collate import EncodedSplit
from multitask.config import TrainConfig, build_parser, parse_args
from multitask.data import (
    Data,
    encode_split,
    encode_train,
    fingerprints,
    load_data,
    on_device,
    report_truncation,
)
from multitask.devices import Distributed, autocast, pick_device, set_up_distributed
from multitask.errors import RunStopped, UsageError, run_command, stop_reason
from multitask.evaluation import calibrate_similarity_heads, evaluate, write_predictions
from multitask.model import MultitaskModel, build_model
from multitask.objectives import Smart, objective_for
from multitask.plots import plot_learning_curves
from multitask.run import RunFolder
from multitask.state import TrainingState
from multitask.step import (
    DeviceFlagged,
    FiniteWeights,
    HostChecked,
    LossLog,
    NonFiniteLoss,
    NonFiniteStep,
    Objective,
    TrainingStep,
    learning_rate,
    linear_warmup_decay,
    loss_weights,
    optimizer_for,
    train_step,
)
from tasks import get_task

__all__ = ["TrainConfig", "build_parser", "main", "parse_args", "train"]


def read_data(cfg: TrainConfig) -> tuple[Data, str]:
    """The chosen tasks' files (multitask/data.py) and the report of their skipped rows."""
    explicit = [key for key, path in cfg.files.items() if path]
    return load_data(cfg.tasks, cfg.data_path, cfg.strict, cfg.limit, explicit, cfg.train_fraction)


def make_model(
    cfg: TrainConfig, device: torch.device, hooks: extras.Hooks | None = None
) -> MultitaskModel:
    """build_model with the config's settings; --add_to also loads the earlier runs, --init_from
    the run it starts from; then the extras' ``wrap_model`` (``hooks``: the run's, else those of
    a run of ``cfg``)."""
    try:
        model = build_model(cfg.model, cfg.tasks, cfg.dropout, cfg.base_tasks)
    except ValueError as err:
        raise UsageError(f"--option {cfg.model.option}: {err}") from err
    if cfg.add_to:
        RunFolder(cfg.add_to).load_into(model)
    if cfg.init_from and not cfg.resume:  # a resumed run restores its weights from last.pt
        RunFolder(cfg.init_from).load_best(model, "--init_from", fit="overlap")
    model = (hooks or extras.Hooks(cfg)).fire("wrap_model", model)
    return model.to(device)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    """What the training loop works with, built by ``set_up``; ``state`` is where the run is
    (multitask/state.py), which last.pt saves with the ``parts``."""

    cfg: TrainConfig
    folder: RunFolder
    dist: Distributed
    device: torch.device
    data: Data
    tokenizer: Tokenizer
    model: MultitaskModel
    state: TrainingState
    step_module: torch.nn.Module  # the objective's loss as a module (multitask/objectives.py)
    autocast: AbstractContextManager  # every step's forward under it (bf16 with --bf16)
    update: HostChecked | DeviceFlagged  # how gradients become an update (multitask/step.py)
    optimizer: torch.optim.Optimizer
    scheduler: Any
    sampler: TaskSampler
    streams: dict[str, BatchStream]
    train: dict[str, EncodedSplit]  # each task's training split, tokenized once, on the device
    dev: dict[str, EncodedSplit]  # each task's dev split, tokenized once, on the device
    smart: Smart | None  # its momentum teacher is saved in last.pt
    steps_per_epoch: int
    log: LossLog  # the losses since the last read and line (multitask/step.py)
    hooks: extras.Hooks  # the extras' parts (multitask/extras.py), each hook fired by name
    step_function: Any = None  # an extra's function in place of train_step, or None: eager
    finite: FiniteWeights = field(default_factory=FiniteWeights)  # checked before each save

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

    def tell(self, event: str, *args: Any) -> None:
        """The extras' ``on_`` ``event``, in the process that writes the run folder only."""
        if self.dist.rank == 0:
            self.hooks.fire(event, *args)


def set_up(cfg: TrainConfig) -> Run:
    """Everything read and built before the run folder is touched; then the rest of the run."""
    dist, device = set_up_distributed(cfg.device, cfg.bf16, cfg.batch_size)
    hooks = extras.Hooks(cfg)
    refuse_what_cannot_run(cfg, dist, device, hooks)
    folder = RunFolder(cfg.out_dir, writes=dist.rank == 0)
    folder.check_can_start(cfg.resume, cfg.overwrite)
    torch.manual_seed(cfg.seed)
    data, skipped_rows = read_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, max_length=cfg.model.max_length)
    model = make_model(cfg, device, hooks)
    train = {name: splits["train"] for name, splits in data.items()}
    hooks.fire("on_set_up", folder, train, device)  # read before --overwrite removes anything
    if not cfg.resume:  # a resumed run restores its heads
        calibrate_similarity_heads(model, train, tokenizer, cfg.batch_size, device)
    folder.start(cfg.resume)
    if not cfg.resume:
        folder.write_config(cfg.to_flat())
    if skipped_rows:
        print(f"every skipped row is listed in {folder.write_skipped_rows(skipped_rows)}")
    if cfg.add_to:
        print(f"adding {cfg.tasks} to {cfg.add_to}, whose settings and tasks {cfg.base_tasks} stay")
    report = parameter_report(model.bert, dict(model.heads))
    print(format_parameter_report(report))
    folder.write_parameters(report)
    tables = encoded(cfg, data, tokenizer, model)
    sizes = {name: len(splits["train"]) for name, splits in data.items()}
    steps_per_epoch = epoch_length(cfg, sizes)
    total_steps = steps_per_epoch * cfg.epochs
    optimizer = optimizer_for(
        model,
        cfg.lr,
        cfg.weight_decay,
        cfg.layer_decay,
        cfg.encoder_lr,
        choose=functools.partial(hooks.fire, "choose_optimizer"),  # --optimizer's implementation
    )
    scheduler = linear_warmup_decay(optimizer, int(cfg.warmup * total_steps), total_steps)
    state = fresh_state(cfg, data)
    progress = extras.Progress(lambda: state.step, total_steps)
    inner = hooks.fire("wrap_objective", model, model, progress)  # an extra's objective
    objective = objective_for(model, inner, cfg.smart_settings if cfg.smart else None)
    group = functools.partial(length_grouped_batches, pool_factor=cfg.batch_pool)
    streams = {  # this process's share of each task's batches
        n: BatchStream(n, t.full_lengths, cfg.batch_size, cfg.seed, group, dist.rank, dist.world)
        for n, t in tables["train"].items()
    }
    run = Run(
        cfg=cfg,
        folder=folder,
        dist=dist,
        device=device,
        data=data,
        tokenizer=tokenizer,
        model=model,
        state=state,
        step_module=make_step(cfg, model, objective, dist, device, hooks),
        autocast=autocast(cfg.bf16, device),
        update=update_for(cfg, device, optimizer, state, hooks),
        optimizer=optimizer,
        scheduler=scheduler,
        sampler=TaskSampler(cfg.sampling, sizes, cfg.epochs, cfg.seed),
        streams=streams,
        train=on_device(tables["train"], device),
        dev=on_device(tables["dev"], device),
        smart=objective if isinstance(objective, Smart) else None,
        steps_per_epoch=steps_per_epoch,
        log=LossLog(state, dist.means, cfg.nonfinite == "stop", skipped),
        hooks=hooks,
    )
    run.step_function = step_function(run)
    return run


def encoded(
    cfg: TrainConfig, data: Data, tokenizer: Tokenizer, model: MultitaskModel
) -> dict[str, dict[str, EncodedSplit]]:
    """The training and dev splits, each tokenized once (as the model encodes a pair), and the
    report of what truncation cut."""
    separately = model.encodes_separately
    tables = {
        "train": encode_train(data, tokenizer, separately, cfg.swap_pairs, cfg.pad_multiple),
        "dev": encode_split(data, tokenizer, separately, "dev"),
    }
    report_truncation(data, tables, tokenizer, separately, cfg.model.max_length)
    return tables


def epoch_length(cfg: TrainConfig, sizes: dict[str, int]) -> int:
    """The steps of an epoch: --steps_per_epoch, or enough batches to see every training example
    once (a step takes one task's batch, or every task's)."""
    per_step = cfg.batch_size * (1 if cfg.step_gradient == "one-task" else len(sizes))
    return cfg.steps_per_epoch or math.ceil(sum(sizes.values()) / per_step)


def step_function(run: Run) -> Any:
    """An extra's function that trains each step in place of ``train_step`` (a replay of the
    step recorded once, say), given what a step is made of; else None: the eager step."""
    parts = extras.StepParts(
        processes=run.dist.world,
        device=run.device,
        optimizer=run.optimizer,
        update=run.update,
        model=run.model,
        train=run.train,
        pad_id=run.tokenizer.pad_token_id,
    )
    return run.hooks.fire("choose_step_function", parts)


def refuse_what_cannot_run(
    cfg: TrainConfig, dist: Distributed, device: torch.device, hooks: extras.Hooks
) -> None:
    """What these processes and this device cannot run, refused before anything is written."""
    if dist.world > 1 and cfg.step_gradient != "one-task":
        raise UsageError(f"--step_gradient {cfg.step_gradient} runs in one process only")
    for line in hooks.fire("check_machine", device, dist.world):
        raise UsageError(line)


def fresh_state(cfg: TrainConfig, data: Data) -> TrainingState:
    """Where a run is when it starts: at step 0, with the training files' fingerprints."""
    files = fingerprints([cfg.data_path(get_task(n), "train") for n in cfg.tasks])
    return TrainingState(running={n: [] for n in data}, train_files=files)


def make_step(
    cfg: TrainConfig,
    model: MultitaskModel,
    objective: Objective,
    dist: Distributed,
    device: torch.device,
    hooks: extras.Hooks,
) -> torch.nn.Module:
    """The loss of a step as a module: ``TrainingStep``, wrapped for several processes
    (DistributedDataParallel), then by the extras' ``wrap_step`` hooks."""
    weights = loss_weights(cfg.loss_weights, cfg.tasks)
    step: torch.nn.Module = TrainingStep(model, objective, weights)
    if dist.world > 1:  # other tasks' heads and plug-ins take no part in a step
        step = torch.nn.parallel.DistributedDataParallel(step, find_unused_parameters=True)
    return hooks.fire("wrap_step", step, device, dist.world)


def update_for(
    cfg: TrainConfig, device: torch.device, optimizer, state: TrainingState, hooks: extras.Hooks
) -> HostChecked | DeviceFlagged:
    """How a step updates (multitask/step.py): an extra's strategy where its ``update`` hook
    gives one (its seed the step's); on a GPU (``--nonfinite_check device``, the default there)
    no read of the host, where the multi-tensor AdamW can gate its update on a device flag; else
    the host check."""
    skip = cfg.nonfinite == "skip"
    chosen = hooks.fire("choose_update", lambda: derived_seed(cfg.seed, state.step), skip)
    if chosen is not None:
        return chosen
    if device_checked(cfg, device, optimizer):
        return DeviceFlagged(torch.ones((), dtype=torch.bool, device=device), skip)
    return HostChecked(skip)


def device_checked(cfg: TrainConfig, device: torch.device, optimizer) -> bool:
    """Whether the steps leave a loss's finiteness on the device (``--nonfinite_check``; auto:
    on a GPU, without SMART, whose teacher counts updates on the host); only an optimizer that
    gates its update on a device flag can (the student tree's AdamW cannot: the host checks).
    An extra's update strategy (``update_for``) decides this for itself."""
    auto = device.type == "cuda" and not cfg.smart
    wanted = cfg.nonfinite_check == "device" or (cfg.nonfinite_check == "auto" and auto)
    return wanted and getattr(optimizer, "gates_on_device", False)


def nonfinite_message(run: Run, step: int, task: str, what: object) -> str:
    return (
        f"{what} at step {step} on task {task}; the run stops before any update from this "
        f"step; {run.folder.on_disk()}"
    )


def train(cfg: TrainConfig) -> dict[str, Any]:
    try:
        run = set_up(cfg)
        if cfg.resume:
            run.state.continue_from(run.folder.resume(run.parts(), run.state.train_files))
        run.tell("on_start", run.folder, run.state.step)  # a resume's reports past it dropped
    except KeyboardInterrupt as err:  # nothing of this command's training is on disk yet
        (what, code), on_disk = stop_reason(err), RunFolder(cfg.out_dir).on_disk()
        raise RunStopped(f"{what} while setting up the run; {on_disk}", code) from None
    try:
        train_epochs(run)
    except KeyboardInterrupt as err:
        what, code = stop_reason(err)
        raise RunStopped(f"{what} at step {run.state.step}; {run.folder.on_disk()}", code) from None
    except OSError as err:  # a full disk, a folder that went away
        raise RunStopped(
            f"{err.strerror or err} while writing to {run.folder.path} at step "
            f"{run.state.step}; {run.folder.on_disk()}",
            1,
        ) from None
    return finish(run)


def steps_per_task(run: Run, schedule: list[str]) -> dict[str, int]:
    """How many steps of an epoch's drawn schedule train each task (a task it never draws: 0)."""
    counts = Counter(schedule)
    return {task: counts[task] for task in run.data}


def train_epochs(run: Run) -> None:
    """The loop: draw the task, take its batch, step, log; evaluate and save on their steps."""
    cfg, spe, state = run.cfg, run.steps_per_epoch, run.state
    one_task = cfg.step_gradient == "one-task"  # else every task's batch in every step
    total, start = spe * cfg.epochs, time.time() - state.seconds
    while state.step < total:
        epoch = state.step // spe + 1
        schedule = run.sampler.schedule(epoch, spe)
        if state.step % spe == 0 and one_task:
            print(f"epoch {epoch}/{cfg.epochs}: steps per task {shares(run, schedule)}")
        run.model.train()
        with progress_bar(run, epoch, state.step % spe) as bar:
            while state.step < epoch * spe:
                names = [schedule[state.step % spe]] if one_task else list(run.data)
                state.step += 1
                take_step(run, names)
                bar.update(1)
                if state.step % cfg.log_every == 0 or state.step == total:
                    log_line(run, epoch, bar)
                state.seconds = time.time() - start
                if state.step % spe == 0 or (cfg.eval_every and state.step % cfg.eval_every == 0):
                    evaluate_and_save(run, epoch)
                elif cfg.save_every and state.step % cfg.save_every == 0:
                    save_last(run)


def take_step(run: Run, names: list[str]) -> None:
    """One update from the next batch of each task in ``names``; its losses stay on the device
    until the log reads them."""
    batches = []
    for name in names:
        batch = make_batch(run.train[name], run.streams[name].next(), run.cfg.swap_pairs)
        batches.append((run.model.tasks[name], batch))
    train = run.step_function or train_step  # an extra's (see step_function), or eager
    try:
        losses = train(
            run.step_module,
            batches,
            run.optimizer,
            run.update,
            run.scheduler,
            run.autocast,
            run.cfg.max_grad_norm,
        )
    except NonFiniteLoss as err:
        raise RunStopped(nonfinite_message(run, run.state.step, err.task, err), 3) from None
    if losses is None:
        skipped(run.state.step, names)
    else:
        run.log.add(run.state.step, names, losses, sum(len(b.labels) for _, b in batches))


def log_line(run: Run, epoch: int, bar: tqdm) -> None:
    """The mean loss of each task since the last line, into train_log.jsonl and the bar."""
    read_losses(run)  # the losses come to the host here: a CPU-GPU sync point
    logged = run.log.line()
    run.folder.log_training(run.state.step, epoch, logged)
    run.tell("on_log", run.state.step, logged, learning_rate(run.optimizer))
    bar.set_postfix(loss=", ".join(f"{k} {v:.3f}" for k, v in logged.items()), refresh=False)


def read_losses(run: Run) -> None:
    """Read the losses kept on the device (``LossLog.read``); a non-finite one, found here
    where the steps leave finiteness on the device, stops the run naming its step."""
    try:
        run.log.read()
    except NonFiniteStep as err:
        message = nonfinite_message(run, err.step, err.task, f"non-finite loss ({err.value})")
        raise RunStopped(f"{message} (found at step {run.state.step})", 3) from None


def skipped(step: int, names: list[str]) -> None:
    message = f"non-finite loss at step {step} on task(s) {','.join(names)}: step skipped"
    tqdm.write(message, file=sys.stderr)


def shares(run: Run, schedule: list[str]) -> str:
    steps, spe = steps_per_task(run, schedule), run.steps_per_epoch
    return ", ".join(f"{k} {n} ({n / spe:.3f})" for k, n in steps.items())


def progress_bar(run: Run, epoch: int, done: int) -> tqdm:
    """The epoch's bar on standard error (closed also when the loop stops: an error line starts
    a line); rank 0 only."""
    return tqdm(
        total=run.steps_per_epoch,
        initial=done,
        desc=f"epoch {epoch}/{run.cfg.epochs}",
        disable=run.dist.rank != 0,
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 60,
    )


def save_last(run: Run) -> None:
    """last.pt, with every loss read from the device first so that a resume logs as the
    uninterrupted run does."""
    read_losses(run)
    run.finite.check(run.model, run.state.step, run.folder)
    run.folder.save_last(run.state, run.parts())


def evaluate_and_save(run: Run, epoch: int) -> None:
    """Evaluate on the dev sets, log, keep the best checkpoint (``state.best``), write last.pt."""
    state = run.state
    read_losses(run)  # a run stopped by a non-finite loss stops before its evaluation
    run.finite.check(run.model, state.step, run.folder)  # no evaluation of a broken model
    started = time.time()
    metrics = dev_metrics(run.model, run.data, run.tokenizer, run.cfg, run.device, run.dev)
    state.eval_seconds += time.time() - started
    run.folder.log_metrics(state.step, epoch, metrics)
    run.tell("on_evaluate", state.step, metrics)
    scores = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
    tqdm.write(f"step {state.step} epoch {epoch}: {scores}", file=sys.stdout)
    if metrics["overall"] > state.best:
        state.best = metrics["overall"]
        run.folder.save_best(run.model)
    save_last(run)


def dev_metrics(
    model, data: Data, tokenizer, cfg: TrainConfig, device, encoded=None
) -> dict[str, float]:
    """The dev metrics at --eval_batch_size, under bf16 autocast with --bf16; ``encoded``: the
    dev splits tokenized once (``Run.dev``)."""
    dev = {name: splits["dev"] for name, splits in data.items()}
    bf16 = autocast(cfg.bf16, device)
    return evaluate(model, dev, tokenizer, cfg.eval_batch_size, device, bf16, encoded)


def finish(run: Run) -> dict[str, Any]:
    """Reload the best checkpoint, write predictions, task files, summary and plots."""
    cfg, folder, state, seconds = run.cfg, run.folder, run.state, run.state.seconds
    examples = round(run.dist.mean(torch.tensor(float(state.examples))) * run.dist.world)
    if run.dist.world > 1:
        torch.distributed.barrier()  # rank 0's best checkpoint is on disk before anyone reads it
    folder.load_best(run.model)
    summary = {
        "best_overall": state.best,
        "wall_clock_s": round(seconds, 1),
        "train_examples_per_s": round(examples / max(seconds, 1e-9), 2),
        "steps": state.step,
        "train_examples": examples,
        "processes": run.dist.world,
        # seconds in dev evaluations (wall_clock_s holds all but the last, which follows it)
        "eval_s": round(state.eval_seconds, 1),
    }
    summary = run.hooks.fire("wrap_summary", summary)  # with what the extras add
    if cfg.step_gradient == "one-task":  # the sampler's schedule, fixed by seed and epoch
        summary["steps_per_task"] = {
            str(e): steps_per_task(run, run.sampler.schedule(e, run.steps_per_epoch))
            for e in range(1, cfg.epochs + 1)
        }
    write_predictions(
        folder, run.model, run.data, run.tokenizer, cfg.eval_batch_size, run.device, run.autocast
    )
    if cfg.model.option != "finetune":
        folder.save_task_checkpoints(run.model)
    folder.write_summary(summary)
    if not cfg.no_plots:
        plot_learning_curves(folder, cfg.tasks)
    print(f"done: {summary}")
    run.tell("on_end", folder, summary)
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
    write_predictions(
        RunFolder(cfg.out_dir), model, data, tokenizer, cfg.eval_batch_size, device, bf16
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
