"""One training step, everything it enters below the driver: the loss of each batch as a
module, its backward, the update as a strategy, the learning-rate schedule, and the loss log.

    step = TrainingStep(model, objective_for(model, ...))      # objective: multitask/objectives.py
    optimizer = optimizer_for(model, lr, weight_decay)
    scheduler = linear_warmup_decay(optimizer, warmup_steps, total_steps)
    losses = train_step(step, [(task, batch)], optimizer, HostChecked(), scheduler)
    log.add(at_step, [task.name], losses, examples)             # LossLog: no read of the device

What the loss is belongs to the objective (``multitask/objectives.py``). How the gradients become
an update is the strategy ``train_step`` takes, under one contract: a step with a non-finite loss
changes no weight (the schedule still advances, so a skipped batch costs its step).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence

import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from minbert.optimizer import AdamW, param_groups
from multitask.collate import Batch
from multitask.errors import RunStopped
from multitask.model import MultitaskModel
from multitask.run import RunFolder
from multitask.state import TrainingState
from tasks.base import Task

Objective = Callable[[Task, Batch], torch.Tensor]


class NonFiniteLoss(FloatingPointError):
    """A batch gave a NaN or infinite loss; nothing was updated. ``task`` names its task."""

    def __init__(self, message: str, task: str) -> None:
        super().__init__(message)
        self.task = task


class TrainingStep(nn.Module):
    """The loss of one batch as a module, so that DistributedDataParallel sees the whole step
    (SMART's extra forwards included) as its forward: the objective's loss times the task's
    weight.

    With ``weights`` (``--loss_weights``), task t's loss is multiplied by w_t, so the objective
    the steps follow is Σ_t w_t·L_t instead of Σ_t L_t: a per-task loss weight, the lever of
    multitask weighting studies (Kendall et al. 2018, "Multi-Task Learning Using Uncertainty to
    Weigh Losses", learn the w_t; here they are fixed). With one task per step, Adam's
    second-moment estimate is shared by every task's steps, so a weight changes that task's
    update size against the others' rather than cancelling out.
    """

    def __init__(
        self,
        model: MultitaskModel,
        objective: Objective | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.objective = objective or model.loss
        self.weights = weights or {}
        # After an optimizer step: what the objective keeps in step with the weights (SMART's
        # teacher), or None
        self.after_update = getattr(self.objective, "after_update", None)

    def forward(self, task: Task, batch: Batch) -> torch.Tensor:
        return self.objective(task, batch) * self.weights.get(task.name, 1.0)


class HostChecked:
    """Reads each loss's finiteness on the host; the tasks' gradients add."""

    def __init__(self, skip: bool = False) -> None:
        self.skip = skip

    def check(self, task: str, loss: torch.Tensor) -> bool:
        """Whether ``loss`` is finite; without ``skip`` a non-finite one raises."""
        if torch.isfinite(loss):
            return True
        if not self.skip:
            raise NonFiniteLoss(f"non-finite loss ({loss.item()})", task)
        return False

    def after_backward(self, optimizer: torch.optim.Optimizer) -> None:
        """After one batch's backward (several batches' gradients add up by default)."""

    def combine(self, optimizer: torch.optim.Optimizer, finite: bool) -> None:
        """The step's gradients in the parameters' ``.grad``, once every backward is done
        (they already are: the tasks' gradients add)."""

    def apply(
        self, optimizer: torch.optim.Optimizer, losses: list[torch.Tensor], finite: bool
    ) -> bool:
        """The update, where every loss was finite; whether it was made."""
        if finite:
            optimizer.step()
        return bool(finite)


class DeviceFlagged:
    """Nothing read on the host. ``healthy`` (0-dim bool, on the device) is the run's "every
    loss so far was finite": without ``skip`` each step's finiteness is and-ed into it in place,
    so after a non-finite loss no later step updates anything and the run, reading the losses
    later, stops at the first non-finite one with the weights as they were before it; with
    ``skip`` only the step's own finiteness counts. Across processes the flag is the minimum of
    all (a NaN on one rank reaches every rank's averaged gradients)."""

    def __init__(self, healthy: torch.Tensor, skip: bool = False) -> None:
        self.healthy, self.skip = healthy, skip

    def check(self, task: str, loss: torch.Tensor) -> bool:
        return True  # decided on the device, in apply

    def after_backward(self, optimizer: torch.optim.Optimizer) -> None:
        pass

    def combine(self, optimizer: torch.optim.Optimizer, finite: bool) -> None:
        pass

    def apply(self, optimizer, losses: list[torch.Tensor], finite: bool) -> bool:
        flag = torch.isfinite(torch.stack(losses)).all()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            everywhere = flag.to(torch.int32)
            torch.distributed.all_reduce(everywhere, op=torch.distributed.ReduceOp.MIN)
            flag = everywhere.bool()
        if not self.skip:
            flag = self.healthy.logical_and_(flag)
        optimizer.step(apply_if=flag)
        return True  # the losses go to the log either way; it finds a non-finite one


def parameters(optimizer: torch.optim.Optimizer) -> list[torch.nn.Parameter]:
    return [p for group in optimizer.param_groups for p in group["params"]]


def train_step(
    step: nn.Module,
    batches: Sequence[tuple[Task, Batch]],
    optimizer: torch.optim.Optimizer,
    update: HostChecked | DeviceFlagged,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    max_grad_norm: float = 0.0,
) -> list[torch.Tensor] | None:
    """One update from a batch of each task in ``batches`` (one, unless --step_gradient combines
    every task's): each loss (its forward under ``autocast``, e.g. bf16) and backward, the
    gradients combined as ``update`` does (an extra's may project them apart) and, with
    ``max_grad_norm``, scaled so that their total L2 norm is at most that (``clip_grad_norm_``, read
    on the device), then the update as ``update`` makes it, the schedule's step, and the objective's
    ``after_update`` (SMART's teacher) when the step counts. Of each task it reads only the
    ``name`` (a loss's, when not finite: MLM pretraining's one "task" is its corpus). Returns the
    detached losses, or None for a step ``update`` skipped (the module docstring states the
    non-finite contract)."""
    optimizer.zero_grad(set_to_none=True)
    losses, finite = [], True
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        finite = update.check(task.name, loss) and finite
        loss.backward()  # a skipped batch too: keeps every process's gradient exchange in step
        losses.append(loss.detach())
        update.after_backward(optimizer)
    update.combine(optimizer, finite)
    if max_grad_norm:
        torch.nn.utils.clip_grad_norm_(parameters(optimizer), max_grad_norm)
    counts = update.apply(optimizer, losses, finite)
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    # SMART's teacher, if any (DistributedDataParallel holds the step as .module)
    after_update = getattr(getattr(step, "module", step), "after_update", None)
    if counts and after_update is not None:
        after_update()
    return losses if counts else None


def learning_rate(optimizer: torch.optim.Optimizer) -> float:
    """The rate a log reports: the largest of the groups' (they differ by layer, --layer_decay,
    and by --encoder_lr), as the schedule has set it for the next step."""
    return max(group["lr"] for group in optimizer.param_groups)


def loss_weights(entries: Sequence[str], tasks: Sequence[str]) -> dict[str, float]:
    """``["sst=2", "sts=0.5"]`` -> ``{"sst": 2.0, "sts": 0.5}``: a positive weight per named task
    (``--loss_weights``); a task not named keeps weight 1. ValueError names a bad entry."""
    weights: dict[str, float] = {}
    for entry in entries:
        name, _, text = entry.partition("=")
        try:
            weight = float(text)
        except ValueError:
            weight = float("nan")
        if name not in tasks or name in weights or not 0 < weight < float("inf"):
            raise ValueError(
                f"--loss_weights {entry!r}: give TASK=WEIGHT with a task of --tasks "
                f"({','.join(tasks)}), each at most once, and a weight > 0 (e.g. sst=2)"
            )
        weights[name] = weight
    return weights


def optimizer_for(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    layer_decay: float = 1.0,
    encoder_lr: float | None = None,
    choose: Callable[[list[dict], float], torch.optim.Optimizer | None] | None = None,
) -> torch.optim.Optimizer:
    """The optimizer the driver trains with over ``param_groups(model, weight_decay, lr,
    layer_decay)``: the one ``choose(groups, lr)`` answers (the driver's: the extras'
    ``choose_optimizer`` hook, as --optimizer picks an implementation of the same update), else
    the hand-written AdamW (``minbert.optimizer.AdamW``, the student's own in the student tree).
    With ``encoder_lr`` (``--train_encoder``), the encoder's own weights (every BERT parameter
    but the plug-ins') train at ``encoder_lr`` in place of ``lr``, times their layer's decay;
    plug-ins and heads at ``lr``."""
    groups = param_groups(model, weight_decay, lr, layer_decay)
    if encoder_lr is not None:
        bert = model.bert
        encoder = {id(p) for p in bert.parameters()} - {id(p) for p in bert.plugins.parameters()}
        groups = rescaled(groups, encoder, lr, encoder_lr / lr)
    chosen = choose(groups, lr) if choose is not None else None
    return chosen if chosen is not None else AdamW(groups, lr=lr)


def rescaled(groups: list[dict], chosen: set[int], lr: float, factor: float) -> list[dict]:
    """``groups`` with the parameters whose id is in ``chosen`` moved into groups of their own
    (the same weight decay) whose learning rate is ``factor`` times their group's."""
    result = []
    for group in groups:
        rate = group.get("lr", lr)
        for picked, scale in ((False, 1.0), (True, factor)):
            params = [p for p in group["params"] if (id(p) in chosen) == picked]
            if params:
                result.append({**group, "params": params, "lr": rate * scale})
    return result


class LinearWarmupDecay:
    """The learning-rate multiplier of linear warmup followed by linear decay.

    With w = warmup_steps, N = total_steps and s = the number of optimizer steps taken so far:

        factor(s) = s / w                          for s < w        (rises 0 → 1)
        factor(s) = max(0, (N − s) / (N − w))      for s ≥ w        (falls 1 → 0 at s = N)

    With w = 0 there is no warmup: factor(0) = 1. (N − w) is taken as at least 1 so that w = N is
    allowed (warmup to the last step, then 0).

    A small class rather than a lambda so that ``LambdaLR.state_dict()`` saves w and N with it.
    """

    def __init__(self, warmup_steps: int, total_steps: int) -> None:
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        if total_steps <= 0:
            raise ValueError(f"total_steps must be > 0, got {total_steps}")
        if warmup_steps > total_steps:
            raise ValueError(f"warmup_steps {warmup_steps} exceeds total_steps {total_steps}")
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return step / self.warmup_steps
        return max(0.0, (self.total_steps - step) / max(1, self.total_steps - self.warmup_steps))


def linear_warmup_decay(
    optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int
) -> LambdaLR:
    """Linear warmup over ``warmup_steps``, then linear decay to 0 at ``total_steps``.

    The learning rate of every group is lr_base · factor(s), with factor as in
    ``LinearWarmupDecay``; call ``scheduler.step()`` once after each ``optimizer.step()``.

    1. s = 0 … w − 1:  factor(s) = s / w                (the first step has lr 0 when w > 0)
    2. s = w … N:      factor(s) = (N − s) / (N − w)    (1 at s = w, 0 at s = N)
    3. s > N:          factor(s) = 0

    To resume a run, build the optimizer and this scheduler as at the start, then load the
    optimizer's state dict and then the scheduler's: the scheduler's constructor sets each
    group's lr, and the optimizer's saved state puts the saved lr back.
    """
    return LambdaLR(optimizer, LinearWarmupDecay(warmup_steps, total_steps))


class FiniteWeights:
    """A NaN or infinity in a trained tensor stops the run before anything is saved or evaluated;
    the weights are read once per step however many saves follow (one read of the device)."""

    def __init__(self) -> None:
        self.checked_at: int | None = None  # the step whose weights were last found finite

    def check(self, model: MultitaskModel, step: int, folder: RunFolder) -> None:
        """A ``RunStopped`` (exit 3) naming the step and what ``folder`` holds, unless finite."""
        if self.checked_at == step:
            return
        trained = [p for p in model.parameters() if p.requires_grad]
        if trained and not torch.stack([torch.isfinite(p).all() for p in trained]).all():
            raise RunStopped(
                f"non-finite weights after step {step} (is --lr too large?); nothing was saved "
                f"at this step; {folder.on_disk()}",
                3,
            )
        self.checked_at = step


class NonFiniteStep(Exception):
    """A step's loss read as not finite (``step``, ``task``, ``value``), with --nonfinite stop."""

    def __init__(self, step: int, task: str, value: float) -> None:
        super().__init__(f"non-finite loss ({value})")
        self.step, self.task, self.value = step, task, value


class LossLog:
    """The steps since the last read (step, task names, their losses on the device, examples)
    and, in the run's ``state``, the losses read since the last log line."""

    def __init__(
        self,
        state: TrainingState,
        means: Callable[[list[torch.Tensor]], list[float]],
        stop_on_nonfinite: bool,
        skipped: Callable[[int, list[str]], None],
    ) -> None:
        self.state, self.means = state, means
        self.stop_on_nonfinite, self.skipped = stop_on_nonfinite, skipped
        self.pending: list[tuple[int, list[str], list[torch.Tensor], int]] = []

    def add(self, step: int, names: list[str], losses: list[torch.Tensor], examples: int) -> None:
        self.pending.append((step, names, losses, examples))

    def read(self) -> None:
        """Move the pending losses to the host (their means over the processes) into ``running``
        and count their examples: one read of the device for all of them. A non-finite one
        stops the run (``NonFiniteStep``) or, with skipping, is reported and left out."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        values = iter(self.means([loss for _, _, losses, _ in pending for loss in losses]))
        for step, names, losses, examples in pending:
            means = [next(values) for _ in losses]
            bad = [(name, v) for name, v in zip(names, means) if not math.isfinite(v)]
            if bad and self.stop_on_nonfinite:
                raise NonFiniteStep(step, *bad[0])
            if bad:
                self.skipped(step, names)
                continue
            for name, value in zip(names, means):
                self.state.running[name].append(value)
            self.state.examples += examples

    def line(self) -> dict[str, float]:
        """Task -> its mean loss since the last line (tasks with a loss only); starts anew."""
        running = self.state.running
        means = {name: sum(v) / len(v) for name, v in running.items() if v}
        for losses in running.values():
            losses.clear()
        return means
