"""The plug-in site protocol: the named places inside an encoder layer where plug-ins act.

Shapes: B batch size; T tokens per sequence; D hidden size.

The layer itself knows nothing of plug-ins: it calls its own modules (``self.query(x)``,
``self.dropout(h)``, ``self.LayerNorm(h)``) and the sites are hooks on those modules
(``nn.Module.register_forward_hook``), installed only when a plug-in is attached. With nothing
attached no hook exists, so the plain model is exactly BERT and runs no code of this file.

This module imports nothing from ``minbert.plugins``, so the model depends on the protocol only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


class LayerSites:
    """The sites of one layer for one task, each the identity. Each site is one module of a
    ``BertLayer``, and what a plug-in does there:

    - ``linear(name, module, x, y)``: the output y = module(x) of a linear map of the layer
      (``query``, ``key``, ``value``, ``attention_output``, ``intermediate``, ``output``;
      ``LINEAR_SITES``), where LoRA adds its low-rank term;
    - ``after_attention(h)``: the output of ``attention.output.dropout``, the attention output
      projection before its add & norm (adapter);
    - ``after_feed_forward(h)``: the output of ``output.dropout``, the feed-forward output before
      its add & norm (adapter);
    - ``norm(name, module, h, y)``: the output y = module(h) of an add & norm's LayerNorm
      (``attention`` or ``feed_forward``) on the sum h, where per-task LayerNorms replace it and
      adapters placed after the LayerNorm act;
    - ``parallel(x, mask)``: a term computed from the layer input x (B, T, D), given the additive
      attention mask (B, 1, 1, T), when the layer starts, and added to the input of its final
      LayerNorm (PAL), or ``None``;
    - ``after_layer(h)``: the layer output (LHUC);
    - ``attentions(x, mask)``: not a hook, but what ``BertModel.encode`` asks each layer for when
      it is asked for attention maps: the attention probabilities plug-ins compute from the layer
      input x, by name (``{"pals": (B, nh, T, T)}``), or ``{}``.
    """

    def linear(
        self, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return y

    def after_attention(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def after_feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def norm(
        self, name: str, module: nn.LayerNorm, h: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        return y

    def parallel(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor | None:
        return None

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        return h

    def attentions(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}


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
    """The sites of layer ``layer`` for ``task``, each composing every handler in order."""

    def __init__(self, handlers: Sequence[SiteHandler], layer: int, task: str | None) -> None:
        self.handlers = handlers
        self.layer = layer
        self.task = task

    def linear(
        self, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
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

    def norm(
        self, name: str, module: nn.LayerNorm, h: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
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


def module_at(layer: nn.Module, path: str) -> nn.Module:
    """The sub-module of a ``BertLayer`` at a dotted ``path`` (``"attention.self.query"``)."""
    for name in path.split("."):
        layer = getattr(layer, name)
    return layer


# The linear sites of a BertLayer: site name -> the nn.Linear's path inside the layer.
LINEAR_SITES = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_output": "attention.output.dense",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
}


def hook_layer(
    layer: nn.Module, sites: Callable[[], LayerSites], linears: Iterable[str] = LINEAR_SITES
) -> list[RemovableHandle]:
    """Route the modules of ``layer`` (a ``BertLayer``) through ``sites()``, asked at every call:
    the hooks of the module docstring, on the linear sites named in ``linears``. Returns the
    hooks' handles (``handle.remove()`` takes one away)."""
    parallel: dict[str, torch.Tensor] = {}  # the PAL term, from the layer's start to its norm
    hooks = [(module_at(layer, LINEAR_SITES[n]), partial(on_linear, sites, n)) for n in linears]
    hooks += [
        (layer.attention.output.dropout, partial(on_output, sites, "after_attention")),
        (layer.attention.output.LayerNorm, partial(on_norm, sites, "attention")),
        (layer.output.dropout, partial(on_output, sites, "after_feed_forward")),
        (layer.output.LayerNorm, partial(on_norm, sites, "feed_forward")),
        (layer, partial(on_output, sites, "after_layer")),
    ]
    handles = [module.register_forward_hook(hook) for module, hook in hooks]
    handles.append(layer.register_forward_pre_hook(partial(on_layer_input, sites, parallel)))
    handles.append(layer.output.LayerNorm.register_forward_pre_hook(partial(add_term, parallel)))
    return handles


def on_linear(sites, name: str, module: nn.Linear, args: tuple, y: torch.Tensor) -> torch.Tensor:
    return sites().linear(name, module, args[0], y)


def on_output(sites, site: str, module: nn.Module, args: tuple, h: torch.Tensor) -> torch.Tensor:
    return getattr(sites(), site)(h)


def on_norm(sites, name: str, module: nn.LayerNorm, args: tuple, y: torch.Tensor) -> torch.Tensor:
    return sites().norm(name, module, args[0], y)


def on_layer_input(sites, parallel: dict[str, torch.Tensor], layer: nn.Module, args: tuple) -> None:
    """At the layer's start: the parallel term from its input x and mask, kept for its norm."""
    term = sites().parallel(*args[:2])
    if term is not None:
        parallel["term"] = term


def add_term(parallel: dict[str, torch.Tensor], norm: nn.LayerNorm, args: tuple) -> tuple | None:
    """Before the layer's final LayerNorm: its input plus the parallel term, if there is one."""
    term = parallel.pop("term", None)
    return None if term is None else (args[0] + term,)


class Plugins(nn.ModuleDict):
    """``BertModel.plugins``: the attached plug-ins by kind, and the task they act for."""

    def __init__(self) -> None:
        super().__init__()
        self.task: str | None = None
        self.handles: list[RemovableHandle] = []  # the layers' hooks, kept to take them away

    def hook(self, layers: Iterable[nn.Module]) -> None:
        """Install the sites of every layer, once (``add_plugin`` calls it)."""
        if not self.handles:
            for i, layer in enumerate(layers):
                self.handles += hook_layer(layer, partial(self.sites, i))

    def unhook(self) -> None:
        """Take every layer's hooks away: the model is the bare model again
        (``remove_plugin`` calls it when the last plug-in goes)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []

    def activate(self, task: str | None) -> None:
        """The task of this forward: checked against every plug-in (a ValueError naming the
        known tasks), then what every site acts for until the next forward."""
        for handler in self.values():
            handler.check_task(task)
        self.task = task

    def sites(self, layer: int) -> LayerSites:
        """The sites of ``layer`` for the active task, every plug-in in the order attached."""
        return ComposedSites(list(self.values()), layer, self.task)
