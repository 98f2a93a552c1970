"""Check of ``minbert/plugins/pals.py`` (the ``pals`` exercise): the PAL term of every layer,
through the plug-in's own site, with random (non-identity) weights."""

from __future__ import annotations

import torch

from minbert.course.references import (
    PLUGIN_TASKS,
    padded_batch,
    randomize,
    ref_additive_mask,
    ref_linear,
    ref_multi_head,
)
from minbert.course.registry import Context, Measurement, check, compare, worst_of


@check(
    "pals: PAL term vs V_D·g(V_E·x)",
    tolerance=1e-5,
    hint="encoder (V_E), then this layer's projected attention with the mask, then decoder (V_D)",
    exercises=("pals",),
)
def check_pals(ctx: Context) -> Measurement:
    """The PAL term of every layer against V_D · g_l(V_E · x), g_l multi-head attention in the
    projected space (fused attention inside, so this check needs no attention exercise)."""
    from minbert.bert import BertConfig
    from minbert.plugins.pals import PAL

    g = torch.Generator().manual_seed(9)
    config = BertConfig.tiny()
    plugin = PAL(config, PLUGIN_TASKS, size=8, heads=2).eval()
    plugin.use_fast_path = True
    randomize(plugin, g)
    x, attention_mask = padded_batch(g, config.hidden_size)
    mask = ref_additive_mask(attention_mask)
    found = []
    for task in PLUGIN_TASKS:
        pal = plugin.by_task[task]
        for layer in range(config.num_hidden_layers):
            attention = pal.layers[layer]
            with torch.no_grad():
                got = plugin.parallel(layer, task, x, mask)
                z = ref_linear(x, pal.encoder)
                z = ref_multi_head(
                    z,
                    mask,
                    lambda t, a=attention: ref_linear(t, a.query),
                    lambda t, a=attention: ref_linear(t, a.key),
                    lambda t, a=attention: ref_linear(t, a.value),
                    plugin.heads,
                )
                expected = ref_linear(z, pal.decoder)
            found.append(compare(f"{task} layer {layer} PAL term", got, expected))
    return worst_of(found)
