"""What a training step minimises, when it is more than the model's own loss.

The plain objective is ``MultitaskModel.loss(task, batch)``: forward, head, the task's loss. The
research options wrap it, each in a class of its own here, and the driver chains them once at
set-up (``objective_for``); the step calls the outermost, ``objective(task, batch) -> loss``:

    loss = model.loss(task, batch)                          # the plain path
    loss = Taught(model, teachers, ...)(task, batch)        # distillation: another target
    loss = Smart(model, Taught(...), ...)(task, batch)      # SMART around either

Each objective also offers ``criterion(task, outputs, batch)``, its loss of head outputs already
computed, which is how SMART adds its terms to whatever is inside it without a second forward.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from minbert.smart import MomentumTeacher, SmartConfig, bregman_term, smart_regularizer
from multitask.collate import Batch, to_device
from multitask.model import MultitaskModel
from multitask.step import Objective
from tasks.base import Task


class Taught:
    """Distillation from single-task teachers (an extra; Clark et al. 2019, BAM!): a taught
    task trains towards λ·gold + (1 − λ)·teacher, the teacher's outputs on the batch's examples
    (``Batch.rows``) and λ from ``gold`` (the step's share of the gold label); every other task
    keeps the model's own loss."""

    def __init__(
        self, model: MultitaskModel, teachers: dict[str, torch.Tensor], gold: Callable[[], float]
    ) -> None:
        self.model, self.teachers, self.gold = model, teachers, gold

    def criterion(self, task: Task, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        if task.name not in self.teachers:
            return self.model.criterion(task, outputs, batch)
        teacher = to_device(self.teachers[task.name][batch.rows], outputs.device)
        return task.taught_loss(outputs.float(), batch.labels, teacher, self.gold())

    def __call__(self, task: Task, batch: Batch) -> torch.Tensor:
        return self.criterion(task, self.model(task.name, batch), batch)


@dataclass
class Smart:
    """SMART (Jiang et al. 2020, ``minbert/smart.py``) around an objective: its loss plus
    λ_s·R_s (the adversarial smoothness term on perturbed embeddings) + μ·D_Breg (the Bregman
    proximal term against the momentum teacher θ̃ of the trainable parameters). The embeddings
    are computed once and perturbed, never re-embedded. Create it after the model is on its
    device and frozen as it will train (``for_model``)."""

    model: MultitaskModel
    inner: Taught | MultitaskModel  # whose ``criterion`` gives the data term
    config: SmartConfig
    teacher: MomentumTeacher

    @classmethod
    def for_model(
        cls, model: MultitaskModel, inner: Taught | MultitaskModel, config: SmartConfig
    ) -> Smart:
        trainable = [p for p in model.parameters() if p.requires_grad]
        return cls(model, inner, config, MomentumTeacher(trainable, config.momentum))

    def __call__(self, task: Task, batch: Batch) -> torch.Tensor:
        model, config = self.model, self.config
        embeddings = model.embed(batch)
        outputs = model.outputs_from_embeddings(task.name, embeddings, batch)
        loss = self.inner.criterion(task, outputs, batch)

        def perturbed_outputs(perturbed: list[torch.Tensor]) -> torch.Tensor:
            return model.outputs_from_embeddings(task.name, perturbed, batch)

        def teacher_outputs() -> torch.Tensor:
            # A trainable embedding layer differs in the teacher, so the teacher embeds again;
            # a frozen one gives the same vectors, so they are reused (one embed per step).
            if any(p.requires_grad for p in model.bert.embeddings.parameters()):
                return model(task.name, batch)
            return model.outputs_from_embeddings(task.name, [e.detach() for e in embeddings], batch)

        adversarial = smart_regularizer(
            perturbed_outputs, embeddings, outputs, task.smart_kind, config
        )
        bregman = bregman_term(teacher_outputs, outputs, self.teacher, task.smart_kind)
        return loss + config.weight * adversarial + config.bregman_weight * bregman

    def after_update(self) -> None:
        """After an optimizer step: the teacher θ̃ moves towards the updated weights."""
        self.teacher.update()


def objective_for(
    model: MultitaskModel,
    teachers: dict[str, torch.Tensor] | None = None,
    gold: Callable[[], float] | None = None,
    smart: SmartConfig | None = None,
) -> Objective:
    """The run's objective: the model's loss, with a taught target where ``teachers`` has the
    task (λ from ``gold``), all of it inside SMART when ``smart`` is given."""
    objective: Objective = model.loss
    inner: Taught | MultitaskModel = model
    if teachers:
        objective = inner = Taught(model, teachers, gold or (lambda: 1.0))
    if smart is not None:
        objective = Smart.for_model(model, inner, smart)
    return objective
