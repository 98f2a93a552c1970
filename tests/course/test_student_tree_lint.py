"""The student tree's lint helps: ruff, as its requirements-dev.txt installs it, passes on an
untouched student tree (``ruff check`` and ``ruff format --check``), and ``ruff check --fix``
there deletes nothing an exercise needs (the scaffold marks an import or a variable that only a
removed region read with ``# noqa``, course/authoring/unused_names.py): the grader still finds every
exercise NOT IMPLEMENTED, with no error of another kind, and the solutions put back into the
fixed tree pass every check.

This file grades the scaffolding against the full project, so the student tree does not have it
(its manifest does not name it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import sanity_check
from course.authoring import scaffold

pytest.importorskip("ruff")

ROOT = Path(__file__).resolve().parents[2]
STATUS = re.compile(r"\s(PASS|FAIL|NOT IMPLEMENTED)$")


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A Python subprocess in ``cwd`` without PYTHONPATH: nothing of this checkout is imported."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def statuses(output: str) -> list[str]:
    return [m[1] for line in output.splitlines() if (m := STATUS.search(line))]


def put_solutions_back(tree: Path) -> None:
    """Each exercise's ``raise NotImplementedError(...)`` in ``tree`` replaced by the lines of
    its solution, as a student who wrote the reference would have them."""
    by_file: dict[str, list[scaffold.Region]] = {}
    for regions in scaffold.find_exercises(ROOT).values():
        for region in regions:
            by_file.setdefault(region.path, []).append(region)
    for path, regions in by_file.items():
        regions.sort(key=lambda region: region.begin)
        text = (tree / path).read_text(encoding="utf-8")
        source = (ROOT / path).read_text(encoding="utf-8").splitlines(keepends=True)
        for region in reversed(regions):
            statement = "".join(
                line + "\n"
                for line in scaffold.raise_statement(region.exercise, region.hint, region.indent)
            )
            assert text.count(statement) == 1, (path, region.exercise)
            text = text.replace(statement, "".join(source[region.begin + 1 : region.end]))
        (tree / path).write_text(text, encoding="utf-8")


@pytest.fixture
def student_tree(tmp_path: Path) -> Path:
    out = tmp_path / "student"
    scaffold.write_student_tree(out, ROOT)
    return out


def test_ruff_passes_on_the_untouched_student_tree(student_tree: Path) -> None:
    """Nothing to report before the student writes a line: no import or variable that only a
    removed region used, no raise statement the formatter would rewrite."""
    check = run(["-m", "ruff", "check", "--no-cache", "."], student_tree)
    assert check.returncode == 0, check.stdout[-3000:]
    form = run(["-m", "ruff", "format", "--check", "--no-cache", "."], student_tree)
    assert form.returncode == 0, form.stdout[-3000:]


def test_ruff_fix_deletes_nothing_an_exercise_needs(student_tree: Path) -> None:
    before = {p: p.read_bytes() for p in student_tree.rglob("*.py")}
    fixed = run(["-m", "ruff", "check", "--fix", "--no-cache", "."], student_tree)
    assert fixed.returncode == 0, fixed.stdout[-3000:]
    assert {p: p.read_bytes() for p in student_tree.rglob("*.py")} == before

    graded = run(["sanity_check.py"], student_tree)
    found = statuses(graded.stdout)
    exercises = sum(1 for c in sanity_check.CHECKS if c.exercises)  # 26 checks when written
    assert found.count("NOT IMPLEMENTED") == exercises, graded.stdout[-3000:]
    assert found.count("PASS") == len(found) - exercises
    assert not re.search(r"Traceback|ImportError|NameError|AttributeError", graded.stdout)
    assert graded.stderr == ""

    put_solutions_back(student_tree)
    graded = run(["sanity_check.py"], student_tree)
    assert statuses(graded.stdout) == ["PASS"] * len(sanity_check.CHECKS), graded.stdout[-3000:]


MARKED = """\
import math
import os


def f(rows):
    total = 0
    scale = 2
    for row in rows:
        # HINT: add each row, scaled by 2π
        # BEGIN SOLUTION: sum
        total += row * scale * math.pi
        # END SOLUTION
    return total + len(os.sep)
"""


def test_the_scaffold_marks_what_only_a_removed_region_read() -> None:
    """The import and the variable only the region read get a pragma (the loop variable too);
    what given code still reads does not."""
    student = scaffold.student_source(MARKED, "m.py").splitlines()
    assert student[0] == "import math  # noqa: F401 (an exercise uses it)"
    assert student[1] == "import os"
    assert "    scale = 2  # noqa: F841 (an exercise uses it)" in student
    assert "    for row in rows:  # noqa: B007 (an exercise uses it)" in student
    assert "    total = 0" in student
    assert scaffold.student_source(MARKED, "m.py", remove=[]) == MARKED
