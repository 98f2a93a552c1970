"""Parameter-efficient plug-ins for ``BertModel``: Houlsby adapters, PALs, LHUC and LoRA.

Shape legend (used in every file of this package)
    B   batch size
    T   tokens per sequence
    D   hidden size
    F   feed-forward size
    L   number of layers
    m   adapter bottleneck size
    s   PAL size (the projected space)
    r   LoRA rank

Usage::

    model = load_pretrained()
    add_plugin(model, "adapter", ["sst", "para", "sts"], size=64)
    freeze_for_plugins(model)                  # only plug-ins (and the heads, outside) train
    out = model(input_ids, attention_mask, token_type_ids, task="sst")

A plug-in lives in ``model.plugins[kind]`` and keeps each task's parameters in
``plugin.by_task[task]``; it acts through the sites of every layer, hooks on the layer's modules
(``minbert/sites.py``):

    kind       site                                   file
    adapter    after_attention, after_feed_forward    adapter.py  (Houlsby et al. 2019)
    pals       parallel                               pals.py     (Stickland & Murray 2019)
    lhuc       after_layer                            lhuc.py     (Swietojanski & Renals 2014)
    lora       linear                                 lora.py     (Hu et al. 2021)
    layernorm  norm                                   layernorm.py (Houlsby et al. 2019)
    fusion     the adapter's sites                    the lab's   (Pfeiffer et al. 2021)

The first four are the driver's ``--option`` choices (``PLUGINS``); ``layernorm``, per-task
LayerNorms, goes beside one of them (``--train_layernorms``) and is attached first; ``fusion``
(``--option fusion``) fuses the fixed adapters of a finished adapter run: a lab extra, which the
student tree leaves out (there the kind is unknown).

Several kinds may be attached at once; each site applies them in the order they were added.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable

from minbert.bert import BertConfig, BertModel
from minbert.plugins.adapter import HoulsbyAdapter
from minbert.plugins.base import Plugin
from minbert.plugins.freezing import freeze_all_but_task, freeze_for_plugins
from minbert.plugins.layernorm import TaskLayerNorms
from minbert.plugins.lhuc import LHUC
from minbert.plugins.lora import LoRA
from minbert.plugins.pals import PAL
from minbert.plugins.report import format_parameter_report, parameter_report
from minbert.plugins.task_state import load_plugin_state_dict, plugin_state_dict

PLUGINS: dict[str, type[Plugin]] = {
    "adapter": HoulsbyAdapter,
    "pals": PAL,
    "lhuc": LHUC,
    "lora": LoRA,
}
KINDS: dict[str, type[Plugin]] = {**PLUGINS, "layernorm": TaskLayerNorms}
# The lab's kinds (module, class), imported by name where the tree has the module: the student
# tree leaves them out, and there they are unknown kinds.
LAB_KINDS = {"fusion": ("minbert.plugins.fusion", "AdapterFusion")}
for _kind, (_module, _name) in LAB_KINDS.items():
    if importlib.util.find_spec(_module):
        KINDS[_kind] = getattr(importlib.import_module(_module), _name)


def _plugin_class(kind: str) -> type[Plugin]:
    if kind not in KINDS:
        raise ValueError(f"unknown plug-in kind {kind!r}; use one of {list(KINDS)}")
    return KINDS[kind]


def add_plugin(model: BertModel, kind: str, tasks: Iterable[str], **options) -> Plugin:
    """Attach a plug-in of ``kind`` with identity-initialised parameters for each task, on the
    model's device and dtype and in its train/eval mode, as ``model.plugins[kind]``; returns it.
    Unknown kinds, options or option values are a ValueError."""
    cls = _plugin_class(kind)
    if kind in model.plugins:
        raise ValueError(f"a {kind!r} plug-in is already attached; add tasks with add_task")
    plugin = cls(model.config, tasks, **options)
    reference = next(model.parameters())
    plugin.to(device=reference.device, dtype=reference.dtype)
    plugin.train(model.training)  # a plug-in added to a model in eval mode must not drop out
    model.plugins[kind] = plugin
    model.plugins.hook(model.encoder.layer)
    plugin.attach(model)
    return plugin


def count_formula(kind: str, config: BertConfig, **options) -> int:
    """Parameters per task of plug-in ``kind`` with ``options``, from its documented formula:

    adapter  positions · ⌈L / share⌉ · (2·m·D + D + m)   (positions: 2 houlsby, 1 pfeiffer)
    pals     2·D·s + D + s + 3·L·(s² + s)
    lhuc     L · D
    lora     L · Σ_targets r·(d_in + d_out)
    layernorm  L · 2 · 2D
    """
    return _plugin_class(kind).parameters_per_task(config, **options)


__all__ = [
    "LHUC",
    "PAL",
    "PLUGINS",
    "TaskLayerNorms",
    "HoulsbyAdapter",
    "KINDS",
    "LoRA",
    "Plugin",
    "add_plugin",
    "count_formula",
    "format_parameter_report",
    "freeze_all_but_task",
    "freeze_for_plugins",
    "load_plugin_state_dict",
    "parameter_report",
    "plugin_state_dict",
]
