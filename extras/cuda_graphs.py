"""The whole training step as one CUDA graph (``--cuda_graphs``): forward, loss, backward and the
AdamW update captured once per task and padded shape, then replayed with one launch a step, as
MLPerf's BERT and Megatron-LM's full-iteration graphs do (PyTorch, "CUDA Graphs").

    steps = for_run(cfg).choose_step_function(parts)  # None: the eager step (a line says why)
    losses = steps(step_module, [(task, batch)], optimizer, update, scheduler)

An eager GPU step is ~1,000 launches that cost the host more than the device's work. Each key
(task, batch size, padded widths) runs ``WARMUP_STEPS`` eager steps on a side stream, is then
captured, and every later step copies its batch into the key's ``StaticBatch`` and replays:
nothing is read on the host (``DeviceFlagged``), the rates come from ``DeviceRates``, dropout
draws anew from the CUDA generator each replay. What it cannot serve falls back to the eager step
(``fallback_reason``). Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from extras.device_lr import DeviceRates
from extras.static_batch import StaticBatch, padded_width
from minbert.flags import setting
from minbert.optimizer_foreach import ForeachAdamW
from multitask.collate import Batch
from multitask.errors import UsageError
from multitask.extras import Part, StepParts
from multitask.step import DeviceFlagged, train_step
from tasks.base import Task

# Eager steps of a key before it is captured: the first sets up cuBLAS, the allocator and the
# optimizer's state on the side stream; a second leaves nothing lazily made for the capture.
WARMUP_STEPS = 2

Key = tuple[str, int, tuple[int, ...]]

# What ``--cuda_graphs auto`` does on a GPU. Off: the graphed step has never been timed against
# the eager step on a GPU (benchmarks/gpu_check.py does that), and a default nobody has measured
# does not ship. Turn it on only with gpu_check.py's figures showing it faster and equal.
AUTO_CAPTURES_ON_A_GPU = False


@dataclass
class Settings:
    """The --cuda_graphs flag (multitask/extras.py)."""

    cuda_graphs: Literal["auto", "on", "off"] = setting(
        "auto",
        "the training step as CUDA graphs: on, off, or auto (off: not yet measured on a GPU)",
        group="CUDA graphs",
    )


def refuse_off_gpu(device: torch.device) -> None:
    """``--cuda_graphs on`` on a device that is not CUDA: a UsageError, before anything runs."""
    if device.type != "cuda":
        raise UsageError(
            f"--cuda_graphs on captures CUDA graphs: it needs a GPU, and this run is on "
            f"{device.type} (leave --cuda_graphs auto, or use --device cuda)"
        )


def setting_of(cfg: Any, extra: str, name: str) -> Any:
    """A setting of an extra this one ``needs`` (multitask/extras.py), or None where this tree
    lacks it."""
    settings = cfg.extras.get(extra)
    return None if settings is None else getattr(settings, name)


def fallback_reason(
    cfg: Any, processes: int, optimizer: torch.optim.Optimizer, update: Any, model: nn.Module
) -> str | None:
    """Why the step of this run cannot be captured whole, or None when it can."""
    unsafe = [type(m).__name__ for m in model.modules() if getattr(m, "graph_safe", True) is False]
    reasons = (
        (processes > 1, "several processes (torchrun): the gradient exchange is not captured"),
        (setting_of(cfg, "compiled", "compile"), "--compile records its own CUDA graphs"),
        (cfg.smart, "--smart: SMART's teacher counts the updates on the host"),
        (
            bool(setting_of(cfg, "distillation", "teachers")),
            "--teachers: distillation indexes its teacher outputs on the host",
        ),
        (
            cfg.step_gradient != "one-task",
            f"--step_gradient {cfg.step_gradient}: a step of every task's batch",
        ),
        (
            not isinstance(update, DeviceFlagged),
            "the host checks each loss (--nonfinite_check host): a read inside the step",
        ),
        (
            not isinstance(optimizer, ForeachAdamW),
            f"--optimizer {cfg.optimizer}: only the multi-tensor AdamW takes a device rate",
        ),
        (bool(unsafe), f"a plug-in cannot be captured ({', '.join(unsafe)}: graph_safe False)"),
    )
    return next((why for holds, why in reasons if holds), None)


def decide(setting: str, device: torch.device, reason: str | None) -> bool:
    """Whether to capture: never with off, off a GPU, or with auto while
    ``AUTO_CAPTURES_ON_A_GPU`` is False; on CUDA with on (or auto) unless ``reason``, which it
    prints as the one line saying why the eager step trains."""
    if setting == "off" or device.type != "cuda":
        return False
    if setting == "auto" and not AUTO_CAPTURES_ON_A_GPU:
        return False
    if reason is not None:
        print(f"--cuda_graphs {setting}: the eager step trains: {reason}")
        return False
    return True


class Graphed(Part):
    """A run with --cuda_graphs on or auto: on is refused off a GPU; the graphed step trains
    where this run's step can be captured (``decide``), else the eager one."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.setting = cfg.extras["cuda_graphs"].cuda_graphs

    def check_machine(self, device: torch.device, processes: int) -> Iterator[str]:
        """``--cuda_graphs on`` off a GPU is refused."""
        if self.setting == "on":
            try:
                refuse_off_gpu(device)
            except UsageError as err:
                yield str(err)

    def choose_step_function(self, parts: StepParts) -> GraphedSteps | None:
        """The graphed step for a run made of ``parts``, or None: the eager step."""
        cfg = self.cfg
        reason = fallback_reason(cfg, parts.processes, parts.optimizer, parts.update, parts.model)
        if not decide(self.setting, parts.device, reason):
            return None
        widths = {name: split.table["input_ids"].shape[1] for name, split in parts.train.items()}
        rates = DeviceRates(parts.optimizer, parts.device)
        return GraphedSteps(widths, cfg.pad_multiple, parts.pad_id, rates, cfg.bf16)


