"""The extras act on a run only through their parts' hooks (multitask/extras.py: ``Part``,
``HOOKS``): no core file names an extra (but the one documented exception), an extra reads
another's settings only where it declares that it needs them and imports another's module only
where its row says so, each hook a part overrides takes ``Part``'s arguments, each family
combines its answers as it says, every hook fires in ``HOOKS``' order with the run's values, and
docs/add-an-extra.md, followed in a copy of the code, adds an extra in one file."""

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
from tools import MOVED

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


# The one core file that names an extra, and the extra (multitask/model.py says why).
NAMED_BY_THE_CORE = {"multitask/model.py": {"fusion"}}


def core_files() -> list[str]:
    """The driver and every file of multitask/ (the core, what the student tree ships), but the
    extras' table and the moved commands' stubs (they name the tools' new homes)."""
    stubs = {f"{old.replace('.', '/')}.py" for old in MOVED}
    shipped = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "multitask").glob("*.py"))
    return ["train_multitask.py", *(f for f in shipped if f not in {*stubs, "multitask/extras.py"})]


@pytest.mark.parametrize("name", core_files())
def test_no_core_file_names_an_extra(name):
    """No extra's name, module, flag or choice is in any string or identifier of the driver or
    a core file (but the one documented exception): the core fires hooks by their names."""
    source = (ROOT / name).read_text(encoding="utf-8")
    words = extra_words()
    named = {extra for text in names_in(source) for extra in named_extras(text, words)}
    assert named == NAMED_BY_THE_CORE.get(name, set())
    assert "setting_of" not in source
    if name == "train_multitask.py":
        assert "extras.load" not in source


def test_the_core_files_are_the_student_trees():
    assert "multitask/step.py" in core_files() and "multitask/model.py" in core_files()
    assert not [name for name in core_files() if not (ROOT / name).is_file()]


@pytest.mark.parametrize("extra", extras.present(), ids=lambda e: e.name)
def test_an_extra_declares_the_other_extras_it_imports(extra):
    """An extra that imports another extra's module says so in its row (``uses``)."""
    others = {m: e.name for e in extras.EXTRAS if e is not extra for m in e.modules()}
    imported = set()
    for module in extra.modules():
        for node in ast.walk(ast.parse(module_source(module))):
            if isinstance(node, ast.ImportFrom) and node.module in others:
                imported.add(others[node.module])
            elif isinstance(node, ast.Import):
                imported |= {others[a.name] for a in node.names if a.name in others}
    assert imported == set(extra.uses), extra.name


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


def test_the_hooks_are_parts_methods_named_by_family():
    """``HOOKS`` describes each method of ``Part`` once; each name's first word is its family."""
    methods = [name for name in vars(extras.Part) if not name.startswith("_")]
    assert sorted(methods) == sorted(extras.HOOK_NAMES)
    assert {hook.family for hook in extras.HOOKS} == set(extras.FAMILIES)
    assert len(set(extras.HOOK_NAMES)) == len(extras.HOOKS)


def part_classes(extra: extras.Extra) -> list[type]:
    module = extra.hook_module()
    classes = [v for v in vars(module).values() if isinstance(v, type)]
    return [c for c in classes if issubclass(c, extras.Part) and c is not extras.Part]


@pytest.mark.parametrize("extra", extras.present(), ids=lambda e: e.name)
def test_an_extras_part_overrides_only_hooks_with_their_arguments(extra):
    """Each extra's module offers ``for_run(cfg)``; its part's methods named like a hook
    (a family's first word) are hooks, and take ``Part``'s arguments."""
    module = extra.hook_module()
    assert list(inspect.signature(module.for_run).parameters) == ["cfg"], extra.name
    (part,) = part_classes(extra)
    families = tuple(f"{family}_" for family in extras.FAMILIES)
    for name, method in vars(part).items():
        if not name.startswith(families):
            continue
        assert name in extras.HOOK_NAMES, (extra.name, name)
        wanted = list(inspect.signature(getattr(extras.Part, name)).parameters)
        assert list(inspect.signature(method).parameters) == wanted, (extra.name, name)


def test_an_unknown_hook_is_an_error_not_silence():
    with pytest.raises(ValueError, match="no hook 'wrap_modle'"):
        extras.Hooks(parse_args(["--out_dir", "unused"])).fire("wrap_modle")


def test_each_family_combines_as_it_says():
    """Checks: every line of every part; wrappers: chained in order; choosers: the first answer
    that is not None; events: every part told."""
    told = []

    class First(extras.Part):
        def check_settings(self, elsewhere):
            yield "first"

        def wrap_model(self, model):
            return model + ["first"]

        def choose_update(self, seed, skip):
            return None

        def on_end(self, folder, summary):
            told.append("first")

    class Second(extras.Part):
        def check_settings(self, elsewhere):
            raise ValueError("second")

        def wrap_model(self, model):
            return model + ["second"]

        def choose_update(self, seed, skip):
            return "second's"

        def on_end(self, folder, summary):
            told.append("second")

    hooks = extras.Hooks(parse_args(["--out_dir", "unused"]), among=[])
    hooks.parts = [First(), Second()]
    assert hooks.fire("check_settings", False) == ["first", "second"]
    assert hooks.fire("wrap_model", ["core"]) == ["core", "first", "second"]
    assert hooks.fire("choose_update", None, False) == "second's"
    assert hooks.fire("on_end", None, {}) is None and told == ["first", "second"]
    assert extras.Hooks(parse_args(["--out_dir", "unused"]), among=[]).fire("choose_update") is None


