"""Command-line flags generated from dataclasses, so every setting has one owner for its default,
its help and its range.

A settings dataclass declares each knob once, with ``setting``: its default, its help (the text
``--help`` prints), optionally its range and the ``--help`` group it opens. A ``Literal`` type
gives its choices (the model is PEFT's ``field(default=..., metadata={"help": ...})``)::

    @dataclass
    class AdapterSettings:
        size: int = setting(64, "adapter bottleneck m", within="[1, inf)", group="plug-ins")
        placement: Literal["houlsby", "pfeiffer"] = setting("houlsby", "where the adapters sit")

Ranges are intervals written as in mathematics, ``"(0, 10]"``, ``"[0, 1)"``, ``"[1, inf)"``;
``None`` (an unset optional value) is always in range.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import math
import re
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

MISSING = dataclasses.MISSING


def setting(
    default: Any = MISSING,
    help: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    within: str | None = None,
    group: str | None = None,
    flag: str | None = None,
    metavar: str | None = None,
    needs: str | dict[str, str] | None = None,
) -> Any:
    """A settings field that is a flag: ``default`` (or ``factory`` for a list), its ``help``,
    its range ``within`` (an interval, see the module docstring), the ``--help`` group it opens,
    a flag name other than the field's, the value's name in ``--help``, and the module its code
    is in when that is an optional part (``needs``: a tree without that module, such as the
    student tree, parses the flag but does not offer it in ``--help``; a dict: choice -> the
    module that choice needs, and a tree without it does not show that choice)."""
    if within is not None:
        Interval.parse(within)  # a malformed range fails where it is declared
    metadata = {"help": help, "within": within, "group": group, "flag": flag, "metavar": metavar}
    metadata["needs"] = needs
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def section(cls: type, prefix: str) -> Any:
    """A field holding another settings dataclass, whose flags read ``--<prefix><name>``."""
    return dataclasses.field(default_factory=cls, metadata={"prefix": prefix})


@dataclasses.dataclass(frozen=True)
class Interval:
    """A range such as ``(0, 10]``: its bounds and which of them it includes."""

    low: float
    high: float
    closed_low: bool
    closed_high: bool

    @classmethod
    def parse(cls, text: str) -> Interval:
        match = re.fullmatch(r"([\[(])\s*(\S+)\s*,\s*(\S+)\s*([\])])", text)
        if match is None:
            raise ValueError(f"range {text!r}: write an interval such as '(0, 10]' or '[1, inf)'")
        return cls(float(match[2]), float(match[3]), match[1] == "[", match[4] == "]")

    def holds(self, value: float) -> bool:
        above = value >= self.low if self.closed_low else value > self.low
        below = value <= self.high if self.closed_high else value < self.high
        return above and below  # False for NaN

    def describe(self, text: str, finite: bool = True) -> str:
        """What a value outside the range is told; ``finite``: whether that value was a finite
        number (inf or NaN is told that it is not, whichever bound it misses)."""
        must = "must be" if finite else "must be a finite number"
        if math.isinf(self.high):
            low = int(self.low) if self.low.is_integer() else self.low
            return f"{must} at least {low}" if self.closed_low else f"{must} greater than {low}"
        return f"{must} in {text}"


def out_of_range(value: Any, within: str | None) -> str | None:
    """What is wrong with ``value`` against the range ``within`` ("must be in [0, 1)"), or None
    when it is in range (or unset). The one place a setting's range is checked."""
    if within is None or value is None:
        return None
    interval = Interval.parse(within)
    if interval.holds(value):
        return None
    return interval.describe(within, finite=not isinstance(value, float) or math.isfinite(value))


def check_ranges(settings: Any) -> None:
    """ValueError for the first field of ``settings`` (sections excluded) outside its range,
    named ``Class.field``: for settings built in Python rather than from flags."""
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if problem := out_of_range(value, f.metadata.get("within")):
            raise ValueError(f"{type(settings).__name__}.{f.name} = {value}: {problem}")


@dataclasses.dataclass(frozen=True)
class Flag:
    """One leaf of a settings tree: its flag name, its path of field names, its field, type,
    help and ``--help`` group."""

    name: str
    path: tuple[str, ...]
    field: dataclasses.Field
    type: Any
    help: str
    group: str


