"""Command-line flags generated from dataclasses, so every setting has one owner for its default.

A settings dataclass declares each knob once, on one commented line; the comment is its help,
comment lines right below it continue the help, a ``Literal`` type gives its choices, and a
comment line ``# -- title --`` starts a group of ``--help``::

    @dataclass
    class AdapterSettings:
        # -- plug-ins --
        size: int = 64  # adapter bottleneck m
        placement: Literal["houlsby", "pfeiffer"] = "houlsby"  # where the adapters sit

and a dataclass that holds it names it as a section with a flag prefix::

    adapter: AdapterSettings = section(AdapterSettings, "adapter_")

``add_flags`` turns the whole tree into argparse flags (``--adapter_size``), ``flatten`` turns a
settings object into the flat ``{flag name: value}`` dict that a run's ``config.json`` holds, and
``unflatten`` builds the object back from such a dict (a key it lacks keeps its default). A
field without a comment is no flag; ``flag_name("steps")`` in a field's metadata renames its flag.

Flag types come from the annotations: ``bool`` is a switch (``bool | None``, whose default is
decided later, also has a ``--no-`` form), ``int``/``float``/``str`` (optionally
``| None``) take one value, ``list[str]`` takes a comma-separated list.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import re
import textwrap
import tokenize
import typing
from collections.abc import Iterator
from typing import Any


def section(cls: type, prefix: str) -> Any:
    """A field holding another settings dataclass, whose flags read ``--<prefix><name>``."""
    return dataclasses.field(default_factory=cls, metadata={"prefix": prefix})


def flag_name(name: str) -> Any:
    """Field metadata giving a flag a name other than its field's (``field(metadata=...)``)."""
    return {"flag": name}


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


GROUP = re.compile(r"--\s*(.+?)\s*--")


def comments_of(cls: type) -> dict[str, tuple[str, str]]:
    """field name -> (help, group), read from the comments of the class's source (see the
    module docstring)."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }

    def comment_only(number: int) -> bool:
        return number in comments and lines[number - 1].lstrip().startswith("#")

    headers = [
        (number, match.group(1))
        for number, text in comments.items()
        if comment_only(number) and (match := GROUP.fullmatch(text))
    ]
    found = {}
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        last = node.end_lineno or node.lineno
        if last not in comments or comment_only(last):
            continue  # no comment of its own: not a flag
        text, number = [comments[last]], last + 1
        while comment_only(number) and not GROUP.fullmatch(comments[number]):
            text, number = [*text, comments[number]], number + 1
        group = next((g for line, g in reversed(headers) if line < node.lineno), "")
        found[node.target.id] = (" ".join(text), group)
    return found


def flags_of(
    cls: type, prefix: str = "", path: tuple[str, ...] = (), group: str = ""
) -> Iterator[Flag]:
    """Every flag of the settings dataclass ``cls``, sections included, in declaration order."""
    hints = typing.get_type_hints(cls)
    comments = comments_of(cls)
    for f in dataclasses.fields(cls):
        if "prefix" in f.metadata:
            inner = f"{prefix}{f.metadata['prefix']}"
            yield from flags_of(hints[f.name], inner, (*path, f.name), group)
        elif f.name in comments:
            help_text, own_group = comments[f.name]
            group = own_group or group
            name = prefix + f.metadata.get("flag", f.name)
            yield Flag(name, (*path, f.name), f, hints[f.name], help_text, group)


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


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: ...)" to a flag's help, unless the help already says its default or
    there is none to say (a switch that is off, an optional value that is unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "(default:" in help_text or action.default in (None, False, ""):
            return help_text
        return super()._get_help_string(action)


def add_flags(parser: argparse.ArgumentParser, cls: type) -> None:
    """Add every flag of ``cls`` to ``parser``, in its ``--help`` groups."""
    groups: dict[str, Any] = {}
    for flag in flags_of(cls):
        if flag.group not in groups:
            groups[flag.group] = parser.add_argument_group(flag.group or None)
        group = groups[flag.group]
        kind = _scalar_type(flag.type)
        default = _default(flag.field)
        if kind is bool:  # a switch; one whose default is decided later (None) also has --no-
            action = argparse.BooleanOptionalAction if default is None else "store_true"
            group.add_argument(f"--{flag.name}", action=action, help=flag.help)
            continue
        if typing.get_origin(kind) is list:
            kind, default = _comma_list, ",".join(default)
        group.add_argument(
            f"--{flag.name}",
            type=kind,
            default=default,
            choices=_choices(flag.type),
            metavar=flag.field.metadata.get("metavar"),
            help=flag.help,
        )


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
    string."""
    values: dict[tuple[str, ...], Any] = {}
    for flag in flags_of(cls):
        if flag.name in flat:
            value = flat[flag.name]
            if typing.get_origin(_scalar_type(flag.type)) is list and isinstance(value, str):
                value = _comma_list(value)
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
