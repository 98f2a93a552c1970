"""Every test's skip condition for a containment level of the class grader (root, user
namespaces, the own-user level, Landlock) is written in one place, tests/course/containment.py,
which asks the grader's own code. Two definitions of one condition disagreed once: a test ran
where the grader refused (a clone inside a private home folder)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
THE_ONE_PLACE = ROOT / "tests" / "course" / "containment.py"
# What a containment condition is made of: the grader's probes of the machine, and the user id.
PROBES = {
    "geteuid",
    "containment",
    "offered",
    "abi",
    "reachable_by_others",
    "unreachable",
    "python_closed_to_runners",
}


def called_names(node: ast.AST) -> set[str]:
    """The names of the functions ``node`` calls (``sandbox.offered()`` -> ``offered``)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def is_skip(call: ast.AST, name: str) -> bool:
    return (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and (call.func.attr == name)
    )


def containment_skips(source: str) -> list[int]:
    """The lines of ``source`` where a skip condition calls a containment probe: a
    ``pytest.mark.skipif(condition, ...)`` or an ``if condition:`` whose body skips."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        condition = None
        if is_skip(node, "skipif") and node.args:
            condition = node.args[0]
        elif isinstance(node, ast.If):
            if any(is_skip(call, "skip") for stmt in node.body for call in ast.walk(stmt)):
                condition = node.test
        if condition is not None and called_names(condition) & PROBES:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_rule_finds_a_condition_written_in_a_test():
    written = (
        "import os, sys, pytest\n"
        "@pytest.mark.skipif(os.geteuid() != 0, reason='root')\n"
        "def test_a():\n"
        "    if not sandbox.reachable_by_others(os.path.realpath(sys.executable)):\n"
        "        pytest.skip('closed')\n"
        "@pytest.mark.skipif(IS_ROOT, reason='imported from the one place')\n"
        "def test_b():\n"
        "    pass\n"
    )
    assert containment_skips(written) == [2, 4]


def test_containment_skip_conditions_are_written_in_one_place():
    written = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != THE_ONE_PLACE
        for line in containment_skips(path.read_text(encoding="utf-8"))
    ]
    assert not written, f"skip conditions for a containment level outside {THE_ONE_PLACE}"
