"""Course scaffolding: write the student version of this project, with exercises cut out.

The student version of a file keeps the hint comments and replaces each region of a removed
exercise, markers included, by ``raise NotImplementedError("<exercise-id>: <hint>")`` at the
region's indentation; the rest stays byte for byte, but for a ``# noqa`` pragma where a name only
a removed region read is bound (course/authoring/unused_names.py). ``sanity_check.py`` reports a
check (``course/checks/``) whose exercise raises this as NOT IMPLEMENTED, with its hint.

    python -m course.authoring.scaffold OUT_DIR                  # every exercise removed
    python -m course.authoring.scaffold OUT_DIR --exercise lora  # only these (repeatable)
    python -m course.authoring.scaffold OUT_DIR --keep adamw     # all but these (repeatable)
    python -m course.authoring.scaffold --list                   # the exercises, where they are

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tokenize
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from course.authoring.pack import ARCHIVE, inside, packed
from course.authoring.unused_names import mark_unused
from minbert.checkpoint import WriteError, atomic_write
from minbert.flags import ArgumentParser, nonempty_path
from multitask.extras import EXTRAS
from tools import MOVED

PROJECT_ROOT = Path(__file__).resolve().parents[2]

BEGIN = re.compile(r"# BEGIN SOLUTION:\s*([a-z][a-z0-9_-]*)\s*$")
END = re.compile(r"# END SOLUTION\s*$")
HINT = re.compile(r"# HINT:\s?(.*?)\s*$")
MARKER_PREFIXES = ("# BEGIN SOLUTION", "# END SOLUTION")

# Instructor-only files, never copied into the student tree, whatever the manifest matches:
# every file of an extra (multitask/extras.py's table: the student tree is the core, and AdamW's
# multi-tensor path is the exercise in another form), the tests that grade the scaffolding and
# the grader against the full solution (they quote solution lines), and the reference equations
# with the script that turns them into the grader's stored data (course/reference_data.pt, which
# is copied).
INSTRUCTOR_ONLY = (
    *(file for extra in EXTRAS for file in extra.files()),
    *(f"{old.replace('.', '/')}.py" for old in MOVED),  # a moved command's old name
    "tests/model/test_optimizer_foreach.py",
    "tests/course/test_scaffold.py",
    "tests/course/test_student_tree_names.py",  # what the student tree names, against the project
    "tests/course/test_grader_mutants.py",
    "tests/course/test_grader_store.py",  # plants cheats through the mutant harness
    "tests/course/test_grade_class.py",  # plants solution files as submissions
    "tests/course/test_grade_hostile.py",  # plants solution files and attacks as submissions
    "tests/course/test_autograder.py",  # plants solution files as submissions
    "tests/course/test_exercise_isolation.py",  # runs the scaffold
    "course/authoring/course_references.py",
    "course/authoring/make_course_references.py",
    "course/authoring/operator_mistakes.py",
)

# Without git: directories and files that are not part of the project.
EXCLUDED_DIRS = {
    ".git",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    ".venv",
    "venv",
    "runs",
}
EXCLUDED_FILES = ("*.pyc", "*.pyo", "data/*.csv", ".DS_Store")

LINE_LENGTH = 100
# The manifest of the student tree, relative to the source, and the line a Markdown file of the
# student tree ends before.
MANIFEST = "course/authoring/student_tree.txt"
INSTRUCTOR_PART = "<!-- instructor-only"
# In OUT_DIR: the digest of every file the scaffold wrote there, so --force replaces only its own.
RECORD = ".scaffold-manifest"


class ScaffoldError(ValueError):
    """A malformed marker, an unknown exercise, or an output directory that cannot be used."""


class ScaffoldWriteError(ScaffoldError):
    """The file system refused a write (a read-only or full folder): exit 1, not 2."""


@dataclass(frozen=True)
class Region:
    """One marked block: lines ``begin`` .. ``end`` (0-based, the marker lines included)."""

    exercise: str
    path: str  # relative to the project root, with '/' separators
    begin: int
    end: int
    indent: str
    hint: str
    function: str  # the enclosing function or class, e.g. "BertSelfAttention.forward"

    @property
    def lines(self) -> str:
        """1-based line numbers of the solution, markers excluded, as "a-b"."""
        first, last = self.begin + 2, self.end
        return str(first) if first == last else f"{first}-{last}"


def _comment_lines(text: str, path: str) -> dict[int, str]:
    """0-based line number -> comment, for the comments that are alone on their line."""
    comments: dict[int, str] = {}
    lines = text.splitlines()
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.COMMENT:
                row, col = token.start
                if not lines[row - 1][:col].strip():
                    comments[row - 1] = token.string.rstrip()
    except (tokenize.TokenError, SyntaxError) as err:
        raise ScaffoldError(f"{path}: cannot tokenize: {err}") from err
    return comments


def _enclosing_names(text: str) -> dict[int, str]:
    """0-based line -> qualified name of the innermost function or class around it."""
    import ast

    names: dict[int, str] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                for line in range(child.lineno - 1, child.end_lineno or child.lineno):
                    names[line] = name  # inner definitions are visited later and overwrite
                visit(child, name + ".")
            else:
                visit(child, prefix)

    try:
        tree = ast.parse(text)
    except SyntaxError:  # reported by the compile check of the student version
        return names
    visit(tree, "")
    return names


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def find_regions(text: str, path: str) -> list[Region]:
    """The marked regions of one Python source file, checked for well-formedness."""
    comments = _comment_lines(text, path)
    if not any(c.startswith(MARKER_PREFIXES) for c in comments.values()):
        return []
    lines = text.splitlines()
    names = _enclosing_names(text)
    regions: list[Region] = []
    open_at: int | None = None
    exercise = ""
    for i, line in enumerate(lines):
        comment = comments.get(i)
        where = f"{path}:{i + 1}"
        if comment is not None and comment.startswith(MARKER_PREFIXES):
            begin, end = BEGIN.match(comment), END.match(comment)
            if begin is None and end is None:
                raise ScaffoldError(
                    f"{where}: malformed marker {comment!r}; write "
                    "'# BEGIN SOLUTION: <exercise-id>' (lower case, digits, '-', '_') or "
                    "'# END SOLUTION'"
                )
            if begin is not None:
                if open_at is not None:
                    raise ScaffoldError(
                        f"{where}: BEGIN SOLUTION inside the region opened at line {open_at + 1}"
                    )
                open_at, exercise = i, begin.group(1)
                continue
            if open_at is None:
                raise ScaffoldError(f"{where}: END SOLUTION without a BEGIN SOLUTION")
            indent = _indent(lines[open_at])
            if _indent(line) != indent:
                raise ScaffoldError(
                    f"{where}: END SOLUTION is not at the indentation of its BEGIN SOLUTION "
                    f"(line {open_at + 1})"
                )
            body = [j for j in range(open_at + 1, i) if lines[j].strip()]
            if not any(j not in comments for j in body):
                raise ScaffoldError(f"{where}: the region opened at line {open_at + 1} is empty")
            for j in body:
                if not _indent(lines[j]).startswith(indent):
                    raise ScaffoldError(
                        f"{path}:{j + 1}: a region is a block at one indentation; this line is "
                        f"left of its BEGIN SOLUTION (line {open_at + 1})"
                    )
            hint_lines = []
            j = open_at - 1
            while j >= 0 and j in comments and HINT.match(comments[j]):
                if _indent(lines[j]) != indent:
                    raise ScaffoldError(f"{path}:{j + 1}: HINT not at the region's indentation")
                hint_lines.insert(0, HINT.match(comments[j]).group(1))
                j -= 1
            hint = " ".join(h for h in hint_lines if h)
            if not hint:
                raise ScaffoldError(
                    f"{path}:{open_at + 1}: region {exercise!r} has no '# HINT: ...' line "
                    "directly above its BEGIN SOLUTION"
                )
            regions.append(
                Region(exercise, path, open_at, i, indent, hint, names.get(open_at, "<module>"))
            )
            open_at = None
    if open_at is not None:
        raise ScaffoldError(f"{path}:{open_at + 1}: BEGIN SOLUTION without an END SOLUTION")
    return regions


def _string_literal(text: str, quote: str = '"') -> str:
    return quote + text.replace("\\", "\\\\").replace(quote, "\\" + quote) + quote


def _literal(text: str) -> str:
    """``text`` as a string literal the way ``ruff format`` writes it: in double quotes, unless
    it holds more double quotes than single ones."""
    return _string_literal(text, "'" if text.count('"') > text.count("'") else '"')


def raise_statement(exercise: str, hint: str, indent: str) -> list[str]:
    """``raise NotImplementedError("<exercise>: <hint>")``, wrapped to the line length as
    ``ruff format`` leaves it: on one line, else the message alone on the next line, else in
    literals of one line each."""
    message = f"{exercise}: {hint}"
    line = f"{indent}raise NotImplementedError({_literal(message)})"
    if len(line) <= LINE_LENGTH:
        return [line]
    inner = indent + " " * 4
    width = LINE_LENGTH - len(inner)  # of each literal, quotes included
    chunks: list[str] = []
    current = ""
    for word in message.split(" "):
        candidate = f"{current} {word}" if current else word
        # every chunk but the last keeps the space that follows it
        if current and len(_literal(candidate + " ")) > width and len(_literal(message)) > width:
            chunks.append(current + " ")
            current = word
        else:
            current = candidate
    chunks.append(current)
    return [
        f"{indent}raise NotImplementedError(",
        *(inner + _literal(chunk) for chunk in chunks),
        f"{indent})",
    ]


def student_source(text: str, path: str, remove: Iterable[str] | None = None) -> str:
    """``text`` with the regions of the exercises in ``remove`` (all when None) replaced."""
    regions = find_regions(text, path)
    remove = None if remove is None else set(remove)
    chosen = [r for r in regions if remove is None or r.exercise in remove]
    if not chosen:
        return text
    lines = text.splitlines(keepends=True)
    newline = "\r\n" if lines and lines[0].endswith("\r\n") else "\n"
    for region in reversed(chosen):  # from the bottom, so earlier line numbers stay valid
        statement = raise_statement(region.exercise, region.hint, region.indent)
        replacement = [s + newline for s in statement]
        lines[region.begin : region.end + 1] = replacement
    result = "".join(lines)
    try:
        compile(result, path, "exec")
    except SyntaxError as err:  # a region that is not a block of whole statements
        raise ScaffoldError(f"{path}: the student version does not compile: {err}") from err
    return mark_unused(text, result)


def project_files(root: Path) -> list[str]:
    """The project's files under ``root`` (relative, '/'-separated, sorted)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout.decode()
        files = {p for p in listed.split("\0") if p}
    except (OSError, subprocess.CalledProcessError):  # no git, or not a checkout
        files = set()
    if not files:
        for directory, subdirs, names in os.walk(root):
            subdirs[:] = sorted(
                d for d in subdirs if d not in EXCLUDED_DIRS and not d.endswith(".egg-info")
            )
            for name in names:
                rel = (Path(directory) / name).relative_to(root).as_posix()
                if not any(fnmatch.fnmatch(rel, pattern) for pattern in EXCLUDED_FILES):
                    files.add(rel)
    return sorted(p for p in files if (root / p).is_file() and p not in INSTRUCTOR_ONLY)


