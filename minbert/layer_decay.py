"""Layer-wise learning-rate decay: lower layers of the encoder move less than upper ones.

Howard & Ruder 2018 ("Universal Language Model Fine-tuning for Text Classification", ACL 2018,
"discriminative fine-tuning") and Clark et al. 2020 (ELECTRA, ICLR 2020) give each layer its own
learning rate, shrinking geometrically from the top of the network down:

    lr_d = lr · γ^(L + 1 − d)

with depth d = 0 for the embeddings, d = l for encoder layer l (1..L), and d = L + 1 for
everything above the encoder (pooler, task heads), which keeps the full rate. γ = 1 is plain
fine-tuning. The idea: lower layers hold general features that a small task should change
little; the task-specific top, and the freshly initialised heads, should change most.

A parameter's depth is read from its name (``...embeddings.``, ``...encoder.layer.N.``), so a
plug-in that sits inside layer N (an adapter, a LoRA update) gets layer N's rate.
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

__all__ = ["layer_depth", "layerwise_lr_decay"]

_LAYER = re.compile(r"(?:^|\.)encoder\.layer\.(\d+)\.")
_EMBEDDINGS = re.compile(r"(?:^|\.)embeddings\.")


def layer_depth(parameter_name: str, num_layers: int) -> int:
    """0 for the embeddings, l for encoder layer l − 1 (0-based index in the name), and
    ``num_layers + 1`` for anything else (pooler, heads)."""
    layer = _LAYER.search(parameter_name)
    if layer is not None:
        return int(layer.group(1)) + 1
    if _EMBEDDINGS.search(parameter_name):
        return 0
    return num_layers + 1


def layerwise_lr_decay(
    groups: list[dict[str, Any]], model: nn.Module, lr: float, decay: float, num_layers: int
) -> list[dict[str, Any]]:
    """Split each optimizer group of ``model``'s parameters (as made by
    ``minbert.optimizer.param_groups``) by depth and give each part the rate
    ``lr · decay^(num_layers + 1 − depth)``. Other keys of a group (weight decay) are kept.
    Parts come out top first; empty parts are left out."""
    if not 0.0 < decay <= 1.0:
        raise ValueError(f"layer decay must be in (0, 1], got {decay}")
    names = {id(p): name for name, p in model.named_parameters()}
    split: list[dict[str, Any]] = []
    for group in groups:
        by_depth: dict[int, list[nn.Parameter]] = {}
        for p in group["params"]:
            by_depth.setdefault(layer_depth(names[id(p)], num_layers), []).append(p)
        for depth in sorted(by_depth, reverse=True):
            scale = decay ** (num_layers + 1 - depth)
            split.append({**group, "params": by_depth[depth], "lr": lr * scale})
    return split
