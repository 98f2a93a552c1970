"""One exercise file that does not compile fails only the checks that need that file, each
reported at the student's file and line first, with no hint that points elsewhere. A student tree
with every exercise written but the masking (``course.authoring.scaffold --exercise masking``)
gets a syntax error in one file, and ``sanity_check.py`` runs there.

Instructor-only (it runs the scaffold)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# file -> (the line broken, the components whose checks may fail: the file's own, and those
# whose code genuinely needs it: PAL's projected attention is BertSelfAttention, LoRA's merge
# check merges into a BertModel; the task losses, in tasks/base.py, need no head)
BROKEN = {
    "minbert/bert.py": (
        "class BertPooler(nn.Module):",
        {"embeddings", "attention", "layer", "bert"},
    ),
    "minbert/sampling.py": ("def annealed_alpha(", {"sampler"}),
    "minbert/plugins/lhuc.py": ("class LHUC(Plugin):", {"lhuc"}),
    "minbert/optimizer.py": ("class AdamW(", {"adamw"}),
    "tasks/heads.py": ("def sentence_representation(", {"pooling", "pair-features", "cosine-head"}),
}


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("isolation") / "tree"
    command = [sys.executable, "-m", "course.authoring.scaffold", str(out), "--exercise", "masking"]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    return out


@pytest.mark.parametrize("rel", sorted(BROKEN))
def test_a_file_that_does_not_compile_fails_only_what_needs_it(rel, tree, tmp_path):
    line, allowed = BROKEN[rel]
    copy = tmp_path / "tree"
    subprocess.run(["cp", "-r", str(tree), str(copy)], check=True)
    text = (copy / rel).read_text(encoding="utf-8")
    assert line in text
    number = text[: text.index(line)].count("\n") + 1
    (copy / rel).write_text(text.replace(line, line.replace("(", "((", 1), 1), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "sanity_check.py"], cwd=copy, capture_output=True, text=True
    )
    report = done.stdout.splitlines()
    failed = [r for r in report if r.endswith(("FAIL", "NOT IMPLEMENTED"))]
    broken = [r for r in failed if not r.startswith("masking")]  # cut out: NOT IMPLEMENTED
    assert broken, done.stdout
    for row in broken:
        assert any(row.startswith(name) for name in allowed), row
        said = report[report.index(row) + 1].strip()
        assert said.startswith(f"SyntaxError in {rel}:{number}"), said
        following = report[report.index(row) + 2 : report.index(row) + 3]
        assert not [r for r in following if r.strip().startswith("hint:")]  # none elsewhere
