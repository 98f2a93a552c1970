"""Checks of ``minbert/plugins/lora.py`` (the ``lora`` exercise): the LoRA linear site with
random (non-identity) weights, and merging the update into the model's weights and back."""

from __future__ import annotations

import torch

from minbert.course.references import PLUGIN_TASKS, randomize, ref_linear
from minbert.course.registry import Context, Measurement, check, compare, worst_of

LORA_OPTIONS = {"rank": 2, "alpha": 6.0, "targets": ["query", "value", "intermediate"]}


@check(
    "lora: LoRA linear vs W x + b + (α/r)·B A x",
    tolerance=1e-5,
    hint="A first (d_in -> r), then B (r -> d_out); scale by α/r; add to y, not to x",
    exercises=("lora",),
)
def check_lora_linear(ctx: Context) -> Measurement:
    """LoRA's linear site against W x + b + (α/r)·B A x on the targets, W x + b elsewhere."""
    from minbert.bert import BertConfig
    from minbert.plugins.lora import LoRA, target_shape

    g = torch.Generator().manual_seed(7)
    config = BertConfig.tiny()
    plugin = LoRA(config, PLUGIN_TASKS, **LORA_OPTIONS).eval()
    randomize(plugin, g)
    scale = LORA_OPTIONS["alpha"] / LORA_OPTIONS["rank"]
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            for name in ("query", "key", "value", "intermediate", "output"):
                d_in, d_out = target_shape(config, name)
                module = torch.nn.Linear(d_in, d_out)
                randomize(module, g)
                x = torch.randn(2, 5, d_in, generator=g)
                with torch.no_grad():
                    y = ref_linear(x, module)
                    got = plugin.linear(layer, task, name, module, x, y)
                    expected = y
                    if name in LORA_OPTIONS["targets"]:
                        update = plugin.by_task[task][layer][name]
                        expected = y + scale * ((x @ update.A.T) @ update.B.T)
                found.append(compare(f"{task} layer {layer} {name} output", got, expected))
    return worst_of(found)


@check(
    "lora: merge vs W + (α/r)·B A",
    tolerance=1e-6,
    hint="delta_weight is B @ A, shaped (d_out, d_in) like the base weight",
    exercises=("lora",),
)
def check_lora_merge(ctx: Context) -> Measurement:
    """LoRA.merge(task) against W + (α/r)·B A for every adapted weight; unmerge restores W."""
    from minbert.bert import BertConfig, BertModel
    from minbert.plugins import add_plugin
    from minbert.plugins.lora import target_module

    g = torch.Generator().manual_seed(8)
    config = BertConfig.tiny()
    model = BertModel(config).eval()
    plugin = add_plugin(model, "lora", PLUGIN_TASKS, **LORA_OPTIONS)
    randomize(plugin, g)
    scale = LORA_OPTIONS["alpha"] / LORA_OPTIONS["rank"]
    layers = list(model.encoder.layer)
    names = LORA_OPTIONS["targets"]
    before = {
        (i, n): target_module(layer, n).weight.detach().clone()
        for i, layer in enumerate(layers)
        for n in names
    }
    found = []
    for task in PLUGIN_TASKS:
        plugin.merge(task)
        for (i, name), weight in before.items():
            update = plugin.by_task[task][i][name]
            expected = weight + scale * (update.B @ update.A).detach()
            got = target_module(layers[i], name).weight
            found.append(
                compare(f"merged {task} layer {i} {name} weight", got, expected, axes=("out", "in"))
            )
        plugin.unmerge()
        for (i, name), weight in before.items():
            got = target_module(layers[i], name).weight
            found.append(
                compare(f"unmerged layer {i} {name} weight", got, weight, axes=("out", "in"))
            )
    return worst_of(found)
