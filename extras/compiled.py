"""A training step whose forward and loss run compiled (``--compile``): ``torch.compile``, and on a
GPU CUDA graphs, so that a step costs the host a few launches instead of one per kernel.

    step = CompiledStep(TrainingStep(model), mode="reduce-overhead")   # on a GPU
    loss = step(task, batch)                                           # as TrainingStep's

At this model's size (22.7M parameters, ~40 tokens an example) a GPU step is a few hundred small
kernels, each launched by the host; the GPU finishes each faster than Python issues the next,
so it waits on the host. ``torch.compile`` (TorchDynamo captures the forward and the loss,
AOTAutograd the backward, Inductor fuses them into fewer kernels); mode ``reduce-overhead``
records each compiled graph once as a CUDA graph and replays it with one launch (Ansel et al.
2024, "PyTorch 2"; NVIDIA, "CUDA Graphs").

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from minbert.flags import setting
from multitask.collate import Batch
from multitask.errors import UsageError
from multitask.extras import Part
from tasks.base import Task

__all__ = ["Compiled", "CompiledStep", "Settings", "compilations", "compile_seconds", "for_run"]


@dataclass
class Settings:
    """The --compile flags (docs/flags.md has the details)."""

    compile: bool = setting(
        False,
        "torch.compile each step's forward and loss (not with --smart or --teachers)",
        group="compiled step",
    )
    compile_mode: Literal["auto", "default", "reduce-overhead", "aot_eager"] = setting(
        "auto",
        "with --compile: torch.compile's mode (auto: reduce-overhead on a GPU, else default)",
    )


def mode_for(setting: str, device: torch.device, processes: int = 1) -> str:
    """torch.compile's mode for ``--compile_mode``: auto is reduce-overhead (CUDA graphs) on a
    GPU and default (Inductor alone) elsewhere, where CUDA graphs do not exist; aot_eager
    captures the graphs (forward and backward) but runs them eagerly, without generating code:
    a quick check that a step compiles at all. A UsageError where it cannot run: CUDA graphs
    off a GPU, and several processes (DistributedDataParallel around a compiled step is left
    untried)."""
    if processes > 1:
        raise UsageError("--compile compiles the step of one process: not under torchrun")
    if setting == "auto":
        return "reduce-overhead" if device.type == "cuda" else "default"
    if setting == "reduce-overhead" and device.type != "cuda":
        raise UsageError("--compile_mode reduce-overhead records CUDA graphs: it needs a GPU")
    return setting


def compilations() -> int:
    """Graphs TorchDynamo compiled in this process so far (a recompilation counts as one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def compile_seconds() -> float:
    """Seconds this process spent compiling so far: TorchDynamo and Inductor on the forward, and
    the backward's compilation at its first run (not the CUDA graphs' recordings)."""
    from torch._dynamo.utils import cumulative_time_spent_ns

    spent = cumulative_time_spent_ns.get("entire_frame_compile", 0)
    return round((spent + cumulative_time_spent_ns.get("entire_backward_compile", 0)) / 1e9, 1)


# -- its part of a run (multitask/extras.py: Part) -----------------------------------------------


class Compiled(Part):
    """A run with --compile (or a --compile_mode, which goes with it): the settings checked, the
    step compiled in its mode, and what compiling took added to summary.json."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.own = cfg.extras["compiled"]

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        """What is wrong with the --compile flags given the rest of the run's settings."""
        cfg, own = self.cfg, self.own
        if own.compile_mode != "auto" and not own.compile:
            yield f"--compile_mode {own.compile_mode} goes with --compile"
        if own.compile and cfg.step_gradient != "one-task":
            yield (
                f"--compile with --step_gradient {cfg.step_gradient}: a compiled step trains one "
                "task's batch (CUDA graphs would overwrite one task's gradients with the next's)"
            )
        distillation = cfg.extras.get("distillation")
        teachers = distillation is not None and bool(distillation.teachers)
        if own.compile and (cfg.smart or teachers):
            yield (
                f"--compile with --{'smart' if cfg.smart else 'teachers'}: not supported (SMART's "
                "extra forwards and a teacher's mixing weight change every step); leave one out"
            )

    def check_machine(self, device: torch.device, processes: int) -> Iterator[str]:
        """--compile where it cannot run (``mode_for``), before anything is read or written."""
        try:
            if self.own.compile:
                mode_for(self.own.compile_mode, device, processes)
        except UsageError as err:
            yield str(err)

    def wrap_step(self, step: nn.Module, device: torch.device, processes: int) -> nn.Module:
        """The step compiled in its mode."""
        if not self.own.compile:
            return step
        return CompiledStep(step, mode_for(self.own.compile_mode, device, processes))

    def wrap_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        """The graphs compiled and the seconds it took, added to summary.json."""
        if not self.own.compile:
            return summary
        return summary | {"compiled_graphs": compilations(), "compile_s": compile_seconds()}


def for_run(cfg: Any) -> Compiled | None:
    """Its part in a run with --compile; else None (where a --compile_mode without --compile
    is the one line its check gives)."""
    own = cfg.extras["compiled"]
    return Compiled(cfg) if own.compile or own.compile_mode != "auto" else None


class CompiledStep(nn.Module):
    """``step`` (a ``TrainingStep``: task, batch -> loss) with its forward compiled in ``mode``;
    ``after_update`` is ``step``'s. Holds ``step`` as its one submodule, so its parameters are
    the model's."""

    def __init__(self, step: nn.Module, mode: str) -> None:
        super().__init__()
        self.step = step
        self.after_update = getattr(step, "after_update", None)
        self.graphs = mode == "reduce-overhead"
        # Each task's head and each padded shape adds an entry to the forward's cache; the
        # default limit (8) would fall back to eager once a few tasks have been seen.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        if mode == "aot_eager":
            self.compiled = torch.compile(step.forward, backend="aot_eager")
        else:
            self.compiled = torch.compile(step.forward, mode=None if mode == "default" else mode)

    def forward(self, task: Task, batch: Batch) -> torch.Tensor:
        for sequence in batch.inputs:
            for tensor in sequence.values():
                torch._dynamo.maybe_mark_dynamic(tensor, 1)
        if self.graphs:  # a new step: earlier replays' outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        loss = self.compiled(task, batch)
        return loss.clone() if self.graphs else loss
