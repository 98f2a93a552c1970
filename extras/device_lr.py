"""Each parameter group's learning rate as a device tensor, for an update captured in a CUDA
graph (extras/cuda_graphs.py): a replay reads its numbers from fixed addresses, so a rate
baked into the graph as a Python float would stay the rate of the step that was captured.

    rates = DeviceRates(optimizer, device)      # one float32 per group, on the device
    with rates.bound(optimizer):                # while capturing: group["lr"] is rates[i]
        optimizer.step(apply_if=flag)
    scheduler.step(); rates.write()             # after each step: the schedule's rates copied in

The schedule stays the one the eager step follows (``LambdaLR`` over ``LinearWarmupDecay``,
multitask/step.py), writing Python floats into the groups, so the optimizer's and the scheduler's
state dicts do not change; ``write`` copies those floats into the one tensor in place, with one
host-to-device copy that does not wait for the device.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class DeviceRates:
    """``rates[i]`` is group i's ``lr`` as float32 on ``device``, once ``write`` has run."""

    def __init__(self, optimizer: torch.optim.Optimizer, device: torch.device) -> None:
        self.optimizer = optimizer
        groups = len(optimizer.param_groups)
        self.rates = torch.zeros(groups, dtype=torch.float32, device=device)
        self.write()

    def write(self) -> None:
        """The groups' current rates into ``rates``, in place (no read of the device)."""
        host = torch.tensor([group["lr"] for group in self.optimizer.param_groups])
        if self.rates.is_cuda:  # pinned, so that the copy does not wait for the device
            host = host.pin_memory()
        self.rates.copy_(host, non_blocking=True)

    @contextlib.contextmanager
    def bound(self, optimizer: torch.optim.Optimizer) -> Iterator[None]:
        """Each group's ``lr`` is its element of ``rates`` inside, its float again after."""
        floats = [group["lr"] for group in optimizer.param_groups]
        for group, rate in zip(optimizer.param_groups, self.rates):
            group["lr"] = rate
        try:
            yield
        finally:
            for group, value in zip(optimizer.param_groups, floats):
                group["lr"] = value
