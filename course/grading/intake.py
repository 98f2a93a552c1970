"""Read a class of submissions, every one of them treated as hostile.

SUBMISSIONS_DIR holds one entry per student, a folder or a .zip; the grader takes from each
only the exercise files. Reading neither hangs, nor fills the memory or the disk, nor follows a
link out of the entry, nor lets one entry overwrite another's results, nor raises: whatever a
submission does becomes a one-line ``Submission.problem`` on its own row.

    entries = list_class(folder)         # names only: no file is opened yet
    for entry in entries:
        submission = entry.read(wanted)  # its exercise files, or the problem that stopped it

Standard library only. How each hazard is met: docs/design/course.md.
"""

from __future__ import annotations

import bz2
import lzma
import os
import stat
import struct
import unicodedata
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from course.grading.inert import clean

COLLIDES = "its name collides with"  # the start of such a problem: no results file is written
MEMBER_BYTES = 1 << 20  # one exercise file; the largest given one is a few dozen KiB
TOTAL_BYTES = 8 << 20  # all the exercise files of one submission together
ENTRIES = 20_000  # files and folders looked at in a folder, members in a zip
DIRECTORY_BYTES = 4 << 20  # a zip's list of members (about 20,000 members with long names)
NAME_BYTES = 200  # a shown name, in UTF-8: "{name}.json" and its temporary file fit in 255
SHOWN_CHARS = 100  # a name quoted inside a problem or a note
CHUNK = 64 << 10  # compressed bytes read at a time
# Folders never holding a student's own exercise files, whose thousands of files would otherwise
# count against ENTRIES (and whose copies of the package would make a file ambiguous).
SKIPPED = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules", "site-packages"})
READABLE = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}
# The names of the other methods of the zip specification, to name them in a problem.
METHODS = {
    1: "shrink",
    6: "implode",
    9: "deflate64",
    10: "implode",
    93: "zstandard",
    95: "xz",
    96: "jpeg",
    97: "wavpack",
    98: "ppmd",
    99: "aes",
}
# Everything reading a submission can raise because of what is in it (NotImplementedError and
# the decompressors' errors included: RuntimeError and OSError cover them; a string of bytes
# that is not UTF-8 is a ValueError); MemoryError for an allocation a header asked for.
READ_ERRORS = (
    OSError,
    EOFError,
    RuntimeError,
    ValueError,
    OverflowError,
    MemoryError,
    struct.error,
    zlib.error,
    lzma.LZMAError,
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
)
END = struct.Struct("<4s4H2LH")  # a zip's end-of-directory record
LOCATOR = struct.Struct("<4sLQL")  # the zip64 locator right before it
END64 = struct.Struct("<4sQ2H2L4Q")  # the zip64 end record right before that
LOCAL = struct.Struct("<4s5H3L2H")  # a member's local header


@dataclass
class Submission:
    """One entry of SUBMISSIONS_DIR: its shown name, its exercise files (relative path ->
    bytes), or why none were taken (``problem``, one line); ``note``: what else to tell."""

    name: str
    files: dict[str, bytes]
    problem: str = ""
    note: str = ""


class Refused(Exception):
    """A submission cannot be taken; the message is its one-line problem."""


@dataclass
class Entry:
    """One entry of SUBMISSIONS_DIR, listed but not read: ``name`` is its shown name, ``kind``
    ``"folder"`` or ``"zip"``, ``problem`` set where it is refused without being read."""

    name: str
    path: Path
    kind: str
    source: str  # the entry's own name as inert text, to name it in another entry's problem
    problem: str = ""
    note: str = ""

    def read(self, wanted: list[str]) -> Submission:
        """The exercise files ``wanted`` (paths relative to the project), each at that path,
        or else at a path that ends with it, or else by file name anywhere in the entry (a
        file found more than once this way is not taken, and a note says so). Never raises for
        anything in the submission: each such thing is the Submission's problem."""
        notes = [self.note] if self.note else []
        if self.problem:
            return Submission(self.name, {}, self.problem, "; ".join(notes))
        reader = read_folder if self.kind == "folder" else read_zip
        try:
            files, said = reader(self.path, wanted)
        except Refused as err:
            return Submission(self.name, {}, clean(str(err)), "; ".join(notes))
        except READ_ERRORS as err:
            return Submission(self.name, {}, f"not readable ({error_text(err)})", "; ".join(notes))
        return Submission(self.name, files, "", clean("; ".join(notes + said)))


