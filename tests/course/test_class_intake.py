"""Reading a class of hostile submissions (course/grading/intake.py) and the inert text that
reaches the instructor (course/grading/inert.py).

One class folder is built in tmp_path: honest entries (folders and zips, each compression zip
can read) beside hostile ones (an encrypted or deflate64 member, a link, a FIFO, a 64 GiB sparse
file, zip bombs, 30,000 files, names with escape sequences, formulas and colliding names, broken
zips). Each entry must come back with its exact files or its own one-line problem, read with
bounded memory, and nothing outside tmp_path is read or written.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import stat
import struct
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from course.grading.inert import clean, csv_cell
from course.grading.intake import ENTRIES, MEMBER_BYTES, Entry, Submission, list_class

WANTED = ["minbert/optimizer.py", "tasks/heads.py"]
OPTIMIZER = b"# the student's AdamW\nclass AdamW:\n    pass\n"
HEADS = "# heads, written in Zürich \N{SNOWMAN}\nHEADS = 3\n".encode()
HONEST = {"minbert/optimizer.py": OPTIMIZER, "tasks/heads.py": HEADS}
PEAK_BYTES = 32 << 20  # the most memory reading any one entry may take (the caps are 1 and 8 MiB)
HYPERLINK = '=HYPERLINK("evil.example","click")'

# Where a zip's header fields are: (offset in the local header, in the central one, format).
FIELDS = {"flags": (6, 8, "<H"), "method": (8, 10, "<H"), "file_size": (22, 24, "<L")}


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def write_zip(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> None:
    with zipfile.ZipFile(path, "w", compression=method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def zeros_zip(path: Path, method: int, mib: int) -> None:
    """A zip of one member, minbert/optimizer.py: ``mib`` MiB of zeros, written a MiB at a time
    (the zeros are never in memory whole)."""
    info = zipfile.ZipInfo("minbert/optimizer.py")
    info.compress_type = method
    with zipfile.ZipFile(path, "w") as archive, archive.open(info, "w") as member:
        block = bytes(1 << 20)
        for _ in range(mib):
            member.write(block)


def patch_members(path: Path, field: str, value: int, *, add_bits: bool = False) -> None:
    """Set a header field of every member of a zip, in its local header and in its entry of
    the central directory (where zipfile reads it), as a hostile archiver would."""
    data = bytearray(path.read_bytes())
    local_at, central_at, fmt = FIELDS[field]
    end = len(data) - 22  # the end record; these zips have no comment
    count, _, start = struct.unpack_from("<HLL", data, end + 10)
    at = start
    for _ in range(count):
        assert data[at : at + 4] == b"PK\x01\x02"
        local = struct.unpack_from("<L", data, at + 42)[0]
        for where in (local + local_at, at + central_at):
            old = struct.unpack_from(fmt, data, where)[0]
            struct.pack_into(fmt, data, where, old | value if add_bits else value)
        name, extra, comment = struct.unpack_from("<3H", data, at + 28)
        at += 46 + name + extra + comment
    path.write_bytes(bytes(data))


def honest_folder(path: Path) -> None:
    # One file at its path, one under a top folder, and a stray copy that must not be taken.
    write_tree(path, {"minbert/optimizer.py": OPTIMIZER, "project/tasks/heads.py": HEADS})
    write_tree(path, {"old/optimizer.py": b"# an older attempt\n", ".git/heads.py": b"# no\n"})


def honest_zip(method: int, top: str = "carol/", sep: str = "/") -> Callable[[Path], None]:
    def build(path: Path) -> None:
        write_zip(path, {top + rel.replace("/", sep): data for rel, data in HONEST.items()}, method)

    return build


def encrypted(path: Path) -> None:
    write_zip(path, HONEST, zipfile.ZIP_STORED)
    patch_members(path, "flags", 0x1, add_bits=True)


def deflate64(path: Path) -> None:
    write_zip(path, HONEST, zipfile.ZIP_STORED)
    patch_members(path, "method", 9)


def sparse(path: Path) -> None:
    write_tree(path, {"tasks/heads.py": HEADS, "minbert/optimizer.py": b""})
    os.truncate(path / "minbert/optimizer.py", 64 << 30)


BOMBS: dict[tuple[int, int], bytes] = {}


def bomb(method: int, mib: int, declared: int | None = None) -> Callable[[Path], None]:
    """A zip bomb; ``declared``: the size its headers claim instead of the true one."""

    def build(path: Path) -> None:
        if (method, mib) not in BOMBS:  # built once, copied for each lie
            zeros_zip(path, method, mib)
            BOMBS[method, mib] = path.read_bytes()
        path.write_bytes(BOMBS[method, mib])
        if declared is not None:
            patch_members(path, "file_size", declared)

    return build


def link_member(path: Path) -> None:
    info = zipfile.ZipInfo("minbert/optimizer.py")
    info.create_system = 3  # Unix: the high 16 bits of external_attr are st_mode
    info.external_attr = (stat.S_IFLNK | 0o777) << 16
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(info, "../../../etc/passwd")


def link_file(path: Path) -> None:
    write_tree(path, {"tasks/heads.py": HEADS})
    target = path.parent.parent / "secret.py"  # in tmp_path, beside the class folder
    target.write_bytes(b"SECRET = 1\n")
    (path / "minbert").mkdir()
    (path / "minbert/optimizer.py").symlink_to(target)


def fifo(path: Path) -> None:
    write_tree(path, {"tasks/heads.py": HEADS})
    (path / "minbert").mkdir()
    os.mkfifo(path / "minbert/optimizer.py")


def latin1(path: Path) -> None:
    write_tree(path, {"minbert/optimizer.py": b"caf\xe9 = 1\n", "tasks/heads.py": HEADS})


def latin1_member(path: Path) -> None:
    write_zip(path, {"minbert/optimizer.py": b"caf\xe9 = 1\n", "tasks/heads.py": HEADS})


def many_files(path: Path) -> None:
    write_tree(path, HONEST)
    crowd = path / "crowd"
    crowd.mkdir()
    (crowd / "0.txt").touch()
    for i in range(1, 30_000):  # hard links: 30,000 names, made much faster than 30,000 files
        os.link(crowd / "0.txt", crowd / f"{i}.txt")


def many_members(path: Path) -> None:
    """A zip whose end record declares 30,000 members (it holds two)."""
    write_zip(path, HONEST)
    data = bytearray(path.read_bytes())
    struct.pack_into("<HH", data, len(data) - 22 + 8, 30_000, 30_000)
    path.write_bytes(bytes(data))


def truncated(path: Path) -> None:
    write_zip(path, HONEST)
    path.write_bytes(path.read_bytes()[:60])


def garbage(path: Path) -> None:
    path.write_bytes(b"PK\x03\x04" + bytes(range(256)) * 40)


def twice(path: Path) -> None:
    write_tree(path, {"a/optimizer.py": OPTIMIZER, "b/optimizer.py": OPTIMIZER})
    write_tree(path, {"tasks/heads.py": HEADS})


def plain_file(path: Path) -> None:
    path.write_text("not a submission\n")


def link_entry(path: Path) -> None:
    path.symlink_to(path.parent / "v-alice")


def fifo_entry(path: Path) -> None:
    os.mkfifo(path)


# (entry's file name, builder, the shown name, the exact problem (a regex), the files taken)
CASES: list[tuple[str, Callable[[Path], None], str, str, dict[str, bytes]]] = [
    ("v-alice", honest_folder, "v-alice", "", HONEST),
    ("v-carol.zip", honest_zip(zipfile.ZIP_DEFLATED), "v-carol", "", HONEST),
    ("v-dan.zip", honest_zip(zipfile.ZIP_STORED, top=""), "v-dan", "", HONEST),
    ("v-dora.zip", honest_zip(zipfile.ZIP_BZIP2), "v-dora", "", HONEST),
    ("v-lena.zip", honest_zip(zipfile.ZIP_LZMA), "v-lena", "", HONEST),
    ("v-win.zip", honest_zip(zipfile.ZIP_DEFLATED, "win\\", "\\"), "v-win", "", HONEST),
    ("\x1b[31mred\x1b[0m", honest_folder, "[31mred[0m", "", HONEST),
    (HYPERLINK, honest_folder, HYPERLINK, "", HONEST),
    (
        "x-encrypted.zip",
        encrypted,
        "x-encrypted",
        r"member minbert/optimizer\.py is encrypted",
        {},
    ),
    (
        "x-deflate64.zip",
        deflate64,
        "x-deflate64",
        r"member minbert/optimizer\.py is compressed with method 9 \(deflate64\), "
        r"which zipfile cannot read",
        {},
    ),
    (
        "x-sparse",
        sparse,
        "x-sparse",
        rf"minbert/optimizer\.py is larger than 1 MiB \({64 << 30} bytes\)",
        {},
    ),
    (
        "x-bomb.zip",
        bomb(zipfile.ZIP_DEFLATED, 200),
        "x-bomb",
        rf"member minbert/optimizer\.py is larger than 1 MiB \({200 << 20} bytes\)",
        {},
    ),
    (
        "x-bomb-lying.zip",
        bomb(zipfile.ZIP_DEFLATED, 200, declared=1000),
        "x-bomb-lying",
        r"member minbert/optimizer\.py is not readable \(BadZipFile: Bad CRC-32 .*\)",
        {},
    ),
    (
        "x-bzip2-bomb.zip",
        bomb(zipfile.ZIP_BZIP2, 64, declared=1000),
        "x-bzip2-bomb",
        r"member minbert/optimizer\.py is larger than 1 MiB",
        {},
    ),
    (
        "x-lzma-bomb.zip",
        bomb(zipfile.ZIP_LZMA, 32, declared=MEMBER_BYTES),
        "x-lzma-bomb",
        r"member minbert/optimizer\.py is larger than 1 MiB",
        {},
    ),
    (
        "x-link-member.zip",
        link_member,
        "x-link-member",
        r"member minbert/optimizer\.py is a link",
        {},
    ),
    ("x-link", link_file, "x-link", r"minbert/optimizer\.py is a link", {}),
    ("x-fifo", fifo, "x-fifo", r"minbert/optimizer\.py is a FIFO, not a plain file", {}),
    (
        "x-latin1",
        latin1,
        "x-latin1",
        r"minbert/optimizer\.py is not UTF-8 \(invalid continuation byte at byte 3\)",
        {},
    ),
    (
        "x-latin1-member.zip",
        latin1_member,
        "x-latin1-member",
        r"member minbert/optimizer\.py is not UTF-8 \(invalid continuation byte at byte 3\)",
        {},
    ),
    ("x-many", many_files, "x-many", rf"more than {ENTRIES} files and folders in it", {}),
    (
        "x-members.zip",
        many_members,
        "x-members",
        rf"more than {ENTRIES} members in it \(30000\)",
        {},
    ),
    (
        "x-truncated.zip",
        truncated,
        "x-truncated",
        r"not a readable zip \(BadZipFile: File is not a zip file\)",
        {},
    ),
    (
        "x-garbage.zip",
        garbage,
        "x-garbage",
        r"not a readable zip \(BadZipFile: File is not a zip file\)",
        {},
    ),
    ("x-twice", twice, "x-twice", "", {"tasks/heads.py": HEADS}),
    ("x-notes.txt", plain_file, "x-notes.txt", r"not a folder or a \.zip \(a plain file\)", {}),
    ("x-shortcut", link_entry, "x-shortcut", r"not a folder or a \.zip \(a link\)", {}),
    ("x-fifo-entry.zip", fifo_entry, "x-fifo-entry", r"not a folder or a \.zip \(a FIFO\)", {}),
    ("\x1b\x07", honest_folder, "(no name)", r"its name is empty once control .*; rename it", {}),
]
COLLIDING = [
    ("v-bob", honest_folder, "its name collides with v-bob.zip; rename one"),
    ("v-bob.zip", honest_zip(zipfile.ZIP_DEFLATED), "its name collides with v-bob; rename one"),
    ("v-Kim", honest_folder, "its name collides with v-kim.zip; rename one"),
    ("v-kim.zip", honest_zip(zipfile.ZIP_DEFLATED), "its name collides with v-Kim; rename one"),
    ("v-eve", honest_folder, r"its name collides with v-eve\x07; rename one"),
    ("v-eve\x07", honest_folder, "its name collides with v-eve; rename one"),
]
NOT_UTF8 = b"caf\xe9"  # a folder name in Latin-1


@pytest.fixture(scope="module")
def class_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("intake") / "class"
    folder.mkdir()
    for name, build, *_ in CASES + COLLIDING:
        build(folder / name)
    honest_folder(Path(os.fsdecode(os.path.join(os.fsencode(folder), NOT_UTF8))))
    return folder


@pytest.fixture(scope="module")
def entries(class_folder: Path) -> list[Entry]:
    return list_class(class_folder)


@contextlib.contextmanager
def deadline(seconds: int):
    """A hang (a FIFO opened for reading waits for a writer) fails the test instead."""

    def stop(*_):
        raise TimeoutError(f"reading took more than {seconds} s: blocked?")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def read_bounded(entry: Entry) -> Submission:
    """``entry.read(WANTED)``, failing if it hangs or its memory peaks past PEAK_BYTES."""
    tracemalloc.start()
    try:
        with deadline(30):
            submission = entry.read(WANTED)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES, f"{entry.name}: reading took {peak >> 20} MiB"
    return submission


def by_name(entries: list[Entry], name: str) -> Entry:
    [entry] = [e for e in entries if e.name == name]
    return entry


def test_entries_listed_in_name_order_without_reading(entries: list[Entry]) -> None:
    """Listing reads no content: every entry is there, in the order of its file name."""
    names = sorted([c[0] for c in CASES + COLLIDING] + [os.fsdecode(NOT_UTF8)])
    assert [e.path.name for e in entries] == names
    assert all(isinstance(e, Entry) for e in entries)


@pytest.mark.parametrize(
    "name, shown, problem, files", [c[:1] + c[2:] for c in CASES], ids=[c[2] for c in CASES]
)
def test_each_entry_read(entries, name, shown, problem, files) -> None:
    """Each entry's exact files, or its exact one-line problem and no files."""
    [entry] = [e for e in entries if e.path.name == name]
    submission = read_bounded(entry)
    assert submission.name == shown
    assert re.fullmatch(problem, submission.problem) if problem else not submission.problem
    assert submission.files == files
    assert clean(submission.problem) == submission.problem
    assert clean(submission.note) == submission.note


