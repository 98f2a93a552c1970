"""The plug-in site protocol: the named places inside an encoder layer where plug-ins act.

Shapes: B batch size; T tokens per sequence; D hidden size.

The layer itself knows nothing of plug-ins: it calls its own modules (``self.query(x)``,
``self.dropout(h)``, ``self.LayerNorm(h)``) and the sites are hooks on those modules
(``nn.Module.register_forward_hook``), installed only when a plug-in is attached. With nothing
attached no hook exists, so the plain model is exactly BERT and runs no code of this file.

This module imports nothing from ``minbert.plugins``, so the model depends on the protocol only.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


class SiteHandler:
    """The site protocol: what a plug-in does at each site of layer ``layer`` for ``task``, each
    the identity here. Each site is one module of a ``BertLayer``:

    - ``linear(name, module, x, y)``: the output y = module(x) of a linear map of the layer
      (``query``, ``key``, ``value``, ``attention_output``, ``intermediate``, ``output``;
      ``LINEAR_SITES``), where LoRA adds its low-rank term;
    - ``after_attention(h)``, ``after_feed_forward(h)``: the output of ``attention.output.dropout``
      and of ``output.dropout``, each sub-layer's output before its add & norm (adapter);
    - ``norm(name, module, h, y)``: the output y so far of an add & norm's LayerNorm
      (``attention`` or ``feed_forward``) on the sum h (per-task LayerNorms, adapters after it);
    - ``parallel(x, mask)``: a term from the layer input x (B, T, D) and the additive mask
      (B, 1, 1, T), added to the input of the layer's final LayerNorm (PAL), or ``None``;
    - ``after_layer(h)``: the layer output (LHUC);
    - ``attentions(x, mask)``: not a hook, what code that draws attention maps asks for: the
      attention probabilities (B, nh, T, T) computed from the layer input, by name, or ``{}``.
    """

    def check_task(self, task: str | None) -> None:
        """Raise a ValueError unless ``task`` is one this handler knows."""

    def linear(
        self, layer: int, task: str, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
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
        return {}


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
    layer: nn.Module, index: int, sites: SiteHandler, linears: Iterable[str] = LINEAR_SITES
) -> list[RemovableHandle]:
    """Route the modules of ``layer`` (a ``BertLayer``, number ``index``) through ``sites`` (the
    attached plug-ins, or a check's own sites) for the task ``sites.task`` of the forward: the
    hooks of the module docstring, on the linear sites named in ``linears``. Returns the hooks'
    handles (``handle.remove()`` takes one away)."""
    parallel: dict[str, torch.Tensor] = {}  # the PAL term, from the layer's start to its norm
    at = partial(Site, sites, index)
    hooks = [(module_at(layer, LINEAR_SITES[n]), at(n).linear) for n in linears]
    hooks += [
        (layer.attention.output.dropout, at("after_attention").output),
        (layer.attention.output.LayerNorm, at("attention").norm),
        (layer.output.dropout, at("after_feed_forward").output),
        (layer.output.LayerNorm, at("feed_forward").norm),
        (layer, at("after_layer").output),
    ]
    handles = [module.register_forward_hook(hook) for module, hook in hooks]
    handles.append(layer.register_forward_pre_hook(partial(on_layer_input, sites, index, parallel)))
    handles.append(layer.output.LayerNorm.register_forward_pre_hook(partial(add_term, parallel)))
    return handles


class Site:
    """One site of layer ``index`` as a forward hook: ``name`` is the linear map's or the norm's
    name, or the output site's method."""

    def __init__(self, sites: SiteHandler, index: int, name: str) -> None:
        self.sites, self.index, self.name = sites, index, name

    def linear(self, module: nn.Linear, args: tuple, y: torch.Tensor) -> torch.Tensor:
        return self.sites.linear(self.index, self.sites.task, self.name, module, args[0], y)

    def output(self, module: nn.Module, args: tuple, h: torch.Tensor) -> torch.Tensor:
        return getattr(self.sites, self.name)(self.index, self.sites.task, h)

    def norm(self, module: nn.LayerNorm, args: tuple, y: torch.Tensor) -> torch.Tensor:
        return self.sites.norm(self.index, self.sites.task, self.name, module, args[0], y)


def on_layer_input(
    sites: SiteHandler, index: int, parallel: dict[str, torch.Tensor], layer: nn.Module, args: tuple
) -> None:
    """At the layer's start: the parallel term from its input x and mask, kept for its norm."""
    term = sites.parallel(index, sites.task, *args[:2])
    if term is not None:
        parallel["term"] = term


def add_term(parallel: dict[str, torch.Tensor], norm: nn.LayerNorm, args: tuple) -> tuple | None:
    """Before the layer's final LayerNorm: its input plus the parallel term, if there is one."""
    term = parallel.pop("term", None)
    return None if term is None else (args[0] + term,)


class Plugins(nn.ModuleDict, SiteHandler):
    """``BertModel.plugins``: the attached plug-ins by kind, and the task they act for."""

    def __init__(self) -> None:
        super().__init__()
        self.task: str | None = None
        self.handles: list[RemovableHandle] = []  # the layers' hooks, kept to take them away

    def hook(self, layers: Iterable[nn.Module]) -> None:
        """Install the sites of every layer, once (``add_plugin`` calls it)."""
        if not self.handles:
            for i, layer in enumerate(layers):
                self.handles += hook_layer(layer, i, self)

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

    # The sites, each composing every plug-in in the order attached (SiteHandler's protocol).

    def linear(
        self, layer: int, task: str, name: str, module: nn.Linear, x: torch.Tensor, y: torch.Tensor
    ) -> torch.Tensor:
        for handler in self.values():
            y = handler.linear(layer, task, name, module, x, y)
        return y

    def after_attention(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        for handler in self.values():
            h = handler.after_attention(layer, task, h)
        return h

    def after_feed_forward(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        for handler in self.values():
            h = handler.after_feed_forward(layer, task, h)
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
        for handler in self.values():
            y = handler.norm(layer, task, name, module, h, y)
        return y

    def parallel(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor | None:
        """The sum of the plug-ins' parallel terms (B, T, D), or None when none contributes."""
        total = None
        for handler in self.values():
            term = handler.parallel(layer, task, x, mask)
            if term is not None:
                total = term if total is None else total + term
        return total

    def after_layer(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        for handler in self.values():
            h = handler.after_layer(layer, task, h)
        return h

    def attentions(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        found: dict[str, torch.Tensor] = {}
        for handler in self.values():
            found |= handler.attentions(layer, task, x, mask)
        return found
