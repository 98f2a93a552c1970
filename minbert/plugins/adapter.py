"""Houlsby bottleneck adapters (Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for
NLP").

Shapes: B batch size; T tokens per sequence; D hidden size; m adapter bottleneck size.

An adapter is a small residual bottleneck applied to a sub-layer's output before its add & norm:

    adapter(h) = h + W_up · GELU(W_down · h + b_down) + b_up,   W_down: m×D, W_up: D×m
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from minbert.config import BertConfig, gelu
from minbert.flags import check_ranges, setting
from minbert.plugins.base import Plugin

PLACEMENTS = {
    "houlsby": ("attention", "feed_forward"),
    "pfeiffer": ("feed_forward",),
    "after_layernorm": ("attention", "feed_forward"),
}
NEAR_IDENTITY_STD = 1e-3


@dataclass
class AdapterSettings:
    """Options of ``HoulsbyAdapter`` (driver flags ``--adapter_<name>``)."""

    size: int = setting(64, "adapter bottleneck m", within="[1, inf)")
    placement: Literal[tuple(PLACEMENTS)] = setting(
        "houlsby",
        ("where the adapters sit: houlsby (two a layer), pfeiffer (one), or after_layernorm"),
    )
    init: Literal["identity", "near_identity"] = setting(
        "identity",
        ("identity: W_up = 0, exactly the identity at start; near_identity: both ~ N(0, 1e-3²)"),
    )
    share: int = setting(
        1, "share one adapter per position across k consecutive layers", within="[1, inf)"
    )
    share_sites: bool = setting(
        False,
        ("one adapter serves both positions of a layer (or of a block of --adapter_share layers)"),
    )

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"adapter placement {self.placement!r}: use one of {sorted(PLACEMENTS)}"
            )
        if self.init not in ("identity", "near_identity"):
            raise ValueError(f"adapter init {self.init!r}: use 'identity' or 'near_identity'")
        check_ranges(self)


class Bottleneck(nn.Module):
    """h + W_up · GELU(W_down · h + b_down) + b_up, the identity (or near it) at initialisation."""

    def __init__(self, hidden_size: int, size: int, init_std: float, init: str) -> None:
        super().__init__()
        self.down = nn.Linear(hidden_size, size)
        self.up = nn.Linear(size, hidden_size)
        if init == "near_identity":
            bound = 2 * NEAR_IDENTITY_STD
            for linear in (self.down, self.up):
                nn.init.trunc_normal_(linear.weight, std=NEAR_IDENTITY_STD, a=-bound, b=bound)
        else:
            nn.init.normal_(self.down.weight, std=init_std)
            nn.init.zeros_(self.up.weight)
        nn.init.zeros_(self.down.bias)
        nn.init.zeros_(self.up.bias)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        # HINT: the bottleneck (down-projection, GELU from minbert.bert, up-projection) added to
        # HINT: its input, which keeps the adapter the identity while up is zero.
        # BEGIN SOLUTION: adapter
        z = gelu(self.down(h))  # (B, T, D) -> (B, T, m)
        return h + self.up(z)  # (B, T, m) -> (B, T, D)
        # END SOLUTION


class HoulsbyAdapter(Plugin):
    """Per task, bottleneck adapters at the chosen positions of every layer (or group of ``share``
    layers); options in ``AdapterSettings``.

    ``switched_off`` is a set of layer indices whose adapters are skipped (every task, every
    position): Houlsby et al.'s span ablation (their figure 6) switches a trained model's
    adapters off over layers [i, j] and measures what each span contributes. Empty, the default,
    is normal operation.
    """

    kind = "adapter"
    Settings = AdapterSettings
    flag_prefix = "adapter_"
    widths = ("size",)
    summary = "Houlsby bottleneck adapters"

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.size = self.settings.size
        self.placement = self.settings.placement
        self.positions = PLACEMENTS[self.placement]
        self.share = self.settings.share
        self.groups = math.ceil(config.num_hidden_layers / self.share)
        # The adapter lists of a task: one per position, or one serving every position.
        self.slots = ("both",) if self.settings.share_sites else self.positions
        self.switched_off: frozenset[int] = frozenset()
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        D, std = self.config.hidden_size, self.config.initializer_range
        return nn.ModuleDict(
            {
                position: nn.ModuleList(
                    Bottleneck(D, self.size, std, self.settings.init) for _ in range(self.groups)
                )
                for position in self.slots
            }
        )

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        """Group g serves layers g·k .. g·k + k − 1: the topmost of them that exists."""
        top = self.config.num_hidden_layers - 1
        return {
            p: min((group + 1) * self.share - 1, top)
            for adapters in self.by_task[task].values()
            for group, adapter in enumerate(adapters)
            for p in adapter.parameters()
        }

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """(1 if share_sites else positions) · ⌈L / k⌉ adapters of 2·m·D + D + m parameters."""
        s = cls.make_settings(**options)
        D, m = config.hidden_size, s.size
        slots = 1 if s.share_sites else len(PLACEMENTS[s.placement])
        adapters = slots * math.ceil(config.num_hidden_layers / s.share)
        return adapters * (2 * m * D + D + m)

    def _adapt(self, position: str, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if position not in self.positions or layer in self.switched_off:
            return h
        slot = "both" if self.settings.share_sites else position
        return self.by_task[task][slot][layer // self.share](h)

    def after_attention(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if self.placement == "after_layernorm":
            return h
        return self._adapt("attention", layer, task, h)

    def after_feed_forward(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        if self.placement == "after_layernorm":
            return h
        return self._adapt("feed_forward", layer, task, h)

    def norm(
        self,
        layer: int,
        task: str,
        name: str,
        module: nn.LayerNorm,
        h: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        if self.placement != "after_layernorm":
            return y
        return self._adapt(name, layer, task, y)

    def extra_repr(self) -> str:
        return (
            f"tasks={self.tasks}, size={self.size}, placement={self.placement!r}, "
            f"share={self.share}, share_sites={self.settings.share_sites}, "
            f"init={self.settings.init!r}"
        )
