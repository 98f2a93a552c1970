"""The hooks of the PCGrad extra (``--step_gradient pcgrad``; the surgery itself is
minbert/pcgrad.py, which imports nothing of the driver's): its update strategy, and the check of
the settings it cannot run with.

A summed step (every task's batch) whose gradients PCGrad projects apart where they conflict is
``multitask.step.PCGrad``, a host-checked update: the tasks' gradients are kept apart until the
step's last backward, then combined (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from multitask.step import PCGrad


def update(cfg: Any, seed: Callable[[], int], skip: bool) -> PCGrad | None:
    """With --step_gradient pcgrad, the projecting update (the others' order drawn from
    ``seed()``, the step's seed); else None (the core's update)."""
    if cfg.step_gradient != "pcgrad":
        return None
    return PCGrad(seed, skip)


def problems(cfg: Any, elsewhere: bool) -> Iterator[str]:
    """--nonfinite_check device leaves the loss on the device until the next --log_every, while
    PCGrad projects gradients that may be NaN: the flag that needs every loss on the host is the
    one named (SMART's, where --smart asks for the same, is named by the core)."""
    if cfg.nonfinite_check == "device" and cfg.step_gradient == "pcgrad" and not cfg.smart:
        yield (
            "--nonfinite_check device with --step_gradient pcgrad: PCGrad projects gradients "
            "that may be NaN, so the losses are checked on the host; leave --nonfinite_check "
            "auto, or leave --step_gradient pcgrad out"
        )
