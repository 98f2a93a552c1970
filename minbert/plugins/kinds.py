"""The plug-in kinds by name: which file holds each, attaching one to a model, and its
parameter count. A kind's file is imported when that kind is first used, so a file that does
not compile fails only the kind it holds."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from typing import TYPE_CHECKING

from minbert.config import BertConfig

if TYPE_CHECKING:
    from minbert.bert import BertModel
    from minbert.plugins.base import Plugin

# kind -> (module, class). The first four are the driver's --option choices (``PLUGINS``).
KIND_CLASSES = {
    "adapter": ("minbert.plugins.adapter", "HoulsbyAdapter"),
    "pals": ("minbert.plugins.pals", "PAL"),
    "lhuc": ("minbert.plugins.lhuc", "LHUC"),
    "lora": ("minbert.plugins.lora", "LoRA"),
    "layernorm": ("minbert.plugins.layernorm", "TaskLayerNorms"),
    "fusion": ("minbert.plugins.fusion", "AdapterFusion"),  # the lab's: the student tree lacks it
}
PLUGINS = ("adapter", "pals", "lhuc", "lora")
KINDS: dict[str, type[Plugin]] = {}  # the kinds imported so far (a test may put its own in)


def available() -> list[str]:
    """The kinds whose file this tree has."""
    return [kind for kind, (module, _) in KIND_CLASSES.items() if importlib.util.find_spec(module)]


def plugin_class(kind: str) -> type[Plugin]:
    """The class of ``kind``, its file imported on first use; a ValueError for an unknown kind."""
    if kind not in KINDS:
        if kind not in KIND_CLASSES or kind not in available():
            raise ValueError(f"unknown plug-in kind {kind!r}; use one of {available()}")
        module, name = KIND_CLASSES[kind]
        KINDS[kind] = getattr(importlib.import_module(module), name)
    return KINDS[kind]


def add_plugin(model: BertModel, kind: str, tasks: Iterable[str], **options) -> Plugin:
    """Attach a plug-in of ``kind`` with identity-initialised parameters for each task, on the
    model's device and dtype and in its train/eval mode, as ``model.plugins[kind]``; returns it.
    Unknown kinds, options or option values are a ValueError."""
    cls = plugin_class(kind)
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
    return plugin_class(kind).parameters_per_task(config, **options)