def list_class(folder: Path) -> list[Entry]:
    """Every entry of ``folder`` in name order, nothing in them read; an entry that is not a
    folder or a .zip, or whose shown name meets another's, is refused here."""
    entries = [list_entry(folder, name) for name in sorted(os.listdir(folder))]
    refuse_collisions(entries)
    return entries


def list_entry(folder: Path, name: str) -> Entry:
    """One entry, from its name and ``lstat`` alone."""
    path = folder / name
    is_zip = name.lower().endswith(".zip") and len(name) > 4
    shown, notes = shown_name(name[:-4] if is_zip else name)
    entry = Entry(shown or "(no name)", path, "", quoted(name), note="; ".join(notes))
    try:
        mode = os.lstat(path).st_mode
    except OSError as err:
        entry.problem = f"not readable ({error_text(err)})"
        return entry
    if stat.S_ISDIR(mode):
        entry.kind = "folder"
    elif stat.S_ISREG(mode) and is_zip:
        entry.kind = "zip"
    else:
        entry.problem = f"not a folder or a .zip ({kind_of(mode)})"
    if not shown:
        entry.problem = "its name is empty once control characters are removed; rename it"
    return entry


def shown_name(name: str) -> tuple[str, list[str]]:
    """A file name as the name of a row and of its results files: bytes that are not UTF-8 as
    \\xNN, control characters removed, at most NAME_BYTES long; and notes saying what changed."""
    escaped = printable(name)
    shown = clean(escaped)
    notes = []
    if escaped != name:
        notes.append("its name is not UTF-8 (shown with \\x escapes)")
    if shown != escaped:
        notes.append("its name has control characters (removed)")
    if len(shown.encode("utf-8")) > NAME_BYTES:
        while len(shown.encode("utf-8")) > NAME_BYTES - 3:  # 3: the "…" in UTF-8
            shown = shown[:-1]
        shown += "…"
        notes.append(f"its name is longer than {NAME_BYTES} bytes (shortened)")
    return shown, notes


