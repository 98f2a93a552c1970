"""Multitask fine-tuning of one BERT on SST-5 sentiment, Quora paraphrase and STS-B similarity.

    python train_multitask.py --option finetune --sampling annealed
    python train_multitask.py --option adapter --sampling annealed
    python train_multitask.py --evaluate runs/finetune-annealed       # predictions from a saved run

The run: config -> data -> model -> optimizer -> task sampler -> training loop -> evaluation.
Each step draws one task (round-robin, or p_i ∝ N_i^α, see minbert/sampling.py), takes that task's
next length-grouped batch, and updates the shared encoder (or only the plug-ins and heads) on that
task's loss (with --step_gradient: a batch of every task, minbert/pcgrad.py). The model layer
is multitask/model.py; everything the run writes goes through its RunFolder (multitask/run.py):
config.json, metrics.jsonl, train_log.jsonl, checkpoints, prediction files and learning-curve
plots; see README.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from tqdm import tqdm

from minbert.flags import HelpFormatter, add_flags, flatten, section, unflatten
from minbert.optimizer import adamw_for, linear_warmup_decay
from minbert.plugins import format_parameter_report, parameter_report
from minbert.sampling import MODES, TaskSampler
from minbert.smart import SmartConfig
from minbert.tokenizer import Tokenizer
from multitask.batching import BatchStream, length_grouped_batches
from multitask.collate import batch_to, collate, swap_at_random
from multitask.data import Data, fingerprints, load_data, train_lengths
from multitask.devices import Distributed, autocast, pick_device, set_up_distributed
from multitask.errors import RunStopped, UsageError, run_command
from multitask.evaluation import calibrate_similarity_heads, evaluate
from multitask.model import ModelSettings, MultitaskModel, build_model
from multitask.run import RunFolder, merge_config, overlapping
from multitask.step import NonFiniteLoss, Smart, TrainingStep, loss_weights, train_step_tasks
from tasks import TASKS, get_task
from tasks.base import SPLITS, Task
from tasks.metrics import OVERALL_TASKS

RUN_DIR = {"metavar": "RUN_DIR"}


# --------------------------------------------------------------------------------------------
# The configuration: one dataclass, the parser generated from it
# --------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Every knob of a run. The flags, their defaults and help come from here, from the model's
    settings (multitask/model.py, with each plug-in's own) and from SmartConfig
    (minbert/smart.py)."""

    model: ModelSettings = section(ModelSettings, "")  # option, checkpoint, plug-ins, ...
    # -- what to train --
    sampling: Literal[MODES] = "annealed"  # which task each step trains: round-robin cycles
    # the tasks; proportional draws task i with p_i ∝ N_i (training-set size); square-root
    # with p_i ∝ √N_i; annealed with p_i ∝ N_i^α, α = 1 − 0.8·(e − 1)/(E − 1) in epoch e of E
    # (Stickland & Murray 2019)
    step_gradient: Literal["one-task", "summed", "pcgrad"] = "one-task"  # one-task: a step trains
    # the task --sampling draws; summed: a batch of every task, gradients added (no sampling; an
    # epoch has 1/K the steps); pcgrad: the same, conflicting gradients projected (Yu et al. 2020)
    tasks: list[str] = field(default_factory=lambda: list(OVERALL_TASKS))  # comma-separated
    # subset of the registered tasks (tasks/: cfimdb, para, sst, sts)
    loss_weights: list[str] = field(default_factory=list)  # TASK=W,...: multiply TASK's loss by
    # W (e.g. sst=2,sts=0.5; unnamed tasks 1); the logged training loss is the weighted one
    # -- data --
    data_dir: str = "data"  # folder with the course's data files
    limit: int | None = None  # at most N examples per task and split (default: all)
    train_fraction: float = 1.0  # train on this fraction of each training file: a random
    # subsample drawn with a fixed generator, so every run (any --seed) sees the same rows; for
    # low-resource experiments (dev and test stay whole)
    strict: bool = False  # a malformed data row is an error, not a skip
    # -- optimisation --
    epochs: int = 3  # training epochs
    steps_per_epoch: int | None = None  # steps per epoch (default: training examples / batch)
    batch_size: int = 32  # examples per step
    batch_pool: int = 50  # length grouping: shuffle, sort pools of N batches by length, cut them
    # into batches (less padding, multitask/batching.py); 1: plain random batches
    lr: float | None = None  # peak learning rate (default: 5e-5 for finetune, else 1e-3)
    warmup: float = 0.1  # warm-up steps, as a fraction of all steps
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    dropout: float = 0.1  # dropout in the encoder and heads
    layer_decay: float = 1.0  # layer-wise learning-rate decay γ: encoder layer l of L trains at
    # lr·γ^(L+1−l), the embeddings at lr·γ^(L+1), heads at lr, each plug-in at its layer's rate
    # (1: one rate for all; see minbert/optimizer.py)
    swap_pairs: bool = False  # train symmetric pair tasks (para, sts) on each pair in a random
    # order, (a, b) or (b, a), so that the model cannot rely on which sentence comes first
    seed: int = 11711  # random seed (data order, dropout, sampler)
    eval_every: int = 0  # also evaluate every N steps (0: only at epoch ends)
    log_every: int = 50  # write the mean training loss every N steps
    save_every: int = 0  # also write the resumable last.pt every N steps (it is always written
    # at evaluations)
    nonfinite: Literal["stop", "skip"] = "stop"  # on a NaN or infinite loss: stop the run
    # (naming step and task) or skip that batch
    # -- SMART regularization (Jiang et al. 2020) --
    smart: bool = False  # add SMART's adversarial and Bregman terms
    smart_settings: SmartConfig = section(SmartConfig, "smart_")
    # -- run --
    out_dir: str | None = None  # run folder (default: runs/<option>-<sampling>; with --add_to:
    # RUN_DIR+<tasks>)
    resume: bool = False  # continue the run in --out_dir from last.pt
    overwrite: bool = False  # reuse a non-empty --out_dir, starting over
    evaluate: str | None = field(default=None, metadata=RUN_DIR)  # evaluate only: load RUN_DIR's
    # best checkpoint, print dev metrics, write predictions (with the run's --batch_size they
    # match the run's bit for bit; another batch size pads differently and may change the last
    # float bits)
    add_to: str | None = field(default=None, metadata=RUN_DIR)  # add tasks to RUN_DIR, a
    # finished plug-in run: train only the plug-ins and heads of the --tasks named here (new
    # tasks only) while RUN_DIR's tasks stay bit-identical; the model settings (option, sizes,
    # encoding) come from RUN_DIR's config.json
    device: str = "auto"  # auto (CUDA when present), cpu, cuda or cuda:N
    bf16: bool = False  # bfloat16 autocast (CUDA only)
    threads: int | None = None  # CPU threads for torch (default: torch's choice, one per core);
    # on a machine shared with other jobs, fewer threads than cores avoids over-subscription
    no_plots: bool = False  # skip the PNG learning curves
    # Not flags; saved in config.json. With --add_to, the earlier runs' tasks (frozen):
    base_tasks: list[str] = field(default_factory=list)
    # Each task file given explicitly (--<task>_<split>, generated from the task registry):
    files: dict[str, str | None] = field(default_factory=dict)

    def resolved(self) -> TrainConfig:
        """The one place where defaults that depend on other settings are decided."""
        option, add_to = self.model.option, self.add_to
        lr = self.lr if self.lr is not None else (5e-5 if option == "finetune" else 1e-3)
        added = f"{add_to.rstrip('/')}+{'+'.join(self.tasks)}" if add_to else None
        out_dir = self.out_dir or self.evaluate or added or f"runs/{option}-{self.sampling}"
        return dataclasses.replace(self, model=self.model.resolved(), lr=lr, out_dir=out_dir)

    def data_path(self, task: Task, split: str) -> Path:
        given = self.files.get(f"{task.name}_{split}")
        return Path(given) if given else Path(self.data_dir) / task.files[split]

    def to_flat(self) -> dict[str, Any]:
        """config.json: {flag name: value}, as the run was configured."""
        return {**flatten(self), **self.files, "base_tasks": self.base_tasks}

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> TrainConfig:
        files = {k: flat.get(k) for k in FILE_FLAGS}
        try:
            config = unflatten(cls, flat)
        except ValueError as err:
            raise UsageError(str(err)) from None
        return dataclasses.replace(config, files=files, base_tasks=flat.get("base_tasks", []))


