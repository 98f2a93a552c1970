"""The PCGrad extra's part of a run (``--step_gradient pcgrad``; the surgery itself is
minbert/pcgrad.py, which imports nothing of the driver's): its update strategy, and the check of
the settings it cannot run with.

A summed step (every task's batch) whose gradients PCGrad projects apart where they conflict is
``PCGrad``, a host-checked update: the tasks' gradients are kept apart until the step's last
backward, then combined (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from minbert.pcgrad import surgery
from multitask.extras import Part
from multitask.step import HostChecked, parameters


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

    def combine(self, optimizer: torch.optim.Optimizer, finite: bool) -> None:
        """The tasks' gradients, projected apart where they conflict, summed into ``.grad``."""
        per_task, self.per_task = self.per_task, []
        if finite:
            generator = torch.Generator().manual_seed(self.seed())
            for p, grad in zip(parameters(optimizer), surgery(per_task, generator)):
                p.grad = grad


class Projecting(Part):
    """A run with --step_gradient pcgrad: its update projects the tasks' gradients apart."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg

    def choose_update(self, seed: Callable[[], int], skip: bool) -> PCGrad:
        """The projecting update (the others' order drawn from ``seed()``, the step's seed)."""
        return PCGrad(seed, skip)

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        """--nonfinite_check device leaves the loss on the device until the next --log_every,
        while PCGrad projects gradients that may be NaN: the flag that needs every loss on the
        host is the one named (SMART's, where --smart asks for the same, is named by the core)."""
        cfg = self.cfg
        if cfg.nonfinite_check == "device" and not cfg.smart:
            yield (
                "--nonfinite_check device with --step_gradient pcgrad: PCGrad projects "
                "gradients that may be NaN, so the losses are checked on the host; leave "
                "--nonfinite_check auto, or leave --step_gradient pcgrad out"
            )


def for_run(cfg: Any) -> Projecting | None:
    """Its part in a run with --step_gradient pcgrad; else None (the core's update)."""
    return Projecting(cfg) if cfg.step_gradient == "pcgrad" else None
