"""LoRA, low-rank adaptation (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language
Models").

Shapes: B batch size; T tokens per sequence; D hidden size; F feed-forward size; r LoRA rank; d_in
input size of an adapted linear map (D, or F for "output"); d_out output size of an adapted linear
map (D, or F for "intermediate").

Per task, chosen linear maps y = W x + b of every layer get a trainable low-rank update while W
stays frozen (and keeps its name in the state dict):

    y = W x + b + (α / r) · B A x,   A: r×d_in,  B: d_out×r

A is drawn Kaiming-uniform (as nn.Linear draws its weights) and B = 0, so LoRA is exactly the
identity at initialisation. An adapted map adds r·(d_in + d_out) parameters per layer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from minbert.config import BertConfig
from minbert.flags import check_ranges, setting
from minbert.plugins.base import Plugin
from minbert.sites import LINEAR_SITES, module_at

TARGETS = ("query", "key", "value", "attention_output", "intermediate", "output")


@dataclass
class LoRASettings:
    """Options of ``LoRA`` (driver flags ``--lora_<name>``)."""

    rank: int = setting(8, "LoRA rank r", within="[1, inf)")
    alpha: float = setting(16.0, "LoRA scale α (the update is scaled by α/r)", within="(0, inf)")
    targets: str = setting(
        "query,value",
        ("the linear maps LoRA adapts, comma-separated (query, key, value, attention_output, ...)"),
    )
    dropout: float = setting(0.0, "dropout on the input of the LoRA update", within="[0, 1)")

    def __post_init__(self) -> None:
        targets = self.targets
        if isinstance(targets, str):
            targets = [t.strip() for t in targets.split(",") if t.strip()]
        unknown = [t for t in targets if t not in TARGETS]
        if unknown or not targets or len(set(targets)) != len(targets):
            raise ValueError(
                f"LoRA targets (--lora_targets) {list(targets)}: give distinct names from "
                f"{list(TARGETS)}"
            )
        check_ranges(self)
        self.target_names = tuple(targets)


def target_shape(config: BertConfig, name: str) -> tuple[int, int]:
    """(d_in, d_out) of the linear site ``name``."""
    D, F_ = config.hidden_size, config.intermediate_size
    return {"intermediate": (D, F_), "output": (F_, D)}.get(name, (D, D))


def target_module(layer: nn.Module, name: str) -> nn.Linear:
    """The base nn.Linear behind the linear site ``name`` of a ``BertLayer``."""
    return module_at(layer, LINEAR_SITES[name])


class LowRankUpdate(nn.Module):
    """ΔW = B A of one linear map: A (r, d_in) Kaiming-uniform, B (d_out, r) zero."""

    def __init__(self, d_in: int, d_out: int, rank: int) -> None:
        super().__init__()
        self.A = nn.Parameter(torch.empty(rank, d_in))
        self.B = nn.Parameter(torch.zeros(d_out, rank))
        nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # nn.Linear's default for weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # HINT: B A x for row vectors x (B, T, d_in) -> (B, T, d_out), through rank r.
        # BEGIN SOLUTION: lora
        return F.linear(F.linear(x, self.A), self.B)  # (B, T, d_in) -> (B, T, r) -> (B, T, d_out)
        # END SOLUTION

    def delta_weight(self) -> torch.Tensor:
        # HINT: ΔW of the class docstring, a (d_out, d_in) matrix like the base weight.
        # BEGIN SOLUTION: lora
        return self.B @ self.A  # (d_out, r) @ (r, d_in) -> (d_out, d_in)
        # END SOLUTION

    def extra_repr(self) -> str:
        return f"d_in={self.A.shape[1]}, d_out={self.B.shape[0]}, rank={self.A.shape[0]}"


class LoRA(Plugin):
    """Per task and layer, a low-rank update of each target linear map.

    Options in ``LoRASettings``: rank r, α (the update is scaled by α/r), the target maps (a
    list, or one comma-separated string) and dropout on the update's input.
    """

    kind = "lora"
    Settings = LoRASettings
    flag_prefix = "lora_"
    widths = ("rank",)
    summary = "low-rank updates of chosen linear maps"

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.rank = self.settings.rank
        self.alpha = self.settings.alpha
        self.scale = self.alpha / self.rank
        self.targets = self.settings.target_names
        self.dropout = nn.Dropout(self.settings.dropout)
        self.merged_task: str | None = None
        self._saved_weights: dict[tuple[int, str], torch.Tensor] = {}  # base W while merged
        self._layers: list[nn.Module] = []  # the model's layers; a plain list, not submodules
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        def updates() -> nn.ModuleDict:
            return nn.ModuleDict(
                {
                    name: LowRankUpdate(*target_shape(self.config, name), self.rank)
                    for name in self.targets
                }
            )

        return nn.ModuleList(updates() for _ in range(self.config.num_hidden_layers))

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        """Layer l's updates act in layer l."""
        return {
            p: layer
            for layer, updates in enumerate(self.by_task[task])
            for p in updates.parameters()
        }

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """L · Σ_targets r·(d_in + d_out)."""
        s = cls.make_settings(**options)
        per_layer = sum(s.rank * sum(target_shape(config, name)) for name in s.target_names)
        return config.num_hidden_layers * per_layer

    def attach(self, model: nn.Module) -> None:
        self._layers = list(model.encoder.layer)

    def check_task(self, task: str | None) -> None:
        super().check_task(task)
        if self.merged_task is not None and task != self.merged_task:
            raise ValueError(
                f"LoRA is merged into the base weights for task {self.merged_task!r}; "
                f"call unmerge() before using task {task!r}"
            )

    def linear(
        self, layer: int, task: str, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        if name not in self.targets or task == self.merged_task:
            return y
        # HINT: add to y the update of the docstring for this task, layer and map (they are kept
        # HINT: in self.by_task), scaled by α/r (self.scale), its input after the LoRA dropout.
        # BEGIN SOLUTION: lora
        update = self.by_task[task][layer][name]
        return y + self.scale * update(self.dropout(x))
        # END SOLUTION

    @torch.no_grad()
    def merge(self, task: str) -> None:
        """W ← W + (α/r)·B A for every adapted map, saving W so ``unmerge`` restores it exactly."""
        if self.merged_task is not None:
            raise ValueError(f"LoRA is already merged for task {self.merged_task!r}; unmerge first")
        self.check_task(task)
        if not self._layers:
            raise RuntimeError("LoRA is not attached to a model; attach it with add_plugin")
        for i, layer in enumerate(self._layers):
            for name, update in self.by_task[task][i].items():
                weight = target_module(layer, name).weight
                self._saved_weights[(i, name)] = weight.detach().clone()
                weight += (self.scale * update.delta_weight()).to(weight.dtype)
        self.merged_task = task

    @torch.no_grad()
    def unmerge(self) -> None:
        """Put back the base weights saved by ``merge`` (bit for bit); a no-op when not merged."""
        for (i, name), saved in self._saved_weights.items():
            target_module(self._layers[i], name).weight.copy_(saved)
        self._saved_weights = {}
        self.merged_task = None

    def extra_repr(self) -> str:
        return (
            f"tasks={self.tasks}, rank={self.rank}, alpha={self.alpha}, "
            f"targets={list(self.targets)}, merged_task={self.merged_task!r}"
        )
