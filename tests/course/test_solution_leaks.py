"""Nothing of the student tree gives an exercise away: no given code, check, message, hint or
document writes out a piece of a solution.

The pieces of a solution are its lines (comments dropped) and the expressions in them (not a bare
name, nor a call of names only) of at least ``SIGNIFICANT`` characters besides whitespace. One
leaks when the student tree has it verbatim, whitespace aside, in any text file (code,
docstrings, messages, hints, the guide), or, if it is an expression of ``RENAMED_SIZE``
operations, in code in a simple equivalent form: variables renamed, numbers as floats, and
casts and guards dropped (``.float()``, ``.to(...)``, ``.clamp(...)``), so that ``(h *
keep).sum(1) / keep.sum(1)`` is the pooling's ``(hidden * m).sum(1) / m.sum(1).clamp(min=1.0)``.

The solution lines are those of the marked regions of this (the full) tree; this file reads them,
quotes none, and is not copied into the student tree (its manifest does not name it).
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from course.authoring import scaffold

ROOT = Path(__file__).resolve().parents[2]
SIGNIFICANT = 25
RENAMED_SIZE = 6  # operations: the expressions of a piece that are not a variable's name
TEXT_SUFFIXES = (".py", ".md", ".txt", ".toml", ".json")
KEPT_NAMES = set(dir(builtins))
# Calls that change a tensor's type, layout or range but not what a solution computes with it.
CASTS_AND_GUARDS = {"float", "double", "half", "bfloat16", "contiguous", "to", "type"}
CASTS_AND_GUARDS |= {"clamp", "clamp_min", "clamp_max", "detach"}


# Pieces that given code has on purpose, each with the reason it gives nothing away.
GIVEN_ON_PURPOSE = {
    "forward_from_embeddings([e+dfore,dinzip(base,deltas,strict=True)])": "smart_regularizer's "
    "own R_s = ℓ_s(f(e), f(e + δ)) calls the forward on e + δ, with the δs the exercise returns: "
    "how to call the forward it is given, not how to find δ",
}


def squeeze(text: str) -> str:
    return "".join(text.split())


def operations(node: ast.AST) -> int:
    """The expressions of ``node`` that are not a variable's name: calls, operators, attributes,
    subscripts, constants."""
    return sum(isinstance(n, ast.expr) and not isinstance(n, ast.Name) for n in ast.walk(node))


def is_piece(node: ast.AST, source: str) -> bool:
    """An expression big enough to say something of a solution: not a bare name or a dotted
    one, nor a call of names only (``divergence(target, perturbed, kind)``)."""
    return len(squeeze(source)) >= SIGNIFICANT and operations(node) >= 2 + isinstance(
        node, ast.Call
    )


class _Equivalent(ast.NodeTransformer):
    """The simple equivalent form: casts and guards dropped, numbers as floats, variables
    numbered by their first appearance (attributes, keyword arguments and builtins keep their
    names)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CASTS_AND_GUARDS:
            return func.value
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        number = isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
        return ast.Constant(value=float(node.value)) if number else node  # 1 is 1.0

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in KEPT_NAMES:
            return node
        return ast.Name(id=self.names.setdefault(node.id, f"v{len(self.names)}"), ctx=ast.Load())


def equivalent(node: ast.expr) -> tuple[str, ast.AST]:
    """The equivalent form of an expression, as a comparable text, and its tree."""
    import copy

    form = _Equivalent().visit(copy.deepcopy(node))
    return ast.dump(form), form


def solution_pieces() -> list[tuple[str, str, str | None]]:
    """(where, the piece as written, its equivalent form or None) over every region of the full
    tree; a piece too small for ``RENAMED_SIZE`` is searched verbatim only."""
    pieces = []
    for regions in scaffold.find_exercises(ROOT).values():
        for region in regions:
            text = (ROOT / region.path).read_text(encoding="utf-8")
            lines = text.splitlines()
            inside = range(region.begin + 2, region.end + 1)  # 1-based rows, markers excluded
            for row in inside:
                code = re.sub(r"\s+#\s.*$", "", lines[row - 1]).strip()
                if not code.startswith("#") and len(squeeze(code)) >= SIGNIFICANT:
                    pieces.append((f"{region.path}:{row} ({region.exercise})", code, None))
            for node in ast.walk(ast.parse(text)):
                if not isinstance(node, ast.expr) or node.lineno not in inside:
                    continue
                source = ast.get_source_segment(text, node) or ""
                if not is_piece(node, source):
                    continue
                form, tree = equivalent(node)
                big = operations(tree) >= RENAMED_SIZE
                where = f"{region.path}:{node.lineno} ({region.exercise})"
                pieces.append((where, source, form if big else None))
    return pieces


def leaks_in(tree: Path, pieces: list[tuple[str, str, str | None]]) -> list[str]:
    """Every piece ``tree`` has, verbatim (whitespace aside) in a text or in its equivalent form
    in code, as "where: piece  in file[:line]"."""
    texts = {
        p.relative_to(tree).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(tree.rglob("*"))
        if p.is_file() and p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
    }
    squeezed = {rel: squeeze(text) for rel, text in texts.items()}
    forms: dict[str, str] = {}
    for rel, text in texts.items():
        try:
            nodes = ast.walk(ast.parse(text)) if rel.endswith(".py") else ()
        except SyntaxError:
            continue
        for node in nodes:
            if isinstance(node, ast.expr) and operations(node) >= RENAMED_SIZE:
                forms.setdefault(equivalent(node)[0], f"{rel}:{node.lineno}")
    found = set()
    for where, written, form in pieces:
        if squeeze(written) in GIVEN_ON_PURPOSE:
            continue
        places = [rel for rel, text in squeezed.items() if squeeze(written) in text]
        if form is not None and form in forms:
            places.append(forms[form])
        found |= {f"{where}: {' '.join(written.split())!r}  in {place}" for place in places}
    return sorted(found)


@pytest.fixture(scope="module")
def student_tree(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("student") / "minbert-student"
    scaffold.write_student_tree(out, ROOT)
    return out


def test_no_piece_of_a_solution_is_in_the_student_tree(student_tree: Path) -> None:
    pieces = solution_pieces()
    covered = {where.split(" ")[-1].strip("()") for where, _, _ in pieces}
    assert set(scaffold.find_exercises()) - covered == {"adapter"}  # two lines of under 25
    leaks = leaks_in(student_tree, pieces)
    assert leaks == [], "\n".join(leaks)


LEAKY = """\
def pooled(h, keep, head):
    return (h * keep).sum(1) / keep.sum(1) @ head


MESSAGE = "the mask has no last axis: m = attention_mask.unsqueeze(-1)"
"""


def test_the_rules_find_a_piece_renamed_in_code_and_verbatim_in_a_message(tmp_path: Path) -> None:
    """The two leaks this file was written for, planted in a made-up tree; a tree without them
    has none."""
    pieces = solution_pieces()
    (tmp_path / "given.py").write_text(LEAKY, encoding="utf-8")
    leaks = leaks_in(tmp_path, pieces)
    assert any("(pooling)" in leak and "given.py:2" in leak for leak in leaks), leaks
    assert any("unsqueeze(-1)" in leak and leak.endswith("in given.py") for leak in leaks), leaks
    (tmp_path / "given.py").write_text("def pooled(h):\n    return h.mean(1)\n", encoding="utf-8")
    assert leaks_in(tmp_path, pieces) == []
