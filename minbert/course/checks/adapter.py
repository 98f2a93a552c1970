"""Check of ``minbert/plugins/adapter.py`` (the ``adapter`` exercise): the Houlsby adapter
through its own sites, with random (non-identity) weights."""

from __future__ import annotations

import torch

from minbert.course.references import PLUGIN_TASKS, randomize, ref_gelu, ref_linear
from minbert.course.registry import Context, Measurement, check, compare, worst_of


@check(
    "adapter: Houlsby adapter vs h + W_up·GELU(W_down·h)",
    tolerance=1e-5,
    hint="keep the residual: h + up(gelu(down(h))), with both biases",
    exercises=("adapter",),
)
def check_adapter(ctx: Context) -> Measurement:
    """Houlsby adapters at both positions of every layer against
    h + W_up · GELU(W_down · h + b_down) + b_up."""
    from minbert.bert import BertConfig
    from minbert.plugins.adapter import HoulsbyAdapter

    g = torch.Generator().manual_seed(5)
    config = BertConfig.tiny()
    plugin = HoulsbyAdapter(config, PLUGIN_TASKS, size=4).eval()
    randomize(plugin, g)
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            for position, site in (
                ("attention", plugin.after_attention),
                ("feed_forward", plugin.after_feed_forward),
            ):
                h = torch.randn(2, 5, config.hidden_size, generator=g)
                adapter = plugin.by_task[task][position][layer]
                with torch.no_grad():
                    got = site(layer, task, h)
                    expected = h + ref_linear(ref_gelu(ref_linear(h, adapter.down)), adapter.up)
                found.append(compare(f"{task} layer {layer} {position} adapter", got, expected))
    return worst_of(found)