@pytest.mark.parametrize("name, _, problem", COLLIDING, ids=[clean(c[0]) for c in COLLIDING])
def test_colliding_names_both_refused(entries, name, _, problem) -> None:
    """Entries that would share a results file are both refused, each naming the other."""
    [entry] = [e for e in entries if e.path.name == name]
    submission = read_bounded(entry)
    assert (submission.problem, submission.files) == (problem, {})


def test_names_made_inert_and_noted(entries: list[Entry]) -> None:
    red = read_bounded(by_name(entries, "[31mred[0m"))
    assert red.note == "its name has control characters (removed)"
    latin = read_bounded(by_name(entries, "caf\\xe9"))
    assert (latin.files, latin.note) == (HONEST, "its name is not UTF-8 (shown with \\x escapes)")


def test_a_file_found_twice_by_name_is_not_taken(entries: list[Entry]) -> None:
    submission = read_bounded(by_name(entries, "x-twice"))
    assert re.fullmatch(
        r"minbert/optimizer\.py found 2 times \([ab]/optimizer\.py, [ab]/optimizer\.py\): "
        r"none taken",
        submission.note,
    )


def test_the_link_target_is_not_read(entries: list[Entry]) -> None:
    submission = read_bounded(by_name(entries, "x-link"))
    assert b"SECRET" not in b"".join(submission.files.values())


