"""Choosing what trains, structurally: by module and by ownership, never by parameter name."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minbert.bert import BertModel


def freeze_for_plugins(model: BertModel) -> None:
    """Freeze every parameter of ``model``, then unfreeze every plug-in parameter (all tasks) but
    those of modules a plug-in keeps ``fixed``.
    (Per-task LayerNorms, as Houlsby et al. train them, are a plug-in of their own.)

    Task heads live outside the model; the caller leaves them trainable.
    """
    if len(model.plugins) == 0:
        raise ValueError("no plug-ins are attached; add one with add_plugin before freezing")
    model.requires_grad_(False)
    model.plugins.requires_grad_(True)
    for plugin in model.plugins.values():
        for module in plugin.fixed():
            module.requires_grad_(False)


def freeze_all_but_task(model: BertModel, *tasks: str) -> None:
    """Only the plug-in parameters of ``tasks`` train: for learning tasks added later while every
    other task's outputs stay exactly as they were. Every attached plug-in must have the tasks."""
    if len(model.plugins) == 0:
        raise ValueError("no plug-ins are attached; add one with add_plugin before freezing")
    for plugin in model.plugins.values():
        for task in tasks:
            plugin.check_task(task)
    model.requires_grad_(False)
    for plugin in model.plugins.values():
        for task in tasks:
            for parameter in plugin.task_parameters(task):
                parameter.requires_grad_(True)
