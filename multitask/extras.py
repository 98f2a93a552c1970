"""The extras: optional parts that the core runs without (the student tree leaves them out).

``EXTRAS`` lists each: its name, its module, its flags, the choices it adds to a core flag and the
extras whose settings it reads (``needs``). A tree without the module does not offer them; using
one ends in one line naming the missing file.

An extra acts on a run only through hooks: functions of its module named as in ``HOOKS``, each
optional, which the driver fires at fixed places over the present extras (``Hooks``) without
knowing who listens, as minGPT's callbacks and the Hugging Face Trainer's events are fired.
Each hook's ``cfg`` is the run's TrainConfig with ``cfg.extras`` holding only the extra's own
settings and those of the extras it ``needs``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from multitask.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Extra:
    """One optional part. ``flags``: each flag its ``Settings`` declare and the value that
    leaves it off (a tree without the extra accepts a saved config.json at those values);
    ``choices``: (core flag, choice, what it does) for each choice it adds to a core flag, such
    as ("step_gradient", "pcgrad", ...); ``needs``: the extras whose settings its hooks read;
    ``hooks``: the module holding its hooks where that is not ``module`` (a part of minbert/,
    which imports nothing of the driver's); ``where``: its flags that say where a run runs, not
    what it trains (a --resume may change them); ``merged``: its list flags that, given twice,
    are merged; ``kinds``: the plug-in kinds it brings (``minbert/plugins/<kind>.py``), which a
    tree without the extra lacks too; ``parts``: its other modules (its helpers, a command).
    ``instead``: for an extra that changes only how fast a run goes or what it reports, never
    the model or its outputs, the core's value of each flag it sets or adds a choice to: a tree
    without it reads a run that used it as if run with these (None: it changes the run)."""

    name: str
    module: str
    flags: tuple[tuple[str, Any], ...] = ()
    choices: tuple[tuple[str, str, str], ...] = ()
    needs: tuple[str, ...] = ()
    hooks: str | None = None
    where: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()
    kinds: tuple[str, ...] = ()
    parts: tuple[str, ...] = ()
    instead: tuple[tuple[str, Any], ...] | None = None

    def modules(self) -> tuple[str, ...]:
        return (self.module,) if self.hooks is None else (self.module, self.hooks)

    def files(self) -> tuple[str, ...]:
        """Every file of the extra, relative to the project: what the student tree leaves out."""
        modules = (*self.modules(), *(f"minbert.plugins.{kind}" for kind in self.kinds))
        return tuple(f"{m.replace('.', '/')}.py" for m in (*modules, *self.parts))

    def present(self) -> bool:
        """Whether this tree has the extra's code."""
        return all(importlib.util.find_spec(module) is not None for module in self.modules())

    def problem(self) -> str:
        """Why the extra's present code does not import, in words naming the file and line
        (``import_problem``); "" when it imports."""
        return next(filter(None, map(import_problem, self.modules())), "")

    def usable(self) -> bool:
        """Whether this tree has the extra's code and it imports: a broken extra takes no part."""
        return self.present() and not self.problem()

    def file(self) -> str:
        return f"{self.module.replace('.', '/')}.py"

    def hook_module(self) -> ModuleType:
        return importlib.import_module(self.hooks or self.module)


EXTRAS = (
    Extra(
        "distillation",
        "multitask.distillation",
        flags=(("teachers", []), ("teacher_annealing", False), ("teacher_weight", None)),
        merged=("teachers",),
    ),
    Extra(
        "fusion",
        "multitask.fusion",
        choices=(("option", "fusion", "AdapterFusion over a finished adapter run's adapters"),),
        kinds=("fusion",),
        parts=("multitask.fusion_weights",),
    ),
    Extra(
        "pcgrad",
        "minbert.pcgrad",
        choices=(("step_gradient", "pcgrad", "summed, conflicts projected"),),
        hooks="multitask.pcgrad_update",
    ),
    Extra(
        "compiled",
        "multitask.compiled",
        flags=(("compile", False), ("compile_mode", "auto")),
        needs=("distillation",),
        where=("compile", "compile_mode"),
        instead=(("compile", False), ("compile_mode", "auto")),
    ),
    Extra(
        "optimizer_foreach",
        "minbert.optimizer_foreach",
        choices=(("optimizer", "foreach", "the same, multi-tensor"),),
        instead=(("optimizer", "adamw"),),
    ),
    Extra(
        "fused_adamw",
        "multitask.fused_adamw",
        choices=(("optimizer", "fused", "torch's fused AdamW"),),
        instead=(("optimizer", "adamw"),),
    ),
    Extra("peft_format", "multitask.peft_format", flags=(("init_lora", []),)),
    Extra(
        "tensorboard",
        "multitask.tensorboard_report",
        flags=(("report_to", "none"),),
        instead=(("report_to", "none"),),
    ),
    Extra(
        "cuda_graphs",
        "multitask.cuda_graphs",
        flags=(("cuda_graphs", "auto"),),
        parts=("multitask.device_lr", "multitask.static_batch"),
        needs=("compiled", "distillation"),
        where=("cuda_graphs",),
        instead=(("cuda_graphs", "auto"),),
    ),
)


def import_problem(module: str) -> str:
    """Why ``module`` does not import, in one line naming its file (and line, for a syntax
    error); "" when it imports."""
    try:
        importlib.import_module(module)
    except SyntaxError as err:
        return f"{module.replace('.', '/')}.py:{err.lineno}: {type(err).__name__}: {err.msg}"
    except Exception as err:  # an import error, anything the file raises as it runs
        return f"{module.replace('.', '/')}.py: {type(err).__name__}: {err}"
    return ""


@dataclasses.dataclass(frozen=True)
class Hook:
    """A function an extra's module may define: its ``signature`` and ``when`` the driver (or
    the config check) fires it, and how the answers of several extras combine (``fired``)."""

    name: str
    signature: str
    when: str
    fired: str
    kept: bool = False  # takes what the extra kept at ``prepare``, as its last argument


# Every hook, the one place each is described (an extra defines any of them, or none), in the
# order the driver fires them (a test holds the two together).
HOOKS = (
    Hook(
        "problems",
        "(cfg, elsewhere) -> Iterator[str]",
        "when the command's settings are checked, before anything runs: one line for each thing "
        "wrong with its settings given the rest (``elsewhere``: a command recorded on another "
        "machine, whose folders may not be here)",
        "every line of every extra, in ``EXTRAS``' order",
    ),
    Hook(
        "refuse",
        "(cfg, device, processes) -> None",
        "first in the run's set-up, before anything is read or written: a UsageError for what "
        "this device (torch.device) and number of processes cannot run",
        "each in turn",
    ),
    Hook(
        "wrap_model",
        "(cfg, model) -> model",
        "once the model is built and the runs it starts from are loaded, before it moves to its "
        "device (training and --evaluate alike)",
        "chained: each extra wraps (or changes and returns) what the one before returned",
    ),
    Hook(
        "prepare",
        "(cfg, folder, train, device) -> kept",
        "before the run folder is started (so before --overwrite removes anything): what the "
        "extra needs from elsewhere for this run (``train``: each task's training examples); "
        "None: it takes no part. What it returns is its ``kept``, the last argument of its "
        "hooks marked ``kept`` (they are fired only for an extra that kept something)",
        "each in turn; each extra's answer kept for its own later hooks",
    ),
    Hook(
        "started",
        "(cfg, folder, kept) -> None",
        "right after the run folder is started (written to from here on)",
        "each in turn",
        kept=True,
    ),
    Hook(
        "wrap_objective",
        "(cfg, inner, model, progress, kept) -> objective",
        "when the objective is built: a new objective around ``inner`` (the model, or the last "
        "extra's objective), offering ``criterion`` as the core's do; SMART goes around the "
        "result. ``progress``: ``Progress`` (the step the loop is at, and the run's steps)",
        "chained",
        kept=True,
    ),
    Hook(
        "wrap_step",
        "(cfg, step, device, processes) -> step",
        "when the step module is built: a module around the step (task, batch -> loss)",
        "chained",
    ),
    Hook(
        "update",
        "(cfg, seed, skip) -> update or None",
        "when the update strategy is chosen: one in place of the core's (``seed()``: the step's "
        "seed; ``skip``: --nonfinite skip)",
        "the first answer that is not None",
    ),
    Hook(
        "reporter",
        "(cfg, folder) -> reporter or None",
        "once the run is set up (rank 0 only): what the loop tells what it logs: ``start(step)`` "
        "(a resume's: drop reports past it), ``losses``, ``metrics``, ``learning_rate`` "
        "(step, values) and ``close()`` at the end",
        "every answer that is not None",
    ),
    Hook(
        "step_function",
        "(cfg, parts) -> callable or None",
        "once the run is set up: a function called as ``train_step`` is, which trains each step "
        "instead (``parts``: ``StepParts``, what a step is made of)",
        "the first answer that is not None",
    ),
    Hook(
        "summary",
        "(cfg) -> dict or None",
        "when summary.json is made: keys to add to it",
        "merged, in ``EXTRAS``' order",
    ),
    Hook(
        "finish",
        "(cfg, folder, summary, kept) -> None",
        "at the end of a run, once its files are written (``summary``: summary.json's)",
        "each in turn",
        kept=True,
    ),
)
HOOK_NAMES = tuple(hook.name for hook in HOOKS)


@dataclasses.dataclass
class Progress:
    """Where the loop is, as an objective reads it during the run: ``step()`` (1 at the first
    step) of ``total`` steps."""

    step: Callable[[], int]
    total: int


@dataclasses.dataclass
class StepParts:
    """What one training step is made of, for ``step_function``: the processes and device, the
    optimizer, the update strategy, the model, each task's training split as encoded (its
    tokens' table gives the widest batch) and the tokenizer's [PAD] id."""

    processes: int
    device: Any
    optimizer: Any
    update: Any
    model: Any
    train: dict[str, Any]
    pad_id: int


def present() -> list[Extra]:
    """The extras whose code this tree has, in ``EXTRAS``' order."""
    return [extra for extra in EXTRAS if extra.present()]


def usable() -> list[Extra]:
    """The present extras whose code imports, in ``EXTRAS``' order: those that take part."""
    return [extra for extra in present() if not extra.problem()]


def named(name: str) -> Extra:
    return next(extra for extra in EXTRAS if extra.name == name)


def view(cfg: Any, extra: Extra) -> Any:
    """``cfg`` as ``extra``'s hooks see it: ``cfg.extras`` holds its own settings and those of
    the extras it ``needs`` (where this tree has them), no other extra's."""
    seen = {n: s for n, s in cfg.extras.items() if n == extra.name or n in extra.needs}
    return dataclasses.replace(cfg, extras=seen)


class Hooks:
    """The present extras' hooks for one run's ``cfg`` (a TrainConfig), fired by name: the
    driver names the hook, never the extra."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.kept: dict[str, Any] = {}  # each extra's answer to ``prepare``

    def listening(self, name: str) -> Iterator[Callable[..., Any]]:
        """Each present extra's ``name`` hook, in ``EXTRAS``' order, as a function of the
        hook's arguments after ``cfg`` (and before ``kept``, for a hook that takes it: only the
        extras that kept something at ``prepare`` listen to that)."""
        hook = next((h for h in HOOKS if h.name == name), None)
        if hook is None:
            raise ValueError(f"no hook {name!r}; the hooks are {', '.join(HOOK_NAMES)}")
        for extra in usable():
            function = getattr(extra.hook_module(), name, None)
            if function is None or (hook.kept and extra.name not in self.kept):
                continue
            kept = (self.kept[extra.name],) if hook.kept else ()
            yield functools.partial(with_kept, function, view(self.cfg, extra), kept)

    def call(self, name: str, *args: Any) -> list[Any]:
        """Every listening extra's answer that is not None, in ``EXTRAS``' order."""
        answers = [function(*args) for function in self.listening(name)]
        return [answer for answer in answers if answer is not None]

    def first(self, name: str, *args: Any) -> Any:
        """The first listening extra's answer that is not None, or None."""
        answers = self.call(name, *args)
        return answers[0] if answers else None

    def chain(self, name: str, value: Any, *args: Any) -> Any:
        """``value`` passed through each listening extra in turn (each returns the next)."""
        for function in self.listening(name):
            value = function(value, *args)
        return value

    def merged(self, name: str, *args: Any) -> dict[str, Any]:
        """The dicts the listening extras answer, merged in ``EXTRAS``' order."""
        merged: dict[str, Any] = {}
        for answer in self.call(name, *args):
            merged |= answer
        return merged

    def prepare(self, *args: Any) -> None:
        """``prepare`` of each usable extra; what each answers (not None) is its ``kept``."""
        for extra in usable():
            function = getattr(extra.hook_module(), "prepare", None)
            kept = None if function is None else function(view(self.cfg, extra), *args)
            if kept is not None:
                self.kept[extra.name] = kept


