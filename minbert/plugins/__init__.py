"""Parameter-efficient plug-ins for ``BertModel``: Houlsby adapters, PALs, LHUC and LoRA.

Shapes (used in every file of this package): B batch size; T tokens per sequence; D hidden size; F
feed-forward size; L number of layers; m adapter bottleneck size; s PAL size (the projected space);
r LoRA rank.

Usage::

    model = load_pretrained()
    add_plugin(model, "adapter", ["sst", "para", "sts"], size=64)
    freeze_for_plugins(model)                  # only plug-ins (and the heads, outside) train
    out = model(input_ids, attention_mask, token_type_ids, task="sst")

Several kinds may be attached at once; each site applies them in the order they were added.
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