def flags_of(
    cls: type, prefix: str = "", path: tuple[str, ...] = (), group: str = ""
) -> Iterator[Flag]:
    """Every flag of the settings dataclass ``cls``, sections included, in declaration order;
    a flag's group is the last one opened before it."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if "prefix" in f.metadata:
            inner = f"{prefix}{f.metadata['prefix']}"
            yield from flags_of(hints[f.name], inner, (*path, f.name), group)
        elif f.metadata.get("help"):
            group = f.metadata.get("group") or group
            name = prefix + (f.metadata.get("flag") or f.name)
            yield Flag(name, (*path, f.name), f, hints[f.name], f.metadata["help"], group)


def _scalar_type(annotation: Any) -> Any:
    """int for ``int | None``, str for a ``Literal`` of strings, and so on."""
    if typing.get_origin(annotation) is typing.Literal:
        return type(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return (
        _scalar_type(args[0]) if args and typing.get_origin(annotation) is not list else annotation
    )


def _choices(annotation: Any) -> tuple | None:
    if typing.get_origin(annotation) is typing.Literal:
        return typing.get_args(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return _choices(args[0]) if len(args) == 1 else None


def _default(f: dataclasses.Field) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose mistakes (an unknown flag, a value of the wrong type, a missing
    argument) end as every other mistake of a command does: one line ``error: ...`` on standard
    error and exit code 2, instead of a usage block followed by the message. ``started_as``, where
    a command is run by another that dispatches to it, is the name it was started by, in its usage
    and errors in place of the ``prog`` its module gives."""

    started_as: str | None = None

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")

    def __init__(self, *args: Any, merged: tuple[str, ...] = (), **kwargs: Any) -> None:
        """``merged``: comma-separated list flags whose every occurrence counts (such a flag
        given ``a=x`` and again ``b=y`` reads ``a=x,b=y``; a value given twice counts once), where
        argparse would keep the last and drop the others silently."""
        if ArgumentParser.started_as is not None:
            kwargs["prog"] = ArgumentParser.started_as
        super().__init__(*args, **kwargs)
        self.merged = merged

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        words = words[: words.index("--")] if "--" in words else words
        parsed, rest = super().parse_known_args(args, namespace)
        for flag in self.merged:
            values = []
            for i, word in enumerate(words):
                if word == flag and i + 1 < len(words):
                    values.append(words[i + 1])
                elif word.startswith(f"{flag}="):
                    values.append(word[len(flag) + 1 :])
            if len(values) > 1:
                merged = [v for value in values for v in _comma_list(value)]
                setattr(parsed, flag.lstrip("-"), list(dict.fromkeys(merged)))
        return parsed, rest


def nonempty_path(text: str) -> Path:
    """An argparse type: a path, never the empty string (which would mean the current folder)."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path; give a file or folder name")
    return Path(text)


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: ...)" to a flag's help, unless the help already says its default or
    there is none to say (a switch that is off, an optional value that is unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "(default:" in help_text or action.default in (None, False, ""):
            return help_text
        return super()._get_help_string(action)


def has_module(name: str) -> bool:
    """Whether this tree has module ``name``'s file, its package too (a tree may leave a whole
    package out)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # its package is missing
        return False


def offered(flag: Flag) -> bool:
    """Whether this tree has the code of ``flag`` (its ``needs`` module, if it names one)."""
    needs = flag.field.metadata.get("needs")
    return not isinstance(needs, str) or has_module(needs)


