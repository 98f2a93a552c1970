"""Where an error in a check comes from, in the student's words: the file and line of the
student's code (not torch's, not the grader's), and when given code fails on what a student's
function returned, that function.

``run_check`` reports an exception raised while a check runs with ``locate(err, functions)``,
where ``functions`` (path -> qualified names of the functions that hold an exercise) is stored
by the generator, since the student tree has no markers to find them by.
"""

from __future__ import annotations

import ast
import re
import traceback
from pathlib import Path

COURSE_DIR = Path(__file__).resolve().parent  # course/, or grader.pyz/course (packed)
# The project: the folder that holds course/, or that holds the archive the grader is packed in
# (the student tree's grader.pyz)
PROJECT_ROOT = COURSE_DIR.parent if COURSE_DIR.parent.is_dir() else COURSE_DIR.parent.parent

INSTALLED_PARTS = {"site-packages", "dist-packages", ".venv", "venv"}


def _in_project(filename: str) -> bool:
    """In the project but not in the grader (``course``, ``sanity_check.py``) nor in an
    installed package."""
    path = Path(filename).resolve()
    if not path.is_relative_to(PROJECT_ROOT) or path.is_relative_to(COURSE_DIR):
        return False
    if INSTALLED_PARTS & set(path.parts):  # torch in a virtual environment inside the project
        return False
    return path != PROJECT_ROOT / "sanity_check.py"


def _relative(filename: str) -> str:
    path = Path(filename).resolve()
    return path.relative_to(PROJECT_ROOT).as_posix() if path.is_relative_to(PROJECT_ROOT) else ""


def _frames(err: BaseException) -> list[tuple[str, traceback.FrameSummary]]:
    """(qualified function name, frame) of every frame of the traceback, outermost first."""
    frames = traceback.extract_tb(err.__traceback__)
    names = [f.f_code.co_qualname for f, _ in traceback.walk_tb(err.__traceback__)]
    return list(zip(names, frames))


def student_frame(
    err: BaseException, functions: dict[str, list[str]] | None = None
) -> traceback.FrameSummary:
    """Where the error comes from in the student's code: the innermost frame of the traceback
    inside one of the student's ``functions`` (path -> qualified names of the functions that hold
    an exercise), else the innermost frame that is in the project but not in the grader
    (``course``, ``sanity_check.py``); the last frame when there is none (an error in the
    grader itself)."""
    return _student_frame(err, functions)[1]


def _student_frame(
    err: BaseException, functions: dict[str, list[str]] | None
) -> tuple[str, traceback.FrameSummary]:
    frames = _frames(err)
    for name, frame in reversed(frames):
        if _owner(name, (functions or {}).get(_relative(frame.filename), ())):
            return name, frame
    for name, frame in reversed(frames):
        if _in_project(frame.filename):
            return name, frame
    return frames[-1]


def _owner(qualname: str, names: list[str] | tuple[str, ...]) -> str | None:
    """The student's function among ``names`` that ``qualname`` is, or is defined inside."""
    return next((n for n in names if qualname == n or qualname.startswith(n + ".<locals>.")), None)


def locate(err: BaseException, functions: dict[str, list[str]] | None = None) -> str:
    """ "path:line" of ``student_frame``. When that frame is in given code (none of the student's
    ``functions``) and its line calls one of them, the error comes from what the student's
    function returned (a shape the given code cannot use): say so, and where that function is."""
    qualname, frame = _student_frame(err, functions)
    here = where(frame)
    path = _relative(frame.filename)
    names = (functions or {}).get(path, [])
    if _owner(qualname, names):
        return here
    called = set(re.findall(r"(\w+)\s*\(", frame.line or ""))
    for name in names:
        if name.rsplit(".", 1)[-1] in called:
            line = definition_line(PROJECT_ROOT / path, name)
            return (
                f"raised in given code at {here}, in {qualname}, on what your {name} returned: "
                f"{path}:{line}"
            )
    return here


def raised_in(err: BaseException, functions: dict[str, list[str]] | None = None) -> str:
    """The qualified name of the student's function (of ``functions``) that ``student_frame`` is
    in, or "" when the error comes from elsewhere (given code, the grader)."""
    qualname, frame = _student_frame(err, functions)
    return _owner(qualname, (functions or {}).get(_relative(frame.filename), [])) or ""


def definition_line(path: Path, qualname: str) -> int | str:
    """The line of ``def`` of the function ``qualname`` in the file, or "?"."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return "?"

    def visit(node: ast.AST, prefix: str) -> int | None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if name == qualname:
                    return child.lineno
                found = visit(child, name + ".")
                if found is not None:
                    return found
        return None

    return visit(tree, "") or "?"


def where(frame: traceback.FrameSummary) -> str:
    """ "path:line" of a frame, relative to the project when inside it."""
    path = Path(frame.filename).resolve()
    shown = path.relative_to(PROJECT_ROOT).as_posix() if path.is_relative_to(PROJECT_ROOT) else path
    return f"{shown}:{frame.lineno}"


def relative_to_project(filename: str) -> str:
    """A file's path relative to the project when inside it, else as given."""
    return _relative(filename) or filename
