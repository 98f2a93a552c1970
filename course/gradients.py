"""Gradient checks: whether the student's function can train, not only what it returns.

A value check passes code whose graph is cut (``.detach()``, ``.item()``, ``.data``, a
``torch.no_grad()`` block, a tensor rebuilt from values): right numbers, no gradient. Here, for a
fixed random projection P of the output y = f(w₁, …, wₙ) and a fixed direction δᵢ per input or
parameter wᵢ, autograd's ⟨∂(P·y)/∂wᵢ, δᵢ⟩ must equal the central difference
(P·f(wᵢ + εδᵢ) − P·f(wᵢ − εδᵢ)) / 2ε, in float64 (``PRECISION``). The value check holds f to the
sealed reference, so together they hold the gradient to the reference's. Each wᵢ is checked
alone, so the message names what gets no gradient or a wrong one. The standard test of a
backward pass (cs231n's gradient check; ``torch.autograd.gradcheck`` compares whole Jacobians).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from course.measure import backward_problem
from course.outcome import Outputs, problem


@dataclass(frozen=True)
class Precision:
    """The central difference's step (relative to the tensor's largest value) and the relative
    and absolute (relative to |P·y|) tolerances of the comparison, per dtype of the output."""

    step: float
    rtol: float
    atol: float


PRECISION = {
    # float64: truncation ≈ ε², rounding ≈ 1e-16/ε, both far below rtol
    torch.float64: Precision(step=1e-6, rtol=1e-5, atol=1e-9),
    # code that computes in float32 whatever it is given: a coarser step, a looser comparison
    torch.float32: Precision(step=3e-3, rtol=3e-2, atol=1e-4),
}

CUT = (
    "something between it and the output cuts the graph (a .detach(), .item(), .data, a "
    "torch.no_grad() block, or a new tensor built from its values)"
)
# The known mistake a cut graph is (``Check.seen``, ``course/outcome.py``: ``observed``).
GRADIENT_CUT = "gradient cut"
GRADIENT_SEEN = {
    GRADIENT_CUT: "the backward pass cuts the graph: your output is right, but what the line "
    "above names would not train (a .detach(), .item(), .data, torch.no_grad() or a tensor "
    "rebuilt from values on the way)",
}


def in_float64(module: nn.Module) -> nn.Module:
    """A float64 copy of ``module`` in eval mode (dropout off: the difference must see one
    function); the module itself is left as it was."""
    return copy.deepcopy(module).double().eval()


def as_float64_leaf(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a float64 leaf that requires a gradient (a new tensor: the stored one is kept)."""
    return t.detach().clone().double().requires_grad_(True)


def _generator(name: str, seed: int) -> torch.Generator:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:7], "little"))


def _direction(name: str, like: torch.Tensor, seed: int) -> torch.Tensor:
    """A fixed random direction of ``like``'s shape, its largest entry 1, seeded by the name."""
    d = torch.randn(like.shape, generator=_generator(name, seed), dtype=torch.float64)
    return (d / d.abs().max().clamp_min(1e-12)).to(like.dtype)


def _projected(output: Callable[[], torch.Tensor], projection: torch.Tensor) -> torch.Tensor:
    y = output()
    return (y.to(projection.dtype) * projection).sum()