FILE_FLAGS = [f"{name}_{split}" for name in TASKS for split in SPLITS]
MODEL_KEYS = list(flatten(ModelSettings()))  # what --evaluate and --add_to take from a run
WHERE_IT_RUNS = ("resume", "device", "bf16", "out_dir", "no_plots", "threads")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter, allow_abbrev=False
    )
    add_flags(parser, TrainConfig)
    files = parser.add_argument_group("data files (default: <data_dir>/<the course's file name>)")
    for flag in FILE_FLAGS:
        files.add_argument(f"--{flag}", default=None, metavar="FILE")
    return parser


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """The command line as a config: a saved run's settings merged in (--resume, --evaluate,
    --add_to), defaults resolved, every value checked."""
    flat = vars(build_parser().parse_args(argv))
    defaults = vars(build_parser().parse_args([]))
    source, flag, inherited = None, "", []
    if flat["resume"]:
        source, flag = flat["out_dir"] or TrainConfig.from_flat(flat).resolved().out_dir, "--resume"
        inherited = [k for k in [*defaults, "base_tasks"] if k not in WHERE_IT_RUNS]
    elif flat["evaluate"]:
        source, flag = flat["evaluate"], "--evaluate"
        inherited = [*MODEL_KEYS, "tasks", "add_to", "base_tasks"]
    elif flat["add_to"]:
        source, flag, inherited = flat["add_to"], "--add_to", MODEL_KEYS
    if source is not None:
        saved = RunFolder(source).read_config(flag)
        flat = merge_config(flat, saved, inherited, defaults | {"base_tasks": []}, flag, source)
        if flag == "--add_to":
            flat["base_tasks"] = [*saved.get("base_tasks", []), *saved["tasks"]]
    config = TrainConfig.from_flat(flat).resolved()
    check(config, explicit=[k for k in FILE_FLAGS if flat.get(k)])
    return config