def refuse_collisions(entries: list[Entry]) -> None:
    """Refuse every entry whose shown name meets another's: their results files would be one.
    Names are compared as a case-insensitive, normalization-insensitive disk (macOS's) would."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        key = unicodedata.normalize("NFC", entry.name).casefold()
        groups.setdefault(key, []).append(entry)
    for group in groups.values():
        for entry in group if len(group) > 1 else []:
            others = ", ".join(other.source for other in group if other is not entry)
            entry.problem = f"{COLLIDES} {others}; rename one"


def read_folder(root: Path, wanted: list[str]) -> tuple[dict[str, bytes], list[str]]:
    """The wanted files of a folder, and notes; a Refused for what stops it (a folder holding no
    exercise file but a zip: the student's own, to be unpacked)."""
    found, notes, zips = walk(root, {Path(rel).name for rel in wanted})
    if not found and zips:
        raise Refused(f"no exercise files found, but a zip: {quoted(zips[0])}; unpack it")
    chosen, ambiguous = choose(wanted, found)
    files: dict[str, bytes] = {}
    for rel, at in chosen.items():
        files[rel] = read_file(root, found[at])
        check_total(files)
    return files, notes + ambiguous


def walk(root: Path, names: set[str]) -> tuple[list[str], list[str], list[str]]:
    """The relative paths of every non-folder under ``root`` named one of ``names``, never
    through a link nor into SKIPPED, a note where a folder could not be listed, and the paths of
    the zips; a Refused past ENTRIES names."""
    found: list[str] = []
    zips: list[str] = []
    failed: list[str] = []
    pending, seen = [""], 0
    while pending:
        rel = pending.pop()
        try:
            with os.scandir(root / rel) as listing:
                for item in listing:
                    seen += 1
                    if seen > ENTRIES:
                        raise Refused(f"more than {ENTRIES} files and folders in it")
                    path = f"{rel}/{item.name}" if rel else item.name
                    if item.is_dir(follow_symlinks=False):
                        if item.name not in SKIPPED:
                            pending.append(path)
                    elif item.name in names:
                        found.append(path)
                    elif item.name.lower().endswith(".zip"):
                        zips.append(path)
        except OSError as err:
            if not rel:
                raise
            failed.append(f"{quoted(rel)} ({error_text(err)})")
    notes = [f"{len(failed)} folder(s) in it not readable, first {failed[0]}"] if failed else []
    return found, notes, sorted(zips)


def choose(wanted: list[str], found: list[str]) -> tuple[dict[str, int], list[str]]:
    """For each wanted path, the index in ``found`` of its one file: the one at that path, or
    else the one path that ends with it, or else the one file of that name; notes where the
    first of these that matched anything matched more than one."""
    chosen: dict[str, int] = {}
    notes = []
    for rel in wanted:
        name = rel.rsplit("/", 1)[-1]
        tiers = (
            [i for i, path in enumerate(found) if path == rel],
            [i for i, path in enumerate(found) if path.endswith("/" + rel)],
            [i for i, path in enumerate(found) if path.rsplit("/", 1)[-1] == name],
        )
        tier = next((t for t in tiers if t), [])
        if len(tier) == 1:
            chosen[rel] = tier[0]
        elif tier:
            some = ", ".join(quoted(found[i]) for i in tier[:3]) + (
                ", ..." if len(tier) > 3 else ""
            )
            notes.append(f"{rel} found {len(tier)} times ({some}): none taken")
    return chosen, notes


def read_file(root: Path, rel: str) -> bytes:
    """One file of a folder, if it is a plain file of at most MEMBER_BYTES in UTF-8."""
    shown = quoted(rel)
    try:
        check_plain(shown, os.lstat(root / rel))  # before opening: a FIFO blocks the open
        with open(root / rel, "rb", opener=no_follow) as file:
            check_plain(shown, os.fstat(file.fileno()))  # what was opened, if it was swapped
            data = file.read(MEMBER_BYTES + 1)
    except OSError as err:
        raise Refused(f"{shown} is not readable ({error_text(err)})") from None
    if len(data) > MEMBER_BYTES:
        raise Refused(f"{shown} is larger than {MEMBER_BYTES >> 20} MiB")
    return utf8(shown, data)


def no_follow(path: str, flags: int) -> int:
    """``open``'s opener: no link as the last name, and no wait for a FIFO's writer."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK)


def check_plain(shown: str, status: os.stat_result) -> None:
    """A Refused unless ``status`` is a plain file of at most MEMBER_BYTES."""
    if stat.S_ISLNK(status.st_mode):
        raise Refused(f"{shown} is a link")
    if not stat.S_ISREG(status.st_mode):
        raise Refused(f"{shown} is {kind_of(status.st_mode)}, not a plain file")
    if status.st_size > MEMBER_BYTES:
        size = status.st_size
        raise Refused(f"{shown} is larger than {MEMBER_BYTES >> 20} MiB ({size} bytes)")


def read_zip(path: Path, wanted: list[str]) -> tuple[dict[str, bytes], list[str]]:
    """The wanted members of a zip, and notes; a Refused for what stops it."""
    names = {Path(rel).name for rel in wanted}
    with open(path, "rb", opener=no_follow) as fp:
        mode = os.fstat(fp.fileno()).st_mode
        if not stat.S_ISREG(mode):  # swapped since it was listed
            raise Refused(f"not a folder or a .zip ({kind_of(mode)})")
        check_directory(fp)
        try:
            archive = zipfile.ZipFile(fp)
        except READ_ERRORS as err:
            raise Refused(f"not a readable zip ({error_text(err)})") from None
        with archive:
            if len(archive.infolist()) > ENTRIES:  # a record this module's reading missed
                raise Refused(f"more than {ENTRIES} members in it")
            members = [i for i in archive.infolist() if wanted_member(i, names)]
            found = [m.filename.replace("\\", "/") for m in members]  # Windows' separators
            chosen, notes = choose(wanted, found)
            files: dict[str, bytes] = {}
            for rel, at in chosen.items():
                files[rel] = read_member(archive, fp, members[at])
                check_total(files)
    return files, notes


def wanted_member(info: zipfile.ZipInfo, names: set[str]) -> bool:
    """Whether a member may be one of the exercise files: named like one, not in SKIPPED."""
    *folders, name = info.filename.replace("\\", "/").split("/")
    return name in names and not SKIPPED.intersection(folders)


def check_directory(fp: BinaryIO) -> None:
    """A Refused where a zip declares more members than ENTRIES or a member list over
    DIRECTORY_BYTES: zipfile reads the whole list into memory on opening."""
    members, size = directory_extent(fp)
    if members > ENTRIES:
        raise Refused(f"more than {ENTRIES} members in it ({members})")
    if size > DIRECTORY_BYTES:
        raise Refused(f"its list of members is larger than {DIRECTORY_BYTES >> 20} MiB")


def directory_extent(fp: BinaryIO) -> tuple[int, int]:
    """The number of members and the size of the member list that a zip declares, found the way
    zipfile finds them: its end record is the last one in the final 64 KiB + 22 bytes, and a
    zip64 end record with its locator right before it overrides it. (0, 0) where there is no
    end record: zipfile then says the file is not a zip."""
    length = fp.seek(0, os.SEEK_END)
    start = max(length - END.size - 0xFFFF, 0)  # 0xFFFF: the longest comment
    fp.seek(start)
    tail = fp.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < END.size:
        return 0, 0
    members, size = END.unpack_from(tail, at)[4:6]
    where = start + at - LOCATOR.size - END64.size
    if where >= 0:
        fp.seek(where)
        record = fp.read(END64.size + LOCATOR.size)
        if record[:4] == b"PK\x06\x06" and record[END64.size : END64.size + 4] == b"PK\x06\x07":
            members, size = END64.unpack_from(record)[7:9]
    return members, size


def read_member(archive: zipfile.ZipFile, fp: BinaryIO, info: zipfile.ZipInfo) -> bytes:
    """One member, refused by its header where it is encrypted, a link, compressed in a way
    that cannot be read or declared too large, and by its content where it inflates past
    MEMBER_BYTES (whatever its header says) or is not UTF-8."""
    shown = f"member {quoted(info.filename)}"
    if info.flag_bits & 0x1:
        raise Refused(f"{shown} is encrypted")
    if stat.S_ISLNK(info.external_attr >> 16):  # what unzip would make a link
        raise Refused(f"{shown} is a link")
    if info.compress_type not in READABLE:
        method = METHODS.get(info.compress_type, "unknown")
        raise Refused(
            f"{shown} is compressed with method {info.compress_type} ({method}), "
            "which zipfile cannot read"
        )
    # Compressed data a little larger than the data: incompressible text, framing.
    if info.file_size > MEMBER_BYTES or info.compress_size > MEMBER_BYTES + (MEMBER_BYTES >> 4):
        raise Refused(f"{shown} is larger than {MEMBER_BYTES >> 20} MiB ({info.file_size} bytes)")
    try:
        if info.compress_type in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            # zipfile inflates deflate by at most the bytes asked for, and stops at the
            # declared size (then checks the CRC).
            with archive.open(info) as member:
                data = member.read(MEMBER_BYTES + 1)
        else:
            data = inflate(fp, info)
    except READ_ERRORS as err:
        raise Refused(f"{shown} is not readable ({error_text(err)})") from None
    if len(data) > MEMBER_BYTES:
        raise Refused(f"{shown} is larger than {MEMBER_BYTES >> 20} MiB")
    return utf8(shown, data)


def inflate(fp: BinaryIO, info: zipfile.ZipInfo) -> bytes:
    """A bzip2 or LZMA member, decompressed by at most MEMBER_BYTES + 1 bytes whatever its
    data says; then its declared size and CRC-32 are checked unless it ran past that."""
    fp.seek(info.header_offset)
    local = LOCAL.unpack(fp.read(LOCAL.size))  # struct.error where the file ends
    if local[0] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad local header")
    fp.seek(info.header_offset + LOCAL.size + local[-2] + local[-1])  # past its name and extra
    left = info.compress_size
    if info.compress_type == zipfile.ZIP_BZIP2:
        decompressor: bz2.BZ2Decompressor | lzma.LZMADecompressor = bz2.BZ2Decompressor()
    else:
        # zip's LZMA: 2 bytes of version, 2 of the properties' size, the properties, raw LZMA1.
        head = fp.read(4)
        size = int.from_bytes(head[2:4], "little") if len(head) == 4 else 0
        decompressor = lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[lzma1(fp.read(size))])
        left -= 4 + size
    data = bytearray()
    while len(data) <= MEMBER_BYTES and not decompressor.eof:
        chunk = b""
        if decompressor.needs_input:
            chunk = fp.read(max(min(CHUNK, left), 0))
            left -= len(chunk)
            if not chunk:  # the member's data ends (an LZMA member may have no end mark)
                break
        data += decompressor.decompress(chunk, max_length=MEMBER_BYTES + 1 - len(data))
    if len(data) <= MEMBER_BYTES and (len(data) != info.file_size or zlib.crc32(data) != info.CRC):
        raise zipfile.BadZipFile("its size or CRC-32 is not the one declared")
    return bytes(data)


def lzma1(properties: bytes) -> dict:
    """The LZMA1 filter that zip's 5 bytes of properties describe (lc, lp, pb in one byte, then
    the dictionary size). The dictionary is capped: no distance in the first MEMBER_BYTES + 1
    bytes reaches further, and a header asking for 4 GiB would get it allocated."""
    if len(properties) < 5 or properties[0] >= 9 * 5 * 5:
        raise lzma.LZMAError("bad LZMA properties")
    pb, rest = divmod(properties[0], 9 * 5)
    lp, lc = divmod(rest, 9)
    dict_size = min(int.from_bytes(properties[1:5], "little"), 4 * MEMBER_BYTES)
    return {"id": lzma.FILTER_LZMA1, "lc": lc, "lp": lp, "pb": pb, "dict_size": dict_size}


def check_total(files: dict[str, bytes]) -> None:
    """A Refused once the files taken pass TOTAL_BYTES."""
    if sum(len(data) for data in files.values()) > TOTAL_BYTES:
        raise Refused(f"its exercise files come to more than {TOTAL_BYTES >> 20} MiB")


def utf8(shown: str, data: bytes) -> bytes:
    """``data`` if it is UTF-8 text; a Refused naming ``shown`` otherwise."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise Refused(f"{shown} is not UTF-8 ({err.reason} at byte {err.start})") from None
    return data


def printable(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 (surrogate-escaped by os.listdir) as
    \\xNN; any other lone surrogate (a zip's name can hold one) as \\uNNNN."""
    try:
        data = name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return name.encode("utf-8", "backslashreplace").decode("utf-8")
    return data.decode("utf-8", "backslashreplace")


def quoted(name: str, limit: int = SHOWN_CHARS) -> str:
    """A name from a submission for a problem or a note: ``printable``, with what ``clean``
    would remove escaped instead (to tell names apart), at most ``limit`` characters."""
    text = printable(name)
    text = "".join(ch if clean(ch) else escape(ch) for ch in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def escape(ch: str) -> str:
    """One character as a Python escape: \\x1b, \\u202e."""
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def error_text(err: BaseException) -> str:
    """An exception as one short line of inert text."""
    text = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return quoted(f"{type(err).__name__}: {text}", 200)


def kind_of(mode: int) -> str:
    """What a file is, in words."""
    kinds = (
        (stat.S_ISLNK, "a link"),
        (stat.S_ISREG, "a plain file"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    return next((word for test, word in kinds if test(mode)), "an unknown kind of file")
