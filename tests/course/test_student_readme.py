"""The student README (course/authoring/student_readme.md, the student tree's README.md): its set-up
works on a Python that refuses ``pip install`` outside an environment, and its first training
command is one the student tree runs once the exercises it names are written, with the figures that
``python benchmarks/first_run.py --student`` measured (benchmarks/results/student-first-run.md).

This file reads the full project (the benchmarks, the scaffold), so the student tree does not
have it (its manifest does not name it).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import first_run
import pytest

from course.authoring import scaffold

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "course" / "authoring" / "student_readme.md"
RESULTS = ROOT / "benchmarks" / "results" / "student-first-run.md"
DATA = ROOT.parent / "shared" / "data"
# The exercises the README says the first run needs.
FIRST_RUN_NEEDS = ["embeddings", "attention", "layer", "adamw", "pooling", "task-losses"]


def code_blocks(text: str) -> list[list[str]]:
    """The indented code blocks of a Markdown text, each as its lines without the indent."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines():
        if line.startswith("    "):
            blocks[-1].append(line[4:])
        elif blocks[-1]:
            blocks.append([])
    return [b for b in blocks if b]


def test_the_set_up_starts_with_an_environment_of_its_own() -> None:
    """PEP 668: Debian's and Ubuntu's Python refuse ``pip install`` outside a venv, so the first
    command of the set-up makes one and activates it, and the README says why."""
    readme = README.read_text(encoding="utf-8")
    set_up = readme[readme.index("## Set-up") :]
    first_block = code_blocks(set_up)[0]
    assert first_block[0] == "python3 -m venv .venv && . .venv/bin/activate"
    assert first_block[1].startswith("pip install")
    assert "PEP 668" in set_up[: set_up.index(first_block[0])]


def test_the_first_run_is_the_measured_one_with_its_figures() -> None:
    """The first driver command is the one the benchmark ran; the lines the README quotes and
    its CPU time are in the results file the benchmark wrote."""
    readme = README.read_text(encoding="utf-8")
    commands = [line for block in code_blocks(readme) for line in block]
    first = next(c for c in commands if c.startswith("python train_multitask.py"))
    assert first == first_run.readme_command(student=True)
    results = RESULTS.read_text(encoding="utf-8")
    assert f"`{first}`" in results
    step = next(c for c in commands if c.startswith("step "))
    assert step in results.splitlines()[-2], "the quoted evaluation is what run 1 printed"
    done = next(c for c in commands if c.startswith("done: {"))
    for field in re.findall(r"'\w+': [^,.][^,]*", done):  # each field it quotes, not "..."
        assert field in results.splitlines()[-1], field
    table = [line.split(" | ") for line in results.splitlines() if re.match(r"\| \d+ \|", line)]
    cpu, wall = {round(float(row[2])) for row in table}, [float(row[1]) for row in table]
    words = " ".join(readme.split())
    assert any(f"{s} s of CPU time" in words for s in cpu), cpu
    assert f"{min(wall):.0f} s" in words and f"{max(wall):.0f} s" in words, wall
    # the threads the figures were measured with are the ones the printed command uses
    default_threads = "torch's default threads" in results
    assert ("torch's default threads" in words) == default_threads


@pytest.mark.skipif(not DATA.is_dir(), reason="needs the course's data files in ../shared/data")
def test_the_first_run_trains_with_only_the_exercises_it_names(tmp_path: Path) -> None:
    """The README's first command, on 16 examples a task, in a student tree where only the
    exercises the README names are written: it trains, evaluates and writes its predictions."""
    tree = tmp_path / "student"
    others = [e for e in scaffold.find_exercises(ROOT) if e not in FIRST_RUN_NEEDS]
    scaffold.write_student_tree(tree, ROOT, remove=others)
    argv = first_run.readme_command(student=True).split()[1:]
    argv[argv.index("--limit") + 1] = "16"
    argv[argv.index("--out_dir") + 1] = str(tmp_path / "first")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, *argv, "--data_dir", str(DATA)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"^step \d+ epoch 1: sst [\d.]+, para [\d.]+, sts", done.stdout, re.M)
    assert (tmp_path / "first" / "sst-dev-output.csv").is_file()


def test_your_files_table_names_every_exercise_in_its_file() -> None:
    """The README's "Your files" table, but its last row (the final project's files), holds each
    file with exercise regions and the exercises in it, as the scaffold finds them; the last
    row's files are in the student tree."""
    text = README.read_text(encoding="utf-8")
    part = text.split("## Your files", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in part.splitlines() if line.startswith("| `")]
    table = {
        cell.strip().strip("`"): [n.strip() for n in names.split(",")] for cell, names in rows[:-1]
    }
    found: dict[str, list[str]] = {}
    for name, regions in scaffold.find_exercises(ROOT).items():
        for region in regions:
            if name not in found.setdefault(region.path, []):
                found[region.path].append(name)
    assert {path: sorted(names) for path, names in table.items()} == {
        path: sorted(names) for path, names in found.items()
    }
    project_files = re.findall(r"`([^`]+)`", rows[-1][0])
    shipped = scaffold.student_files(ROOT)  # by the path in the student tree
    assert project_files
    assert [path for path in project_files if path not in shipped] == []
