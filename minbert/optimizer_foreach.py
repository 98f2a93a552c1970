"""The multi-tensor path of the hand-written AdamW: the six steps of ``minbert.optimizer.AdamW``
(see its docstring), each done for all parameters of a group at once with ``torch._foreach_*``
ops instead of one parameter at a time.

A model has about a hundred parameter tensors; the per-parameter loop launches several small
kernels for each (on a GPU each launch costs the host more than the arithmetic costs the
device), while a foreach op launches one kernel for a whole list (CUDA) or loops in C++ (CPU).
``torch.optim.AdamW`` does the same by default on CUDA.

    optimizer = ForeachAdamW(param_groups(model, weight_decay=0.01), lr=5e-5)

The numbers equal the per-parameter loop's up to float rounding
(``tests/test_optimizer_foreach.py``: within 1e-7 after 100 steps, and against
``torch.optim.AdamW(foreach=True)``); the state dict has the same keys, so either loads the
other's.

Instructor-only (``minbert/course/scaffold.py``): the student tree leaves this file out, since it
is the AdamW exercise in another form; there ``multitask.step.optimizer_for`` trains with the
student's own loop.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from minbert.optimizer import AdamW


class ForeachAdamW(AdamW):
    """``AdamW`` whose step updates each parameter group with multi-tensor ops.

    Parameters of a group may have taken different numbers of steps (a task's head has a
    gradient only in that task's steps), so the bias corrections are computed per parameter
    from its own step count t, on the host (the counts live on the CPU, as torch keeps them):
    no value is read back from the device.
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update_group(group, params)
        return loss

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        grads = [p.grad for p in params]
        if any(g.is_sparse for g in grads):
            raise RuntimeError("AdamW does not support sparse gradients")
        states = [self._state_of(p) for p in params]
        ms = [s["exp_avg"] for s in states]
        vs = [s["exp_avg_sq"] for s in states]
        # 1. t ← t + 1 (on the CPU step counters)
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        ts = [float(t) for t in steps]
        # 2. θ ← (1 − lr·λ)·θ
        if weight_decay != 0:
            torch._foreach_mul_(params, 1 - lr * weight_decay)
        # 3. m ← β₁·m + (1 − β₁)·g (lerp, as torch)
        torch._foreach_lerp_(ms, grads, 1 - beta1)
        # 4. v ← β₂·v + (1 − β₂)·g²
        torch._foreach_mul_(vs, beta2)
        torch._foreach_addcmul_(vs, grads, grads, 1 - beta2)
        # 5. bias corrections, per parameter
        step_sizes = [-lr / (1 - beta1**t) for t in ts]
        root_corrections = [math.sqrt(1 - beta2**t) for t in ts]
        # 6. θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
        denoms = torch._foreach_sqrt(vs)
        torch._foreach_div_(denoms, root_corrections)
        torch._foreach_add_(denoms, eps)
        torch._foreach_addcdiv_(params, ms, denoms, step_sizes)

    def _state_of(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if len(state) == 0:  # as the per-parameter loop starts it
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state
