"""The house: no import circle anywhere, the layering of the packages (``LAYERS``), every
module importable in a fresh interpreter in dependency order, the driver's size, and its flags
and config format.

The import graph is read from the source (``ast``), lazy imports inside functions included:
a circle closed by a lazy import still makes the code depend on import order."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("minbert", "tasks", "multitask", "extras", "tools", "course")
ENTRY_POINTS = ("train_multitask", "sanity_check", "pretrain_mlm")
# The layers, bottom first: a module may import its own layer and those below it, never above.
LAYERS = ("minbert", "tasks", "multitask", "extras", "tools", "course")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_modules() -> dict[str, Path]:
    modules = {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    return modules | {name: ROOT / f"{name}.py" for name in ENTRY_POINTS}


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``path`` imports, anywhere in the file. Importing ``p.q`` from outside
    package ``p`` runs ``p/__init__.py`` first, so it counts as importing ``p`` too; a module
    inside ``p`` is imported while ``p`` is already being set up, so for it only ``p.q`` counts."""
    own = module_name(path)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            prefixes = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
            found |= {p for p in prefixes if p == name or not own.startswith(p + ".")}
    return (found & set(modules)) - {own}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imports_of(path, modules) for name, path in modules.items()}


def test_no_import_circle(graph):
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as err:
        pytest.fail(f"import circle: {' -> '.join(err.args[1])}")
    assert set(order) == set(graph)


def test_layering(graph):
    """Arrows run one way: entry scripts -> multitask -> tasks -> minbert; the model knows only
    the site protocol, never the plug-ins. No exemption: every module of a layer obeys it."""
    for name, imported in graph.items():
        assert not imported & set(ENTRY_POINTS), name
        if name in ENTRY_POINTS:
            continue
        layer = LAYERS.index(name.split(".")[0])
        above = {m for m in imported if LAYERS.index(m.split(".")[0]) > layer}
        assert not above, f"{name} imports {sorted(above)}, a layer above it"
    for name in ("minbert.bert", "minbert.sites"):
        assert not {m for m in graph[name] if m.startswith("minbert.plugins")}, name