def for_run(cfg: Any) -> Graphed | None:
    """Its part in a run with --cuda_graphs on or auto; else None (off: the eager step)."""
    return None if cfg.extras["cuda_graphs"].cuda_graphs == "off" else Graphed(cfg)


@dataclass
class Captured:
    """One key's graph, the buffers it reads and the losses it writes."""

    graph: torch.cuda.CUDAGraph
    static: StaticBatch
    losses: list[torch.Tensor]


class GraphedSteps:
    """Called as ``train_step`` is (one task a step): eager for a key's first steps, then its
    captured graph replayed. Returns the step's losses, copies out of the graph's memory."""

    def __init__(
        self,
        widths: dict[str, int],
        pad_multiple: int,
        pad_id: int,
        rates: DeviceRates,
        bf16: bool,
        warmup: int = WARMUP_STEPS,
    ) -> None:
        self.widths, self.pad_multiple, self.pad_id = widths, pad_multiple, pad_id
        self.rates, self.bf16, self.warmup = rates, bf16, warmup
        self.seen: Counter[Key] = Counter()
        self.graphs: dict[Key, Captured] = {}
        self.side = torch.cuda.Stream()

    def key(self, task: Task, batch: Batch) -> Key:
        width = self.widths[task.name]
        shapes = tuple(
            padded_width(s["input_ids"].shape[1], self.pad_multiple, width) for s in batch.inputs
        )
        return task.name, len(batch.labels), shapes

    def __call__(
        self,
        step: nn.Module,
        batches: Sequence[tuple[Task, Batch]],
        optimizer: torch.optim.Optimizer,
        update: DeviceFlagged,
        scheduler: Any = None,
        autocast: contextlib.AbstractContextManager | None = None,
        max_grad_norm: float = 0.0,
    ) -> list[torch.Tensor] | None:
        ((task, batch),) = batches
        key = self.key(task, batch)
        self.seen[key] += 1
        eager = (step, batches, optimizer, update, scheduler, autocast, max_grad_norm)
        if key not in self.graphs and self.seen[key] <= self.warmup:
            return self.on_side_stream(*eager)
        if key not in self.graphs:
            self.graphs[key] = self.capture(step, task, batch, optimizer, update, max_grad_norm)
        captured = self.graphs[key]
        captured.static.copy_in(batch)
        self.rates.write()
        captured.graph.replay()
        if scheduler is not None:
            scheduler.step()
        return [loss.clone() for loss in captured.losses]  # the next replay overwrites them

    def on_side_stream(self, *eager: Any) -> list[torch.Tensor] | None:
        """The eager step on the capture's stream (PyTorch's warm-up before a capture)."""
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            losses = train_step(*eager)
        torch.cuda.current_stream().wait_stream(self.side)
        return losses

    def capture(self, step, task, batch, optimizer, update, max_grad_norm) -> Captured:
        """The step of ``task`` at ``batch``'s key recorded (not run: the caller replays it)."""
        static = StaticBatch(batch, self.key(task, batch)[2], self.pad_id)
        graph = torch.cuda.CUDAGraph()
        optimizer.zero_grad(set_to_none=True)  # the captured backward writes fresh gradients
        with self.rates.bound(optimizer), torch.cuda.graph(graph, stream=self.side):
            losses = train_step(
                step,
                [(task, static.batch)],
                optimizer,
                update,
                None,
                self.autocast(),
                max_grad_norm,
            )
        return Captured(graph, static, losses)

    def autocast(self) -> contextlib.AbstractContextManager:
        """bf16 autocast without its cache of cast weights, as capture needs (PyTorch's docs)."""
        if not self.bf16:
            return contextlib.nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
