"""Read the course's tab-separated data files into examples, reporting every row it skips.

File format (CS224N default final project): UTF-8 text, one record per line, fields separated by
tabs. The first line is a header naming the columns; the first column is an unnamed row index
(in the ``*-test-student.csv`` files there are two index columns, named ``0`` and ``""``). The
columns this reader uses are found by NAME: ``id``, the sentence column(s) and, in labelled
files, the label column. Every other column is ignored.

A row with any problem is skipped and reported as ``SkippedRow(path, line, reason)`` (all of the
row's problems, joined by "; "); with ``strict=True`` the first such row raises ``DataError``.
Problems that make the whole file unusable (missing file, empty file, no rows, a header without a
needed column) always raise ``DataError``. Messages read ``path:line: what is wrong``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DataError", "Example", "SkippedRow", "format_skip_report", "read_examples"]

ID_COLUMN = "id"
PREDICTION_SEPARATOR = " , "  # between id and prediction in the course's prediction files
_BOM = "\ufeff"


@dataclass
class Example:
    """One readable row of a data file."""

    id: str
    texts: tuple[str, ...]  # (sentence,) or (sentence1, sentence2)
    label: int | float | None  # None for unlabeled test files
    line: int  # 1-based physical line number in the file (for messages)


@dataclass
class SkippedRow:
    """A row that could not be read, and why."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


class DataError(ValueError):
    """A data file, or a row of it, cannot be read. The message names file, line and problem."""


def read_examples(
    path: str | Path,
    text_columns: list[str],
    label_column: str | None,
    parse_label: Callable[[str], int | float],
    strict: bool = False,
    require_label: bool = False,
) -> tuple[list[Example], list[SkippedRow]]:
    """Read a tab-separated course data file (the format: see the module docstring).

    How a line becomes an example (or a ``SkippedRow``; nothing is dropped without one):

    1. The file is split into physical lines on ``\\n`` (a trailing ``\\r`` is removed, so CRLF
       files read the same; a UTF-8 byte-order mark before the header is removed). Each line is
       decoded on its own, so invalid UTF-8 costs that line only, and is reported with its position.
    2. A line is split on every tab (``csv.QUOTE_NONE`` semantics). A quote character therefore
       never joins lines or hides tabs: a stray ``"`` costs at most its own row. The original course
       loader (``csv.DictReader`` with quotechar ``"``) reads an unbalanced quote as the start of a
       quoted field that runs on, over tabs and line ends, to the next quote, silently merging the
       following rows into one.
    3. A line must have exactly as many fields as the header (a blank line is reported too).
    4. Fields in the files were written with CSV quoting: a field that contains a ``"`` is wrapped
       in quotes with inner quotes doubled (``"a ""b"" c"`` means ``a "b" c``). A field that starts
       with ``"`` is unquoted that way, which gives the same text as the course loader. A field that
       starts with ``"`` but is not a well-formed quoted field (no closing quote, or a lone inner
       quote) is an "unbalanced quote": the row is skipped, since the course loader would have
       merged rows there. A ``"`` inside an unquoted field (``a 5" screen``) is literal text, as in
       csv.
    5. The id and the sentences are stripped of surrounding whitespace and must not be empty; ids
       must be unique within the file; the label, when the file has a label column, must be present
       and accepted by ``parse_label``.

    Args:
        path: the file.
        text_columns: header names of the sentence column(s), e.g. ``["sentence1", "sentence2"]``.
        label_column: header name of the label column, or None to read no label. A file without
            this column (a test file) reads with ``label=None`` unless ``require_label``.
        parse_label: turns the label field into a label; raises ``ValueError(reason)`` on bad input.
        strict: raise ``DataError`` at the first unreadable row instead of skipping it.
        require_label: a missing label column is an error (for training and dev files).

    Returns:
        ``(examples, skipped)``: the readable rows in file order, and one ``SkippedRow`` for every
        other line after the header. Every line after the header is in exactly one of the two.

    Raises:
        DataError: missing or empty file, header-only file, a needed column missing from the
            header, a header that is not UTF-8, or (``strict``) any unreadable row.
    """
    name = str(path)
    lines = _read_lines(name, Path(path))
    header = _read_header(name, lines[0])
    if all(not line.strip() for line in lines[1:]):
        raise DataError(f"{name}: no rows (the file has a header line only)")
    layout = _locate_columns(name, header, text_columns, label_column, require_label)

    examples: list[Example] = []
    skipped: list[SkippedRow] = []
    first_line_of_id: dict[str, int] = {}
    for line_number, line_bytes in enumerate(lines[1:], start=2):
        problems, example = _read_row(
            line_bytes, line_number, layout, parse_label, first_line_of_id
        )
        if problems:
            reason = "; ".join(problems)
            if strict:
                raise DataError(f"{name}:{line_number}: {reason}")
            skipped.append(SkippedRow(name, line_number, reason))
        else:
            assert example is not None
            first_line_of_id[example.id] = line_number
            examples.append(example)
    return examples, skipped


