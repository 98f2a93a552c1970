"""How many parameters a run stores and trains, in total and per task.

"Base" is every parameter of the model not under ``model.plugins`` (the pretrained encoder); the
fractions are of the base, as papers on parameter-efficient methods report them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from minbert.bert import BertModel


def _count(parameters) -> int:
    return sum(p.numel() for p in parameters)


def _unique(parameters) -> list[nn.Parameter]:
    return list({id(p): p for p in parameters}.values())


def parameter_report(model: BertModel, heads: dict[str, nn.Module]) -> dict[str, Any]:
    """Counts (JSON-ready):

    * ``base``, ``plugins``, ``heads``, ``total``: parameters stored;
    * ``trainable``: parameters with requires_grad (model and heads);
    * ``shared_trainable``: trainable parameters that belong to no task (the encoder, trained
      beside the plug-ins or fine-tuned);
    * ``tasks[t]``: ``trainable`` (t's plug-in parameters that train), ``trainable_with_head``,
      and both as ``fraction_of_base`` / ``fraction_of_base_with_head``.
    """
    plugin_params = _unique(model.plugins.parameters())
    plugin_ids = {id(p) for p in plugin_params}
    base_params = [p for p in model.parameters() if id(p) not in plugin_ids]
    head_params = _unique(p for head in heads.values() for p in head.parameters())
    base = _count(base_params)

    plugin_tasks = [t for plugin in model.plugins.values() for t in plugin.tasks]
    tasks: dict[str, dict[str, float]] = {}
    for task in dict.fromkeys([*plugin_tasks, *heads]):
        own = [
            p
            for plugin in model.plugins.values()
            if task in plugin.tasks
            for p in plugin.task_parameters(task)
        ]
        head = list(heads[task].parameters()) if task in heads else []
        trainable = _count(p for p in own if p.requires_grad)
        with_head = trainable + _count(p for p in head if p.requires_grad)
        tasks[task] = {
            "trainable": trainable,
            "trainable_with_head": with_head,
            "fraction_of_base": trainable / base,
            "fraction_of_base_with_head": with_head / base,
        }

    everything = base_params + plugin_params + head_params
    task_owned = plugin_ids | {id(p) for p in head_params}
    return {
        "base": base,
        "plugins": _count(plugin_params),
        "heads": _count(head_params),
        "total": _count(everything),
        "trainable": _count(p for p in everything if p.requires_grad),
        "shared_trainable": _count(
            p for p in everything if p.requires_grad and id(p) not in task_owned
        ),
        "tasks": tasks,
    }


def format_parameter_report(report: dict[str, Any]) -> str:
    """A few lines and a per-task table for the console."""
    base = report["base"]
    lines = [
        f"parameters: base {base:,}, plug-ins {report['plugins']:,}, heads {report['heads']:,}, "
        f"total {report['total']:,}",
        f"trainable: {report['trainable']:,} ({report['trainable'] / base:.3%} of base), "
        f"of which shared by all tasks: {report['shared_trainable']:,}",
        f"{'task':<12}{'plug-in':>12}{'% base':>10}{'+ head':>12}{'% base':>10}",
    ]
    for task, row in report["tasks"].items():
        lines.append(
            f"{task:<12}{row['trainable']:>12,}{row['fraction_of_base']:>10.3%}"
            f"{row['trainable_with_head']:>12,}{row['fraction_of_base_with_head']:>10.3%}"
        )
    return "\n".join(lines)