def test_every_module_imports_in_a_fresh_interpreter_in_dependency_order(graph):
    order = [m for m in TopologicalSorter(graph).static_order() if m not in ENTRY_POINTS]
    code = f"import importlib\nfor name in {order!r}:\n    importlib.import_module(name)\n"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_driver_reads_top_to_bottom():
    """The driver holds the run's order, not the step's parts: the training step is one use of
    ``train_step`` (multitask/step.py; or the CUDA graphs that replay it, extras/cuda_graphs.py),
    and no backward, update or clipping is written here."""
    source = (ROOT / "train_multitask.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    assert not [part for part in (".backward(", ".step(", "clip_grad") if part in source]
    uses = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "train_step"]
    assert len(uses) == 1


def tracked_python_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [ROOT / name for name in listed if (ROOT / name).is_file()]


def test_no_function_over_80_lines_outside_tests():
    """Sizes measure code: no function or method over 80 lines anywhere but tests/."""
    long = []
    for path in tracked_python_files():
        if path.relative_to(ROOT).parts[0] == "tests":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not long, long


def test_the_formatter_is_never_switched_off():
    """The formatter is never told to skip a line or a block: a size limit is met by structure."""
    marker = "fmt" + r": *(skip|off)"
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in tracked_python_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if re.search(r"#\s*" + marker, line)
    ]
    assert not found, found


# A module opens with what it is, its equations, its paper and a short usage example; longer
# notes live in docs/design/ (the module's docstring links its page, unless the student tree,
# which has no docs/, ships the module).
DOCSTRING_LINES = 15


def test_every_module_docstring_is_at_most_15_lines():
    """A reader sees the code within a screen of opening a file: no module docstring, from its
    opening quotes to its closing ones, is longer than ``DOCSTRING_LINES``."""
    long = []
    for path in tracked_python_files():
        body = ast.parse(path.read_text(encoding="utf-8")).body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            lines = body[0].end_lineno - body[0].lineno + 1
            if isinstance(body[0].value.value, str) and lines > DOCSTRING_LINES:
                long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert not long, long


def test_no_text_cites_the_design_file_kept_outside_the_repository():
    """The project's design document is not part of the repository, so no file of it may send a
    reader there: what it says is restated where it is needed, or in docs/."""
    name = "DESIGN" + ".md"  # spelt apart, so that this file does not name it either
    binary = (".png", ".pt", ".safetensors", ".bin", ".zip")
    found = [
        str(path.relative_to(ROOT))
        for path in tracked_text_files(".")
        if path.is_file()
        and not path.name.endswith(binary)
        and name in path.read_text(encoding="utf-8", errors="replace")
    ]
    assert not found, found


# Every flag the driver had before the redesign; spellings are kept (new flags may be added).
FLAGS_BEFORE = """adapter_placement adapter_share adapter_size add_to batch_size bf16 checkpoint
data_dir device dropout epochs eval_every evaluate layer_decay limit log_every lora_alpha
lora_rank lora_targets lr max_length no_plots nonfinite option out_dir overwrite pair_encoding
pal_heads pal_size representation resume sampling save_every seed smart smart_bregman
smart_epsilon smart_momentum smart_norm smart_sigma smart_step_size smart_steps smart_weight
steps_per_epoch strict swap_pairs tasks threads train_layernorms warmup weight_decay
sst_train sst_dev sst_test para_train para_dev para_test sts_train sts_dev sts_test
cfimdb_train cfimdb_dev cfimdb_test""".split()


def test_every_flag_is_still_spelt_as_before():
    import train_multitask

    parser = train_multitask.build_parser()
    known = {s.lstrip("-") for action in parser._actions for s in action.option_strings}
    assert set(FLAGS_BEFORE) <= known


def test_config_round_trips_through_its_flat_form(tmp_path):
    """config.json is {flag: value}; read back it gives the same config, and a key it lacks (a
    flag added after the run) takes its default."""
    import train_multitask

    (tmp_path / "x.csv").touch()
    argv = "--option lora --lora_targets query,key --tasks sst,sts --smart_steps 2 --sst_dev"
    cfg = train_multitask.parse_args([*argv.split(), str(tmp_path / "x.csv")])
    flat = json.loads(json.dumps(cfg.to_flat()))
    assert flat["lora_targets"] == "query,key" and flat["smart_steps"] == 2
    assert flat["tasks"] == ["sst", "sts"] and flat["sst_dev"] == str(tmp_path / "x.csv")
    assert train_multitask.TrainConfig.from_flat(flat) == cfg
    del flat["layer_decay"]
    assert train_multitask.TrainConfig.from_flat(flat).layer_decay == 1.0


def test_merge_rule():
    """Inherited keys take the saved run's value (or, missing there, the default); the rest come
    from the command line; a flag given to change an inherited value is refused."""
    from multitask.errors import UsageError
    from multitask.run import merge_config

    defaults = {"a": 0, "b": 0, "c": 0}
    command_line = {"a": 0, "b": 2, "c": 0}
    saved = {"a": 10, "b": 20}
    assert merge_config(command_line, saved, ["a"], defaults) == {"a": 10, "b": 2, "c": 0}
    assert merge_config(command_line, saved, ["a", "c"], defaults) == {"a": 10, "b": 2, "c": 0}
    assert merge_config({**command_line, "a": 10}, saved, ["a"], defaults)["a"] == 10
    with pytest.raises(UsageError, match="--a 1: the run in R has 10"):
        merge_config({**command_line, "a": 1}, saved, ["a"], defaults, "--resume", "R")


def test_every_task_file_registers_a_task():
    """A task is one file: tasks/ holds the parts of a task (what tasks/base.py builds on) and
    the task files tasks/__init__.py names, each registering exactly one task."""
    import importlib

    import tasks

    parts = {m.split(".")[1] for m in graph_of_tasks_base()}
    files = {p.stem for p in (ROOT / "tasks").glob("*.py") if p.stem != "__init__"}
    task_files = {name.split(".")[1] for name in tasks.TASK_MODULES}
    assert files == parts | task_files | {"base"}
    for name in tasks.TASK_MODULES:
        module = importlib.import_module(name)
        registered = [v for v in vars(module).values() if isinstance(v, tasks.Task)]
        assert len(registered) == 1 and tasks.TASKS[registered[0].name] is registered[0]
    assert len(tasks.TASKS) == len(task_files)


def graph_of_tasks_base() -> set[str]:
    """The project modules tasks/base.py imports: the parts a task is made of."""
    return imports_of(ROOT / "tasks" / "base.py", project_modules())


# Where one machine keeps things: a home or the root user's folder, a temporary folder, the
# folders these machines' working trees and interpreters live in.
MACHINE_FOLDERS = ("root", "home", "Users", "tmp", "var", "private", "work", "opt", "mnt")
MACHINE_PATH = re.compile(r"(?:^|[^\w.~-])/(?:" + "|".join(MACHINE_FOLDERS) + r")/")


def tracked_text_files(*places: str) -> list[Path]:
    """The files git tracks under ``places`` (a clone's own), without pictures and weights."""
    listed = subprocess.run(
        ["git", "ls-files", "--", *places], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    binary = (".png", ".pt", ".safetensors", ".bin")
    return [ROOT / name for name in listed if not name.endswith(binary)]


def test_no_tracked_result_test_or_doc_names_a_path_of_one_machine():
    """Results, tests and docs are read on machines other than the one that wrote them: a
    recorded command names ``python`` and folders relative to the clone, never an interpreter
    path, a working tree's root, a home or a temporary folder (``_common.portable``)."""
    own = [str(ROOT), str(Path.home())]
    found = []
    for path in tracked_text_files("tests", "benchmarks/results", "docs", "*.md"):
        text = path.read_bytes().decode("utf-8", errors="replace")  # test data holds bad bytes
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line) or any(folder in line for folder in own):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not found, "\n".join(found[:20])


def test_a_recorded_command_is_made_portable():
    """The rule the results writers and benchmarks/portable_results.py share."""
    from _common import portable

    command = (  # /srv: a machine folder the test above does not look for, so it can be here
        "/srv/.pyenv/versions/3.11.7/bin/python train_multitask.py --data_dir /srv/shared/data "
        "--out_dir /srv/bench5/runs/bench/x --teachers sst=/srv/runs3/t,para=/srv/gt/data"
    )
    assert portable(command) == (
        "python train_multitask.py --data_dir ../shared/data --out_dir runs/bench/x "
        "--teachers sst=runs/t,para=data"
    )
    # a clone's own folder, as a fixed path: this clone's may hold a space, which a command line
    # written unquoted cannot tell from the next word
    clone = Path("/srv/clone")
    assert portable(f"--out_dir {clone / 'runs' / 'a'}", root=clone) == "--out_dir runs/a"
    assert portable(f"--results_dir {Path('/tmp') / 'r2'}") == "--results_dir $TMPDIR/r2"
    assert portable("minBERT / transformers, runs/mlm") == "minBERT / transformers, runs/mlm"


# Measured when the plug-in sites became hooks on the layer's modules and the step's loss module,
# schedule and loss log joined multitask/step.py (12 files and 49 functions before the spine, 14
# and 46 after its first cut, 13 and 39 after its second; the aim was 9 and 35).
STEP_FILES, STEP_FUNCTIONS = 9, 32


def project_file(path: Path) -> bool:
    """A file of the project's own code: inside the clone, not a test, and not inside an
    environment made there (make's .venv holds torch's files)."""
    if not path.is_relative_to(ROOT) or path.relative_to(ROOT).parts[0] == "tests":
        return False
    return not any(part.startswith(".venv") for part in path.relative_to(ROOT).parts)


def functions_one_step_enters(checkpoint: Path, data: Path, folder: Path) -> dict[str, set[str]]:
    """File -> the project functions one training step enters: profiled in two plain finetune
    runs of one task that differ only in their number of steps (no evaluation or log line in
    between), those called more often in the longer run."""
    import cProfile
    import pstats

    import train_multitask
    from tests.helpers import driver_argv

    calls = []
    for steps in (4, 8):
        flags = ("--no_plots", "--tasks", "sst", "--epochs", "1", "--steps_per_epoch", str(steps))
        argv = driver_argv(checkpoint, data, folder / str(steps), *flags, "--log_every", "100")
        profile = cProfile.Profile()
        profile.enable()
        assert train_multitask.main(argv) == 0
        profile.disable()
        calls.append({key[::2]: value[1] for key, value in pstats.Stats(profile).stats.items()})
    entered: dict[str, set[str]] = {}
    for (file, function), n in calls[1].items():
        if not project_file(Path(file)):
            continue
        if n > calls[0].get((file, function), 0):
            entered.setdefault(str(Path(file).relative_to(ROOT)), set()).add(function)
    return entered


def test_one_training_step_enters_few_files_and_functions(tiny_checkpoint, tiny_data, tmp_path):
    """How wide one step is for a reader: the files and named functions it enters (lambdas and
    comprehensions aside). Measured when the step was made one spine (the model's loss, the
    objective beside it, one train_step with the update a strategy, the loss log)."""
    entered = functions_one_step_enters(tiny_checkpoint, tiny_data, tmp_path)
    named = {f: {n for n in fs if not n.startswith("<")} for f, fs in entered.items()}
    files, functions = len(named), sum(len(fs) for fs in named.values())
    print(f"{files} files, {functions} functions:", {f: sorted(fs) for f, fs in named.items()})
    assert files <= STEP_FILES and functions <= STEP_FUNCTIONS, named