def test_total_bytes_capped(tmp_path: Path) -> None:
    """Nine files of 1 MiB each are each allowed, and together refused (8 MiB)."""
    wanted = [f"minbert/part{i}.py" for i in range(9)]
    write_tree(tmp_path / "class/v-big", {rel: b"#" * MEMBER_BYTES for rel in wanted})
    [entry] = list_class(tmp_path / "class")
    submission = entry.read(wanted)
    assert submission.problem == "its exercise files come to more than 8 MiB"
    assert entry.read(wanted[:8]).files == {rel: b"#" * MEMBER_BYTES for rel in wanted[:8]}


def test_a_folder_holding_the_students_zip_names_it(tmp_path: Path) -> None:
    """A folder with no exercise files but the student's own zip: the problem says to unpack it."""
    (tmp_path / "class" / "carol" / "work").mkdir(parents=True)
    write_zip(tmp_path / "class" / "carol" / "work" / "carol.zip", HONEST)
    [entry] = list_class(tmp_path / "class")
    problem = entry.read(WANTED).problem
    assert problem == "no exercise files found, but a zip: work/carol.zip; unpack it", problem


def test_long_names_shortened(tmp_path: Path) -> None:
    folder = tmp_path / "class"
    honest_folder(Path(os.fsdecode(os.path.join(os.fsencode(folder), b"\xff" * 250))))
    [entry] = list_class(folder)
    assert len(entry.name.encode()) <= 200 and entry.name.endswith("…")
    assert entry.read(WANTED).files == HONEST