def shown_metavar(flag: Flag) -> str | None:
    """The value's name in ``--help``: the flag's own, or, where this tree lacks the code of
    some of its choices (``needs`` as a dict), the others: ``{a,b}``. A choice left out still
    parses, so that its use ends in the one line naming what it needs."""
    choices, needs = _choices(flag.type), flag.field.metadata.get("needs")
    if choices is None or not isinstance(needs, dict):
        return flag.field.metadata.get("metavar")
    offered = [c for c in choices if c not in needs or has_module(needs[c])]
    return "{" + ",".join(map(str, offered)) + "}"


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add every flag of ``cls`` to ``parser``, in its ``--help`` groups; one whose code this
    tree lacks (``offered``) still parses, so that its use ends in the one line naming what it
    needs, but ``--help`` does not list it."""
    groups: dict[str, Any] = {}
    for flag in flags_of(cls):
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group or None)
        group = groups[flag.group]
        kind = _scalar_type(flag.type)
        default = _default(flag.field)
        shown = flag.help if offered(flag) else argparse.SUPPRESS
        if kind is bool:  # a switch; one whose default is decided later (None) also has --no-
            action = argparse.BooleanOptionalAction if default is None else "store_true"
            group.add_argument(f"--{flag.name}", action=action, help=shown)
            continue
        if typing.get_origin(kind) is list:
            kind, default = _comma_list, ",".join(default)
        group.add_argument(
            f"--{flag.name}",
            type=kind,
            default=default,
            choices=_choices(flag.type),
            metavar=shown_metavar(flag),
            help=shown,
        )


def wrong_type(value: Any, annotation: Any) -> str | None:
    """What is wrong with the type of ``value`` for a flag annotated ``annotation`` ("must be an
    integer"), or None. Values read from a saved file pass through here, so that a hand-edited
    or damaged config is refused by name rather than failing later in a comparison."""
    choices = _choices(annotation)
    if value is None:
        return None if type(None) in typing.get_args(annotation) else "must not be null"
    if choices is not None:
        return None if value in choices else f"must be one of {', '.join(map(str, choices))}"
    kind = _scalar_type(annotation)
    if kind is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if kind is int:
        return (
            None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"
        )
    if kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else "must be a number"
    if kind is str:
        return None if isinstance(value, str) else "must be a string"
    if typing.get_origin(kind) is list:
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if ok else "must be a list of strings"
    return None


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def flatten(settings: Any) -> dict[str, Any]:
    """``{flag name: value}`` for every flag of the settings object (lists stay lists)."""
    flat = {}
    for flag in flags_of(type(settings)):
        value = settings
        for name in flag.path:
            value = getattr(value, name)
        flat[flag.name] = list(value) if isinstance(value, (list, tuple)) else value
    return flat


def unflatten(cls: type, flat: dict[str, Any]) -> Any:
    """The settings object of type ``cls`` whose flags take their values from ``flat``; a flag
    missing from ``flat`` keeps its default. A ``list[str]`` flag also accepts a comma-separated
    string. A value outside its flag's range is a ValueError naming the flag."""
    values: dict[tuple[str, ...], Any] = {}
    for flag in flags_of(cls):
        if flag.name in flat:
            value = flat[flag.name]
            if typing.get_origin(_scalar_type(flag.type)) is list and isinstance(value, str):
                value = _comma_list(value)
            if problem := wrong_type(value, flag.type):
                raise ValueError(f"--{flag.name} {value!r}: {problem}")
            if problem := out_of_range(value, flag.field.metadata.get("within")):
                raise ValueError(f"--{flag.name} {value}: {problem}")
            values[flag.path] = value
    return _build(cls, values, ())


def _build(cls: type, values: dict[tuple[str, ...], Any], path: tuple[str, ...]) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if "prefix" in f.metadata:
            kwargs[f.name] = _build(hints[f.name], values, (*path, f.name))
        elif (*path, f.name) in values:
            kwargs[f.name] = values[(*path, f.name)]
    return cls(**kwargs)


def task_folders(flag: str, entries: Sequence[str], tasks: Sequence[str]) -> dict[str, str]:
    """A ``TASK=DIR,...`` flag's entries -> ``{task: folder}`` (``sst=runs/sst,sts=runs/sts``);
    ValueError names an entry without a folder, of a task not in ``tasks``, or a task twice."""
    folders: dict[str, str] = {}
    for entry in entries:
        name, _, folder = entry.partition("=")
        if name not in tasks or name in folders or not folder:
            raise ValueError(
                f"{flag} {entry!r}: give TASK=DIR with a task of --tasks "
                f"({','.join(tasks)}), each at most once"
            )
        folders[name] = folder
    return folders
