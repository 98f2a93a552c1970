"""The multi-tensor path of the hand-written AdamW: the six steps of ``minbert.optimizer.AdamW``
(see its docstring), each done for all parameters of a group at once with ``torch._foreach_*``
ops instead of one parameter at a time.

A model has about a hundred parameter tensors; the per-parameter loop launches several small
kernels for each (on a GPU each launch costs the host more than the arithmetic costs the
device), while a foreach op launches one kernel for a whole list (CUDA) or loops in C++ (CPU).
``torch.optim.AdamW`` does the same by default on CUDA.

    optimizer = ForeachAdamW(param_groups(model, weight_decay=0.01), lr=5e-5)

Design notes: docs/design/minbert.md.
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

    # step(apply_if=flag) updates only where a 0-dim device flag holds, never reading it: what
    # multitask.step.DeviceFlagged needs (the base AdamW has no such step)
    gates_on_device = True

    @torch.no_grad()
    def step(  # type: ignore[override]
        self, closure: Callable[[], float] | None = None, apply_if: torch.Tensor | None = None
    ) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params and apply_if is None:
                self._update_group(group, params)
            elif params:
                self._update_group_if(group, params, apply_if)
        return loss

    def _update_group(self, group: dict, params: list[torch.Tensor]) -> None:
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        grads = [p.grad for p in params]
        if any(g.is_sparse for g in grads):
            raise RuntimeError("AdamW does not support sparse gradients")
        steps, ms, vs = self._state(params, torch.device("cpu"))
        # 1. t ← t + 1 (on the CPU step counters)
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

    def _update_group_if(self, group: dict, params: list[torch.Tensor], flag: torch.Tensor) -> None:
        """The six steps with every change multiplied by f = ``flag`` (1 or 0, never read on the
        host): with f = 0, θ, m, v and t stay exactly as they were."""
        lr, (beta1, beta2) = group["lr"], group["betas"]
        eps, weight_decay = group["eps"], group["weight_decay"]
        f = flag.to(torch.float32)
        # A skipped step's gradients may be NaN, and NaN · 0 is NaN: they are set to 0 first.
        grads = [torch.where(flag, p.grad, 0.0) for p in params]
        steps, ms, vs = self._state(params, None)
        # 1. t ← t + f (counters on the device)
        torch._foreach_add_(steps, [f] * len(steps))
        # 2. θ ← (1 − lr·λ·f)·θ
        if weight_decay != 0:
            torch._foreach_mul_(params, 1 - lr * weight_decay * f)
        # 3. m ← (1 − (1 − β₁)·f)·m + (1 − β₁)·g   (g = 0 when f = 0)
        torch._foreach_mul_(ms, 1 - (1 - beta1) * f)
        torch._foreach_add_(ms, grads, alpha=1 - beta1)
        # 4. v ← (1 − (1 − β₂)·f)·v + (1 − β₂)·g²
        torch._foreach_mul_(vs, 1 - (1 - beta2) * f)
        torch._foreach_addcmul_(vs, grads, grads, 1 - beta2)
        # 5. bias corrections from t (at least 1: a first step that is skipped divides by 0)
        ts = torch._foreach_clamp_min(steps, 1.0)
        corrections1 = torch._foreach_neg(torch._foreach_pow(beta1, ts))
        torch._foreach_add_(corrections1, 1.0)
        roots2 = torch._foreach_neg(torch._foreach_pow(beta2, ts))
        torch._foreach_add_(roots2, 1.0)
        torch._foreach_sqrt_(roots2)
        # 6. θ ← θ − f · (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
        denoms = torch._foreach_sqrt(vs)
        torch._foreach_div_(denoms, roots2)
        torch._foreach_add_(denoms, eps)
        updates = torch._foreach_div(ms, denoms)
        torch._foreach_div_(updates, corrections1)
        torch._foreach_mul_(updates, -lr * f)
        torch._foreach_add_(params, updates)

    def _state(self, params: list[torch.Tensor], counters_on: torch.device | None) -> tuple:
        """Each parameter's step count t and first and second moments m and v, started as the
        per-parameter loop starts them. The counts are moved once to where the path keeps
        them: ``counters_on`` (the CPU, where they are read on the host), or with None each
        parameter's device (where they are never read)."""
        steps, ms, vs = [], [], []
        for p in params:
            state = self.state[p]
            if len(state) == 0:
                state["step"] = torch.tensor(0.0, dtype=torch.float32)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if state["step"].device != (device := counters_on or p.device):
                state["step"] = state["step"].to(device)
            steps.append(state["step"])
            ms.append(state["exp_avg"])
            vs.append(state["exp_avg_sq"])
        return steps, ms, vs
