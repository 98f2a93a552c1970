"""The layer sites when plug-ins are attached: each site composes every plug-in, in the order the
plug-ins were added, for one layer and one task.

Shape legend
    B   batch size
    T   tokens per sequence
    D   hidden size
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from minbert.bert import LayerSites
from minbert.plugins.base import Plugin


class PluginSites(LayerSites):
    """``BertModel.layer_sites(i, task)`` returns one of these when ``model.plugins`` is not
    empty. The task is checked here, once per layer, against every attached plug-in."""

    def __init__(self, plugins: Sequence[Plugin], layer: int, task: str | None) -> None:
        for plugin in plugins:
            plugin.check_task(task)
        self.plugins = plugins
        self.layer = layer
        self.task = task

    def linear(self, name: str, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        y = module(x)
        for plugin in self.plugins:
            y = plugin.linear(self.layer, self.task, name, module, x, y)
        return y

    def after_attention(self, h: torch.Tensor) -> torch.Tensor:
        for plugin in self.plugins:
            h = plugin.after_attention(self.layer, self.task, h)
        return h

    def after_feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        for plugin in self.plugins:
            h = plugin.after_feed_forward(self.layer, self.task, h)
        return h

    def parallel(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """The sum of the plug-ins' parallel terms (B, T, D), or None when none contributes.
        ``mask`` is the layer's additive attention mask (B, 1, 1, T)."""
        total = None
        for plugin in self.plugins:
            term = plugin.parallel(self.layer, self.task, x, mask)
            if term is not None:
                total = term if total is None else total + term
        return total

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        for plugin in self.plugins:
            h = plugin.after_layer(self.layer, self.task, h)
        return h
