"""torch's fused AdamW (``--optimizer fused``): the update of minbert/optimizer.py's AdamW in one
kernel per chunk of parameters.

The driver's default (``--optimizer foreach``, minbert/optimizer_foreach.py) computes the same
six steps with multi-tensor operations: a kernel launch per operation and chunk of tensors, a
few dozen launches a step. On a GPU, where a step of this model waits on its launches
(RESULTS.md: "Where does a GPU step's time go now"), torch's fused kernel
(``torch.optim.AdamW(fused=True)``) does all six steps for a chunk of tensors in one launch.
It computes the same update up to float rounding (not bit for bit: its kernel orders the
operations its own way).

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from multitask.extras import Part


class FusedAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW(params, lr, fused=True)`` with ``step(apply_if=flag)``."""

    # step(apply_if=flag) updates only where a 0-dim device flag holds, never reading it
    gates_on_device = True

    def __init__(self, params: Iterable[Any], lr: float) -> None:
        super().__init__(params, lr=lr, fused=True)

    @torch.no_grad()
    def step(  # type: ignore[override]
        self, closure: Callable[[], float] | None = None, apply_if: torch.Tensor | None = None
    ) -> float | None:
        if apply_if is not None:  # read by torch's step as GradScaler's overflow flag
            self.found_inf = (~apply_if).to(torch.float32)
        try:
            return super().step(closure)
        finally:
            self.found_inf = None


class Fused(Part):
    def choose_optimizer(self, groups: list[dict], lr: float) -> FusedAdamW:
        return FusedAdamW(groups, lr=lr)


def for_run(cfg: Any) -> Fused | None:
    """Its part in a run with --optimizer fused; else None."""
    return Fused() if cfg.optimizer == "fused" else None
