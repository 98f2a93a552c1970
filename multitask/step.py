"""One training step: the loss of each batch, its backward, and the update as a strategy.

    step = TrainingStep(model, objective_for(model, ...))      # multitask/objectives.py
    losses = train_step(step, [(task, batch)], optimizer, HostChecked(), scheduler)

What the loss is belongs to the objective (the model's own loss, or SMART and distillation
wrapped around it: ``multitask/objectives.py``). How the gradients become an update is the
strategy ``train_step`` takes, under one contract: a step with a non-finite loss changes no
weight (the schedule still advances, so a skipped batch costs its step). The strategies differ
in how several batches' gradients combine and in when the run learns of a non-finite loss:

    HostChecked(skip)        each loss read on the host as the step runs: a non-finite one
                             raises ``NonFiniteLoss`` before the update, or with ``skip`` drops
                             the step (train_step returns None); gradients of several tasks add
    PCGrad(seed, skip)       as HostChecked, the tasks' gradients combined by PCGrad's
                             projection (Yu et al. 2020, ``minbert/pcgrad.py``)
    DeviceFlagged(healthy,   nothing read on the host, for a GPU that should never wait for it:
                  skip)      finiteness stays a flag on the device that the multi-tensor AdamW
                             obeys (``step(apply_if=flag)``), and the run learns of a non-finite
                             loss when its losses are read (``multitask/loss_log.py``)

The optimizer the driver steps is here too (``optimizer_for``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import nn

from minbert.optimizer import AdamW, param_groups
from minbert.pcgrad import surgery
from multitask.collate import Batch
from multitask.fused_adamw import FusedAdamW
from tasks.base import Task


class NonFiniteLoss(FloatingPointError):
    """A batch gave a NaN or infinite loss; nothing was updated. ``task`` names its task."""

    def __init__(self, message: str, task: str) -> None:
        super().__init__(message)
        self.task = task


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

    def apply(
        self, optimizer: torch.optim.Optimizer, losses: list[torch.Tensor], finite: bool
    ) -> bool:
        """The update, where every loss was finite; whether it was made."""
        if finite:
            optimizer.step()
        return bool(finite)


class PCGrad(HostChecked):
    """HostChecked, with each task's gradient of the shared parameters projected off any other
    task's it conflicts with before they add; the order of the others drawn from ``seed()``."""

    def __init__(self, seed: Callable[[], int], skip: bool = False) -> None:
        super().__init__(skip)
        self.seed = seed
        self.per_task: list[list[torch.Tensor | None]] = []

    def after_backward(self, optimizer: torch.optim.Optimizer) -> None:
        self.per_task.append([p.grad for p in parameters(optimizer)])  # kept apart from the next
        optimizer.zero_grad(set_to_none=True)

    def apply(
        self, optimizer: torch.optim.Optimizer, losses: list[torch.Tensor], finite: bool
    ) -> bool:
        per_task, self.per_task = self.per_task, []
        if finite:
            generator = torch.Generator().manual_seed(self.seed())
            for p, grad in zip(parameters(optimizer), surgery(per_task, generator)):
                p.grad = grad
        return super().apply(optimizer, losses, finite)


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
) -> list[torch.Tensor] | None:
    """One update from a batch of each task in ``batches`` (one, unless --step_gradient combines
    every task's): each loss (its forward under ``autocast``, e.g. bf16) and backward, then the
    update as ``update`` makes it, the schedule's step, and the objective's ``after_update``
    (SMART's teacher) when the step counts. Returns the detached losses, or None for a step
    ``update`` skipped (the module docstring states the non-finite contract)."""
    optimizer.zero_grad(set_to_none=True)
    losses, finite = [], True
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        finite = update.check(task.name, loss) and finite
        loss.backward()  # a skipped batch too: keeps every process's gradient exchange in step
        losses.append(loss.detach())
        update.after_backward(optimizer)
    counts = update.apply(optimizer, losses, finite)
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    # SMART's teacher, if any (DistributedDataParallel holds the step as .module)
    after_update = getattr(getattr(step, "module", step), "after_update", None)
    if counts and after_update is not None:
        after_update()
    return losses if counts else None


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
    kind: str = "foreach",
) -> torch.optim.Optimizer:
    """The optimizer the driver trains with: the hand-written AdamW over
    ``param_groups(model, weight_decay, lr, layer_decay)``, through its multi-tensor path
    (``minbert/optimizer_foreach.py``: the same numbers with far fewer kernel launches) where
    the tree has it; the student tree leaves that file out, and then the student's own loop
    (``minbert.optimizer.AdamW``) trains. With ``encoder_lr`` (``--train_encoder``), the
    encoder's own weights (every BERT parameter but the plug-ins') train at ``encoder_lr`` in
    place of ``lr``, times their layer's decay; plug-ins and heads at ``lr``. ``kind`` fused
    (``--optimizer fused``): torch's fused AdamW instead (multitask/fused_adamw.py)."""
    groups = param_groups(model, weight_decay, lr, layer_decay)
    if encoder_lr is not None:
        bert = model.bert
        encoder = {id(p) for p in bert.parameters()} - {id(p) for p in bert.plugins.parameters()}
        groups = rescaled(groups, encoder, lr, encoder_lr / lr)
    if kind == "fused":
        return FusedAdamW(groups, lr=lr)
    try:
        from minbert.optimizer_foreach import ForeachAdamW
    except ImportError:  # the student tree
        return AdamW(groups, lr=lr)
    return ForeachAdamW(groups, lr=lr)


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