def with_kept(function: Callable[..., Any], cfg: Any, kept: tuple, *args: Any) -> Any:
    return function(cfg, *args, *kept)


def load(name: str, flag: str) -> ModuleType:
    """The module of extra ``name``, which ``flag`` (how the user asked for it) needs; where this
    tree lacks it, or its code does not import, a UsageError in one line naming the file."""
    extra = named(name)
    if not extra.present():
        raise UsageError(
            f"{flag} needs {extra.file()}, which this tree does not have (the student tree "
            "leaves the extras out): run it in the full project"
        )
    if problem := extra.problem():
        raise UsageError(f"{flag} needs {extra.file()}, which does not import: {problem}")
    return importlib.import_module(extra.module)


def sections() -> dict[str, type]:
    """{extra name: its Settings class} for every usable extra that declares settings (one whose
    code does not import offers none: its flags end in ``load``'s line)."""
    modules = {extra.name: importlib.import_module(extra.module) for extra in usable()}
    return {name: m.Settings for name, m in modules.items() if hasattr(m, "Settings")}


def choices(flag: str) -> tuple[str, ...]:
    """The choices every extra adds to the core's ``flag``, present or not, so that a recorded
    command parses and, where the extra is absent, ends in the line naming its file."""
    return tuple(choice for extra in EXTRAS for name, choice, _ in extra.choices if name == flag)


