"""How large the student tree is, part by part, and what would make it smaller.

The student tree is what ``python -m course.authoring.scaffold OUT`` writes: the files the manifest
(course/authoring/student_tree.txt) names, with every exercise cut out, and the grader packed into
one file (grader.pyz, course/authoring/pack.py). What a student sees is counted: the tree's files,
the archive as one file whose Python is not in view (its contents are counted apart). The Python in
view is counted from the student versions three ways: every line; without blank lines and comments;
and code only (no docstrings either, where the exercises' equations and papers are written). The aim
is at most 70 files and 10,500 lines in view.

    python benchmarks/student_tree_size.py

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass

import _common

from course.authoring.pack import ARCHIVE, inside
from course.authoring.scaffold import project_files, read_source, student_files, student_source

AIM_FILES, AIM_LINES = 70, 10_500
# The parts of the tree, as the issue lists them: each a label and the path prefixes it holds.
PARTS = (
    ("the model library, the plug-ins and the optimizer (the exercises)", ("minbert/",)),
    ("the tasks", ("tasks/",)),
    ("the driver", ("train_multitask.py", "multitask/")),
    ("the grader", ("sanity_check.py", "course/")),
    ("the tests of what the student writes", ("tests/",)),
    ("set-up", ("scripts/",)),
)
# The driver's settings, run folder (resume, --evaluate, --add_to, --init_from) and front end:
# what a smaller driver written only for students would replace.
DRIVER_FRONT = (
    "train_multitask.py",
    "multitask/config.py",
    "multitask/run.py",
    "multitask/errors.py",
)


@dataclass
class Size:
    """Lines of Python: all, blank, comment-only and docstring lines."""

    files: int = 0
    lines: int = 0
    blank: int = 0
    comments: int = 0
    docstrings: int = 0

    def __add__(self, other: Size) -> Size:
        return Size(*(a + b for a, b in zip(self.counts(), other.counts(), strict=True)))

    def counts(self) -> tuple[int, ...]:
        return self.files, self.lines, self.blank, self.comments, self.docstrings

    def row(self) -> list[str]:
        """Files; lines; without blanks and comments; code only (no docstrings either)."""
        prose = self.lines - self.blank - self.comments
        return [f"{self.files:,}", f"{self.lines:,}", f"{prose:,}", f"{prose - self.docstrings:,}"]


def size_of(text: str) -> Size:
    """The counts of one Python file: a docstring is the string that opens a module, class or
    function (every line of it); a comment line holds nothing but the comment."""
    lines = text.splitlines()
    docstrings = 0
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    docstrings += first.end_lineno - first.lineno + 1
    blank = sum(1 for line in lines if not line.strip())
    comments = sum(1 for line in lines if line.strip().startswith("#"))
    return Size(1, len(lines), blank, comments, docstrings)


def student_tree() -> tuple[dict[str, str], dict[str, str]]:
    """The student tree's files as a student sees them (target path -> text), the archive of the
    packed grader one of them with no text in view; and the files packed into it (path inside
    it -> text). The Python ones as the scaffold writes them, the others empty (only their
    number counts)."""
    root = _common.ROOT
    seen, packed = {}, {}
    for target, rel in student_files(root).items():
        text = student_source(read_source(root, rel), rel) if rel.endswith(".py") else ""
        if (path := inside(target)) is not None:
            packed[path] = text
            seen[ARCHIVE] = ""
        else:
            seen[target] = text
    return seen, packed


def part_of(path: str) -> str | None:
    """The label of the part a student-tree file belongs to; None for a file that is not Python
    (data, requirements, the guide)."""
    if not path.endswith(".py"):
        return None
    labels = [label for label, prefixes in PARTS if path.startswith(prefixes)]
    if len(labels) != 1:
        raise SystemExit(f"{path}: in {len(labels)} of the parts; PARTS must hold it once")
    return labels[0]


def total(texts: dict[str, str], files: int) -> Size:
    """The Python of ``texts`` counted, with ``files`` as the file count (every file, not only
    the Python ones: the aim counts files of any kind)."""
    python = [size_of(text) for path, text in texts.items() if path.endswith(".py")]
    counted = sum(python, Size())
    counted.files = files
    return counted


def lab_parts(root=_common.ROOT) -> list[str]:
    """The files of the lab's extras (multitask/extras.py), which the driver imports on demand."""
    from multitask.extras import EXTRAS

    return sorted(f for extra in EXTRAS for f in extra.files() if (root / f).is_file())


def levers(tree: dict[str, str]) -> tuple[list[list[str]], int]:
    """A row for each set of files, and the lines left within the aim for a whole driver (its
    model, step, data and evaluation too) beside the rest of the tree."""
    root = _common.ROOT
    everything = [*project_files(root), *lab_parts()]  # the project's files leave extras out
    whole = {rel: read_source(root, rel) for rel in everything if rel.endswith(".py")}
    extras = {rel: whole[rel] for rel in lab_parts() if rel not in tree}
    floor = {p: t for p, t in tree.items() if p not in DRIVER_FRONT}
    no_driver = {p: t for p, t in floor.items() if not p.startswith("multitask/")}
    rows = (
        ("the whole project (no manifest)", whole, len(everything)),
        ("the manifest with the lab's extras (each lab_part module)", tree | extras, None),
        ("the student tree as the manifest writes it", tree, None),
        ("a driver for students of zero lines, beside the driver's parts", floor, None),
        ("no driver at all (no train_multitask.py, no multitask/)", no_driver, None),
    )
    out = []
    for label, texts, files in rows:
        size = total(texts, files if files is not None else len(texts))
        within = size.files <= AIM_FILES and size.lines <= AIM_LINES
        out.append([label, *size.row(), "yes" if within else "no"])
    room = AIM_LINES - total(no_driver, len(no_driver)).lines
    return out, room


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # only --help
    report = _common.Report(
        "student-tree-size", "The student tree's size", __doc__.split("\n\n")[1]
    )
    tree, packed = student_tree()
    header = ["files", "lines", "without blanks and comments", "code only"]
    by_part = {label: Size() for label, _ in PARTS}
    for path, text in tree.items():
        if label := part_of(path):
            by_part[label] += size_of(text)
    other = len(tree) - sum(s.files for s in by_part.values())
    rows = [[label, *size.row()] for label, size in by_part.items()]
    rows.append(["other files (the guide, data README, requirements, references, grader.pyz)"])
    rows[-1] += [f"{other:,}", "", "", ""]
    rows.append(["the student tree, in view", *total(tree, len(tree)).row()])
    rows.append([f"packed in {ARCHIVE}, not in view", *total(packed, len(packed)).row()])
    report.add("## Part by part\n\n" + _common.table(["part", *header], rows))
    rows, room = levers(tree)
    report.add(
        "## The levers\n\nEach row counts another set of files the same way; the last column says "
        f"whether it is within the aim of {AIM_FILES} files and {AIM_LINES:,} lines.\n\n"
        + _common.table(["what the tree holds", *header, "within the aim"], rows)
        + f"\n\nWithin the aim, a whole driver (with the model, step, data and evaluation it "
        f"trains with) beside the rest of the tree would have {room:,} lines."
    )
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
