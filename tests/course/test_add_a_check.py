"""docs/add-a-check.md, followed as a reader follows it: its diffs applied with ``git apply`` to a
copy of the code (course/, the library, sanity_check.py and its reference, GUIDE.md), its
commands run there in fresh processes (the references' generator writes the copy's
course/reference_data.pt; ``sanity_check.py --only`` runs the new check), and what it says they
print is what they print. The new check passes on the solution and fails, naming the recipe's
known mistake, once that mistake is planted in the copy's ``minbert/sampling.py``. Nothing is
written into the repository."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.helpers import copy_of_the_code, rules_hold_in

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "docs" / "add-a-check.md"
COPIED = ("course", "minbert", "tasks", "multitask", "extras", "tools", "sanity_check.py")
COPIED += ("sanity_check_reference.pt", "GUIDE.md", "pyproject.toml")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
CORRECT = "    return {name: weight / total for name, weight in weights.items()}\n"
UNDIVIDED = "    return weights\n"  # the known mistake the recipe's stored data names
DIAGNOSIS = "diagnosis: the weights N_i^α are not divided by their sum"


def blocks(kind: str) -> list[str]:
    return [body for fence, body in FENCE.findall(RECIPE.read_text("utf-8")) if fence == kind]


def copy_code(folder: Path) -> Path:
    copy_of_the_code(folder, COPIED)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    return folder


def run(folder: Path, line: str) -> subprocess.CompletedProcess:
    """A command of the recipe (``python ...``) in the copy, with this interpreter."""
    argv = shlex.split(line)
    assert argv[0] == "python", line
    return subprocess.run(
        [sys.executable, *argv[1:]], cwd=folder, capture_output=True, text=True, timeout=600
    )


def test_the_recipe_adds_a_check_that_passes_and_names_a_planted_mistake(tmp_path):
    code = copy_code(tmp_path / "code")
    diffs = blocks("diff")
    assert len(diffs) == 3
    for diff in diffs:
        applied = subprocess.run(
            ["git", "apply", "-"], input=diff, cwd=code, capture_output=True, text=True
        )
        assert applied.returncode == 0, f"{applied.stderr}\n{diff}"
    (commands,) = blocks("sh")
    generate, sanity = commands.strip().splitlines()
    before = (code / "course" / "reference_data.pt").stat().st_mtime_ns
    made = run(code, generate)
    assert made.returncode == 0, made.stderr[-3000:]
    assert (code / "course" / "reference_data.pt").stat().st_mtime_ns != before

    said = [body for body in blocks("text") if "passed" in body]
    assert len(said) == 1
    done = run(code, sanity)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert done.stdout == said[0]
    rules_hold_in(code)

    # the order of the report: the new check right after the sampler's own
    listed = run(code, "python sanity_check.py --list").stdout.splitlines()
    components = [line.split(":")[0] for line in listed]
    assert components.index("sampler-sqrt") == components.index("adapter") - 1
    assert components[components.index("sampler-sqrt") - 1] == "sampler"

    sampling = code / "minbert" / "sampling.py"
    text = sampling.read_text(encoding="utf-8")
    assert text.count(CORRECT) == 1
    sampling.write_text(text.replace(CORRECT, UNDIVIDED), encoding="utf-8")
    failed = run(code, sanity)
    assert failed.returncode == 1, failed.stdout + failed.stderr[-3000:]
    lines = failed.stdout.splitlines()
    assert lines[0].startswith("sampler-sqrt: ") and lines[0].endswith("FAIL")
    assert f"    {DIAGNOSIS}" in lines and DIAGNOSIS.split(": ", 1)[1] in RECIPE.read_text("utf-8")
    assert lines[-1] == "0 passed, 1 failed"