def needs(flag: str) -> dict[str, str]:
    """{choice: module} of the choices extras add to ``flag`` (``setting(needs=...)``)."""
    return {c: e.module for e in EXTRAS for name, c, _ in e.choices if name == flag}


def where_it_runs() -> tuple[str, ...]:
    """Every extra's flags that say where a run runs, not what it trains."""
    return tuple(flag for extra in EXTRAS for flag in extra.where)


def merged_flags() -> tuple[str, ...]:
    """Every extra's list flags that, given twice, are merged into one list."""
    return tuple(f"--{flag}" for extra in EXTRAS for flag in extra.merged)


def refuse_absent(values: dict[str, Any], words: list[str] = (), source: str = "") -> None:
    """A UsageError where ``values`` (a saved config.json, named by ``source``) used an absent
    extra: set one of its flags to anything but its off value, or made a choice it adds to a
    core flag (``--step_gradient pcgrad``), every extra alike: a run is read only by a tree that
    has every part it ran with; or where ``words`` (a command line) names one of its flags."""
    where = f"{source}: " if source else ""
    for extra in EXTRAS:
        if extra.usable():
            continue
        for flag, off in extra.flags:
            given = any(w == f"--{flag}" or w.startswith(f"--{flag}=") for w in words)
            if given:
                load(extra.name, f"--{flag}")
            if values.get(flag, off) != off and extra.instead is None:
                load(extra.name, f"{where}--{flag}")
        for flag, choice, _ in extra.choices:
            if values.get(flag) == choice and extra.instead is None:
                load(extra.name, f"{where}--{flag} {choice}")