# -- the hooks fire in a real run, with the run's values -------------------------------------


@dataclass
class Heard:
    """What a listening extra was told, hook by hook, in order."""

    calls: list[tuple[str, object]]


def listening_extra(heard: Heard) -> types.ModuleType:
    """A module whose part overrides every hook, each noting what it was given in ``heard``."""
    module = types.ModuleType("listening_extra")
    module.__spec__ = importlib.machinery.ModuleSpec("listening_extra", None)

    def note(name, value):
        heard.calls.append((name, value))

    class Listening(extras.Part):
        def __init__(self, cfg):
            self.cfg, self.kept = cfg, None

        def check_settings(self, elsewhere):
            return iter(note("check_settings", elsewhere) or ())

        def check_machine(self, device, processes):
            return iter(note("check_machine", (device.type, processes)) or ())

        def wrap_model(self, model):
            return note("wrap_model", type(model).__name__) or model

        def on_set_up(self, folder, train, device):
            self.kept = "kept"  # the part's own state, from here to its later hooks
            note("on_set_up", sorted(train))

        def choose_optimizer(self, groups, lr):
            note("choose_optimizer", (len(groups) > 0, lr))

        def wrap_objective(self, inner, model, progress):
            note("wrap_objective", (inner is model, progress.total, self.kept))
            return inner

        def wrap_step(self, step, device, processes):
            return note("wrap_step", processes) or step

        def choose_update(self, seed, skip):
            note("choose_update", (skip, seed()))

        def choose_step_function(self, parts):
            note("choose_step_function", sorted(parts.train))

        def on_start(self, folder, step):
            note("on_start", (folder.path.name, step))

        def on_log(self, step, losses, rate):
            note("on_log", (step, sorted(losses), rate >= 0))

        def on_evaluate(self, step, metrics):
            note("on_evaluate", (step, "overall" in metrics))

        def wrap_summary(self, summary):
            note("wrap_summary", sorted(self.cfg.extras))
            return summary | {"heard": True}

        def on_end(self, folder, summary):
            note("on_end", (summary["steps"], self.kept))

    module.for_run = Listening
    return module


def test_every_hook_fires_once_in_order_with_the_runs_values(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    heard = Heard([])
    monkeypatch.setitem(sys.modules, "listening_extra", listening_extra(heard))
    listening = extras.Extra("listening", "listening_extra", needs=("distillation",))
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS, listening))
    out = tmp_path / "run"
    loop = ("--optimizer", "adamw")  # no other part answers choose_optimizer first
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(epochs=1, steps=3), *loop) == 0
    order = list(dict.fromkeys(name for name, _ in heard.calls))  # each hook's first firing
    assert order == list(extras.HOOK_NAMES)  # HOOKS is listed in the order they fire
    told = dict(heard.calls)  # each hook's last firing
    assert told["check_settings"] is False
    assert told["check_machine"] == ("cpu", 1)
    assert told["wrap_model"] == "MultitaskModel"
    assert told["on_set_up"] == ["para", "sst", "sts"]
    assert told["choose_optimizer"][0] is True
    assert told["wrap_objective"] == (True, 3, "kept")  # the model itself; 3 steps in all
    assert told["choose_update"][0] is False and isinstance(told["choose_update"][1], int)
    assert told["choose_step_function"] == ["para", "sst", "sts"]
    assert told["on_start"] == ("run", 0)
    assert told["on_log"][0] == 3 and told["on_log"][2] is True
    assert told["on_evaluate"] == (3, True)
    assert told["wrap_summary"] == ["distillation"]  # its needs, not its own (no settings)
    assert told["on_end"] == (3, "kept")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["heard"] is True and summary["steps"] == 3


def test_a_hook_that_reads_an_undeclared_extras_settings_fails(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    module = types.ModuleType("nosy_extra")
    module.__spec__ = importlib.machinery.ModuleSpec("nosy_extra", None)

    class Nosy(extras.Part):
        def __init__(self, cfg):
            self.cfg = cfg

        def wrap_summary(self, summary):
            return summary | {"teachers": self.cfg.extras["distillation"].teachers}

    module.for_run = Nosy
    monkeypatch.setitem(sys.modules, "nosy_extra", module)
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS, extras.Extra("nosy", "nosy_extra")))
    cfg = parse_args(driver_argv(tiny_checkpoint, tiny_data, tmp_path / "r"))
    with pytest.raises(KeyError, match="distillation"):
        extras.Hooks(cfg).fire("wrap_summary", {})
    declared = extras.Extra("nosy", "nosy_extra", needs=("distillation",))
    monkeypatch.setattr(extras, "EXTRAS", (*extras.EXTRAS[:-1], declared))
    assert extras.Hooks(cfg).fire("wrap_summary", {}) == {"teachers": []}


# -- docs/add-an-extra.md, followed ------------------------------------------------------------


def test_add_an_extra(tiny_checkpoint, tiny_data, tmp_path):
    """The recipe's extra, in a copy of the code: its flag is offered, a run with it prints the
    count of each task's batches, which is the run's own schedule (summary.json), and a run
    without it trains as before and prints nothing of it."""
    recipe = read_recipe("add-an-extra.md")
    assert list(recipe.files) == ["extras/step_count.py"] and len(recipe.diffs) == 1
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
