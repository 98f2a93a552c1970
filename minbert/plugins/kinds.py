"""The plug-in kinds by name: ``KIND_NAMES`` is the table (the project's one rule for finding a
part: one table names them all), and kind ``<name>`` is the ``Plugin`` subclass of that kind in
``minbert/plugins/<name>.py``, imported when first used. A tree without a kind's file (the student
tree has no fusion) does not offer it; a file that does not import fails only the kind it holds.
Also: attaching a kind to a model, and its parameter count."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Iterable
from typing import TYPE_CHECKING

from minbert.config import BertConfig

if TYPE_CHECKING:
    from minbert.bert import BertModel
    from minbert.plugins.base import Plugin

# Every plug-in kind, by name: adding a kind is adding its file and its name here.
KIND_NAMES = ("adapter", "fusion", "layernorm", "lhuc", "lora", "pals")
KINDS: dict[str, type[Plugin]] = {}  # the kinds imported so far (a test may put its own in)


def available() -> list[str]:
    """The kinds of the table whose files this tree has (nothing imported)."""
    return [kind for kind in KIND_NAMES if importlib.util.find_spec(f"minbert.plugins.{kind}")]


def plugin_class(kind: str) -> type[Plugin]:
    """The class of ``kind``, its file imported on first use; a ValueError for an unknown kind.
    A file that does not import raises what importing it raised (``import_problem`` says it)."""
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


def import_problem(kind: str) -> str:
    """Why ``kind``'s file cannot give its class, in one line naming the file and line ("" when
    it can): the driver still offers the kind, and refuses it with this line when chosen."""
    try:
        plugin_class(kind)
    except SyntaxError as err:
        return f"minbert/plugins/{kind}.py:{err.lineno}: {type(err).__name__}: {err.msg}"
    except Exception as err:  # an import error, a missing class: anything the file raises
        return f"minbert/plugins/{kind}.py: {type(err).__name__}: {err}"
    return ""


def option_kinds() -> list[str]:
    """The kinds that are a driver --option of their own (``Plugin.option``), by name, and every
    kind whose file does not import (offered, so that choosing it says what is wrong with it)."""
    return [kind for kind in available() if import_problem(kind) or plugin_class(kind).option]


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
    """Parameters per task of plug-in ``kind`` with ``options``, from the formula its class
    documents in ``parameters_per_task`` (each kind's own file)."""
    return plugin_class(kind).parameters_per_task(config, **options)