def check(cfg: TrainConfig, explicit: list[str]) -> None:
    """Every value in range and every named file present, or a UsageError naming the flag and
    the fix, before anything is written."""
    tasks, m = cfg.tasks, cfg.model
    unknown = [t for t in tasks if t not in TASKS]
    repeated = [t for t in tasks if t in cfg.base_tasks]
    try:
        checkpoint = m.check([get_task(t) for t in tasks if t in TASKS])
        loss_weights(cfg.loss_weights, tasks)
    except ValueError as err:
        raise UsageError(str(err)) from None
    missing = [k for k in explicit if not Path(cfg.files[k]).is_file()]
    for bad, message in [
        (unknown or not tasks, f"--tasks: unknown task(s) {unknown}; known: {sorted(TASKS)}"),
        (len(set(tasks)) < len(tasks), f"--tasks {','.join(tasks)}: a task is named twice"),
        (missing, f"--{missing[0] if missing else ''}: file not found; give an existing file"),
        (cfg.add_to and overlapping(Path(cfg.out_dir), Path(cfg.add_to)),
         "--out_dir must differ from --add_to and lie outside it: the earlier run stays as it is"),
        (overlapping(Path(cfg.out_dir), checkpoint), f"--out_dir {cfg.out_dir} and the checkpoint "
         f"folder {checkpoint} must not be the same or inside each other"),
        (cfg.add_to and m.plugin is None,
         f"--add_to: {cfg.add_to} was trained with --option {m.option}, which changes weights "
         "every task shares; tasks can be added only to a plug-in run (adapter, pals, lhuc, lora)"),
        (cfg.add_to and m.train_encoder,
         f"--add_to: {cfg.add_to} was trained with --train_encoder, which changes the encoder "
         "every task shares; tasks can be added only to a run whose encoder stayed frozen"),
        (cfg.add_to and repeated, f"--tasks: {repeated} already trained in {cfg.add_to} (tasks "
         f"{cfg.base_tasks}); with --add_to, name only the new tasks"),
        (not 0 < cfg.lr <= 10, f"--lr {cfg.lr}: must be a number in (0, 10]"),
        (not 0 <= cfg.warmup < 1, f"--warmup {cfg.warmup}: a fraction of all steps in [0, 1)"),
        (not 0 <= cfg.dropout < 1, f"--dropout {cfg.dropout}: a probability in [0, 1)"),
        (not 0 < cfg.layer_decay <= 1, f"--layer_decay {cfg.layer_decay}: a factor in (0, 1]"),
        (not 0 < cfg.train_fraction <= 1, f"--train_fraction {cfg.train_fraction}: in (0, 1]"),
    ] + [
        (v is not None and not v >= low, f"--{name} {v}: must be at least {low}")
        for name, low in AT_LEAST.items() for v in [getattr(cfg, name)]
    ]:  # fmt: skip
        if bad:
            raise UsageError(message)
    pick_device(cfg.device)


