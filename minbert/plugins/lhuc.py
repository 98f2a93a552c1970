"""LHUC, learning hidden unit contributions (Swietojanski & Renals 2014, "Learning Hidden Unit
Contributions for Unsupervised Speaker Adaptation of Neural Network Acoustic Models").

Shape legend
    B   batch size
    T   tokens per sequence
    D   hidden size
    L   number of layers

Per task and layer, every hidden unit of the layer output is rescaled by an amplitude in (0, 2):

    h ← h ⊙ 2·σ(r),   r ∈ ℝ^D, r = 0 at initialisation (2·σ(0) = 1: exactly the identity)

A task has L·D parameters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from minbert.config import BertConfig
from minbert.plugins.base import Plugin


class Amplitudes(nn.Module):
    """One task's LHUC parameters: row i of ``r`` (L, D) scales the output of layer i."""

    def __init__(self, num_layers: int, hidden_size: int) -> None:
        super().__init__()
        self.r = nn.Parameter(torch.zeros(num_layers, hidden_size))


class LHUC(Plugin):
    """Per task, a learnt amplitude 2·σ(r) on every unit of every layer's output."""

    kind = "lhuc"
    summary = "a learned scale of every hidden unit"

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        return Amplitudes(self.config.num_hidden_layers, self.config.hidden_size)

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        """r is one (L, D) table for every layer: it counts at the top layer."""
        return {self.by_task[task].r: self.config.num_hidden_layers - 1}

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """L · D."""
        cls.make_settings(**options)
        return config.num_hidden_layers * config.hidden_size

    def after_layer(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        # HINT: this task's row of r for this layer (a (D,) vector) rescales every hidden unit of
        # HINT: h by 2·σ(r).
        # BEGIN SOLUTION: lhuc
        r = self.by_task[task].r[layer]  # (D,), broadcast over (B, T, D)
        return h * (2.0 * torch.sigmoid(r))
        # END SOLUTION
