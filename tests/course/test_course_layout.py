"""``course/`` split by who runs it (docs/layout.md): ``course/`` itself is what ships to
students (the checks, the sealed references, the runner), ``course/grading/`` is the instructor's
class grading (the judge, the sandbox, the report, the leaderboard, the Gradescope zip) and
``course/authoring/`` writes the course (the scaffold, its manifest, the references' generators).

What ships imports neither, read from the source (``ast``: imports inside functions included,
and the module names given to ``importlib`` as literals), and the student tree holds no file of
either. The one arrow between the two instructor folders runs from grading to the scaffold: the
grader builds each submission's tree as the scaffold writes the student tree (the manifest, the
exercise regions: ``grade.py``) and packs the project's files into the Gradescope zip
(``autograder.py``); the scaffold knows nothing of grading."""

from __future__ import annotations

import ast
from pathlib import Path

from course.authoring import pack, scaffold
from tests.structure.test_structure import imports_of, project_modules

ROOT = Path(__file__).resolve().parents[2]
INSTRUCTOR = ("course.grading", "course.authoring")
SCAFFOLD = "course.authoring.scaffold"


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def importlib_names(path: Path) -> set[str]:
    """Module names a file gives as string literals to ``importlib.import_module`` or
    ``importlib.util.find_spec``: an import the import statements do not show."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = ast.unparse(node.func)
        first = node.args[0]
        if func.endswith(("import_module", "find_spec")) and isinstance(first, ast.Constant):
            found.add(str(first.value))
    return found


def course_imports() -> dict[str, set[str]]:
    """Every module of ``course/``, with the project modules it imports (statements anywhere in
    the file, and the literal names it hands to importlib)."""
    modules = project_modules()
    graph = {}
    for name, path in modules.items():
        if within(name, "course"):
            graph[name] = imports_of(path, modules) | importlib_names(path)
    return graph


def test_what_ships_imports_neither_grading_nor_authoring():
    graph = course_imports()
    shipped = {n: i for n, i in graph.items() if not any(within(n, p) for p in INSTRUCTOR)}
    assert "course.registry" in shipped and "course.runner" in shipped  # the reading works
    assert "course.checks.bert" in shipped
    wrong = {
        f"{name} imports {other}"
        for name, imported in shipped.items()
        for other in imported
        if any(within(other, p) for p in INSTRUCTOR)
    }
    assert sorted(wrong) == []


def test_grading_imports_of_authoring_only_the_scaffold_and_authoring_no_grading():
    graph = course_imports()
    to_authoring = {
        (name, other)
        for name, imported in graph.items()
        if within(name, "course.grading")
        for other in imported
        if within(other, "course.authoring") and other != "course.authoring"
    }
    assert to_authoring == {
        ("course.grading.grade", SCAFFOLD),
        ("course.grading.autograder", SCAFFOLD),
        ("course.grading.sandbox", "course.authoring.pack"),  # the packed grader's runner
    }
    to_grading = [
        f"{name} imports {other}"
        for name, imported in graph.items()
        if within(name, "course.authoring")
        for other in imported
        if within(other, "course.grading")
    ]
    assert to_grading == []


def test_the_student_tree_ships_nothing_of_grading_or_authoring():
    """The manifest's files, by the scaffold's own reading of it: the shipped ``course/`` files,
    all packed into grader.pyz, and none under ``course/grading/`` or ``course/authoring/`` (the
    student README is written from ``course/authoring/student_readme.md`` under the name
    README.md)."""
    files = scaffold.student_files(ROOT)
    packed = {pack.inside(t) for t in files} - {None}
    assert {"course/registry.py", "course/runner.py", "course/gradescope.py"} <= packed
    assert {"course/checks/__init__.py", "course/checks/sampling.py"} <= packed
    assert [t for t in files if t.startswith("course/")] == []  # in the archive, nowhere else
    assert [t for t in packed if t.startswith(("course/grading/", "course/authoring/"))] == []
    assert files["README.md"] == "course/authoring/student_readme.md"


def test_checks_are_found_by_their_table_in_its_order():
    """``MODULES`` is the one table of the checks' files; the report lists the checks file by
    file in its order, every file of ``course/checks/`` is in it, and the imports follow it (no
    sorting switched off to keep an order of import statements)."""
    from course.checks import CHECKS, MODULES

    folder = ROOT / "course" / "checks"
    files = {p.stem for p in folder.glob("*.py")} - {"__init__"}
    assert sorted(MODULES) == sorted(files) and len(set(MODULES)) == len(MODULES)
    order = list(dict.fromkeys(c.compute.__module__ for c in CHECKS))
    assert order == [f"course.checks.{name}" for name in MODULES]
    assert "isort" not in (folder / "__init__.py").read_text(encoding="utf-8")
