"""AdamW written out by hand, and the parameter groups it trains (layer-wise learning rates).

The learning-rate schedule (linear warmup, linear decay) is the training loop's:
``multitask/step.py``.

AdamW is Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization") with the weight
decay taken out of the gradient and applied to the weights directly ("decoupled"), as proposed by
Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization" (ICLR 2019).

``AdamW`` computes the same numbers as ``torch.optim.AdamW`` (non-fused, non-foreach, no amsgrad):
the operations below are done in the same order with the same rounding, and its per-parameter
state uses the same keys (``step``, ``exp_avg``, ``exp_avg_sq``), so a state dict saved by one
loads into the other. ``tests/model/test_optimizer.py`` and ``sanity_check.py`` check both claims.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn


class AdamW(torch.optim.Optimizer):
    """AdamW: Adam with decoupled weight decay (Loshchilov & Hutter 2019).

    For each parameter θ with gradient g, at step t = 1, 2, ... (all operations elementwise):

    1. t ← t + 1
    2. decoupled weight decay, before the Adam update:  θ ← θ − lr·λ·θ = (1 − lr·λ)·θ
    3. first moment (mean of g):                        m ← β₁·m + (1 − β₁)·g
    4. second moment (uncentred variance of g):         v ← β₂·v + (1 − β₂)·g²
    5. bias corrections (m and v start at 0, so early averages are too small):
                                                         m̂ = m / (1 − β₁ᵗ),  v̂ = v / (1 − β₂ᵗ)
    6. update:                                          θ ← θ − lr · m̂ / (√v̂ + ε)

    In step 6 the division by (1 − β₁ᵗ) is folded into the step size and √(1 − β₂ᵗ) divides √v
    before ε is added, exactly as torch.optim.AdamW does, so the two agree to the last bit on CPU:
    θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε).

    As in torch, the decay in step 2 is multiplied by the current learning rate lr (which follows
    the schedule); the paper writes it as η_t·λ·θ with η_t the schedule multiplier alone, which
    differs only by the constant factor of the base learning rate absorbed into λ.

    Args:
        params: parameters, or parameter groups (dicts with ``params`` and any of the options
            below, which then override the defaults for that group); see ``param_groups``.
        lr: learning rate (α in Kingma & Ba).
        betas: (β₁, β₂), decay rates of the first and second moment averages.
        eps: ε, added to the denominator for numerical stability.
        weight_decay: λ, the decoupled weight decay coefficient.
    """

    def __init__(
        self,
        params: Iterable[nn.Parameter] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        if lr < 0.0:
            raise ValueError(f"invalid learning rate {lr}: must be >= 0")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}: each must be in [0, 1)")
        if eps < 0.0:
            raise ValueError(f"invalid eps {eps}: must be >= 0")
        if weight_decay < 0.0:
            raise ValueError(f"invalid weight_decay {weight_decay}: must be >= 0")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:  # type: ignore[override]
        """Do one AdamW update of every parameter that has a gradient.

        closure: optional function that re-evaluates the model and returns the loss.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            eps = group["eps"]
            weight_decay = group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("AdamW does not support sparse gradients")

                state = self.state[p]
                if len(state) == 0:
                    # A float32 tensor on the CPU, as torch keeps it, so state dicts interchange.
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                m, v = state["exp_avg"], state["exp_avg_sq"]

                # HINT: steps 1-6 of the class docstring, updating p, m and v in place; the step
                # HINT: count t lives in state["step"]. The decay is decoupled from the gradient.
                # BEGIN SOLUTION: adamw
                # 1. t ← t + 1
                state["step"] += 1
                t = float(state["step"])

                # 2. θ ← (1 − lr·λ)·θ, decoupled from the gradient: decay does not pass through
                # the adaptive scaling of step 6, so every weight decays at the same rate.
                if weight_decay != 0:
                    p.mul_(1 - lr * weight_decay)

                # 3. m ← β₁·m + (1 − β₁)·g, written as m + (1 − β₁)·(g − m) (lerp) as torch does.
                m.lerp_(grad, 1 - beta1)
                # 4. v ← β₂·v + (1 − β₂)·g²
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)

                # 5. bias corrections
                bias_correction1 = 1 - beta1**t
                bias_correction2 = 1 - beta2**t

                # 6. θ ← θ − (lr / (1 − β₁ᵗ)) · m / (√v / √(1 − β₂ᵗ) + ε)
                step_size = lr / bias_correction1
                denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)
                p.addcdiv_(m, denom, value=-step_size)
                # END SOLUTION

        return loss


