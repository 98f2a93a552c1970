"""Deterministic dropout for grading in training mode."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F


class DropoutRecorder:
    """The replacement of ``F.dropout``: seeded masks per unit in call order, each call
    recorded."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.units = 0  # units drawn so far
        self.calls: list[tuple[tuple[int, ...], float]] = []

    def keep_mask(self, shape: tuple[int, ...], p: float) -> torch.Tensor:
        """The keep mask of the next call on ``shape``: one unit, or shape[1] stacked on axis 1."""
        stacked = len(shape) >= 4
        unit = (shape[0], *shape[2:]) if stacked else shape
        masks = []
        for _ in range(shape[1] if stacked else 1):
            key = f"{self.seed}:{self.units}:{unit}".encode()
            g = torch.Generator().manual_seed(int(hashlib.sha256(key).hexdigest()[:15], 16))
            masks.append(torch.rand(unit, generator=g) >= p)
            self.units += 1
        return torch.stack(masks, 1) if stacked else masks[0]

    def __call__(
        self, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or p == 0.0:
            return input
        self.calls.append((tuple(input.shape), float(p)))
        if p >= 1.0:
            return input * 0.0
        keep = self.keep_mask(tuple(input.shape), float(p)).to(input.device, input.dtype)
        if inplace:  # the same arithmetic in place, seen by autograd as torch's in-place dropout
            return input.mul_(keep).div_(1.0 - p)
        return input * keep / (1.0 - p)


# The op named in a call recorded as (shape, p, FUSED): torch's fused attention, its dropout_p.
FUSED = "F.scaled_dot_product_attention"
# What a failing check's diagnosis says when dropout acts in eval mode: one mistake wherever it
# acts (F.dropout, an nn.Dropout, the fused op), so that a check whose cases each call dropout in
# their own way names it (``measure.worst_of`` keeps a mistake only if every case agrees).
EVAL_DROPOUT = (
    "dropout still acts in eval mode: after model.eval() it must be off (F.dropout with "
    "training=self.training, or the module's nn.Dropout; F.scaled_dot_product_attention with "
    "dropout_p=0.0)"
)


def units(calls: list) -> list[tuple[tuple[int, ...], float]]:
    """The (unit shape, p) of every unit the calls draw, in order: calls with the same units
    draw the same masks."""
    found = []
    for shape, p, *_ in calls:
        shape = tuple(shape)
        if len(shape) >= 4:
            found += [((shape[0], *shape[2:]), float(p))] * shape[1]
        else:
            found.append((shape, float(p)))
    return found


def explain_calls(hint: str, calls: list | None, case: dict) -> str:
    """``hint``, with what differs in the dropout calls when the student's code did not draw the
    units the reference drew (``case["dropout calls"]``, stored for training mode); in eval mode
    (no calls stored) any active dropout call is the mistake, and named so. ``calls``: the
    recorder's (``DropoutRecorder.calls``), None when the code ran without one."""
    expected = case.get("dropout calls")
    if calls is None:
        return hint
    if expected is None:
        if not calls:
            return hint
        advice = (
            "pass dropout_p=0.0 to F.scaled_dot_product_attention unless self.training"
            if _fused(calls)
            else "pass training=self.training to F.dropout, or call the module's nn.Dropout"
        )
        return (
            f"{hint}; in eval mode your code {describe_calls(calls)}, the reference "
            f"never drops out in eval mode (dropout is off after model.eval(): {advice})"
        )
    if units(calls) == units(expected):
        return hint
    return (
        f"{hint}; in training mode your code {describe_calls(calls)}, the reference "
        f"{describe_calls(expected)}"
    )


def eval_mode_mistakes(calls: list | None, case: dict) -> dict[str, float]:
    """The known mistake that active dropout calls in eval mode are (``EVAL_DROPOUT``, at
    distance 0: the calls show it, whatever the output), or none: in training mode (the case
    stores the reference's calls), or without calls."""
    if calls is None or case.get("dropout calls") is not None or not calls:
        return {}
    return {EVAL_DROPOUT: 0.0}


def describe_calls(calls: list) -> str:
    """ "called dropout 4 times on (3, 1, 6, 6) with p 0.1", "called dropout once on
    (3, 4, 6, 6) with p 0.1, then ...", "called F.scaled_dot_product_attention once on
    (3, 4, 6, 6) with dropout_p 0.1" (a call recorded with ``FUSED``), or "never called
    dropout". Runs of the same call are counted."""
    runs: list[list] = []
    for shape, p, *op in calls:
        call = (tuple(shape), float(p), op[0] if op else "dropout")
        if runs and runs[-1][0] == call:
            runs[-1][1] += 1
        else:
            runs.append([call, 1])
    if not runs:
        return "never called dropout"
    times = {1: "once", 2: "twice"}
    said = []
    for (shape, p, op), n in runs:
        rate = "dropout_p" if op == FUSED else "p"
        said.append(f"{op} {times.get(n, f'{n} times')} on {shape} with {rate} {p:g}")
    return "called " + ", then ".join(said)


def _fused(calls: list) -> bool:
    """Whether any of the recorded calls is torch's fused attention (``FUSED``)."""
    return any(len(call) > 2 and call[2] == FUSED for call in calls)


@contextlib.contextmanager
def recorded_dropout(seed: int) -> Iterator[DropoutRecorder]:
    """Replace dropout by seeded, recorded dropout (see the module docstring) while inside."""
    recorder = DropoutRecorder(seed)
    saved = F.dropout, torch.dropout
    F.dropout = recorder
    torch.dropout = lambda input, p, train: recorder(input, p, train)
    try:
        yield recorder
    finally:
        F.dropout, torch.dropout = saved


@contextlib.contextmanager
def mode(module: torch.nn.Module, name: str, seed: int) -> Iterator[DropoutRecorder | None]:
    """``name`` "eval" or "train": the module in that mode under ``recorded_dropout(seed)``
    (yields its recorder: in eval mode a correct module calls no active dropout, and one that
    does is named), no gradients: a check that runs the backward pass (the layer check) enables
    them inside. The module is left in eval mode afterwards."""
    module.train(name == "train")
    try:
        with torch.no_grad(), recorded_dropout(seed) as recorder:
            yield recorder
    finally:
        module.eval()


MODES = ("eval", "train")
