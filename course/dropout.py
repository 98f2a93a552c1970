"""Deterministic dropout for grading in training mode.

Inside ``recorded_dropout(seed)`` every call of ``torch.nn.functional.dropout`` (which
``nn.Dropout`` calls) and of ``torch.dropout`` that is active (training, p > 0) draws its keep mask
(``rand >= p``, kept values scaled by 1/(1 − p), as torch does) from seeded streams, one stream
per *unit*: a tensor of 4 or more dimensions (B, S, ...) is S units of shape (B, ...) stacked on
axis 1 (the heads of attention probabilities, (B, nh, T, T)); a tensor of 3 or fewer dimensions is
one unit. Units are numbered in call order, and unit n of shape s draws from a generator seeded
with (seed, n, s). So written-out attention that loops over the heads, calling dropout on
(B, 1, T, T) or (B, T, T) once per head, gets exactly the masks of one call on (B, nh, T, T): how
a correct computation is batched over the heads does not matter. The student's code and the
reference that produced the stored outputs (the instructor's reference script) run under the
same context, so they see the same masks exactly when they call dropout in the same places, in
the same order, on the same units: a dropout that is missing, misplaced or applied twice changes
the output and is graded.

``calls`` records (shape, p) of each active call, for the messages (``describe_calls``).
"""

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


def units(calls: list) -> list[tuple[tuple[int, ...], float]]:
    """The (unit shape, p) of every unit the calls draw, in order: calls with the same units
    draw the same masks."""
    found = []
    for shape, p in calls:
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
        return (
            f"{hint}; in eval mode your code {describe_calls(calls)}, the reference "
            "never calls it in eval mode (dropout is off after model.eval(): pass "
            "training=self.training to F.dropout, or call the module's nn.Dropout)"
        )
    if units(calls) == units(expected):
        return hint
    return (
        f"{hint}; in training mode your code {describe_calls(calls)}, the reference "
        f"{describe_calls(expected)}"
    )


def describe_calls(calls: list[tuple[tuple[int, ...], float]]) -> str:
    """ "called dropout 4 times on (3, 1, 6, 6) with p 0.1", "called dropout once on
    (3, 4, 6, 6) with p 0.1, then ...", or "never called dropout". Runs of the same call are
    counted."""
    runs: list[list] = []
    for call in calls:
        if runs and runs[-1][0] == call:
            runs[-1][1] += 1
        else:
            runs.append([call, 1])
    if not runs:
        return "never called dropout"
    times = {1: "once", 2: "twice"}
    return "called dropout " + ", then ".join(
        f"{times.get(n, f'{n} times')} on {tuple(shape)} with p {p:g}" for (shape, p), n in runs
    )


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