def format_skip_report(skipped: Sequence[SkippedRow]) -> str:
    """Every skipped row as ``file:line: reason``, one per line, then a count line.

    The count line reads ``N rows skipped`` (with ``in M files`` when there are several files).
    """
    lines = [str(s) for s in skipped]
    files = {s.path for s in skipped}
    count = f"{len(skipped)} row{'' if len(skipped) == 1 else 's'} skipped"
    if len(files) > 1:
        count += f" in {len(files)} files"
    lines.append(count)
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------
# Helpers: the file


@dataclass(frozen=True)
class _Columns:
    """Where the fields this reader uses sit in a file's header (indices into a row's fields)."""

    header: list[str]  # every column name of the header line, in order
    id_index: int
    text_indices: list[int]
    text_columns: list[str]  # the names of the sentence columns, for messages
    label_index: int | None  # None: the file has no label column, or none is read
    label_column: str | None


def _read_lines(name: str, path: Path) -> list[bytes]:
    """The file's physical lines as bytes (the header first), after the whole-file checks:
    it exists, is a readable regular file of UTF-8 text, and is not empty."""
    if not path.exists():
        raise DataError(f"{name}: file not found")
    if not path.is_file():
        raise DataError(f"{name}: not a regular file")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise DataError(f"{name}: cannot be read ({err.strerror or err})") from None
    _check_is_utf8_text(name, raw)
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line does not start another one
    if not lines or (len(lines) == 1 and _strip_bom(lines[0]).strip() == b""):
        raise DataError(f"{name}: empty file (expected a header line and rows)")
    return lines