def gradient_problem(
    output: Callable[[], torch.Tensor],
    wrt: dict[str, torch.Tensor],
    seed: int = 0,
    held: dict[str, torch.Tensor] | None = None,
) -> tuple[str, bool]:
    """Why training through ``output()`` would not train each tensor of ``wrt`` (what a message
    calls it -> a leaf tensor that requires a gradient: an input made by ``as_float64_leaf`` or
    a parameter of an ``in_float64`` module): (the message, whether the graph is cut), or
    ("", False) when every one gets the gradient of the function's own change. A tensor that
    gets no gradient is named before one that gets a wrong one (a wrong one is often what a
    cut elsewhere leaves). ``output`` recomputes the function from the current values of
    ``wrt`` (a closure), deterministically (eval mode, no dropout). ``held``: name -> a 0/1
    mask of the entries that get no gradient by design (an embedding's padding row), left out
    of the direction."""
    with torch.enable_grad():
        tensors = list(wrt.values())
        if said := backward_problem(output(), tensors):  # an in-place change autograd saved
            if "does not depend" not in said:
                return said, False
            first = next(iter(wrt))
            nothing = f"{first} (nor anything else)" if len(wrt) > 1 else first
            return f"no gradient reaches {nothing}: {CUT}; it would never train", True
        y = output()
        precision = PRECISION.get(y.dtype, PRECISION[torch.float32])
        projection = _direction("projection", y.detach(), seed).to(torch.float64)
        value = (y.to(torch.float64) * projection).sum()
        grads = torch.autograd.grad(value, tensors, allow_unused=True)
    scale = precision.atol * (1.0 + abs(value.item()))
    missing, wrong = [], []
    for (name, t), g in zip(wrt.items(), grads):
        delta = _direction(name, t.detach(), seed)
        if held is not None and name in held:
            delta = delta * (1 - held[name]).to(delta.dtype)
        autograd = 0.0 if g is None else float((g.double() * delta.double()).sum())
        numeric = _central_difference(output, projection, t, delta, precision.step)
        if not math.isfinite(numeric):  # the function itself is not finite here: nothing to judge
            continue
        tolerance = precision.rtol * max(abs(autograd), abs(numeric)) + scale
        if (g is None or autograd == 0.0) and abs(numeric) > scale:
            missing.append(f"no gradient reaches {name}: {CUT}; it would never train")
        elif g is not None and not abs(autograd - numeric) <= tolerance:  # NaN: wrong too
            wrong.append(
                f"the gradient with respect to {name} is wrong: along a fixed direction, "
                f"autograd gives {autograd:.6g} where your output changes at the rate "
                f"{numeric:.6g}; {CUT}"
            )
    found = missing + wrong
    return (found[0], True) if found else ("", False)


def _central_difference(
    output: Callable[[], torch.Tensor],
    projection: torch.Tensor,
    t: torch.Tensor,
    delta: torch.Tensor,
    step: float,
) -> float:
    """(P·f(t + εδ) − P·f(t − εδ)) / 2ε, with ε = step × (1 + max |t|); ``t`` is changed in
    place and restored."""
    eps = step * (1.0 + float(t.detach().abs().max())) if t.numel() else step
    kept = t.detach().clone()
    with torch.no_grad():
        try:
            t.add_(eps * delta)
            plus = float(_projected(output, projection))
            t.copy_(kept)
            t.sub_(eps * delta)
            minus = float(_projected(output, projection))
        finally:
            t.copy_(kept)
    return (plus - minus) / (2 * eps)


def parameters_of(module: nn.Module, label: str) -> dict[str, torch.Tensor]:
    """``module``'s trainable parameters, each called "<label>'s <name>" in a message."""
    return {f"{label}'s {n}": p for n, p in module.named_parameters() if p.requires_grad}


def gradient_failure(
    call: Callable[..., torch.Tensor],
    inputs: dict[str, torch.Tensor],
    module: nn.Module | None = None,
    label: str = "",
    where: str = "",
    functions: tuple[str, ...] = (),
) -> Outputs | None:
    """The failing outputs of a check whose function does not train (``gradient_problem`` of
    ``call(module, *inputs)`` on float64 copies), or None when it does. The gradients must reach
    every floating-point input (called "the argument <name>") and every trainable parameter of
    ``module`` (called "<label>'s <name>"); integer inputs (ids, masks) are passed as they are.
    ``where``: what the message puts first ("mlm_loss"); ``functions``: those of the check's
    functions the call is in, where it is one of them (else the message blames them all)."""
    module = None if module is None else in_float64(module)
    args = [t if not t.is_floating_point() else as_float64_leaf(t) for t in inputs.values()]
    wrt = {f"the argument {n}": t for n, t in zip(inputs, args) if t.is_floating_point()}
    held = {}
    if module is not None:
        wrt |= parameters_of(module, label)
        held = padding_rows(module, label)
    said, cut = gradient_problem(lambda: call(module, *args), wrt, held=held)
    if not said:
        return None
    return problem(f"{where}: {said}" if where else said, GRADIENT_CUT if cut else "", functions)


def padding_rows(module: nn.Module, label: str) -> dict[str, torch.Tensor]:
    """The padding row of each embedding table of ``module`` that has one (``padding_idx``: its
    gradient is zero by design), as ``gradient_problem``'s ``held`` masks."""
    held = {}
    for name, sub in module.named_modules():
        if isinstance(sub, nn.Embedding) and sub.padding_idx is not None:
            mask = torch.zeros_like(sub.weight)
            mask[sub.padding_idx] = 1
            held[f"{label}'s {name + '.' if name else ''}weight"] = mask
    return held
