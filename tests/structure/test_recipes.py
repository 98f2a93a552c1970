"""The recipes of docs/ (add a task, a plug-in, an objective), followed as a reader follows them:
each recipe's blocks are read from its Markdown and applied to a copy of the code (a block whose
first line names a file is that new file; a diff is applied with ``git apply``), then what the
recipe says to run runs in that copy, on the tiny checkpoint and data, in a fresh process.
Nothing is written into the repository. And the README's first command is the one
benchmarks/first_run.py measured.

A recipe's blocks, by their fence and first line:

    ```python  # <path>     a new file (the first line names it and is not written)
    ```python  # try it     code to run in the copy
    ```diff                 a change, applied in order
    ```text    # <path>     a sample of a data file (its header line gives the columns)
    ```sh                   commands; each ``python train_multitask.py ...`` line is run
"""

from __future__ import annotations

import json
import random
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from safetensors.torch import load_file

from tests.helpers import driver_argv, rules_hold_in, short_run

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CODE = ("minbert", "tasks", "multitask", "extras", "train_multitask.py")  # what the driver runs on
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
DRIVER = "python train_multitask.py "


@dataclass
class Recipe:
    """The blocks of one recipe, in the order the Markdown gives them."""

    files: dict[str, str] = field(default_factory=dict)
    diffs: list[str] = field(default_factory=list)
    tries: list[str] = field(default_factory=list)
    samples: dict[str, str] = field(default_factory=dict)
    commands: list[list[str]] = field(default_factory=list)


def read_recipe(name: str) -> Recipe:
    recipe = Recipe()
    for fence, body in FENCE.findall((DOCS / name).read_text(encoding="utf-8")):
        first, _, rest = body.partition("\n")
        if fence == "diff":
            recipe.diffs.append(body)
        elif fence == "python" and first == "# try it":
            recipe.tries.append(body)
        elif fence == "python":
            recipe.files[first.removeprefix("# ")] = rest
        elif fence == "text":
            recipe.samples[first.removeprefix("# ")] = rest
        elif fence == "sh":
            lines = [line for line in body.splitlines() if line.startswith(DRIVER)]
            recipe.commands += [shlex.split(line)[2:] for line in lines]
    return recipe


def follow(recipe: Recipe, folder: Path) -> Path:
    """A copy of the code in ``folder`` with the recipe's new files written and diffs applied."""
    changed = [re.search(r"^--- a/(\S+)$", d, re.MULTILINE)[1] for d in recipe.diffs]
    for name in [*CODE, *changed]:  # the code, then the other files the diffs change
        source, target = ROOT / name, folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        elif not target.exists():
            shutil.copy2(source, target)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    for diff in recipe.diffs:
        applied = subprocess.run(
            ["git", "apply", "-"], input=diff, cwd=folder, capture_output=True, text=True
        )
        assert applied.returncode == 0, f"{applied.stderr}\n{diff}"
    for name, text in recipe.files.items():
        assert not (folder / name).exists(), f"{name} is not a new file"
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def run_in(folder: Path, code: str) -> subprocess.CompletedProcess:
    """``python -c code`` in the copy: its own packages come first on the path."""
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return done


def driver_code(command: list[str], checkpoint: Path, data: Path, out: Path, then: str = "") -> str:
    """Python that runs the recipe's driver command in the copy, the tiny run's flags after it
    (the later flag wins: tiny checkpoint and data, one epoch of two steps), then ``then``."""
    argv = [*command, *driver_argv(checkpoint, data, out, *short_run(epochs=1, steps=2))]
    run = f"code = train_multitask.main({argv!r})"
    return f"import sys, train_multitask\n{run}\n{then}\nsys.exit(code)\n"