AT_LEAST = {"epochs": 1, "batch_size": 1, "steps_per_epoch": 1, "limit": 1, "batch_pool": 1,
            "log_every": 1, "eval_every": 0, "save_every": 0, "seed": 0, "threads": 1,
            "weight_decay": 0}  # fmt: skip


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
    smart: Smart | None
    steps_per_epoch: int
    extra: dict[str, Any]

    def parts(self) -> dict[str, Any]:
        """What last.pt saves and restores besides the step (multitask/run.py: save_last)."""
        teacher = self.smart.teacher if self.smart else None
        return dict(model=self.model, optimizer=self.optimizer, scheduler=self.scheduler,
                    streams=self.streams, teacher=teacher)  # fmt: skip


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
    if not cfg.resume:  # a resumed run restores its heads
        train = {name: splits["train"] for name, splits in data.items()}
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
    optimizer = adamw_for(model, cfg.lr, cfg.weight_decay, cfg.layer_decay)
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
    extra = {"running": {n: [] for n in data}, "examples": 0, "seconds": 0.0,
             "train_files": fingerprints(train_files)}  # fmt: skip
    # fmt: off
    return Run(cfg, folder, dist, device, data, tokenizer, model, step_module, optimizer,
               scheduler, sampler, streams, smart, steps_per_epoch, extra)
    # fmt: on


def one_step(run: Run, names: list[str], step: int) -> list[torch.Tensor] | None:
    """Train on the next batch of each task in ``names`` (one, unless --step_gradient combines
    every task's); the losses, or None when a non-finite loss was skipped."""
    cfg, batches = run.cfg, []
    for name in names:
        task, indices = get_task(name), run.dist.shard(run.streams[name].next())
        chosen = [run.data[name]["train"][i] for i in indices]
        chosen = swap_at_random(chosen) if cfg.swap_pairs and task.symmetric else chosen
        batch = collate(task, chosen, run.tokenizer, run.model.encodes_separately(task))
        batches.append((task, batch_to(batch, run.device)))
    bf16, skip = autocast(cfg.bf16, run.device), cfg.nonfinite == "skip"
    teacher = run.smart.teacher if run.smart else None
    pcgrad = cfg.seed * 1_000_003 + step if cfg.step_gradient == "pcgrad" else None  # its order
    try:
        losses = train_step_tasks(run.step_module, batches, run.optimizer, run.scheduler, bf16,
                                  skip, teacher, pcgrad)  # fmt: skip
    except NonFiniteLoss as err:
        raise RunStopped(f"{err} at step {step} on task {err.task}; the run stops before any "
                         f"update from this step; {run.folder.on_disk()}", 3) from None  # fmt: skip
    run.extra["examples"] += sum(len(b["labels"]) for _, b in batches) if losses else 0
    return losses


