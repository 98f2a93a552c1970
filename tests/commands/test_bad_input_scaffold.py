"""Bad input to ``python -m course.authoring.scaffold``: its source and OUT_DIR, exercise ids,
--force over what a student changed (their work, symlinks, notes, finished exercises), a full
disk (the promise and how a case is run: tests/commands/bad_input.py). Tests of their own below:
the exercise ids listed with the flag, --force once the student's file is moved away, --force
over the scaffold's own files, and a read-only folder (a real process without root's permission
bypass)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from course.authoring import scaffold
from tests.commands.bad_input import (
    ROOT,
    Case,
    Ctx,
    case_ids,
    check,
    disk_full,
    files,
    plain,
    snapshot,
    then,
)

EXERCISE = """def area(width, height):
    # HINT: the area of a width x height rectangle.
    # BEGIN SOLUTION: area
    return width * height
    # END SOLUTION
"""


def source_tree(*extra: tuple[str, bytes]):
    """A small source tree in {tmp}/src: one exercise (``EXERCISE``), a README, ``extra``."""

    def make(ctx: Ctx) -> None:
        src = ctx.tmp / "src"
        (src / "pkg").mkdir(parents=True)
        (src / "pkg" / "geometry.py").write_text(EXERCISE)
        (src / "README.md").write_text("a course\n")
        for name, content in extra:
            (src / name).write_bytes(content)

    return make


def scaffolded(change=None):
    """The student tree of ``source_tree()`` in {tmp}/out, written by the scaffold, then
    ``change(ctx)``: what the student did to it."""

    def make(ctx: Ctx) -> None:
        source_tree()(ctx)
        assert scaffold.main([str(ctx.tmp / "out"), "--source", str(ctx.tmp / "src")]) == 0
        if change is not None:
            change(ctx)

    return make


def moved_out_and_linked(ctx: Ctx) -> None:
    """The exercise file moved to the student's own folder, finished there, and linked back."""
    mine = ctx.tmp / "mine"
    mine.mkdir()
    (mine / "geometry.py").write_text(EXERCISE)
    (ctx.tmp / "out" / "pkg" / "geometry.py").unlink()
    (ctx.tmp / "out" / "pkg" / "geometry.py").symlink_to(mine / "geometry.py")


def folder_linked(ctx: Ctx) -> None:
    """The package folder moved to the student's own place and linked back."""
    shutil.move(ctx.tmp / "out" / "pkg", ctx.tmp / "mine")
    (ctx.tmp / "mine" / "geometry.py").write_text(EXERCISE)
    (ctx.tmp / "out" / "pkg").symlink_to(ctx.tmp / "mine")


def write(rel: str, text: str):
    def change(ctx: Ctx) -> None:
        (ctx.tmp / "out" / rel).write_text(text)

    return change


def scaffolded_then_edited(ctx: Ctx) -> None:
    """A student tree written by the scaffold, whose exercise file the student then filled in."""
    scaffolded(write("pkg/geometry.py", "def area(w, h):\n    return w * h\n"))(ctx)


def no_record(ctx: Ctx) -> None:
    """A tree written before the scaffold kept its record, whose note the student changed."""
    (ctx.tmp / "out" / scaffold.RECORD).unlink()
    (ctx.tmp / "out" / "README.md").write_text("a course\nmy notes on it\n")


FORCE = ("{tmp}/out", "--source", "{tmp}/src", "--force")

