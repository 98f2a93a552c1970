"""One task's plug-in tensors: which they are, and loading them back. The files that hold them are
written and read by the run folder (``multitask/run.py``) through ``minbert/checkpoint.py``.

Keys are those of ``model.state_dict()`` (``plugins.<kind>.by_task.<task>....``), so the driver can
add its head's tensors under their own prefix and write one safetensors file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from minbert.bert import BertModel


def _task_prefix(kind: str, task: str) -> str:
    return f"plugins.{kind}.by_task.{task}."


def plugin_state_dict(model: BertModel, task: str) -> dict[str, torch.Tensor]:
    """``task``'s tensors of every attached plug-in, keyed as in ``model.state_dict()``."""
    if len(model.plugins) == 0:
        raise ValueError("no plug-ins are attached to the model")
    state: dict[str, torch.Tensor] = {}
    for kind, plugin in model.plugins.items():
        plugin.check_task(task)
        modules = plugin.by_task[task]
        for key, tensor in modules.state_dict(prefix=_task_prefix(kind, task)).items():
            state[key] = tensor.detach()
    return state


def load_plugin_state_dict(model: BertModel, task: str, state: dict[str, torch.Tensor]) -> None:
    """Copy ``task``'s plug-in tensors into the model; the task must already exist in every
    attached plug-in (``add_plugin`` / ``add_task``). Missing or unexpected keys, or a shape that
    differs (plug-in options that differ from training), are errors."""
    expected = plugin_state_dict(model, task)
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"plug-in state for task {task!r} does not match the attached plug-ins: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
        )
    for kind, plugin in model.plugins.items():
        prefix = _task_prefix(kind, task)
        own = {
            key[len(prefix) :]: tensor for key, tensor in state.items() if key.startswith(prefix)
        }
        plugin.by_task[task].load_state_dict(own, strict=True)