def write_rows(path: Path, columns: list[str], labels: range | None, rows: int = 24) -> None:
    """A course-format file of ``columns`` (id, the texts, the label unless ``labels`` is None):
    tab-separated, a header, each row numbered; random words."""
    rng = random.Random(path.name)
    words = "good bad movie film a the man plays music stage is empty".split()
    texts = columns[1:-1] if labels else columns[1:]
    lines = ["\t" + "\t".join(columns)]
    for i in range(rows):
        sentences = [" ".join(rng.choices(words, k=rng.randint(3, 9))) for _ in texts]
        label = [str(rng.choice(labels))] if labels else []
        lines.append("\t".join([str(i), f"{path.stem}{i}", *sentences, *label]))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_add_a_task(tiny_checkpoint, tiny_data, tmp_path):
    recipe = read_recipe("add-a-task.md")
    code = follow(recipe, tmp_path / "code")
    data = Path(shutil.copytree(tiny_data, tmp_path / "data"))
    (sample,) = recipe.samples.items()
    columns = sample[1].splitlines()[0].split("\t")[1:]  # the header: a leading tab
    assert columns[-1] == "label" and Path(sample[0]).name == "nli-train.csv"
    write_rows(data / "nli-train.csv", columns, range(3))
    write_rows(data / "nli-dev.csv", columns, range(3))
    write_rows(data / "nli-test-student.csv", columns[:-1], None)
    (command,) = recipe.commands
    done = run_in(code, driver_code(command, tiny_checkpoint, data, tmp_path / "run"))
    assert "[nli] natural language inference" in done.stdout
    metrics = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[-1])
    assert 0 <= metrics["nli"] <= 1 and "sst" in metrics
    header = (tmp_path / "run" / "nli-test-output.csv").read_text().splitlines()[0]
    assert header == "id \t Predicted_Label "
    rules_hold_in(code)


def test_add_a_plugin(tiny_checkpoint, tiny_data, tmp_path):
    recipe = read_recipe("add-a-plugin.md")
    code = follow(recipe, tmp_path / "code")
    (command,) = recipe.commands
    (tried,) = recipe.tries  # the identity at initialisation, asserted by the recipe itself
    run_in(code, tried + driver_code(command, tiny_checkpoint, tiny_data, tmp_path / "run"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    for task, steps in summary["steps_per_task"]["1"].items():
        tensors = load_file(tmp_path / "run" / f"task-{task}.safetensors")
        (shift,) = [v for k, v in tensors.items() if ".shift." in k]
        assert (shift.abs().sum() > 0) == (steps > 0), task  # a task's steps move its own only
    assert sum(summary["steps_per_task"]["1"].values()) == 2
    rules_hold_in(code)


FLOODED = """
import torch
from multitask import objectives

class Given:  # an inner objective whose loss is its outputs
    def criterion(self, task, outputs, batch):
        return outputs

flooded = objectives.Flooded(None, Given(), 0.5)
for value, loss, grad in ((0.2, 0.8, -1.0), (0.9, 0.9, 1.0)):
    x = torch.tensor(value, requires_grad=True)
    y = flooded.criterion(None, x, None)
    y.backward()
    assert abs(y.item() - loss) < 1e-6 and x.grad.item() == grad, (value, y, x.grad)

steps = []
criterion = objectives.Flooded.criterion

def counted(self, *args):
    steps.append(self.level)
    return criterion(self, *args)

objectives.Flooded.criterion = counted
"""


def test_add_an_objective(tiny_checkpoint, tiny_data, tmp_path):
    recipe = read_recipe("add-an-objective.md")
    code = follow(recipe, tmp_path / "code")
    (command,) = recipe.commands
    level = float(command[command.index("--flood") + 1])
    report = 'print("flooded steps", len(steps), sorted(set(steps)))'
    run = driver_code(command, tiny_checkpoint, tiny_data, tmp_path / "r", then=report)
    done = run_in(code, FLOODED + run)
    assert f"flooded steps 2 [{level}]" in done.stdout  # each of the two steps used it
    assert json.loads((tmp_path / "r" / "config.json").read_text())["flood"] == level
    rules_hold_in(code)


def test_the_readme_starts_with_the_measured_first_run():
    """The README's first training command is the one benchmarks/first_run.py runs and times,
    its figures are in the results file that script wrote, and the recipes are linked."""
    import first_run

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = next(line.strip() for line in readme.splitlines() if DRIVER in line + " ")
    assert first == first_run.readme_command()
    results = ROOT / "benchmarks" / "results" / "first-run.md"
    assert "benchmarks/results/first-run.md" in readme
    assert f"`{first_run.readme_command()}`" in results.read_text(encoding="utf-8")
    recipes = sorted(path.name for path in DOCS.glob("add-*.md"))
    assert len(recipes) == 5
    assert [name for name in recipes if f"docs/{name}" not in readme] == []
