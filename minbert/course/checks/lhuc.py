"""Check of ``minbert/plugins/lhuc.py`` (the ``lhuc`` exercise): LHUC through its own site,
with random (non-identity) weights."""

from __future__ import annotations

import torch

from minbert.course.references import PLUGIN_TASKS, randomize
from minbert.course.registry import Context, Measurement, check, compare, worst_of


@check(
    "lhuc: LHUC vs h ⊙ 2·σ(r)",
    tolerance=1e-6,
    hint="use this layer's row r[layer] and the factor 2 (2·σ(0) = 1 keeps the identity)",
    exercises=("lhuc",),
)
def check_lhuc(ctx: Context) -> Measurement:
    """LHUC on every layer's output against h ⊙ 2·σ(r_layer)."""
    from minbert.bert import BertConfig
    from minbert.plugins.lhuc import LHUC

    g = torch.Generator().manual_seed(6)
    config = BertConfig.tiny()
    plugin = LHUC(config, PLUGIN_TASKS).eval()
    randomize(plugin, g, std=1.0)
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            h = torch.randn(2, 5, config.hidden_size, generator=g)
            r = plugin.by_task[task].r[layer]
            with torch.no_grad():
                got = plugin.after_layer(layer, task, h)
                expected = h * (2.0 / (1.0 + torch.exp(-r)))
            found.append(compare(f"{task} layer {layer} LHUC output", got, expected))
    return worst_of(found)