def _check_is_utf8_text(name: str, raw: bytes) -> None:
    """Whole-file problems that would otherwise show as a confusing error on every row."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(
            f"{name}: the file is UTF-16 text (it starts with a UTF-16 byte-order "
            "mark); expected UTF-8: save it as UTF-8"
        )
    if raw and raw.count(b"\x00") * 2 >= len(raw):
        raise DataError(
            f"{name}: the file is mostly NUL bytes (a binary or zero-filled file), not UTF-8 text"
        )
    if b"\x00" in raw:
        line = raw[: raw.index(b"\x00")].count(b"\n") + 1
        raise DataError(f"{name}:{line}: NUL byte in the text (expected UTF-8 text without NULs)")
    if b"\r" in raw and b"\n" not in raw.rstrip(b"\r"):
        raise DataError(
            f"{name}: the lines end with CR alone (old Mac line ends); expected LF or "
            "CRLF: convert the file, e.g. tr '\\r' '\\n'"
        )


def has_visible_text(text: str) -> bool:
    """True when ``text`` has a character that is not whitespace, a control, a format character,
    a zero-width space or a combining mark (categories C*, Z*, M*): a sentence of only those
    (``"\u200b\u200b"``, a lone accent ``"\u0301"``) reads as empty. A mark on a letter
    (``"e\u0301"``) is text: the letter is visible."""
    return any(not (ch.isspace() or unicodedata.category(ch)[0] in "CZM") for ch in text)


def empty_text_problem(column: str, text: str) -> str | None:
    """How the reader reports a sentence that holds nothing (``empty sentence``, or ``empty
    sentence (only invisible characters: '\\u200b')``), or None when it holds text; predict and
    the attention command report such input in the same words."""
    if text == "":
        return f"empty {column}"
    if not has_visible_text(text):
        return f"empty {column} (only invisible characters: {ascii(text)})"
    return None


def _strip_bom(line: bytes) -> bytes:
    return line[3:] if line.startswith(_BOM.encode("utf-8")) else line


def _decode(line: bytes) -> str:
    """Decode one line; a trailing CR (CRLF line ends) is not part of the text."""
    if line.endswith(b"\r"):
        line = line[:-1]
    return line.decode("utf-8")


def _describe_decode_error(line: bytes, error: UnicodeDecodeError) -> str:
    bad = " ".join(f"0x{byte:02x}" for byte in line[error.start : error.end])
    return f"invalid UTF-8: byte {bad} at byte offset {error.start} of the line"


def _read_header(name: str, line: bytes) -> list[str]:
    try:
        header = _decode(_strip_bom(line))
    except UnicodeDecodeError as error:
        raise DataError(f"{name}:1: header is not {_describe_decode_error(line, error)}") from None
    if not header.strip():
        raise DataError(f"{name}:1: the header line is blank")
    return [column.strip() for column in header.split("\t")]


def _show_columns(columns: list[str]) -> str:
    return ", ".join(repr(c) for c in columns)


def _column_index(name: str, columns: list[str], column: str) -> int:
    matches = [i for i, c in enumerate(columns) if c == column]
    if not matches:
        raise DataError(
            f"{name}:1: no column {column!r} in the header (columns: {_show_columns(columns)})"
        )
    if len(matches) > 1:
        raise DataError(f"{name}:1: column {column!r} appears {len(matches)} times in the header")
    return matches[0]


def _locate_columns(
    name: str,
    header: list[str],
    text_columns: list[str],
    label_column: str | None,
    require_label: bool,
) -> _Columns:
    """Find the id, sentence and label columns by name in the header; a needed column that is
    missing (or named twice) is a ``DataError``."""
    id_index = _column_index(name, header, ID_COLUMN)
    text_indices = [_column_index(name, header, c) for c in text_columns]
    label_index = None
    if label_column is not None:
        if label_column in header:
            label_index = _column_index(name, header, label_column)
        elif require_label:
            raise DataError(
                f"{name}:1: no label column {label_column!r} in the header "
                f"(columns: {_show_columns(header)})"
            )
    return _Columns(header, id_index, text_indices, list(text_columns), label_index, label_column)


# ----------------------------------------------------------------------------------------------
# Helpers: one row


def _unquote(field: str) -> str | None:
    """Undo CSV quoting of one field; None when the field's quotes are unbalanced.

    ``"a ""b"" c"`` -> ``a "b" c``; a field not starting with a quote is returned unchanged.
    """
    if not field.startswith('"'):
        return field
    inner = field[1:-1]
    if len(field) < 2 or not field.endswith('"') or '"' in inner.replace('""', ""):
        return None
    return inner.replace('""', '"')


def _split_line(line_bytes: bytes, header: list[str]) -> tuple[list[str], str | None]:
    """A line's tab-separated fields, or ([], the problem) when it is not valid UTF-8, is
    blank, or has another number of fields than the header."""
    try:
        line = _decode(line_bytes)
    except UnicodeDecodeError as error:
        return [], _describe_decode_error(line_bytes, error)
    if not line.strip():
        return [], "blank line"
    fields = line.split("\t")
    if len(fields) != len(header):
        # Under csv quoting a quoted field may hold a tab or a line break; this reader does not
        # join lines, so say so when the line has a quote.
        hint = (
            " (the line has a '\"': a quoted field with a tab or line break?)"
            if '"' in line
            else ""
        )
        return [], (
            f"expected {len(header)} tab-separated columns as in the header, "
            f"found {len(fields)}{hint}"
        )
    return fields, None


class _Row:
    """The fields of one line of the right width, and the problems found in them so far."""

    def __init__(self, fields: list[str], header: list[str]) -> None:
        self.fields, self.header = fields, header
        self.problems: list[str] = []

    def field(self, index: int) -> str | None:
        """Field ``index`` unquoted and stripped; None (and a problem) when its quotes are
        unbalanced."""
        value = _unquote(self.fields[index])
        if value is None:
            self.problems.append(
                f"unbalanced quote in column {self.header[index]!r}: the field starts with '\"' "
                f"but is not a well-formed quoted field (a csv reader would merge rows here)"
            )
            return None
        return value.strip()


def _row_id(row: _Row, index: int, first_line_of_id: dict[str, int]) -> str | None:
    """The row's id; a problem when it is empty, holds the prediction files' separator or was
    seen on an earlier line."""
    example_id = row.field(index)
    if example_id == "":
        row.problems.append("empty id")
    elif example_id is not None and PREDICTION_SEPARATOR in example_id:
        row.problems.append(
            f"id {example_id!r} contains {PREDICTION_SEPARATOR!r}, the separator of the "
            "prediction files, so its predictions could not be read back"
        )
    elif example_id is not None and example_id in first_line_of_id:
        first = first_line_of_id[example_id]
        row.problems.append(f"duplicate id {example_id!r} (first seen on line {first})")
    return example_id


def _row_texts(row: _Row, layout: _Columns) -> list[str | None]:
    """The row's sentences; a problem for each one that is empty or only invisible characters."""
    texts = []
    for index, column in zip(layout.text_indices, layout.text_columns, strict=True):
        text = row.field(index)
        if text is not None and (problem := empty_text_problem(column, text)):
            row.problems.append(problem)
        texts.append(text)
    return texts


def _row_label(
    row: _Row, layout: _Columns, parse_label: Callable[[str], int | float]
) -> int | float | None:
    """The row's label (None when the file has no label column); a problem when the label is
    missing or ``parse_label`` refuses it."""
    if layout.label_index is None:
        return None
    raw_label = row.field(layout.label_index)
    if raw_label == "":
        row.problems.append(f"missing label (column {layout.label_column!r} is empty)")
    elif raw_label is not None:
        try:
            return parse_label(raw_label)
        except ValueError as error:
            row.problems.append(
                f"bad label {raw_label!r} in column {layout.label_column!r}: {error}"
            )
    return None


def _read_row(
    line_bytes: bytes,
    line_number: int,
    layout: _Columns,
    parse_label: Callable[[str], int | float],
    first_line_of_id: dict[str, int],
) -> tuple[list[str], Example | None]:
    """Read one line after the header: (problems, example); the example is None if problems."""
    fields, problem = _split_line(line_bytes, layout.header)
    if problem is not None:
        return [problem], None
    row = _Row(fields, layout.header)
    example_id = _row_id(row, layout.id_index, first_line_of_id)
    texts = _row_texts(row, layout)
    label = _row_label(row, layout, parse_label)
    if row.problems:
        return row.problems, None
    assert example_id is not None and all(t is not None for t in texts)
    return [], Example(id=example_id, texts=tuple(texts), label=label, line=line_number)  # type: ignore[arg-type]
