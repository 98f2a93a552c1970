"""Where a run executes: the device, bfloat16 autocast, and several processes under torchrun.

device = pick_device("auto")                   # CUDA when present, else the CPU
with autocast(bf16=True, device=device): ...   # bfloat16 autocast (CUDA only)
dist, device = set_up_distributed("cuda", bf16=True, batch_size=32)
"""

from __future__ import annotations

import contextlib
import os
import sys
from dataclasses import dataclass

import torch

from multitask.errors import UsageError

MAX_THREADS = 1024  # more CPU threads than any machine has cores; above it a typo, not a setting
THREADS_RANGE = f"[1, {MAX_THREADS}]"


def set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads, 1..MAX_THREADS (a huge number would start that many
    threads at the first matrix product); None keeps torch's choice."""
    if threads is None:
        return
    if not 1 <= threads <= MAX_THREADS:
        raise UsageError(f"--threads {threads}: must be in {THREADS_RANGE}")
    torch.set_num_threads(threads)


def pick_device(name: str) -> torch.device:
    """``auto`` (CUDA when present), ``cpu``, ``cuda`` or ``cuda:N``; a device this machine or
    this torch build lacks is a UsageError."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine; use cpu")
    try:
        device = torch.device(name)
        torch.empty(1, device=device)  # a device this torch build or machine lacks fails here
    except (RuntimeError, AssertionError) as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UsageError(f"--device {name}: not usable here ({first}); use auto or cpu") from None
    return device


def autocast(bf16: bool, device: torch.device) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on ``device`` with ``bf16``, else nothing."""
    if bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@dataclass
class Distributed:
    """Data parallelism under torchrun: every rank draws the same task and the same global batch
    (the samplers and batch streams are pure functions of the seed), computes the loss on its
    shard of that batch (examples rank, rank + world, ...), and DistributedDataParallel averages
    the gradients. Only rank 0 writes files and prints progress."""

    rank: int = 0
    world: int = 1

    def means(self, values: list[torch.Tensor]) -> list[float]:
        """Each scalar's mean over all processes, as Python numbers: one exchange and one read
        of the device for the whole list (every process passes as many, in the same order)."""
        stacked = torch.stack(values)
        if self.world > 1:
            torch.distributed.all_reduce(stacked)
            stacked /= self.world
        return stacked.tolist()

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over all processes (the global batch's loss, for the logs)."""
        if self.world > 1:
            value = value.clone()
            torch.distributed.all_reduce(value)
            value /= self.world
        return value.item()


def set_up_distributed(
    device_name: str, bf16: bool, batch_size: int
) -> tuple[Distributed, torch.device]:
    """This process's place in the run (``WORLD_SIZE``, ``LOCAL_RANK`` from torchrun) and its
    device: gloo on CPUs, nccl with one GPU per process. Ranks other than 0 print nothing."""
    device, world = pick_device(device_name), int(os.environ.get("WORLD_SIZE", "1"))
    if bf16 and device.type != "cuda":
        raise UsageError("--bf16 needs a CUDA device (--device cuda)")
    if world == 1:
        return Distributed(), device
    if batch_size < world:
        raise UsageError(f"--batch_size {batch_size} is smaller than the {world} processes")
    if device.type == "cuda":  # one GPU per process
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = torch.device("cuda", torch.cuda.current_device())
    torch.distributed.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    dist = Distributed(torch.distributed.get_rank(), torch.distributed.get_world_size())
    if dist.rank != 0:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- rank 0 alone prints
    return dist, device