def student_files(root: Path) -> dict[str, str]:
    """The student tree's files, target -> source (relative to ``root``): the project's files the
    manifest's patterns match, and its renamed files; every project file without a manifest. A
    file packed into an archive (``SOURCE => grader.pyz``, ``course/authoring/pack.py``) has the
    target ``grader.pyz/<its path>``."""
    files = project_files(root)
    manifest = root / MANIFEST
    if not manifest.is_file():
        return {rel: rel for rel in files}
    chosen: dict[str, str] = {}
    for number, line in enumerate(manifest.read_text(encoding="utf-8").splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        source, _, archive = (part.strip() for part in line.partition("=>"))
        source, _, target = (part.strip() for part in source.partition("->"))
        matched = [rel for rel in files if fnmatch.fnmatch(rel, source)]
        if not matched:
            raise ScaffoldError(f"{MANIFEST}:{number}: {source!r} names no file of the project")
        if archive != "" and archive != ARCHIVE:
            raise ScaffoldError(
                f"{MANIFEST}:{number}: the one archive is {ARCHIVE}, not {archive!r}"
            )
        if target:
            chosen[target] = source
        else:
            inside = f"{archive}/" if archive else ""
            chosen |= {f"{inside}{rel}": rel for rel in matched}
    return dict(sorted(chosen.items()))


def student_part(text: str) -> str:
    """A Markdown file as the student tree holds it: up to its instructor-only line, if any."""
    lines = text.splitlines(keepends=True)
    ends = [i for i, line in enumerate(lines) if line.startswith(INSTRUCTOR_PART)]
    return "".join(lines[: ends[0]]).rstrip() + "\n" if ends else text


def find_exercises(root: Path = PROJECT_ROOT) -> dict[str, list[Region]]:
    """Exercise id -> its regions, over the project's Python files, in file order."""
    exercises: dict[str, list[Region]] = {}
    for rel in project_files(root):
        if rel.endswith(".py"):
            text = read_source(root, rel)
            for region in find_regions(text, rel):
                exercises.setdefault(region.exercise, []).append(region)
    return exercises


def read_source(root: Path, rel: str) -> str:
    """A Python file of the source tree as text; one that is not UTF-8 (Python's own encoding,
    which the student tree keeps) is a ScaffoldError naming it and the first bad byte."""
    raw = (root / rel).read_bytes()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ScaffoldError(
            f"--source {root}: {rel} is not UTF-8 text (byte 0x{raw[err.start]:02x} at offset "
            f"{err.start}); save it as UTF-8"
        ) from None


def _check_targets(out_dir: Path, files: list[str]) -> None:
    """Before anything is written (also with --force): no file of the tree would have to
    replace a folder of OUT_DIR, and no folder would have to replace a file."""
    for rel in files:
        target = out_dir / rel
        if target.is_dir() and not target.is_symlink():
            raise ScaffoldError(f"{target} is a folder where the file {rel} goes; move it away")
        for above in target.parents:
            if above == out_dir or out_dir not in above.parents:
                break
            if above.exists() and not above.is_dir():
                raise ScaffoldError(
                    f"{above} is a file where a folder of the tree goes ({rel}); move it away"
                )


def _check_output_dir(out_dir: Path, root: Path, force: bool) -> None:
    out, src = out_dir.resolve(), root.resolve()
    if out == src or src in out.parents:
        raise ScaffoldError(
            f"{out_dir} is inside the source tree {root}; choose a directory outside"
        )
    if out in src.parents:
        raise ScaffoldError(f"{out_dir} contains the source tree {root}; choose another directory")
    if out.exists() and not out.is_dir():
        raise ScaffoldError(f"{out_dir} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ScaffoldError(f"{out_dir} is not empty; pass --force to write into it anyway")


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_record(out_dir: Path) -> dict[str, set[str]]:
    """What this command wrote into ``out_dir`` before: {file: digests of its written bytes},
    from ``RECORD``; {} where there is none (a fresh folder, or a tree written before the
    record existed, whose every differing file is then refused). A record that is no record is
    a ScaffoldError naming it: guessing would risk the student's work."""
    path = out_dir / RECORD
    if not os.path.lexists(path):
        return {}
    if path.is_symlink() or not path.is_file():
        raise ScaffoldError(f"{path}: not the scaffold's record (not a plain file); move it away")
    try:
        files = json.loads(path.read_text(encoding="utf-8"))["files"]
        record = {str(rel): {str(d) for d in digests} for rel, digests in files.items()}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        why = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
        raise ScaffoldError(
            f"{path}: corrupted ({why}); it records what the scaffold wrote, so --force cannot "
            "tell the student's files from its own: move the student's files and it away"
        ) from None
    return record


def _student_work(out_dir: Path, tree: dict[str, bytes], record: dict[str, set[str]]) -> list:
    """The files of OUT_DIR that --force would replace and that hold what the scaffold did not
    write there (the student's work: an exercise finished as the reference, a changed note),
    each "path" or "path (why)". A file is the scaffold's when its bytes are recorded or are
    what it writes now; a symlink never is (writing would go through it, to the student's file
    elsewhere), nor is a file below a symlinked folder."""
    changed = []
    for target, data in tree.items():
        written = out_dir / target
        links = [p for p in [*written.parents, written] if out_dir in p.parents and p.is_symlink()]
        if links:
            link = links[0].relative_to(out_dir).as_posix()
            changed.append(f"{target} (a symlink)" if link == target else f"{target} (via {link})")
        elif os.path.lexists(written) and not written.is_file():
            changed.append(f"{target} (not a regular file)")
        elif written.is_file():
            now = written.read_bytes()
            if now != data and _digest(now) not in record.get(target, ()):
                changed.append(target)
    return changed


def _write_file(path: Path, data: bytes, source: Path) -> None:
    """``data`` to ``path`` atomically (a file that is not written stays whole, and a rename
    replaces a symlink instead of writing through it), with ``source``'s permission bits."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda f: f.write(data))
    shutil.copymode(source, path)


def _write_fault(err: OSError) -> str:
    """The one line of a write the file system refused: the file (or folder) and why."""
    if isinstance(err, WriteError):
        return str(err)
    return f"{err.filename or '?'}: cannot write: {err.strerror or err}"


def _write_record(out_dir: Path, record: dict[str, set[str]]) -> None:
    files = {rel: sorted(digests) for rel, digests in sorted(record.items())}
    text = json.dumps(
        {"written_by": "python -m course.authoring.scaffold", "files": files}, indent=1
    )
    atomic_write(out_dir / RECORD, lambda f: f.write(text.encode("utf-8") + b"\n"))


def student_tree(root: Path, remove: Iterable[str] | None) -> dict[str, bytes]:
    """Every file of the student tree (target -> bytes), made before anything is written."""
    tree, archived = {}, {}
    for target, rel in student_files(root).items():
        if rel.endswith((".py", ".md")):
            text = read_source(root, rel)
            student = student_source(text, rel, remove) if rel.endswith(".py") else text
            data = (student_part(student) if rel.endswith(".md") else student).encode()
        else:
            data = (root / rel).read_bytes()
        if (path := inside(target)) is not None:
            archived[path] = data
        else:
            tree[target] = data
    if archived:
        tree[ARCHIVE] = packed(archived)
    return dict(sorted(tree.items()))


def _write_tree(out_dir: Path, root: Path, tree: dict[str, bytes], old: dict) -> None:
    """Write ``tree`` into ``out_dir``. The record first accepts both the old and the new bytes
    of every file, so a write cut short (a full disk, kill -9) leaves a tree that --force still
    tells from the student's work; the record of only the new bytes is written last."""
    files = student_files(root)
    _write_record(out_dir, {t: old.get(t, set()) | {_digest(d)} for t, d in tree.items()})
    for target, data in tree.items():
        # the archive's permission bits are the manifest's, which names what it holds
        _write_file(out_dir / target, data, root / files.get(target, MANIFEST))
    _write_record(out_dir, {t: {_digest(d)} for t, d in tree.items()})


def write_student_tree(
    out_dir: Path,
    root: Path = PROJECT_ROOT,
    remove: Iterable[str] | None = None,
    force: bool = False,
) -> dict[str, list[Region]]:
    """Copy the project from ``root`` to ``out_dir`` with the exercises in ``remove`` (all when
    None) cut out. Returns the regions removed, by exercise. Unknown ids, a student's work in
    the way of --force (nothing is written then) or a write the file system refuses are a
    ScaffoldError in one line; a folder this call made is removed again after a failed write."""
    exercises = find_exercises(root)
    if remove is not None:
        remove = list(dict.fromkeys(remove))
        unknown = [e for e in remove if e not in exercises]
        if unknown:
            raise ScaffoldError(f"unknown exercise {unknown}; the exercises: {list(exercises)}")
    _check_output_dir(out_dir, root, force)
    tree = student_tree(root, remove)
    _check_targets(out_dir, list(tree))
    old = read_record(out_dir) if out_dir.is_dir() else {}
    if changed := _student_work(out_dir, tree, old):
        named = ", ".join(changed)
        raise ScaffoldError(
            f"--force: {out_dir} holds files the scaffold did not write there ({named}), which "
            "--force never replaces; move them out of it (or delete them) and run again"
        )
    made = not os.path.lexists(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        _write_tree(out_dir, root, tree, old)
    except OSError as err:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        raise ScaffoldWriteError(_write_fault(err)) from None
    chosen = list(exercises) if remove is None else remove
    return {e: exercises[e] for e in chosen}


def print_exercises(exercises: dict[str, list[Region]]) -> None:
    """--list: each exercise, where its regions are and the function around each."""
    rows = [
        (exercise if i == 0 else "", f"{r.path}:{r.lines}", r.function)
        for exercise, regions in exercises.items()
        for i, r in enumerate(regions)
    ]
    widths = [max((len(row[k]) for row in rows), default=0) for k in (0, 1)]
    for exercise, where, function in rows:
        print(f"{exercise:<{widths[0]}}  {where:<{widths[1]}}  {function}")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m course.authoring.scaffold",
        description="Write the student version of this project: every marked exercise region "
        "becomes raise NotImplementedError(<hint>). See GUIDE.md for the exercises.",
    )
    parser.add_argument("out_dir", nargs="?", type=nonempty_path, metavar="OUT_DIR")
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--exercise",
        action="append",
        metavar="ID",
        help="remove only this exercise (repeatable; default: all)",
    )
    which.add_argument(
        "--keep",
        action="append",
        metavar="ID",
        help="remove every exercise but this one (repeatable)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"write into a non-empty OUT_DIR (an earlier student tree); a file there that "
        f"differs from what the scaffold wrote (OUT_DIR/{RECORD} records it) and from what it "
        "would write, or that is a symlink, is the student's and never replaced: the command "
        "refuses, naming each, before writing anything",
    )
    parser.add_argument("--list", action="store_true", help="list the exercises and exit")
    parser.add_argument(
        "--source",
        type=nonempty_path,
        default=PROJECT_ROOT,
        metavar="DIR",
        help="the project to copy (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if not args.source.is_dir():
        parser.error(f"--source {args.source}: no such directory; give the project to copy")
    try:
        exercises = find_exercises(args.source)
        if not exercises:
            raise ScaffoldError(f"--source {args.source}: no exercise regions found in it")
        if args.list:
            print_exercises(exercises)
            return 0
        if args.out_dir is None:
            parser.error("OUT_DIR is required (or --list)")
        for flag, ids in (("--exercise", args.exercise), ("--keep", args.keep)):
            if unknown := [e for e in ids or [] if e not in exercises]:
                raise ScaffoldError(
                    f"{flag} {unknown[0]}: unknown exercise; the exercises: {', '.join(exercises)}"
                )
        remove = args.exercise
        if args.keep:
            remove = [e for e in exercises if e not in args.keep]
        removed = write_student_tree(args.out_dir, args.source, remove, args.force)
    except ScaffoldError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1 if isinstance(err, ScaffoldWriteError) else 2
    except OSError as err:  # OUT_DIR or the source unreadable
        print(f"error: {err.filename or '?'}: {err.strerror or err}", file=sys.stderr)
        return 2
    count = sum(len(r) for r in removed.values())
    names = ", ".join(removed) or "none"
    print(f"wrote the student tree to {args.out_dir}: {count} regions removed ({names})")
    print(f"students run: cd {args.out_dir} && python sanity_check.py")
    return 0


if __name__ == "__main__":
    sys.exit(main())
