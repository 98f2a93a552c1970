"""The extras: optional parts that the core runs without (the student tree leaves them out).

``EXTRAS`` lists each: its name, its module, its flags and the choices it adds to a core flag. A
tree without the module does not offer them; using one ends in one line naming the missing file.

An extra's module hooks into the run through these names, each optional:

    Settings                    a settings dataclass (minbert/flags.py): its flags, in a --help
                                section of their own; a run's values are ``cfg.extras[name]``
    problems(cfg, elsewhere)    what is wrong with its settings given the whole TrainConfig
                                (``elsewhere``: a recorded command); yields one line each
    reporter(cfg, folder)       None, or what the loop tells what it logs: ``start(step)`` (a
                                resume's: drop reports past it), ``losses``, ``metrics``,
                                ``learning_rate`` (step, values) and ``close()`` at the end
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from multitask.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Extra:
    """One optional part. ``flags``: each flag its ``Settings`` declare and the value that
    leaves it off (a tree without the extra accepts a saved config.json at those values);
    ``choices``: (core flag, choice) pairs it adds, such as ("step_gradient", "pcgrad")."""

    name: str
    module: str
    flags: tuple[tuple[str, Any], ...] = ()
    choices: tuple[tuple[str, str], ...] = ()

    def present(self) -> bool:
        """Whether this tree has the extra's code."""
        return importlib.util.find_spec(self.module) is not None

    def file(self) -> str:
        return f"{self.module.replace('.', '/')}.py"


EXTRAS = (
    Extra(
        "distillation",
        "multitask.distillation",
        flags=(("teachers", []), ("teacher_annealing", False), ("teacher_weight", None)),
    ),
    Extra("fusion", "multitask.fusion", choices=(("option", "fusion"),)),
    Extra("pcgrad", "minbert.pcgrad", choices=(("step_gradient", "pcgrad"),)),
    Extra("compiled", "multitask.compiled", flags=(("compile", False), ("compile_mode", "auto"))),
    Extra("optimizer_foreach", "minbert.optimizer_foreach", choices=(("optimizer", "foreach"),)),
    Extra("fused_adamw", "multitask.fused_adamw", choices=(("optimizer", "fused"),)),
    Extra("peft_format", "multitask.peft_format", flags=(("init_lora", []),)),
    Extra("tensorboard", "multitask.tensorboard_report", flags=(("report_to", "none"),)),
    Extra("cuda_graphs", "multitask.cuda_graphs", flags=(("cuda_graphs", "auto"),)),
)


def present() -> list[Extra]:
    """The extras whose code this tree has, in ``EXTRAS``' order."""
    return [extra for extra in EXTRAS if extra.present()]


def named(name: str) -> Extra:
    return next(extra for extra in EXTRAS if extra.name == name)


def load(name: str, flag: str) -> ModuleType:
    """The module of extra ``name``, which ``flag`` (how the user asked for it) needs; where this
    tree lacks it, a UsageError in one line naming the missing file."""
    extra = named(name)
    if not extra.present():
        raise UsageError(
            f"{flag} needs {extra.file()}, which this tree does not have (the student tree "
            "leaves the extras out): run it in the full project"
        )
    return importlib.import_module(extra.module)


def sections() -> dict[str, type]:
    """{extra name: its Settings class} for every present extra that declares settings."""
    modules = {extra.name: importlib.import_module(extra.module) for extra in present()}
    return {name: m.Settings for name, m in modules.items() if hasattr(m, "Settings")}


def choices(flag: str) -> tuple[str, ...]:
    """The choices every extra adds to the core's ``flag``, present or not, so that a recorded
    command parses and, where the extra is absent, ends in the line naming its file."""
    return tuple(choice for extra in EXTRAS for name, choice in extra.choices if name == flag)


def needs(flag: str) -> dict[str, str]:
    """{choice: module} of the choices extras add to ``flag`` (``setting(needs=...)``)."""
    return {c: e.module for e in EXTRAS for name, c in e.choices if name == flag}


def refuse_absent(values: dict[str, Any], words: list[str] = (), source: str = "") -> None:
    """A UsageError where ``values`` (a saved config.json, named by ``source``) used an absent
    extra: set one of its flags to anything but its off value, or made a choice it adds to a
    core flag (``--step_gradient pcgrad``), every extra alike: a run is read only by a tree that
    has every part it ran with; or where ``words`` (a command line) names one of its flags."""
    where = f"{source}: " if source else ""
    for extra in EXTRAS:
        if extra.present():
            continue
        for flag, off in extra.flags:
            given = any(w == f"--{flag}" or w.startswith(f"--{flag}=") for w in words)
            if given:
                load(extra.name, f"--{flag}")
            if values.get(flag, off) != off:
                load(extra.name, f"{where}--{flag}")
        for flag, choice in extra.choices:
            if values.get(flag) == choice:
                load(extra.name, f"{where}--{flag} {choice}")


def chosen(cfg: Any) -> Iterator[tuple[Extra, str]]:
    """Each (extra, "--<flag> <choice>") whose choice ``cfg`` (a TrainConfig, flat) makes."""
    for extra in EXTRAS:
        for flag, choice in extra.choices:
            if cfg.get(flag) == choice:
                yield extra, f"--{flag} {choice}"


def reporters(cfg: Any, folder: Any) -> list[Any]:
    """The reporters of the present extras that report with ``cfg``'s settings."""
    made = []
    for extra in present():
        hook = getattr(importlib.import_module(extra.module), "reporter", None)
        if hook is not None and (made_one := hook(cfg, folder)) is not None:
            made.append(made_one)
    return made


def problems(cfg: Any, elsewhere: bool) -> Iterator[str]:
    """What each present extra finds wrong with ``cfg`` (its ``problems`` hook)."""
    for extra in present():
        hook = getattr(importlib.import_module(extra.module), "problems", None)
        if hook is not None:
            try:
                yield from hook(cfg, elsewhere)
            except ValueError as err:
                yield str(err)


def setting_of(cfg: Any, name: str, setting: str) -> Any:
    """Setting ``setting`` of extra ``name`` in a run's TrainConfig, or None where this tree
    lacks the extra."""
    settings = cfg.extras.get(name)
    return getattr(settings, setting) if settings is not None else None


def described(flag: str, core: str, choices: dict[str, str]) -> str:
    """The help of the core's ``flag``: ``core`` (its own choices) and "choice: what it does"
    for each choice in ``choices`` that an extra this tree has adds, so --help names only what
    the tree can run."""
    here = {choice for extra in present() for name, choice in extra.choices if name == flag}
    return "; ".join([core, *(f"{c}: {what}" for c, what in choices.items() if c in here)])


def first_present(flag: str, choice: str, otherwise: str) -> str:
    """``choice`` where this tree has the extra that adds it to ``flag``, else ``otherwise``: a
    default that is never a choice the tree lacks."""
    return choice if extra_for(flag, choice).present() else otherwise


def extra_for(flag: str, choice: str) -> Extra:
    """The extra that adds ``choice`` to the core's ``flag``."""
    return next(e for e in EXTRAS if (flag, choice) in e.choices)
