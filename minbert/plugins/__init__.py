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

The first four are the driver's ``--option`` choices (``option_kinds()``); ``layernorm``, per-task
LayerNorms, goes beside one of them (``--train_layernorms``) and is attached first; ``fusion``
(``--option fusion``) fuses the fixed adapters of a finished adapter run: a lab extra, which the
student tree leaves out (there the kind is unknown).

Several kinds may be attached at once; each site applies them in the order they were added.

Nothing is imported here until it is asked for (``from minbert.plugins import add_plugin``
imports ``kinds.py``, which imports a kind's file only when that kind is attached): a plug-in
file that does not compile fails only what uses it, never the other plug-ins.
"""

from __future__ import annotations

import importlib
from typing import Any

# The public names of the package, by the file of the package that holds each.
HOMES = {
    "KINDS": "kinds",
    "add_plugin": "kinds",
    "remove_plugin": "kinds",
    "count_formula": "kinds",
    "plugin_class": "kinds",
    "option_kinds": "kinds",
    "available": "kinds",
    "Plugin": "base",
    "HoulsbyAdapter": "adapter",
    "PAL": "pals",
    "LHUC": "lhuc",
    "LoRA": "lora",
    "TaskLayerNorms": "layernorm",
    "freeze_for_plugins": "freezing",
    "freeze_all_but_task": "freezing",
    "format_parameter_report": "report",
    "parameter_report": "report",
    "load_plugin_state_dict": "task_state",
    "plugin_state_dict": "task_state",
}
__all__ = sorted(HOMES)


def __getattr__(name: str) -> Any:
    """``minbert.plugins.NAME``: imported from its file on first use (see the docstring)."""
    if name not in HOMES:
        raise AttributeError(f"module 'minbert.plugins' has no attribute {name!r}")
    return getattr(importlib.import_module(f"minbert.plugins.{HOMES[name]}"), name)
