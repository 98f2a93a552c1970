"""The training losses between two log lines: kept on the device as the steps make them, read
on the host only at --log_every (and before a save or an evaluation), then logged as a mean per
task.

    log = LossLog(extra, means=dist.means, stop_on_nonfinite=True)
    log.add(step, ["sst"], losses, examples=32)     # every step: no read of the device
    log.read(at_step)                                # a CPU-GPU sync point: the host waits here
    folder.log_training(step, epoch, log.line())     # the mean loss per task since the last line

Its state lives in ``extra`` (the driver's part of last.pt: ``running``, the losses read since
the last line, and ``examples``, the examples of the steps read), so a resumed run logs as the
uninterrupted one. Reading is where a step whose loss was not finite is found when the steps
do not check their losses on the host (``multitask.step.DeviceFlagged``): it took no update,
and it is skipped with a message, or the run stops there (``NonFiniteStep``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch


class NonFiniteStep(Exception):
    """A step's loss read as not finite (``step``, ``task``, ``value``), with --nonfinite stop."""

    def __init__(self, step: int, task: str, value: float) -> None:
        super().__init__(f"non-finite loss ({value})")
        self.step, self.task, self.value = step, task, value


class LossLog:
    """The steps since the last read (step, task names, their losses on the device, examples)
    and, in ``extra``, the losses read since the last log line."""

    def __init__(
        self,
        extra: dict[str, Any],
        means: Callable[[list[torch.Tensor]], list[float]],
        stop_on_nonfinite: bool,
        skipped: Callable[[int, list[str]], None],
    ) -> None:
        self.extra, self.means = extra, means
        self.stop_on_nonfinite, self.skipped = stop_on_nonfinite, skipped
        self.pending: list[tuple[int, list[str], list[torch.Tensor], int]] = []

    def add(self, step: int, names: list[str], losses: list[torch.Tensor], examples: int) -> None:
        self.pending.append((step, names, losses, examples))

    def read(self) -> None:
        """Move the pending losses to the host (their means over the processes) into ``running``
        and count their examples: one read of the device for all of them. A non-finite one
        stops the run (``NonFiniteStep``) or, with skipping, is reported and left out."""
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        values = iter(self.means([loss for _, _, losses, _ in pending for loss in losses]))
        for step, names, losses, examples in pending:
            means = [next(values) for _ in losses]
            bad = [(name, v) for name, v in zip(names, means) if not math.isfinite(v)]
            if bad and self.stop_on_nonfinite:
                raise NonFiniteStep(step, *bad[0])
            if bad:
                self.skipped(step, names)
                continue
            for name, value in zip(names, means):
                self.extra["running"][name].append(value)
            self.extra["examples"] += examples

    def line(self) -> dict[str, float]:
        """Task -> its mean loss since the last line (tasks with a loss only); starts anew."""
        running = self.extra["running"]
        means = {name: sum(v) / len(v) for name, v in running.items() if v}
        for losses in running.values():
            losses.clear()
        return means