def train(cfg: TrainConfig) -> dict[str, Any]:
    run = set_up(cfg)
    step, best = run.folder.resume(run.parts(), run.extra) if cfg.resume else (0, -math.inf)
    try:
        step, best = train_epochs(run, step, best)
    except KeyboardInterrupt:
        raise RunStopped(f"interrupted at step {step}; {run.folder.on_disk()}", 130) from None
    except OSError as err:  # a full disk, a folder that went away
        raise RunStopped(f"{err.strerror or err} while writing to {run.folder.path} at step "
                         f"{step}; {run.folder.on_disk()}", 1) from None  # fmt: skip
    return finish(run, step, best)


def train_epochs(run: Run, step: int, best: float) -> tuple[int, float]:
    """The loop: an epoch's task schedule, one batch a step, logs, evaluations and saves."""
    cfg, spe, running = run.cfg, run.steps_per_epoch, run.extra["running"]
    one_task = cfg.step_gradient == "one-task"  # else every task's batch in every step
    total, start = spe * cfg.epochs, time.time() - run.extra["seconds"]
    while step < total:
        epoch = step // spe + 1
        schedule = run.sampler.schedule(epoch, spe)
        if step % spe == 0 and one_task:
            shares = ", ".join(f"{k} {v:.3f}" for k, v in run.sampler.probabilities(epoch).items())
            print(f"epoch {epoch}/{cfg.epochs}: task probabilities {shares}")
        run.model.train()
        bar = tqdm(total=spe, initial=step % spe, desc=f"epoch {epoch}/{cfg.epochs}",
                   disable=run.dist.rank != 0, file=sys.stderr, dynamic_ncols=True,
                   mininterval=0.1 if sys.stderr.isatty() else 60)  # fmt: skip
        while step < epoch * spe:
            names = [schedule[step % spe]] if one_task else list(run.data)
            step += 1
            losses = one_step(run, names, step)
            bar.update(1)
            if losses is None:
                tqdm.write(f"non-finite loss at step {step} on task(s) {','.join(names)}: "
                           "step skipped", file=sys.stderr)  # fmt: skip
                continue
            for name, loss in zip(names, losses):
                running[name].append(run.dist.mean(loss))
            recent = running[names[0]][-50:]
            bar.set_postfix(task=names[0], loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
            if step % cfg.log_every == 0 or step == total:
                run.folder.log_training(step, epoch, running)
            run.extra["seconds"] = time.time() - start
            if step % spe == 0 or (cfg.eval_every and step % cfg.eval_every == 0):
                best = evaluate_and_save(run, step, epoch, best)
            elif cfg.save_every and step % cfg.save_every == 0:
                run.folder.save_last(step, best, run.parts(), run.extra)
        bar.close()
    return step, best


def evaluate_and_save(run: Run, step: int, epoch: int, best: float) -> float:
    """Evaluate on the dev sets, log, keep the best checkpoint, write last.pt; the new best."""
    run.folder.check_finite(run.model, step)  # no evaluation of a broken model
    metrics = dev_metrics(run.model, run.data, run.tokenizer, run.cfg, run.device)
    run.model.train()
    run.folder.log_metrics(step, epoch, metrics)
    tqdm.write(f"step {step} epoch {epoch}: " + ", ".join(f"{k} {v:.4f}" for k, v in
               metrics.items()), file=sys.stdout)  # fmt: skip
    if metrics["overall"] > best:
        best = metrics["overall"]
        run.folder.save_best(run.model, step)
    run.folder.save_last(step, best, run.parts(), run.extra)
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
    summary = {"best_overall": best, "wall_clock_s": round(seconds, 1),
               "train_examples_per_s": round(examples / max(seconds, 1e-9), 2), "steps": step,
               "train_examples": examples, "processes": run.dist.world}  # fmt: skip
    folder.write_predictions(run.model, run.data, run.tokenizer, 2 * cfg.batch_size, run.device,
                             autocast(cfg.bf16, run.device))  # fmt: skip
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
