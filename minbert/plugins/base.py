"""What every plug-in shares: its settings, per-task parameters in a container keyed by task name,
task checks, and the per-layer sites of ``minbert.sites.SiteHandler`` (each the identity unless a
plug-in overrides it).

Shape legend
    B   batch size
    T   tokens per sequence
    D   hidden size
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

from torch import nn

from minbert.config import BertConfig
from minbert.sites import SiteHandler


@dataclasses.dataclass
class NoSettings:
    """A plug-in without options."""


class Plugin(nn.Module, SiteHandler, ABC):
    """A parameter-efficient method attached to a ``BertModel`` under ``model.plugins[kind]``.

    Every parameter of a plug-in belongs to exactly one task and lives in
    ``self.by_task[task]`` (an ``nn.ModuleDict`` keyed by task name), so the state-dict keys read
    ``plugins.<kind>.by_task.<task>....`` and one task's tensors are one sub-tree.

    A subclass sets ``kind`` (the name of its file in this package: a kind is found by its
    file), its options as a ``Settings`` dataclass (whose defaults and help are the only ones:
    the driver's flags ``--<flag_prefix><option>`` are generated from it, ``widths`` naming the
    options that are sizes, which the driver bounds), whether it is a driver ``--option`` of its
    own with the one line ``summary`` its help gives, builds one task's modules in
    ``build_task``, overrides the sites it acts at, says in ``layer_of`` which layer each of its
    parameters acts in (for layer-wise learning rates), and gives its parameter count per task in
    ``parameters_per_task`` (the documented formula, which the tests compare with the real
    count). Sites receive the layer index and the task explicitly: nothing about the active task
    is stored between calls.
    """

    kind: ClassVar[str] = ""
    Settings: ClassVar[type] = NoSettings
    flag_prefix: ClassVar[str] = ""  # the driver's flags of ``Settings``; "": none
    widths: ClassVar[tuple[str, ...]] = ()  # the options of ``Settings`` that are sizes
    option: ClassVar[bool] = True  # a driver --option of its own
    summary: ClassVar[str] = ""  # what it is, in --option's help

    def __init__(self, config: BertConfig, **options: Any) -> None:
        super().__init__()
        self.config = config
        self.settings = self.make_settings(**options)
        self.by_task = nn.ModuleDict()

    @classmethod
    def make_settings(cls, **options: Any) -> Any:
        """``cls.Settings(**options)``; an unknown option is a ValueError listing the known ones
        (the Settings' own checks raise ValueError for a bad value)."""
        accepted = [f.name for f in dataclasses.fields(cls.Settings)]
        unknown = sorted(set(options) - set(accepted))
        if unknown:
            raise ValueError(
                f"plug-in {cls.kind!r} has no option {unknown}; its options: {accepted}"
            )
        return cls.Settings(**options)

    # ----- tasks -----

    @property
    def tasks(self) -> list[str]:
        return list(self.by_task.keys())

    @abstractmethod
    def build_task(self) -> nn.Module:
        """Fresh modules for one task, initialised so that the plug-in is the identity."""

    def add_tasks(self, tasks: Iterable[str]) -> None:
        if isinstance(tasks, str):
            raise ValueError(f"tasks must be a list of task names, not the string {tasks!r}")
        tasks = list(tasks)
        if not tasks:
            raise ValueError(f"plug-in {self.kind!r} needs at least one task")
        for name in tasks:
            self.add_task(name)

    def add_task(self, name: str) -> nn.Module:
        """Add a task (for example one learnt after the others), identity-initialised, on the
        device and dtype of the plug-in's existing parameters and in its train/eval mode.
        Returns its modules."""
        if not isinstance(name, str) or not name or "." in name:
            raise ValueError(f"a task name must be a non-empty string without '.', got {name!r}")
        if name in self.by_task:
            raise ValueError(f"plug-in {self.kind!r} already has task {name!r}")
        if hasattr(self.by_task, name):  # "keys", "items", ...: would shadow a ModuleDict method
            raise ValueError(f"task name {name!r} clashes with an attribute of nn.ModuleDict")
        modules = self.build_task()
        existing = next(self.parameters(), None)
        if existing is not None:
            modules.to(device=existing.device, dtype=existing.dtype)
        modules.train(self.training)
        self.by_task[name] = modules
        return modules

    def task_parameters(self, task: str) -> list[nn.Parameter]:
        """The parameters that belong to ``task`` (and to no other task)."""
        self.check_task(task)
        return list(self.by_task[task].parameters())

    def check_task(self, task: str | None) -> None:
        """Raise a ValueError naming the known tasks unless ``task`` is one of them."""
        if task is None:
            raise ValueError(
                f"plug-in {self.kind!r} is attached, so the forward pass needs a task: "
                f"pass task= one of {self.tasks}"
            )
        if task not in self.by_task:
            raise ValueError(
                f"unknown task {task!r} for plug-in {self.kind!r}; known tasks: {self.tasks}"
            )

    def fixed(self) -> list[nn.Module]:
        """Modules of the plug-in that never train (AdapterFusion's stage-1 adapters)."""
        return []

    def attach(self, model: nn.Module) -> None:
        """Called by ``add_plugin`` once the plug-in sits in ``model.plugins`` (LoRA keeps a
        reference to the layers so it can merge its update into their weights)."""

    @abstractmethod
    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        """For each parameter of ``task``: the index of the (topmost) encoder layer it acts in.
        A parameter that serves several layers (a shared adapter, PAL's V_E and V_D, LHUC's
        (L, D) table) counts at the topmost of them."""

    @classmethod
    @abstractmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """The number of parameters one task adds, from the plug-in's formula."""

    def extra_repr(self) -> str:
        return f"tasks={self.tasks}"
