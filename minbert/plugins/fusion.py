"""AdapterFusion (Pfeiffer et al. 2021, "AdapterFusion: Non-Destructive Task Composition for
Transfer Learning", EACL 2021): a task reads the knowledge of adapters trained for other tasks.

Two stages. Stage 1 trains one Houlsby adapter per task (``--option adapter``). Stage 2, for each
target task, keeps every stage-1 adapter fixed and learns, at every adapter position of every
layer, a fusion layer that attends over the adapters' outputs, and a new head:

    z_n = adapter_n(h)                       (B, T, D), n = 1..N: each source adapter on the
                                             sub-layer output h it would have seen alone
    q = h W_Q + b_Q,   k_n = z_n W_K + b_K,   v_n = z_n W_V
    s_n = softmax_n(q · k_n)                 (B, T, N): per token, a weight over the adapters
    fusion(h) = Σ_n s_n v_n                  (B, T, D), in place of the adapter's output

Design notes: docs/design/minbert.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from minbert.config import BertConfig
from minbert.flags import setting
from minbert.plugins.adapter import PLACEMENTS, AdapterSettings, HoulsbyAdapter
from minbert.plugins.base import Plugin


@dataclass
class FusionSettings(AdapterSettings):
    """The stage-1 adapters' settings, and the tasks they were trained for (``sources``)."""

    sources: list[str] = setting(help="the stage-1 adapters' tasks, in order", factory=list)


class FusionLayer(nn.Module):
    """One position of one layer: query, key and value maps, the value the identity at first."""

    def __init__(self, hidden_size: int, init_std: float) -> None:
        super().__init__()
        self.query = nn.Linear(hidden_size, hidden_size)
        self.key = nn.Linear(hidden_size, hidden_size)
        self.value = nn.Linear(hidden_size, hidden_size, bias=False)
        for linear in (self.query, self.key):
            nn.init.normal_(linear.weight, std=init_std)
            nn.init.zeros_(linear.bias)
        with torch.no_grad():
            self.value.weight.copy_(torch.eye(hidden_size))

    def forward(self, h: torch.Tensor, outputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """h (B, T, D) and the adapters' outputs (B, T, N, D) -> the fused output (B, T, D) and
        the weights s (B, T, N)."""
        q = self.query(h)  # (B, T, D)
        k = self.key(outputs)  # (B, T, N, D)
        s = torch.einsum("btd,btnd->btn", q, k).softmax(dim=-1)  # (B, T, N)
        return torch.einsum("btn,btnd->btd", s, self.value(outputs)), s


class AdapterFusion(Plugin):
    """Per task, a fusion layer at each stage-1 adapter position of every layer, over the fixed
    stage-1 adapters; options in ``FusionSettings``."""

    kind = "fusion"
    Settings = FusionSettings
    option = False  # --option fusion with --adapters_from: its own stage and flags

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        adapter = {k: v for k, v in vars(self.settings).items() if k != "sources"}
        if not self.settings.sources:
            raise ValueError("fusion needs the stage-1 adapters' tasks (sources)")
        self.sources = HoulsbyAdapter(config, self.settings.sources, **adapter)
        self.positions = PLACEMENTS[self.settings.placement]
        self.record: dict[tuple[str, int, str], tuple[torch.Tensor, int]] | None = None
        self.add_tasks(tasks)

    def fixed(self) -> list[nn.Module]:
        return [self.sources]

    def build_task(self) -> nn.Module:
        D, std, L = self.config.hidden_size, self.config.initializer_range, self.layers
        return nn.ModuleDict(
            {p: nn.ModuleList(FusionLayer(D, std) for _ in range(L)) for p in self.positions}
        )

    @property
    def layers(self) -> int:
        return self.config.num_hidden_layers

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        return {
            p: layer
            for fusions in self.by_task[task].values()
            for layer, fusion in enumerate(fusions)
            for p in fusion.parameters()
        }

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """positions · L · (3·D² + 2·D)."""
        s = cls.make_settings(**options)
        D = config.hidden_size
        return len(PLACEMENTS[s.placement]) * config.num_hidden_layers * (3 * D * D + 2 * D)

    def _fuse(self, position: str, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if position not in self.positions:
            return h
        outputs = torch.stack(
            [self.sources._adapt(position, layer, source, h) for source in self.sources.tasks],
            dim=-2,
        )  # N × (B, T, D) -> (B, T, N, D)
        fused, weights = self.by_task[task][position][layer](h, outputs)
        if self.record is not None:  # summed over the batch's positions, and their count
            total, count = self.record.get((task, layer, position), (0.0, 0))
            flat = weights.detach().flatten(0, -2)  # (B·T, N)
            self.record[(task, layer, position)] = (total + flat.sum(0), count + len(flat))
        return fused

    def after_attention(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if self.settings.placement == "after_layernorm":
            return h
        return self._fuse("attention", layer, task, h)

    def after_feed_forward(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if self.settings.placement == "after_layernorm":
            return h
        return self._fuse("feed_forward", layer, task, h)

    def norm(self, layer, task, name, module, h, y) -> torch.Tensor:
        if self.settings.placement != "after_layernorm":
            return y
        return self._fuse(name, layer, task, y)

    def extra_repr(self) -> str:
        return f"tasks={self.tasks}, sources={self.settings.sources}"
