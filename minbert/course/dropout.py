"""Deterministic dropout for grading in training mode.

Inside ``recorded_dropout(seed)`` every call of ``torch.nn.functional.dropout`` (which
``nn.Dropout`` calls) and of ``torch.dropout`` that is active (training, p > 0) draws its keep mask
from one generator seeded with ``seed``, in call order: the k-th active call gets the k-th draw
(``torch.rand(shape) >= p``, kept values scaled by 1/(1 − p), as torch does). The student's code
and the reference that produced the stored outputs (``scripts/make_course_references.py``) run
under the same context, so they see the same masks exactly when they call dropout in the same
places, in the same order, on tensors of the same shapes: a dropout that is missing, misplaced or
applied twice changes the output and is graded.

``calls`` records (shape, p) of each active call, for the messages.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F


class DropoutRecorder:
    """The replacement of ``F.dropout``: seeded masks in call order, each call recorded."""

    def __init__(self, seed: int) -> None:
        self.generator = torch.Generator().manual_seed(seed)
        self.calls: list[tuple[tuple[int, ...], float]] = []

    def __call__(
        self, input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False
    ) -> torch.Tensor:
        if not training or p == 0.0:
            return input
        self.calls.append((tuple(input.shape), float(p)))
        if p >= 1.0:
            return input * 0.0
        keep = torch.rand(input.shape, generator=self.generator) >= p
        out = input * keep.to(input.dtype) / (1.0 - p)
        if inplace:
            with torch.no_grad():
                input.copy_(out)
            return input
        return out


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
def mode(module: torch.nn.Module, name: str, seed: int) -> Iterator[None]:
    """``name`` "eval": the module in eval mode, no gradients. "train": training mode under
    ``recorded_dropout(seed)``. The module is left in eval mode afterwards."""
    module.train(name == "train")
    try:
        with torch.no_grad():
            if name == "train":
                with recorded_dropout(seed):
                    yield
            else:
                yield
    finally:
        module.eval()


MODES = ("eval", "train")
