"""The extras: optional parts that the core runs without (the student tree leaves them out).

``EXTRAS`` lists each: its name, its module, its flags, the choices it adds to a core flag, the
extras whose settings it reads (``needs``) and whose modules it imports (``uses``). A tree
without the module does not offer them; using one ends in one line naming the missing file.

An extra acts on a run only through its part: the object its module's ``for_run(cfg)`` makes for
one run, or None where it takes no part. A part is a ``Part`` whose methods are the hooks, named
by family (``check_``, ``wrap_``, ``choose_``, ``on_``: ``FAMILIES``), which the driver fires at
fixed places over every part (``Hooks.fire``) without knowing whose they are, as minGPT's
callbacks and the Hugging Face Trainer's events are fired. ``HOOKS`` describes each, in the
order they fire.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import Any

from minbert.flags import has_module
from multitask.errors import UsageError


@dataclasses.dataclass(frozen=True)
class Extra:
    """One optional part. ``flags``: each flag its ``Settings`` declare and the value that leaves
    it off (a tree without the extra accepts a saved config.json at those values); ``choices``:
    (core flag, choice, what it does) for each choice it adds to a core flag, such as
    ("step_gradient", "pcgrad", ...); ``needs``: the extras whose settings its part reads;
    ``hooks``: the module offering its ``for_run`` where that is not ``module`` (a part of
    minbert/, which imports nothing of the driver's); ``where``: its flags that say where a run
    runs, not what it trains (a --resume may change them); ``merged``: its list flags that,
    given twice, are merged; ``kinds``: the plug-in kinds it brings
    (``minbert/plugins/<kind>.py``), which a tree without the extra lacks too; ``parts``: its
    other modules (its helpers, a command); ``uses``: the other extras whose modules it imports;
    ``default``: the core flags whose default is its choice where this tree has it; ``reports``:
    its part is told what a run logs (``on_start``, ``on_log``, ``on_evaluate``, ``on_end``), so
    MLM pretraining offers it too; ``writes``: the files it writes in a run folder (glob
    patterns, part of the folder's layout: multitask/run.py); ``instead``: for an extra that
    changes only how fast a run goes or what it reports, never the model or its outputs, the
    core's value of each flag it sets or adds a choice to: a tree without it reads a run that
    used it as if run with these (None: it changes the run)."""

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
    uses: tuple[str, ...] = ()
    default: tuple[str, ...] = ()
    reports: bool = False
    writes: tuple[str, ...] = ()

    def modules(self) -> tuple[str, ...]:
        return (self.module,) if self.hooks is None else (self.module, self.hooks)

    def files(self) -> tuple[str, ...]:
        """Every file of the extra, relative to the project: what the student tree leaves out."""
        modules = (*self.modules(), *(f"minbert.plugins.{kind}" for kind in self.kinds))
        return tuple(f"{m.replace('.', '/')}.py" for m in (*modules, *self.parts))

    def present(self) -> bool:
        """Whether this tree has the extra's code (the student tree has none of them)."""
        return all(has_module(module) for module in self.modules())

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
        "extras.distillation",
        flags=(("teachers", []), ("teacher_annealing", False), ("teacher_weight", None)),
        merged=("teachers",),
        writes=("teacher-outputs.safetensors",),
    ),
    Extra(
        "fusion",
        "extras.fusion",
        choices=(("option", "fusion", "AdapterFusion over a finished adapter run's adapters"),),
        kinds=("fusion",),
        parts=("tools.fusion_weights",),
    ),
    Extra(
        "pcgrad",
        "minbert.pcgrad",
        choices=(("step_gradient", "pcgrad", "summed, conflicts projected"),),
        hooks="extras.pcgrad_update",
    ),
    Extra(
        "compiled",
        "extras.compiled",
        flags=(("compile", False), ("compile_mode", "auto")),
        needs=("distillation",),
        where=("compile", "compile_mode"),
        instead=(("compile", False), ("compile_mode", "auto")),
    ),
    Extra(
        "optimizer_foreach",
        "minbert.optimizer_foreach",
        choices=(("optimizer", "foreach", "the same, multi-tensor"),),
        hooks="extras.foreach_optimizer",
        default=("optimizer",),
        instead=(("optimizer", "adamw"),),
    ),
    Extra(
        "fused_adamw",
        "extras.fused_adamw",
        choices=(("optimizer", "fused", "torch's fused AdamW"),),
        instead=(("optimizer", "adamw"),),
    ),
    Extra("peft_format", "extras.peft_format", flags=(("init_lora", []),)),
    Extra(
        "tensorboard",
        "extras.tensorboard_report",
        flags=(("report_to", "none"),),
        instead=(("report_to", "none"),),
        reports=True,
        writes=("tensorboard/events.out.tfevents.*",),
    ),
    Extra(
        "cuda_graphs",
        "extras.cuda_graphs",
        flags=(("cuda_graphs", "auto"),),
        parts=("extras.device_lr", "extras.static_batch"),
        needs=("compiled", "distillation"),
        uses=("optimizer_foreach",),
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


class Part:
    """What an extra is in one run: the object its module's ``for_run(cfg)`` returns (None: the
    extra takes no part in this run). Its state for the run lives on it. Every hook is a method
    here, named by its family's first word, that does nothing: a ``check_`` finds nothing, a
    ``wrap_`` returns what it was given, a ``choose_`` answers None (the core's own), an ``on_``
    event does nothing. An extra's part overrides the hooks it needs (``HOOKS`` says when each
    fires); ``cfg`` (given to ``for_run``) is the run's settings with ``cfg.extras`` holding only
    the extra's own and those of the extras it ``needs``."""

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        return iter(())

    def check_machine(self, device: Any, processes: int) -> Iterator[str]:
        return iter(())

    def wrap_model(self, model: Any) -> Any:
        return model

    def on_set_up(self, folder: Any, train: dict[str, Any], device: Any) -> None:
        pass

    def choose_optimizer(self, groups: list[dict], lr: float) -> Any:
        return None

    def wrap_objective(self, inner: Any, model: Any, progress: Progress) -> Any:
        return inner

    def wrap_step(self, step: Any, device: Any, processes: int) -> Any:
        return step

    def choose_update(self, seed: Callable[[], int], skip: bool) -> Any:
        return None

    def choose_step_function(self, parts: StepParts) -> Any:
        return None

    def on_start(self, folder: Any, step: int) -> None:
        pass

    def on_log(self, step: int, losses: dict[str, float], rate: float) -> None:
        pass

    def on_evaluate(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def wrap_summary(self, summary: dict[str, Any]) -> dict[str, Any]:
        return summary

    def on_end(self, folder: Any, summary: dict[str, Any]) -> None:
        pass


# How the answers of several extras' parts combine, by the family a hook's first word names.
FAMILIES = {
    "check": "each in turn; every line of every part (a ValueError raised is a line too)",
    "wrap": "chained: each part wraps (or changes and returns) what the one before returned",
    "choose": "the first answer that is not None; None from every part: the core's own",
    "on": "each in turn; nothing is answered",
}


@dataclasses.dataclass(frozen=True)
class Hook:
    """A method of ``Part``: ``when`` the driver (or the settings check) fires it. Its family,
    the first word of its name, says how the parts' answers combine (``FAMILIES``)."""

    name: str
    when: str

    @property
    def family(self) -> str:
        return self.name.split("_", 1)[0]


# Every hook, the one place each is described, in the order the driver fires them (a test holds
# the two together); each one's arguments are ``Part``'s method's.
HOOKS = (
    Hook(
        "check_settings",
        "when the command's settings are checked, before anything runs: a line for each thing "
        "wrong with the extra's settings given the rest (``elsewhere``: a command recorded on "
        "another machine, whose folders may not be here)",
    ),
    Hook(
        "check_machine",
        "first in the run's set-up, before anything is read or written: a line for what this "
        "device (torch.device) and number of processes cannot run",
    ),
    Hook(
        "wrap_model",
        "once the model is built and the runs it starts from are loaded, before it moves to its "
        "device (training and --evaluate alike)",
    ),
    Hook(
        "on_set_up",
        "before the run folder is started (so before --overwrite removes anything): read what "
        "the extra needs from elsewhere for this run (``train``: each task's training examples)",
    ),
    Hook(
        "choose_optimizer",
        "when the optimizer is built: one in place of the hand-written AdamW over the same "
        "parameter ``groups`` at peak rate ``lr``",
    ),
    Hook(
        "wrap_objective",
        "when the objective is built: a new objective around ``inner`` (the model, or the last "
        "part's objective), offering ``criterion`` as the core's do; SMART goes around the "
        "result. ``progress``: ``Progress`` (the step the loop is at, and the run's steps)",
    ),
    Hook(
        "wrap_step",
        "when the step module is built: a module around the step (task, batch -> loss)",
    ),
    Hook(
        "choose_update",
        "when the update strategy is chosen: one in place of the core's (``seed()``: the step's "
        "seed; ``skip``: --nonfinite skip)",
    ),
    Hook(
        "choose_step_function",
        "once the run is set up: a function called as ``train_step`` is, which trains each step "
        "instead (``parts``: ``StepParts``, what a step is made of)",
    ),
    Hook(
        "on_start",
        "once the run folder is started and, on a resume, its state restored, before the first "
        "step (``step``: 0, or the step a resume goes on from). This event and the ones after "
        "it fire only in the process that writes the run folder (rank 0)",
    ),
    Hook("on_log", "after each log line: the mean ``losses`` by task and the learning ``rate``"),
    Hook("on_evaluate", "after each evaluation: the dev ``metrics`` at ``step``"),
    Hook("wrap_summary", "when summary.json is made: the summary, with what the extra adds"),
    Hook("on_end", "at the end of a run, once its files are written (``summary``: its summary)"),
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
    """What one training step is made of, for ``choose_step_function``: the processes and
    device, the optimizer, the update strategy, the model, each task's training split as encoded
    (its tokens' table gives the widest batch) and the tokenizer's [PAD] id."""

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
    """``cfg`` as ``extra``'s part sees it: ``cfg.extras`` holds its own settings and those of
    the extras it ``needs`` (where this tree has them), no other extra's."""
    seen = {n: s for n, s in cfg.extras.items() if n == extra.name or n in extra.needs}
    return dataclasses.replace(cfg, extras=seen)


class Hooks:
    """The parts the usable extras (or those of ``among``) take in one run of ``cfg``, each
    made once by its module's ``for_run``; ``fire`` calls a hook of every part by the hook's
    name: the driver names the hook, never the extra."""

    def __init__(self, cfg: Any, among: Iterable[Extra] | None = None) -> None:
        self.parts: list[Part] = []
        for extra in usable() if among is None else among:
            part = extra.hook_module().for_run(view(cfg, extra))
            if part is not None:
                self.parts.append(part)

    def fire(self, name: str, *args: Any) -> Any:
        """Hook ``name`` of every part, in ``EXTRAS``' order, the answers combined as its
        family says (``FAMILIES``): a check's lines (a list), a wrapper's last value (the
        first argument, wrapped by each part in turn), a chooser's first answer or None."""
        hook = next((h for h in HOOKS if h.name == name), None)
        if hook is None:
            raise ValueError(f"no hook {name!r}; the hooks are {', '.join(HOOK_NAMES)}")
        methods = [getattr(part, name) for part in self.parts]
        if hook.family == "check":
            return [line for method in methods for line in checked(method, *args)]
        if hook.family == "wrap":
            value, *rest = args
            for method in methods:
                value = method(value, *rest)
            return value
        answers = (method(*args) for method in methods)
        if hook.family == "choose":
            return next((answer for answer in answers if answer is not None), None)
        for _ in answers:  # events: each in turn
            pass
        return None


def checked(check: Callable[..., Iterable[str]], *args: Any) -> list[str]:
    """The lines of one part's check; a ValueError it raises is its line."""
    try:
        return list(check(*args))
    except ValueError as err:
        return [str(err)]


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


def written(reporting_only: bool = False) -> tuple[str, ...]:
    """The files every extra (or every one that reports) writes in a run folder, present or not:
    a folder a run wrote with an extra is still the run's in a tree without it."""
    return tuple(f for e in EXTRAS if e.reports or not reporting_only for f in e.writes)


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
    """What each usable extra's part finds wrong with ``cfg`` (its ``check_settings``)."""
    yield from Hooks(cfg).fire("check_settings", elsewhere)


def described(flag: str, core: str) -> str:
    """The help of the core's ``flag``: ``core`` (its own choices) and "choice: what it does"
    for each choice that an extra this tree has adds, so --help names only what the tree can
    run."""
    here = [f"{c}: {what}" for e in present() for name, c, what in e.choices if name == flag]
    return "; ".join([core, *here])


def default_choice(flag: str, otherwise: str) -> str:
    """The default of the core's ``flag``: the choice of the first extra this tree has that
    makes its choice the default (``Extra.default``), else ``otherwise`` (the core's): a default
    that is never a choice the tree lacks."""
    made = [c for e in present() if flag in e.default for f, c, _ in e.choices if f == flag]
    return made[0] if made else otherwise
