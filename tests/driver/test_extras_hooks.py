"""The extras act on a run only through hooks (multitask/extras.py: ``HOOKS``): the driver names
no extra, an extra reads another's settings only where it declares that it needs them, each hook
an extra defines has the declared signature, and docs/add-an-extra.md, followed in a copy of the
code, adds an extra in one file whose hooks fire with the run's values."""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import inspect
import json
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

from multitask import extras
from multitask.config import parse_args
from tests.helpers import driver_argv, rules_hold_in, run_driver, short_run
from tests.structure.test_recipes import driver_code, follow, read_recipe, run_in

ROOT = Path(__file__).resolve().parents[2]


def extra_words() -> dict[str, str]:
    """Each word that names an extra, and the extra: its name, its modules' own names, its flags
    and the choices it adds to core flags."""
    words = {}
    for extra in extras.EXTRAS:
        named = [extra.name, *(m.rsplit(".", 1)[-1] for m in extra.modules())]
        named += [flag for flag, _ in extra.flags] + [c for _, c, _ in extra.choices]
        words |= {word.lower(): extra.name for word in named}
    return words


def names_in(source: str) -> list[str]:
    """Every string constant (docstrings and f-strings' text too) and every identifier of
    ``source``: attributes, names, imported names and modules, functions, arguments."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.Attribute):
            found.append(node.attr)
        elif isinstance(node, ast.Name):
            found.append(node.id)
        elif isinstance(node, ast.alias):
            found += [node.name, node.asname or ""]
        elif isinstance(node, ast.ImportFrom):
            found.append(node.module or "")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            found.append(node.name)
        elif isinstance(node, ast.arg):
            found.append(node.arg)
    return found


def named_extras(text: str, words: dict[str, str]) -> set[str]:
    """The extras a text names: one of their words, whole (case aside; "_" and "." are inside a
    word, so that ``fused_adamw`` is not ``fused``)."""
    tokens = re.findall(r"[a-z0-9_]+", text.lower())
    return {words[token] for token in tokens if token in words}


def test_the_words_cover_every_extra():
    words = extra_words()
    assert {"pcgrad", "fusion", "teachers", "compile", "cuda_graphs", "report_to"} <= set(words)
    assert set(words.values()) == {extra.name for extra in extras.EXTRAS}
    assert named_extras("PCGrad's projection", words) == {"pcgrad"}
    assert named_extras("the compiled step, not --compile_mode", words) == {"compiled"}
    assert named_extras("a fused_adamw_like thing", words) == set()


def test_the_driver_names_no_extra():
    """train_multitask.py fires hooks by their names; no extra's name, module, flag or choice is
    in any string or identifier of it."""
    source = (ROOT / "train_multitask.py").read_text(encoding="utf-8")
    words = extra_words()
    named = {(text[:60], extra) for text in names_in(source) for extra in named_extras(text, words)}
    assert not named, sorted(named)
    assert "extras.load" not in source and "setting_of" not in source


def read_settings(source: str) -> set[str]:
    """The extras whose settings ``source`` reads by name: ``X.extras["name"]``,
    ``X.extras.get("name")`` and ``setting_of(cfg, "name", ...)``."""
    read = set()
    for node in ast.walk(ast.parse(source)):
        key = None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
            if node.value.attr == "extras" and isinstance(node.slice, ast.Constant):
                key = node.slice.value
        elif isinstance(node, ast.Call) and node.args:
            function = node.func
            called = function.attr if isinstance(function, ast.Attribute) else None
            holder = function.value if isinstance(function, ast.Attribute) else None
            is_get = called == "get" and getattr(holder, "attr", None) == "extras"
            is_setting = getattr(function, "id", None) == "setting_of" and len(node.args) > 1
            argument = node.args[1] if is_setting else node.args[0] if is_get else None
            key = argument.value if isinstance(argument, ast.Constant) else None
        if isinstance(key, str):
            read.add(key)
    return read


def module_source(module: str) -> str:
    return inspect.getsource(importlib.import_module(module))


@pytest.mark.parametrize("extra", extras.present(), ids=lambda e: e.name)
def test_an_extra_reads_only_its_own_settings_and_those_it_needs(extra):
    read = set().union(*(read_settings(module_source(m)) for m in extra.modules()))
    others = read - {extra.name}
    assert others <= set(extra.needs), f"{extra.name} reads {others - set(extra.needs)}"
    assert set(extra.needs) <= {e.name for e in extras.EXTRAS} - {extra.name}


def test_the_reader_of_settings_finds_each_way_of_reading():
    source = 'a = cfg.extras["x"]\nb = cfg.extras.get("y")\nc = setting_of(cfg, "z", "s")\n'
    assert read_settings(source) == {"x", "y", "z"}
    assert read_settings('d = {"w": 1}["w"]\ne = os.environ.get("v")\n') == set()


def test_a_hook_sees_only_the_settings_its_extra_needs():
    cfg = parse_args(["--compile", "--out_dir", "unused"])
    assert set(cfg.extras) >= {"compiled", "distillation", "cuda_graphs", "tensorboard"}
    assert set(extras.view(cfg, extras.named("compiled")).extras) == {"compiled", "distillation"}
    assert set(extras.view(cfg, extras.named("tensorboard")).extras) == {"tensorboard"}
    assert extras.view(cfg, extras.named("cuda_graphs")).extras["compiled"].compile is True
    assert cfg.extras.keys() >= {"peft_format"}  # the run's own config is left whole


@pytest.mark.parametrize("extra", extras.present(), ids=lambda e: e.name)
def test_each_hook_an_extra_defines_takes_the_declared_arguments(extra):
    module = extra.hook_module()
    for hook in extras.HOOKS:
        function = getattr(module, hook.name, None)
        if function is None:
            continue
        declared = hook.signature.split("->")[0].strip(" ()").split(", ")
        parameters = list(inspect.signature(function).parameters)
        assert len(parameters) == len(declared), (extra.name, hook.name, parameters, declared)
        assert parameters[0] == "cfg", (extra.name, hook.name)


def test_an_unknown_hook_is_an_error_not_silence():
    with pytest.raises(ValueError, match="no hook 'wrap_modle'"):
        extras.Hooks(parse_args(["--out_dir", "unused"])).call("wrap_modle")


# -- the hooks fire in a real run, with the run's values -------------------------------------


@dataclass
class Heard:
    """What a listening extra was told, hook by hook, in order."""

    calls: list[tuple[str, object]]


def listening_extra(heard: Heard, needs: tuple[str, ...] = ()) -> types.ModuleType:
    """A module defining every hook, each noting what it was given in ``heard``."""
    module = types.ModuleType("listening_extra")
    module.__spec__ = importlib.machinery.ModuleSpec("listening_extra", None)

    def note(name, value):
        heard.calls.append((name, value))

    module.problems = lambda cfg, elsewhere: iter(note("problems", elsewhere) or ())
    module.refuse = lambda cfg, device, processes: note("refuse", (device.type, processes))
    module.wrap_model = lambda cfg, model: note("wrap_model", type(model).__name__) or model
    module.prepare = lambda cfg, folder, train, device: note("prepare", sorted(train)) or "kept"
    module.started = lambda cfg, folder, kept: note("started", (folder.path.is_dir(), kept))

    def wrap_objective(cfg, inner, model, progress, kept):
        note("wrap_objective", (inner is model, progress.total, kept))
        return inner

    module.wrap_objective = wrap_objective
    module.wrap_step = lambda cfg, step, device, processes: note("wrap_step", processes) or step
    module.update = lambda cfg, seed, skip: note("update", (skip, seed()))
    module.step_function = lambda cfg, parts: note("step_function", sorted(parts.train))
    module.reporter = lambda cfg, folder: note("reporter", folder.path.name)
    module.summary = lambda cfg: note("summary", sorted(cfg.extras)) or {"heard": True}
    module.finish = lambda cfg, folder, summary, kept: note("finish", (summary["steps"], kept))
    return module


def test_every_hook_fires_once_in_order_with_the_runs_values(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    heard = Heard([])
    monkeypatch.setitem(sys.modules, "listening_extra", listening_extra(heard))
    listening = extras.Extra("listening", "listening_extra", needs=("distillation",))
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS, listening))
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(epochs=1, steps=3)) == 0
    order = [name for name, _ in heard.calls]
    assert order == list(extras.HOOK_NAMES)  # HOOKS is listed in the order they fire
    assert order[-4:] == ["reporter", "step_function", "summary", "finish"]
    told = dict(heard.calls)
    assert told["problems"] is False
    assert told["refuse"] == ("cpu", 1)
    assert told["wrap_model"] == "MultitaskModel"
    assert told["prepare"] == ["para", "sst", "sts"]
    assert told["started"] == (True, "kept")
    assert told["wrap_objective"] == (True, 3, "kept")  # the model itself; 3 steps in all
    assert told["update"] == (False, told["update"][1]) and isinstance(told["update"][1], int)
    assert told["step_function"] == ["para", "sst", "sts"]
    assert told["reporter"] == "run"
    assert told["summary"] == ["distillation"]  # its needs, not its own (it has no settings)
    assert told["finish"] == (3, "kept")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heard"] is True and summary["steps"] == 3


def test_a_hook_that_reads_an_undeclared_extras_settings_fails(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    module = types.ModuleType("nosy_extra")
    module.__spec__ = importlib.machinery.ModuleSpec("nosy_extra", None)
    module.summary = lambda cfg: {"teachers": cfg.extras["distillation"].teachers}
    monkeypatch.setitem(sys.modules, "nosy_extra", module)
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS, extras.Extra("nosy", "nosy_extra")))
    cfg = parse_args(driver_argv(tiny_checkpoint, tiny_data, tmp_path / "r"))
    with pytest.raises(KeyError, match="distillation"):
        extras.Hooks(cfg).merged("summary")
    declared = extras.Extra("nosy", "nosy_extra", needs=("distillation",))
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS[:-1], declared))
    assert extras.Hooks(cfg).merged("summary") == {"teachers": []}


# -- docs/add-an-extra.md, followed ------------------------------------------------------------


def test_add_an_extra(tiny_checkpoint, tiny_data, tmp_path):
    """The recipe's extra, in a copy of the code: its flag is offered, a run with it prints the
    count of each task's batches, which is the run's own schedule (summary.json), and a run
    without it trains as before and prints nothing of it."""
    recipe = read_recipe("add-an-extra.md")
    assert list(recipe.files) == ["multitask/step_count.py"] and len(recipe.diffs) == 1
    code = follow(recipe, tmp_path / "code")
    (command,) = recipe.commands
    assert "--count_steps" in command
    done = run_in(code, driver_code(command, tiny_checkpoint, tiny_data, tmp_path / "r"))
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    steps = {task: n for task, n in summary["steps_per_task"]["1"].items() if n}
    counted = ", ".join(f"{task} {n}" for task, n in sorted(steps.items()))
    line = f"batches counted: {counted}, {summary['steps']} in {summary['steps']} steps"
    assert done.stdout.splitlines()[-1] == line
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["count_steps"] is True
    plain = [w for w in command if w != "--count_steps"]
    done = run_in(code, driver_code(plain, tiny_checkpoint, tiny_data, tmp_path / "p"))
    assert "batches counted" not in done.stdout
    rules_hold_in(code)
