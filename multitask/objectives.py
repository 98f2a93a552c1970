"""What a training step minimises, when it is more than the model's own loss.

The plain objective is ``MultitaskModel.loss(task, batch)``: forward, head, the task's loss. The
research options wrap it, each in a class of its own (here the core's, SMART; an extra's comes
from its ``wrap_objective`` hook), and the driver chains them once at set-up (``objective_for``);
the step calls the outermost, ``objective(task, batch) -> loss``:

    loss = model.loss(task, batch)                          # the plain path
    loss = inner(task, batch)                               # an extra's objective around it
    loss = Smart(model, inner, ...)(task, batch)            # SMART around either

Each objective also offers ``criterion(task, outputs, batch)``, its loss of head outputs already
computed, which is how SMART adds its terms to whatever is inside it without a second forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from minbert.smart import MomentumTeacher, SmartConfig, bregman_term, smart_regularizer
from multitask.collate import Batch
from multitask.model import MultitaskModel
from multitask.step import Objective
from tasks.base import Task


@dataclass
class Smart:
    """SMART (Jiang et al. 2020, ``minbert/smart.py``) around an objective: its loss plus
    λ_s·R_s (the adversarial smoothness term on perturbed embeddings) + μ·D_Breg (the Bregman
    proximal term against the momentum teacher θ̃ of the trainable parameters). The embeddings
    are computed once and perturbed, never re-embedded. Create it after the model is on its
    device and frozen as it will train (``for_model``)."""

    model: MultitaskModel
    inner: Any  # the model, or an extra's objective around it: its criterion is the data term
    config: SmartConfig
    teacher: MomentumTeacher

    @classmethod
    def for_model(cls, model: MultitaskModel, inner: Any, config: SmartConfig) -> Smart:
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
    model: MultitaskModel, inner: Any = None, smart: SmartConfig | None = None
) -> Objective:
    """The run's objective: the model's loss, or ``inner`` (an objective around the model, from
    the extras' ``wrap_objective`` hooks), all of it inside SMART when ``smart`` is given."""
    inner = model if inner is None else inner
    objective: Objective = model.loss if inner is model else inner
    if smart is not None:
        objective = Smart.for_model(model, inner, smart)
    return objective