def layer_depths(model: nn.Module) -> dict[int, int]:
    """id(parameter) -> depth d of the ``BertModel`` inside ``model``, chosen by structure:

    d = 0        the embeddings
    d = l        encoder layer l (1..L), and every plug-in parameter that acts in that layer
                 (``Plugin.layer_of``; one that serves several layers counts at the topmost)
    d = L + 1    everything else: the pooler, the task heads (absent from the dict)
    """
    from minbert.bert import BertModel  # here: AdamW itself needs no part of the model

    bert = next((m for m in model.modules() if isinstance(m, BertModel)), None)
    if bert is None:
        return {}
    depths = {id(p): 0 for p in bert.embeddings.parameters()}
    for index, layer in enumerate(bert.encoder.layer):
        depths |= {id(p): index + 1 for p in layer.parameters()}
    for plugin in bert.plugins.values():
        for task in plugin.tasks:
            depths |= {id(p): index + 1 for p, index in plugin.layer_of(task).items()}
    return depths


def param_groups(
    model: nn.Module, weight_decay: float, lr: float | None = None, layer_decay: float = 1.0
) -> list[dict[str, Any]]:
    """The trainable parameters of ``model`` in optimizer groups.

    Weight decay: a parameter is decayed when it is a matrix or higher (ndim ≥ 2: linear and
    embedding weights) and does not belong to a LayerNorm. Biases, LayerNorm gains and biases,
    and any other vector or scalar (e.g. LHUC scales) get no decay, because shrinking them
    towards 0 is not a useful prior: a LayerNorm gain of 0 switches the unit off.

    Layer-wise learning-rate decay (Howard & Ruder 2018, "Universal Language Model Fine-tuning
    for Text Classification", discriminative fine-tuning; Clark et al. 2020, ELECTRA): with
    γ = ``layer_decay`` < 1, a parameter at depth d (``layer_depths``) trains at

        lr_d = lr · γ^(L + 1 − d)

    so the embeddings move least, the heads keep the full rate. Lower layers hold general
    features that a small task should change little; the freshly initialised top should change
    most. γ = 1 is plain fine-tuning: the groups carry no rate of their own.

    Both choices are structural, never by parameter name. Frozen parameters
    (``requires_grad=False``) are left out, a parameter shared by several modules is listed
    once, and empty groups are omitted. Returns groups for ``AdamW(groups, lr=lr)``: with γ = 1,
    ``[{"params": [...], "weight_decay": weight_decay}, {"params": [...], "weight_decay": 0.0}]``;
    otherwise one such pair per depth, top first, each with its ``lr``.
    """
    if not 0.0 < layer_decay <= 1.0:
        raise ValueError(f"layer decay must be in (0, 1], got {layer_decay}")
    if layer_decay != 1.0 and lr is None:
        raise ValueError("layer-wise learning-rate decay needs the base learning rate lr")
    depths = layer_depths(model) if layer_decay != 1.0 else {}
    top = 1 + max(depths.values(), default=0)
    groups: dict[tuple[int, bool], list[nn.Parameter]] = {}
    seen: set[int] = set()
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            decayed = p.ndim >= 2 and not isinstance(module, nn.LayerNorm)
            groups.setdefault((depths.get(id(p), top), decayed), []).append(p)
    result = []
    for depth in sorted({d for d, _ in groups}, reverse=True):
        for decayed in (True, False):
            if params := groups.get((depth, decayed)):
                group = {"params": params, "weight_decay": weight_decay if decayed else 0.0}
                if layer_decay != 1.0:
                    group["lr"] = lr * layer_decay ** (top - depth)
                result.append(group)
    return result


def adamw_for(model: nn.Module, lr: float, weight_decay: float, layer_decay: float = 1.0) -> AdamW:
    """The optimizer of a run: ``AdamW`` over ``param_groups(model, weight_decay, lr,
    layer_decay)``, the trainable parameters only. (The driver takes its multi-tensor form,
    ``multitask.step.optimizer_for``.)"""
    return AdamW(param_groups(model, weight_decay, lr, layer_decay), lr=lr)
