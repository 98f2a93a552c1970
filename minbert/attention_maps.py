"""Attention maps of a ``BertModel``, captured by hooks while it runs (the model's forward carries
no capture of its own): each layer's P = softmax(QKᵀ / √d_k + M) after the mask and softmax,
before dropout (``BertSelfAttention.probabilities``, as Hugging Face's ``output_attentions``),
and the attention each plug-in computes inside a layer, by name (PAL's, in its projected space).

    with attention_maps(model) as maps:
        model(input_ids, attention_mask, task="sts")
    maps.attentions               # one (B, nh, T, T) tensor per layer
    maps.plugin_attentions        # {"pals": one (B, nh_PAL, T, T) tensor per layer}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

import torch
from torch import nn


@dataclass
class AttentionMaps:
    """What ``attention_maps`` captured, layer by layer, in the order the layers ran."""

    attentions: list[torch.Tensor] = field(default_factory=list)
    plugin_attentions: dict[str, list[torch.Tensor]] = field(default_factory=dict)


@contextlib.contextmanager
def attention_maps(model: nn.Module) -> Iterator[AttentionMaps]:
    """While inside, every layer of ``model`` (a ``BertModel``) that runs adds its attention
    maps, computed from the layer's input before the layer runs, to the ``AttentionMaps`` it
    yields; the hooks go when it ends."""
    maps = AttentionMaps()

    def before_layer(i: int, layer: nn.Module, args: tuple) -> None:
        hidden, mask = args
        maps.attentions.append(layer.attention.self.probabilities(hidden, mask))
        if len(model.plugins):
            plugins = model.plugins
            for name, probs in plugins.attentions(i, plugins.task, hidden, mask).items():
                maps.plugin_attentions.setdefault(name, []).append(probs)

    layers = model.encoder.layer
    handles = [
        layer.register_forward_pre_hook(partial(before_layer, i)) for i, layer in enumerate(layers)
    ]
    try:
        yield maps
    finally:
        for handle in handles:
            handle.remove()