def test_clean_removes_control_characters() -> None:
    assert clean("a\x1b[31mb\x1b[0m") == "a[31mb[0m"
    assert clean("tab\there\r\nnew\x00nul\x7fdel\x85nel\x9bcsi") == "tabherenewnuldelnelcsi"
    assert clean("bidi\u202eevil\u2066x\u2069\u200f") == "bidievilx"
    assert clean("line\u2028para\u2029") == "linepara"
    for kept in ("  two  spaces ", "café ünïcödé 名前", "\N{WOMAN}\u200d\N{PERSONAL COMPUTER}", ""):
        assert clean(kept) == kept


def test_csv_cell_defuses_formulas() -> None:
    for formula in (HYPERLINK, "+1", "-1", "@SUM(A1:A9)", "=1+1"):
        assert csv_cell(formula) == "'" + formula
    assert csv_cell("\t=1") == "'=1"  # the tab is removed, then the formula defused
    assert csv_cell("\r-2") == "'-2"
    assert csv_cell("  =1") == "'  =1"
    assert csv_cell("\x1b=cmd") == "'=cmd"  # ESC removed, then the formula defused
    assert csv_cell("\x1b]8;;evil\x07text") == "]8;;eviltext"
    for text in ("bob", "", "a=b", "graded", "2.5", "0", "not graded: timeout (see v-bob.log)"):
        assert csv_cell(text) == text
