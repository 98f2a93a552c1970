"""The names a cut exercise leaves unused, marked for the linter in the student tree.

A student version lacks the code of its removed regions, so an import or a local variable that
only that code read is unused there: ``ruff check`` reports it, and ``ruff check --fix`` deletes
the import the student's code will need. ``mark_unused`` adds a ``# noqa`` pragma with its reason
to each line that binds such a name: F401 for an import, F841 for a variable, B007 for a loop
variable. A name the full source does not read either is left alone: the full tree's lint
reports it there. Only the scaffold uses this module (course/authoring/scaffold.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator

REASON = "an exercise uses it"
PRAGMA = re.compile(r"  # noqa: [A-Z0-9, ]+ \(an exercise uses it\)$")


def strip_pragma(line: str) -> str:
    """A line of a student version as the source has it: without the pragma ``mark_unused``
    added."""
    return PRAGMA.sub("", line)


def _loads(node: ast.AST) -> set[str]:
    """The names read anywhere inside ``node``, and those an ``__all__`` list names."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and type(n.ctx) is ast.Load}
    for n in ast.walk(node):
        targets = n.targets if isinstance(n, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            names |= {c.value for c in ast.walk(n.value) if isinstance(c, ast.Constant)}
    return names


def _imports(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(bound name, line) of every import of the module."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                if alias.name != "*":
                    bound = alias.asname or alias.name.split(".")[0]
                    yield bound, getattr(alias, "lineno", node.lineno)


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions and classes defined in it."""
    stack = list(ast.iter_child_nodes(function))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def _bindings(function: ast.AST) -> Iterator[tuple[str, int, str]]:
    """(name, line, code) of every variable the function itself binds where the linter reports
    it unused: F841 for an assignment or a ``with ... as``, B007 for a loop variable."""
    for node in _own_nodes(function):
        if isinstance(node, (ast.For, ast.AsyncFor)):
            targets, code = [node.target], "B007"
        elif isinstance(node, ast.Assign):
            # unpacking (``B, T = x.shape``) is never reported, but that of a tuple is
            unpacked = not isinstance(node.value, ast.Tuple)
            targets = [t for t in node.targets if not (unpacked and isinstance(t, ast.Tuple))]
            code = "F841"
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets, code = [node.target], "F841"
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets, code = [node.optional_vars], "F841"
        else:
            continue
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    yield name.id, name.lineno, code


def _functions(tree: ast.Module) -> dict[str, ast.AST]:
    """Qualified name -> function, for every function of the module."""
    found: dict[str, ast.AST] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found[name] = child
                visit(child, name + ".")

    visit(tree, "")
    return found


def unused_lines(source: str, student: str) -> dict[int, list[str]]:
    """1-based line of ``student`` -> the codes of the names bound there that ``source`` reads
    and ``student`` no longer does."""
    full, cut = ast.parse(source), ast.parse(student)
    marks: dict[int, list[str]] = {}
    read_full, read_cut = _loads(full), _loads(cut)
    for name, line in _imports(cut):
        if name in read_full and name not in read_cut:
            marks.setdefault(line, []).append("F401")
    originals = _functions(full)
    for qualified, function in _functions(cut).items():
        if qualified not in originals:
            continue
        was, now = _loads(originals[qualified]), _loads(function)
        for name, line, code in _bindings(function):
            if name in was and name not in now and code not in marks.get(line, []):
                marks.setdefault(line, []).append(code)
    return marks


def mark_unused(source: str, student: str) -> str:
    """``student`` (a student version of ``source``) with the pragma on every line that binds a
    name only a removed region read."""
    marks = unused_lines(source, student)
    if not marks:
        return student
    lines = student.splitlines(keepends=True)
    for number, codes in marks.items():
        line = lines[number - 1]
        body = line.rstrip("\r\n")
        if "# noqa" not in body:
            ending = line[len(body) :]
            lines[number - 1] = f"{body}  # noqa: {', '.join(sorted(codes))} ({REASON}){ending}"
    return "".join(lines)
