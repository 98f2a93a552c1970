"""The plug-in kinds by name: a kind is a file of this package (``minbert/plugins/<kind>.py``
holding a ``Plugin`` subclass whose ``kind`` is that name), found by its file and imported when
first used, so adding a kind is adding one file, and a file that does not compile fails only the
kind it holds. Also: attaching a kind to a model, and its parameter count."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from typing import TYPE_CHECKING

import minbert.plugins
from minbert.config import BertConfig

if TYPE_CHECKING:
    from minbert.bert import BertModel
    from minbert.plugins.base import Plugin

# The package's files that hold no kind.
HELPERS = frozenset({"base", "freezing", "kinds", "projected_attention", "report", "task_state"})
KINDS: dict[str, type[Plugin]] = {}  # the kinds imported so far (a test may put its own in)


def available() -> list[str]:
    """The kinds this tree has, by their files (nothing imported)."""
    found = pkgutil.iter_modules(minbert.plugins.__path__)
    return sorted(m.name for m in found if m.name not in HELPERS and not m.name.startswith("_"))


def plugin_class(kind: str) -> type[Plugin]:
    """The class of ``kind``, its file imported on first use; a ValueError for an unknown kind."""
    if kind not in KINDS:
        if kind not in available():
            raise ValueError(f"unknown plug-in kind {kind!r}; use one of {available()}")
        from minbert.plugins.base import Plugin

        module = importlib.import_module(f"minbert.plugins.{kind}")
        found = [
            cls
            for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, Plugin) and cls.kind == kind
        ]
        if len(found) != 1:
            raise ValueError(f"minbert/plugins/{kind}.py: no Plugin subclass of kind {kind!r}")
        KINDS[kind] = found[0]
    return KINDS[kind]


def option_kinds() -> list[str]:
    """The kinds that are a driver --option of their own (``Plugin.option``), by name."""
    return [kind for kind in available() if plugin_class(kind).option]


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


def remove_plugin(model: BertModel, kind: str) -> Plugin:
    """Take the plug-in of ``kind`` off ``model`` and return it; with none left, the layers'
    hooks go too, so the model computes exactly what it did before any was attached. A LoRA
    merged into the weights is unmerged first (``unmerge``), or they would keep its update."""
    if kind not in model.plugins:
        raise ValueError(f"no {kind!r} plug-in is attached; attached: {list(model.plugins)}")
    plugin = model.plugins[kind]
    if getattr(plugin, "merged_task", None) is not None:
        raise ValueError(f"the {kind!r} plug-in is merged into the weights: unmerge() it first")
    del model.plugins[kind]
    if len(model.plugins) == 0:
        model.plugins.unhook()
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
