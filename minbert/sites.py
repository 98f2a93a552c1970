"""The plug-in site protocol: the named places inside an encoder layer where plug-ins act.

Shape legend
    B   batch size
    T   tokens per sequence
    D   hidden size

Two sides of one protocol:

* ``LayerSites`` is what a ``BertLayer`` calls, for one layer and one task. Every site is the
  identity (``NO_SITES``), so with nothing attached the layer is exactly BERT:

  - ``linear(name, module, x)``: a linear map of the layer (``query``, ``key``, ``value``,
    ``attention_output``, ``intermediate``, ``output``), where LoRA adds its low-rank term;
  - ``after_attention(h)``: the attention output projection, before its add & norm (adapter);
  - ``after_feed_forward(h)``: the feed-forward output, before its add & norm (adapter);
  - ``norm(name, module, h)``: an add & norm's LayerNorm ``module`` applied to the sum ``h``
    (``attention`` or ``feed_forward``), where per-task LayerNorms replace it and adapters
    placed after the LayerNorm act;
  - ``parallel(x, mask)``: a term computed from the layer input x (B, T, D), given the additive
    attention mask (B, 1, 1, T), added before the layer's final LayerNorm (PAL), or ``None``;
  - ``after_layer(h)``: the layer output (LHUC);
  - ``attentions(x, mask)``: not a site the layer calls, but what ``BertModel.encode`` asks
    each layer for when it is asked for attention maps: the attention probabilities plug-ins
    compute from the layer input x, by name (``{"pals": (B, nh, T, T)}``), or ``{}``.

* ``SiteHandler`` is what a plug-in implements: the same sites, told the layer index and the
  task explicitly, so nothing about the active task is stored between calls. Each is the
  identity unless the plug-in overrides it.

``ComposedSites`` joins the two: the sites of one layer for one task, composed over every
attached handler in the order they were attached. ``BertModel.layer_sites`` builds one; this
module imports nothing from ``minbert.plugins``, so the model depends on the protocol only.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


class LayerSites:
    """The sites of one layer for one task, each the identity (see the module docstring)."""

    def linear(self, name: str, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return module(x)

    def after_attention(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def after_feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def norm(self, name: str, module: nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
        return module(h)

    def parallel(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        return None

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def attentions(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}


NO_SITES = LayerSites()


class SiteHandler:
    """The per-layer, per-task side of the protocol that a plug-in overrides."""

    def check_task(self, task: str | None) -> None:
        """Raise a ValueError unless ``task`` is one this handler knows."""

    def linear(
        self, layer: int, task: str, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        """``y = module(x)`` of the linear map ``name``; returns the (possibly changed) output."""
        return y

    def after_attention(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        return h

    def after_feed_forward(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        return h

    def norm(
        self,
        layer: int,
        task: str,
        name: str,
        module: nn.LayerNorm,
        h: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        """``y`` is the output so far of the LayerNorm ``name`` on the sum ``h``: ``module(h)``,
        or what an earlier handler made of it; returns the (possibly changed) output."""
        return y

    def parallel(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor | None:
        return None

    def after_layer(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        return h

    def attentions(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """The attention probabilities (B, nh, T, T) this plug-in computes in ``layer`` from its
        input x, by name; only called when the model is asked for its attention."""
        return {}


class ComposedSites(LayerSites):
    """The sites of layer ``layer`` for ``task``, each composing every handler in order. The task
    is checked here, once per layer, against every handler."""

    def __init__(self, handlers: Sequence[SiteHandler], layer: int, task: str | None) -> None:
        for handler in handlers:
            handler.check_task(task)
        self.handlers = handlers
        self.layer = layer
        self.task = task

    def linear(self, name: str, module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        y = module(x)
        for handler in self.handlers:
            y = handler.linear(self.layer, self.task, name, module, x, y)
        return y

    def after_attention(self, h: torch.Tensor) -> torch.Tensor:
        for handler in self.handlers:
            h = handler.after_attention(self.layer, self.task, h)
        return h

    def after_feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        for handler in self.handlers:
            h = handler.after_feed_forward(self.layer, self.task, h)
        return h

    def norm(self, name: str, module: nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
        y = module(h)
        for handler in self.handlers:
            y = handler.norm(self.layer, self.task, name, module, h, y)
        return y

    def parallel(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor | None:
        """The sum of the handlers' parallel terms (B, T, D), or None when none contributes."""
        total = None
        for handler in self.handlers:
            term = handler.parallel(self.layer, self.task, x, mask)
            if term is not None:
                total = term if total is None else total + term
        return total

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        for handler in self.handlers:
            h = handler.after_layer(self.layer, self.task, h)
        return h

    def attentions(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        found: dict[str, torch.Tensor] = {}
        for handler in self.handlers:
            found |= handler.attentions(self.layer, self.task, x, mask)
        return found