CASES = [
    Case("s-source-missing", "scaffold", plain("{tmp}/out", "--source", "{tmp}/nope"), "--source"),
    Case("s-source-empty", "scaffold", plain("{tmp}/out", "--source", ""), "--source"),
    Case("s-no-out-dir", "scaffold", plain(), "OUT_DIR"),
    Case("s-unknown-exercise", "scaffold", plain("{tmp}/out", "--exercise", "nope"), "nope"),
    Case(
        "s-out-is-file",
        "scaffold",
        then(lambda c: c.file("f.txt", "x"), plain("{tmp}/f.txt")),
        "f.txt",
    ),
    Case("s-bad-flag", "scaffold", plain("--nope"), "--nope"),
    # -- a source the scaffold cannot read, an OUT_DIR whose files stand where folders go --
    Case(
        "s-latin1-source",
        "scaffold",
        then(
            source_tree(("latin.py", b"# caf\xe9\nx = 1\n")),
            plain("{tmp}/out", "--source", "{tmp}/src"),
        ),
        "latin.py",
    ),
    Case(
        "s-force-file-where-folder",
        "scaffold",
        then(
            lambda c: (source_tree()(c), files("out/pkg")(c)),
            plain("{tmp}/out", "--source", "{tmp}/src", "--force"),
        ),
        "pkg",
    ),
    Case(
        "s-force-folder-where-file",
        "scaffold",
        then(
            lambda c: (source_tree()(c), files("out/README.md/")(c)),
            plain("{tmp}/out", "--source", "{tmp}/src", "--force"),
        ),
        "README.md",
    ),
    # -- --force over a student's work, and exercise ids --
    Case(
        "s-force-over-students-work",
        "scaffold",
        then(scaffolded_then_edited, plain(*FORCE)),
        "pkg/geometry.py",
    ),
    Case(
        "s-exercise-unknown",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src", "--exercise", "nosuch")),
        "--exercise nosuch",
    ),
    Case(
        "s-keep-unknown",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src", "--keep", "nosuch")),
        "--keep nosuch",
    ),
    # -- --force over what a student changed, and a full disk --
    Case(
        "s-force-exercise-symlink",
        "scaffold",
        then(scaffolded(moved_out_and_linked), plain(*FORCE)),
        "pkg/geometry.py (a symlink)",
    ),
    Case(
        "s-force-folder-symlink",
        "scaffold",
        then(scaffolded(folder_linked), plain(*FORCE)),
        "pkg/geometry.py (via pkg)",
    ),
    Case(
        "s-force-note-changed",
        "scaffold",
        then(scaffolded(write("README.md", "a course\nmy notes\n")), plain(*FORCE)),
        "(README.md)",
    ),
    Case(
        "s-force-exercise-finished-as-reference",
        "scaffold",
        then(scaffolded(write("pkg/geometry.py", EXERCISE)), plain(*FORCE)),
        "(pkg/geometry.py)",
    ),
    Case(
        "s-force-new-file-of-the-students",
        "scaffold",
        then(
            scaffolded(lambda c: (write("NOTES.md", "mine\n")(c), files("src/NOTES.md")(c))),
            plain(*FORCE),
        ),
        "(NOTES.md)",
    ),
    Case(
        "s-force-no-record",
        "scaffold",
        then(scaffolded(no_record), plain(*FORCE)),
        "(README.md)",
    ),
    Case(
        "s-force-record-corrupted",
        "scaffold",
        then(scaffolded(write(scaffold.RECORD, "{not json")), plain(*FORCE)),
        f"out/{scaffold.RECORD}: corrupted",
    ),
    Case(
        "s-disk-full",
        "scaffold",
        then(source_tree(), plain("{tmp}/out", "--source", "{tmp}/src")),
        ": cannot write: No space left on device",
        1,
        disk_full("fsync"),
    ),
    Case(
        "s-force-disk-full",
        "scaffold",
        then(scaffolded(), plain(*FORCE, "--keep", "area")),
        ": cannot write: No space left on device",
        1,
        disk_full("fsync"),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_the_exercise_ids_are_listed_with_the_flag(tmp_path, capsys):
    """The one line names the flag and every valid id, so the user can correct it at once."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    source_tree()(ctx)
    argv = [str(tmp_path / "out"), "--source", str(tmp_path / "src")]
    for flag in ("--exercise", "--keep"):
        assert scaffold.main([*argv, flag, "area", flag, "nosuch"]) == 2
        assert f"{flag} nosuch: unknown exercise; the exercises: area" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_force_writes_again_once_the_students_file_is_moved_away(tmp_path, capsys):
    """The refusal says how to go on, and going on works: the student's file moved out, the
    tree is written again; an unchanged tree, or another choice of exercises, needs no move."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    scaffolded_then_edited(ctx)
    argv = [str(tmp_path / "out"), "--source", str(tmp_path / "src"), "--force"]
    work = (tmp_path / "out" / "pkg" / "geometry.py").read_bytes()
    assert scaffold.main(argv) == 2
    assert "move them out of it" in capsys.readouterr().err
    assert (tmp_path / "out" / "pkg" / "geometry.py").read_bytes() == work
    (tmp_path / "out" / "pkg" / "geometry.py").rename(tmp_path / "mine.py")
    assert scaffold.main(argv) == 0
    assert "NotImplementedError" in (tmp_path / "out" / "pkg" / "geometry.py").read_text()
    assert scaffold.main([*argv, "--keep", "area"]) == 0  # the full source: still the scaffold's
    assert scaffold.main(argv) == 0


def test_force_replaces_exactly_its_own_files_and_keeps_the_record(tmp_path, capsys):
    """--force writes over the files the scaffold wrote (another choice of exercises) and
    records the new bytes; a file the student added beside them stays untouched."""
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    scaffolded(write("mine.txt", "not the scaffold's\n"))(ctx)
    out = tmp_path / "out"
    argv = [str(out), "--source", str(tmp_path / "src"), "--force"]
    assert scaffold.main([*argv, "--keep", "area"]) == 0
    assert (out / "pkg" / "geometry.py").read_text() == EXERCISE
    assert (out / "mine.txt").read_text() == "not the scaffold's\n"
    assert scaffold.main(argv) == 0  # the full source it wrote goes back to the stub
    assert "NotImplementedError" in (out / "pkg" / "geometry.py").read_text()
    assert scaffold.read_record(out).keys() == {"README.md", "pkg/geometry.py"}
    assert not [p for p in out.rglob("*.tmp")]


READ_ONLY = [sys.executable, "-m", "course.authoring.scaffold"]


@pytest.mark.parametrize("where", ["parent", "out"])
def test_a_read_only_folder_is_one_line_naming_it(where, tmp_path):
    """Root's permission bypass dropped (setpriv): a read-only parent of a new OUT_DIR, or a
    read-only OUT_DIR under --force, is one line naming the file or folder, exit 1, nothing
    changed and no traceback."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    ctx = Ctx(tmp_path, {}, tmp_path, tmp_path)
    source_tree()(ctx)
    parent = tmp_path / "p"
    parent.mkdir()
    argv = [str(parent / "out"), "--source", str(tmp_path / "src")]
    if where == "out":
        assert scaffold.main(argv) == 0
        argv += ["--force", "--keep", "area"]
    locked = parent / "out" if where == "out" else parent
    before = snapshot(parent)
    locked.chmod(0o555)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *READ_ONLY, *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
    finally:
        locked.chmod(0o755)
    if "Operation not permitted" in done.stderr and "setpriv" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {locked}") and "Permission denied" in lines[0], lines
    assert snapshot(parent) == before
