"""One training step: the loss of a task's batch (with SMART's terms when it is on) and the update
it makes.

    step = TrainingStep(model, smart=None)
    loss = train_step(step, task, batch, optimizer, scheduler)         # one AdamW update

``TrainingStep`` is a module so that DistributedDataParallel sees the whole loss, SMART's extra
forwards included, as its forward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from minbert.optimizer import AdamW, param_groups
from minbert.pcgrad import surgery
from minbert.smart import MomentumTeacher, SmartConfig, bregman_term, smart_regularizer
from multitask.model import MultitaskModel
from tasks.base import Task


@dataclass
class Smart:
    """SMART during training: its hyperparameters and the momentum teacher θ̃ of the trainable
    parameters (create it after the model is on its device and frozen as it will train)."""

    config: SmartConfig
    teacher: MomentumTeacher

    @classmethod
    def for_model(cls, config: SmartConfig, model: nn.Module) -> Smart:
        trainable = [p for p in model.parameters() if p.requires_grad]
        return cls(config, MomentumTeacher(trainable, config.momentum))


def batch_loss(model: MultitaskModel, task: Task, batch: dict, smart: Smart | None) -> torch.Tensor:
    """The task loss of one batch (against λ·gold + (1 − λ)·teacher when the batch carries a
    teacher's outputs and λ: ``multitask/distillation.py``), plus SMART's λ_s·R_s + μ·D_Breg
    when SMART is on (``minbert/smart.py``: the embeddings are computed once and perturbed,
    never re-embedded)."""
    embeddings = model.embed(task.name, batch)
    outputs = model.outputs_from_embeddings(task.name, embeddings, batch)
    if "teacher" in batch:
        loss = task.taught_loss(outputs.float(), batch["labels"], batch["teacher"], batch["gold"])
    else:
        loss = task.loss(outputs.float(), batch["labels"])
    if smart is None:
        return loss

    def perturbed_outputs(perturbed: list[torch.Tensor]) -> torch.Tensor:
        return model.outputs_from_embeddings(task.name, perturbed, batch)

    def teacher_outputs() -> torch.Tensor:
        # A trainable embedding layer differs in the teacher, so the teacher embeds again;
        # a frozen one gives the same vectors, so they are reused (one embed per step).
        if any(p.requires_grad for p in model.bert.embeddings.parameters()):
            return model(task.name, batch)
        return model.outputs_from_embeddings(task.name, [e.detach() for e in embeddings], batch)

    config = smart.config
    adversarial = smart_regularizer(perturbed_outputs, embeddings, outputs, task.smart_kind, config)
    bregman = bregman_term(teacher_outputs, outputs, smart.teacher, task.smart_kind)
    return loss + config.weight * adversarial + config.bregman_weight * bregman


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


class TrainingStep(nn.Module):
    """The loss of one batch as a module, so that DistributedDataParallel sees the whole step
    (SMART's extra forwards included) as its forward.

    With ``weights`` (``--loss_weights``), task t's loss is multiplied by w_t, so the objective
    the steps follow is Σ_t w_t·L_t instead of Σ_t L_t: a per-task loss weight, the lever of
    multitask weighting studies (Kendall et al. 2018, "Multi-Task Learning Using Uncertainty to
    Weigh Losses", learn the w_t; here they are fixed).
    With one task per step, Adam's second-moment estimate is shared by every task's steps, so
    a weight changes that task's update size against the others' rather than cancelling out.
    """

    def __init__(
        self,
        model: MultitaskModel,
        smart: Smart | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.smart = smart
        self.weights = weights or {}

    def forward(self, task: Task, batch: dict) -> torch.Tensor:
        return batch_loss(self.model, task, batch, self.smart) * self.weights.get(task.name, 1.0)

    def after_update(self) -> None:
        """After an optimizer step: SMART's teacher θ̃ moves towards the updated weights."""
        if self.smart is not None:
            self.smart.teacher.update()


def optimizer_for(
    model: nn.Module,
    lr: float,
    weight_decay: float,
    layer_decay: float = 1.0,
    encoder_lr: float | None = None,
) -> AdamW:
    """The optimizer the driver trains with: the hand-written AdamW over
    ``param_groups(model, weight_decay, lr, layer_decay)``, through its multi-tensor path
    (``minbert/optimizer_foreach.py``: the same numbers with far fewer kernel launches) where
    the tree has it; the student tree leaves that file out, and then the student's own loop
    (``minbert.optimizer.AdamW``) trains. With ``encoder_lr`` (``--train_encoder``), the
    encoder's own weights (every BERT parameter but the plug-ins') train at ``encoder_lr`` in
    place of ``lr``, times their layer's decay; plug-ins and heads at ``lr``."""
    groups = param_groups(model, weight_decay, lr, layer_decay)
    if encoder_lr is not None:
        bert = model.bert
        encoder = {id(p) for p in bert.parameters()} - {id(p) for p in bert.plugins.parameters()}
        groups = rescaled(groups, encoder, lr, encoder_lr / lr)
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


def unwrapped(step: nn.Module) -> nn.Module:
    """The step module itself, also when DistributedDataParallel wraps it."""
    return step.module if isinstance(step, nn.parallel.DistributedDataParallel) else step


class NonFiniteLoss(FloatingPointError):
    """A batch gave a NaN or infinite loss; nothing was updated. ``task`` names its task."""

    def __init__(self, message: str, task: str) -> None:
        super().__init__(message)
        self.task = task


def train_step(
    step: nn.Module,
    task: Task,
    batch: dict,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    skip_nonfinite: bool = False,
) -> torch.Tensor | None:
    """One update on one task's batch: loss (its forward under ``autocast``, e.g. bf16),
    backward, AdamW step, schedule step, and SMART's teacher update when ``step`` has SMART
    (``TrainingStep.after_update``).

    A non-finite loss raises ``NonFiniteLoss`` before anything changes, or with
    ``skip_nonfinite`` drops the batch (the schedule still advances, so a skipped batch costs
    its step) and returns None. Returns the detached loss otherwise.
    """
    losses = train_step_tasks(step, [(task, batch)], optimizer, scheduler, autocast, skip_nonfinite)
    return None if losses is None else losses[0]


def train_step_tasks(
    step: nn.Module,
    batches: Sequence[tuple[Task, dict]],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    skip_nonfinite: bool = False,
    pcgrad: int | None = None,
) -> list[torch.Tensor] | None:
    """One update from a batch of each of several tasks (``train_step`` with one): the gradients
    of the task losses are added (``--step_gradient summed``), or with a ``pcgrad`` seed combined
    by PCGrad's projection (``minbert/pcgrad.py``: each task's gradient of the shared parameters
    loses its part against any other task's it conflicts with, the order of the others drawn
    with that seed). Non-finite losses as in ``train_step``: any one stops or skips the whole
    step. Returns the detached loss of each batch.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    optimizer.zero_grad(set_to_none=True)
    losses, per_task, finite = [], [], True
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        if not torch.isfinite(loss):
            if not skip_nonfinite:
                raise NonFiniteLoss(f"non-finite loss ({loss.item()})", task.name)
            finite = False
        loss.backward()  # a skipped batch too: keeps every process's gradient exchange in step
        losses.append(loss.detach())
        if pcgrad is not None:  # keep this task's gradients apart from the next task's
            per_task.append([p.grad for p in params])
            optimizer.zero_grad(set_to_none=True)
    if finite:
        if pcgrad is not None:
            for p, grad in zip(params, surgery(per_task, torch.Generator().manual_seed(pcgrad))):
                p.grad = grad
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    after_update = getattr(unwrapped(step), "after_update", None)
    if finite and after_update is not None:  # e.g. SMART's teacher (TrainingStep.after_update)
        after_update()
    return losses if finite else None


def train_step_unread(
    step: nn.Module,
    batches: Sequence[tuple[Task, dict]],
    optimizer: torch.optim.Optimizer,
    healthy: torch.Tensor,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    skip_nonfinite: bool = False,
) -> list[torch.Tensor]:
    """``train_step_tasks`` without reading anything on the host, for a GPU that should never
    wait for the host: whether the losses are finite stays a flag on the device, and the update
    (``ForeachAdamW.step(apply_if=flag)``) applies only where it holds, as the gradient scaler
    of mixed precision skips a step. ``healthy`` (0-dim bool, on the device) is the run's "every
    loss so far was finite": without ``skip_nonfinite`` this step's finiteness is and-ed into it
    in place, so after a non-finite loss no later step updates anything, and the caller, reading
    the losses later (at --log_every), stops the run at the first non-finite one with the weights
    as they were before it; with ``skip_nonfinite`` only this step's own finiteness counts. The
    schedule advances either way. Across processes the flag is the minimum of all (a NaN on one
    rank reaches every rank's averaged gradients). Returns the detached losses."""
    optimizer.zero_grad(set_to_none=True)
    losses = []
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        loss.backward()
        losses.append(loss.detach())
    finite = torch.isfinite(torch.stack(losses)).all()
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        everywhere = finite.to(torch.int32)
        torch.distributed.all_reduce(everywhere, op=torch.distributed.ReduceOp.MIN)
        finite = everywhere.bool()
    if not skip_nonfinite:
        finite = healthy.logical_and_(finite)
    optimizer.step(apply_if=finite)
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    return losses
