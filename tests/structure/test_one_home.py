"""One home per text: no sentence of 60 characters or more stands in two places.

A text copied into a second place drifts from the first (a design page restating a docstring,
the README restating docs/layout.md). The homes searched are the Markdown files of the clone and
the docstrings and comments of its own ``.py`` files (``git ls-files``: tracked and new files,
nothing git ignores, so no ``.venv*``, ``runs/`` or data files). Each home is split into units
(a Markdown paragraph, list item, heading or table cell; a docstring; a block of adjacent
comment lines), each unit into sentences; a sentence is compared after whitespace, Markdown
emphasis, backticks and link targets are normalised and case is folded. The docstring keeps
what its code needs; a page keeps the reasons and links the file.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHORTEST = 60

# Left out, each for a reason:
# - benchmarks/results/: written by the benchmark scripts, which repeat their own texts per run;
# - course/authoring/student_readme.md: the scaffold ships it as the student tree's README.md,
#   in a tree that has none of the project's other Markdown, so its sentences stand there in full.
SKIPPED = ("benchmarks/results/", "course/authoring/student_readme.md")

# Lines that are not prose: a fenced block of code (its fence names a language other than
# text: code repeats code), a command a user types or a doctest line, and a table's rule
# (``|---|``). They are dropped before splitting. A block of aligned lines (a ``text`` fence, an
# indented block: a map, a table of symbols) is kept a line a unit, as a table row is.
# A shape legend is no home either: the conventions put one at the top of every file that
# computes with shapes, so two files with the same symbols carry the same legend.
FENCE = re.compile(r"^\s*(```|~~~)\s*(\w*)")
COMMAND = re.compile(r"^\s*(\$ |>>> |\.\.\. |python |make |pip |torchrun |git |cd )")
TABLE_RULE = re.compile(r"^\s*\|?[\s:|-]+\|[\s:|-]*$")
STARTS_UNIT = re.compile(r"^\s*(#{1,6} |[-*+] |\d+[.)] |\|)")
INDENTED = re.compile(r"^(    |\t)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
LEGEND = re.compile(r"^\s*(shape legend|shapes:)", re.IGNORECASE)


def homes() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [n for n in listed if (ROOT / n).is_file() and not n.startswith(SKIPPED)]


def units_of_lines(lines: list[str], first: int) -> list[tuple[int, str]]:
    """Prose units of ``lines`` (numbered from ``first``): paragraphs, list items, headings,
    table cells and the lines of an aligned block, without code, commands and table rules."""
    units: list[tuple[int, list[str]]] = [(first, [])]
    fence = None  # inside a fenced block: its language ("" or "text": a block of lines)
    for number, line in enumerate(lines, first):
        opening = FENCE.match(line)
        if opening:
            fence = None if fence is not None else opening.group(2)
            units.append((number, []))
        elif COMMAND.match(line) or TABLE_RULE.match(line) or not line.strip():
            units.append((number, []))
        elif fence not in (None, "", "text"):
            continue
        elif line.lstrip().startswith("|"):
            units += [(number, [cell]) for cell in line.split("|")] + [(number, [])]
        elif fence is not None or (INDENTED.match(line) and not units[-1][1]):
            units += [(number, [line]), (number, [])]
        elif STARTS_UNIT.match(line) or not units[-1][1]:
            units.append((number, [line]))
        else:
            units[-1][1].append(line)
    return [(n, " ".join(text)) for n, text in units if text and not LEGEND.match(text[0])]


def markdown_units(text: str) -> list[tuple[int, str]]:
    return units_of_lines(text.splitlines(), 1)


def python_units(text: str) -> list[tuple[int, str]]:
    """Docstrings (module, class, function) and blocks of adjacent comment lines."""
    units = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc:
                units += units_of_lines(doc.splitlines(), node.body[0].lineno)
    block: list[str] = []
    last = start = -1
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type != tokenize.COMMENT:
            continue
        row = token.start[0]
        if row != last + 1 and block:
            units += units_of_lines(block, start)
            block = []
        if not block:
            start = row
        block.append(token.string.lstrip("#").strip())
        last = row
    return units + (units_of_lines(block, start) if block else [])


def normalise(sentence: str) -> str:
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", sentence)  # a link: its words only
    text = text.replace("`", "")
    text = re.sub(r"(?<!\w)[*_]+|[*_]+(?!\w)", "", text)  # emphasis, not snake_case
    text = re.sub(r"[-=~#]{3,}", "", text)  # a rule drawn under or beside a title
    text = re.sub(r"\s+", " ", text).strip().rstrip(".:;,").strip()
    return text.casefold()


def sentences(name: str, text: str) -> list[tuple[str, str]]:
    """Each sentence of 60 characters or more of the home ``name`` holding ``text``, normalised,
    with its place (``name:line``, the line its unit starts on)."""
    units = markdown_units(text) if name.endswith(".md") else python_units(text)
    found = []
    for number, unit in units:
        for raw in SENTENCE_END.split(unit.strip()):
            sentence = normalise(raw)
            if len(sentence) >= SHORTEST:
                found.append((sentence, f"{name}:{number}"))
    return found


def places_of_sentences() -> dict[str, list[str]]:
    places: dict[str, list[str]] = defaultdict(list)
    for name in homes():
        for sentence, place in sentences(name, (ROOT / name).read_text(encoding="utf-8")):
            places[sentence].append(place)
    return places


def test_a_copy_is_found_through_markup_and_code_is_not():
    """The finder itself: a docstring's sentence copied onto a page with emphasis, a link and
    backticks is the same sentence; the same words in a code fence or a command are not prose."""
    doc = '"""Write it.\n\nThe one atomic writer of every file a run saves, renamed over path."""\n'
    page = (
        "# Notes\n\nThe **one** atomic writer of every file\na run saves, renamed over "
        "[`path`](../x.py).\n\n```python\n# The one atomic writer of every file a run "
        "saves, renamed over path.\n```\n"
    )
    wanted = "the one atomic writer of every file a run saves, renamed over path"
    assert sentences("x.py", doc) == [(wanted, "x.py:3")]
    assert sentences("notes.md", page) == [(wanted, "notes.md:3")]
    command = "    python train_multitask.py --option adapter --sampling annealed --epochs 3\n"
    assert sentences("a.md", command) == []


def test_no_sentence_stands_in_two_places():
    """Every sentence of 60 characters or more has one home; a second place links to it."""
    repeated = sorted((p, s) for s, p in places_of_sentences().items() if len(p) > 1)
    report = "\n".join(f"{' and '.join(p)}:\n    {s}" for p, s in repeated)
    assert not repeated, f"{len(repeated)} sentences stand in two places:\n{report}"
