"""Parameter-efficient plug-ins for ``BertModel``: Houlsby adapters, PALs, LHUC and LoRA.

Shapes (in every file of this package): B batch; T tokens per sequence; D hidden; F feed-forward;
L layers; m adapter bottleneck; s PAL size (the projected space); r LoRA rank.

Usage::

    model = load_pretrained()
    add_plugin(model, "adapter", ["sst", "para", "sts"], size=64)
    freeze_for_plugins(model)                  # only plug-ins (and the heads, outside) train
    out = model(input_ids, attention_mask, token_type_ids, task="sst")

Nothing is imported here until it is asked for (see ``__getattr__``): a plug-in's file is imported
only when that kind is attached, so one that does not compile fails only what uses it.
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
    "import_problem": "kinds",
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