def stood_in(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a saved config.json) with what each extra this tree cannot use set to the
    core's value, where the extra changes only a run's speed or reports (``Extra.instead``):
    the optimizer's implementation is no part of a model."""
    values = dict(values)
    for extra in EXTRAS:
        if extra.usable() or extra.instead is None:
            continue
        choices = {(flag, choice) for flag, choice, _ in extra.choices}
        for flag, value in extra.instead:
            off = dict(extra.flags).get(flag)
            if (flag, values.get(flag)) in choices or values.get(flag, off) != off:
                values[flag] = value
    return values


def chosen(cfg: Any) -> Iterator[tuple[Extra, str]]:
    """Each (extra, "--<flag> <choice>") whose choice ``cfg`` (a TrainConfig, flat) makes."""
    for extra in EXTRAS:
        for flag, choice, _ in extra.choices:
            if cfg.get(flag) == choice:
                yield extra, f"--{flag} {choice}"


def problems(cfg: Any, elsewhere: bool) -> Iterator[str]:
    """What each present extra finds wrong with ``cfg`` (its ``problems`` hook)."""
    for hook in Hooks(cfg).listening("problems"):
        try:
            yield from hook(elsewhere)
        except ValueError as err:
            yield str(err)


def described(flag: str, core: str) -> str:
    """The help of the core's ``flag``: ``core`` (its own choices) and "choice: what it does"
    for each choice that an extra this tree has adds, so --help names only what the tree can
    run."""
    here = [f"{c}: {what}" for e in present() for name, c, what in e.choices if name == flag]
    return "; ".join([core, *here])


def first_present(flag: str, choice: str, otherwise: str) -> str:
    """``choice`` where this tree has the extra that adds it to ``flag``, else ``otherwise``: a
    default that is never a choice the tree lacks."""
    return choice if extra_for(flag, choice).present() else otherwise


def extra_for(flag: str, choice: str) -> Extra:
    """The extra that adds ``choice`` to the core's ``flag``."""
    return next(e for e in EXTRAS if (flag, choice) in [(f, c) for f, c, _ in e.choices])
