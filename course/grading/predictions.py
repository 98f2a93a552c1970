"""The leaderboard's reading: the instructor's label files, and a student's prediction files
checked line by line and scored with the tasks' own metrics. Only data is read, never run.

A prediction file is what the driver writes (``Task.write_predictions``), named
``<task>-test-output.csv``: a header ``id \\t <column>``, one ``<id> , <prediction>`` line per
test example. A file that is not one prediction per test id, each in the task's range (what the
task's label parser accepts: SST 0..4, Quora 0/1, STS a finite number in [0, 5]), is bad: its
task scores the floor of its metric (accuracy 0, Pearson r −1), a term of 0 in the overall score,
and the problem is said in one line. A file is opened without following a link, and one larger
than a prediction file of its test set can be is refused before a byte is read.

    labels = read_labels(Path("labels"))                 # LabelsError when unusable
    scores = score_folder(Path("subs/ada"), labels)      # task -> TaskScore
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tasks.base import Task, get_task
from tasks.metrics import OVERALL_TASKS
from tasks.reader import DataError

__all__ = [
    "SCORED_TASKS",
    "BadFile",
    "Labels",
    "LabelsError",
    "TaskScore",
    "floor",
    "label_file_names",
    "prediction_file",
    "read_labels",
    "score_folder",
    "score_task",
    "shown",
]

SCORED_TASKS = tuple(OVERALL_TASKS)  # the tasks of the course's overall score: sst, para, sts
# The worst value of each kind of metric: a task whose file is bad is scored with it, which is
# a term of 0 in the overall score (accuracy 0; Pearson r −1, whose term (r + 1) / 2 is 0).
FLOOR = {"acc": 0.0, "pearson": -1.0}
# Size cap of a prediction file: a header and this many bytes per test id (the driver writes a
# 25-character id and at most 24 characters of prediction: about 55 bytes a line).
HEADER_BYTES = 1024
BYTES_PER_ROW = 256
SHOWN = 40  # characters of a student's text quoted in a message


class LabelsError(ValueError):
    """The label folder cannot be used: the message says which file and what is wrong."""


class BadFile(ValueError):
    """A prediction file that cannot be scored; the message says why, in one line."""


@dataclass(frozen=True)
class Labels:
    """One task's test labels: id -> label, in the label file's order."""

    task: Task
    file: Path
    values: dict[str, int | float]

    @property
    def size_limit(self) -> int:
        """The most bytes a prediction file of this test set may have (see ``BYTES_PER_ROW``)."""
        return HEADER_BYTES + BYTES_PER_ROW * len(self.values)


@dataclass(frozen=True)
class TaskScore:
    """One task of one student: its metric (the floor when the file is bad) and the problem."""

    task: str
    metric: float
    problem: str = ""  # "" when the file was read and scored


def floor(task: Task) -> float:
    """The worst value of ``task``'s metric: what a bad file scores (``FLOOR``)."""
    return FLOOR[task.metric_name]


def prediction_file(task: str) -> str:
    """The name of the driver's test prediction file of ``task`` (multitask/evaluation.py)."""
    return f"{task}-test-output.csv"


def label_file_names(task: Task) -> tuple[str, str]:
    """The names a label file of ``task`` may have in the label folder: the course's test file's
    name without ``-student`` (``ids-sst-test.csv``), or the test file's own name."""
    test = task.files["test"]
    return test.replace("-student", ""), test


def shown(text: str) -> str:
    """A student's text quoted for a one-line message: at most ``SHOWN`` characters, controls,
    line and bidirectional marks escaped (``repr`` escapes what is not printable)."""
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")


# ----------------------------------------------------------------------------------------------
# The label folder


def read_labels(folder: Path) -> dict[str, Labels]:
    """Every scored task's labels from ``folder``; a ``LabelsError`` names the first file that
    is missing, doubled, unreadable or malformed (the project's reader, strict: any bad row)."""
    if not folder.is_dir():
        raise LabelsError(f"{folder}: not a folder")
    labels = {}
    for name in SCORED_TASKS:
        task = get_task(name)
        present = [folder / n for n in label_file_names(task) if (folder / n).exists()]
        wanted = " or ".join(label_file_names(task))
        if not present:
            raise LabelsError(
                f"{folder}: no {name} label file ({wanted}, with a {task.label_column!r} column)"
            )
        if len(present) > 1:
            raise LabelsError(f"{folder}: both {' and '.join(p.name for p in present)}; keep one")
        try:
            examples, _ = task.read(present[0], strict=True, require_label=True)
        except DataError as err:
            raise LabelsError(str(err)) from None
        if len(examples) < 2:
            raise LabelsError(f"{present[0]}: one row; a test set needs at least two")
        labels[name] = Labels(task, present[0], {e.id: e.label for e in examples})
    return labels


# ----------------------------------------------------------------------------------------------
# One prediction file


def read_limited(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, refused unread (``BadFile``) when it is missing,
    a link, not a regular file, or over ``limit`` bytes; opened without following a link and
    without waiting on a pipe, and checked again once open."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise BadFile("missing") from None
    except OSError as err:
        raise BadFile(f"cannot be read ({err.strerror or err})") from None
    if stat.S_ISLNK(info.st_mode):
        raise BadFile("a symbolic link, not read (submit the file itself)")
    if stat.S_ISDIR(info.st_mode):
        raise BadFile("a folder, not a file")
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        handle = os.open(path, flags)
    except OSError as err:
        raise BadFile(f"cannot be read ({err.strerror or err})") from None
    with os.fdopen(handle, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BadFile("not a regular file (a pipe or a device), not read")
        if info.st_size > limit:
            raise BadFile(
                f"{info.st_size:,} bytes, more than a prediction file can need "
                f"({limit:,}); not read"
            )
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise BadFile(f"more than the {limit:,} bytes a prediction file can need; not read")
    return raw


def decoded_lines(raw: bytes) -> list[str]:
    """The file's lines as UTF-8 text (a byte-order mark and CRLF line ends are accepted)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BadFile(
            f"not UTF-8 text (byte 0x{raw[err.start]:02x} at offset {err.start}); "
            "write the file as UTF-8"
        ) from None
    lines = [line.removesuffix("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if not any(line.strip() for line in lines):
        raise BadFile("empty file")
    return lines


def check_header(line: str, labels: Labels, others: list[Labels]) -> None:
    """``id \\t <column>``, the task's column; another scored task's column is named as such."""
    task = labels.task
    columns = [column.strip() for column in line.split("\t")]
    if columns == ["id", task.prediction_header]:
        return
    for other in others:
        if columns[-1] == other.task.prediction_header:
            raise BadFile(
                f"holds {other.task.name} predictions (column {columns[-1]!r}), not "
                f"{task.name}'s ({task.prediction_header!r})"
            )
    raise BadFile(f"wrong header {shown(line)}; expected 'id \\t {task.prediction_header}'")


@dataclass
class Findings:
    """What the lines of one file hold: the predictions by id, and each kind of problem with
    its count and its first instance."""

    predicted: dict[str, int | float] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)
    foreign: dict[str, int] = field(default_factory=dict)  # unknown ids another task knows

    def add(self, kind: str, example: str) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.first.setdefault(kind, example)


def read_line(number: int, line: str, labels: Labels, others: list[Labels], found: Findings):
    """One ``<id> , <prediction>`` line into ``found``: its prediction, or its problem."""
    example_id, comma, value = (part.strip() for part in line.rpartition(","))
    if not comma or not example_id:
        found.add("malformed line", f"{number} ({shown(line)}; expected '<id> , <prediction>')")
        return
    if example_id in found.first_line:
        first = found.first_line[example_id]
        found.add("duplicated id", f"{shown(example_id)} on lines {first} and {number}")
        return
    found.first_line[example_id] = number
    if example_id not in labels.values:
        found.add("unknown id", f"{shown(example_id)} on line {number}")
        for other in others:
            if example_id in other.values:
                found.foreign[other.task.name] = found.foreign.get(other.task.name, 0) + 1
        return
    try:
        found.predicted[example_id] = labels.task.parse_label(value)
    except ValueError as err:
        found.add("bad prediction", f"on line {number}: {shown(value)}: {err}")


def verdict(found: Findings, labels: Labels) -> str:
    """The problems of ``found`` in one line ("" when there are none)."""
    missing = [i for i in labels.values if i not in found.first_line]
    unknown = found.counts.get("unknown id", 0)
    for task, count in found.foreign.items():
        if count == unknown and count * 2 >= len(labels.values):
            return f"its ids are {task}'s test ids: {task} predictions, not {labels.task.name}'s"
    said = []
    for kind, count in found.counts.items():
        more = f" (and {count - 1} more)" if count > 1 else ""
        said.append(f"{kind} {found.first[kind]}{more}")
    if missing:
        said.append(
            f"{len(missing)} of the {len(labels.values)} test ids missing "
            f"(first {shown(missing[0])})"
        )
    return "; ".join(said)


def parse_predictions(raw: bytes, labels: Labels, others: list[Labels]) -> dict[str, int | float]:
    """A prediction for every test id of ``labels``, from a file's bytes; ``BadFile`` saying
    every kind of problem (with its first instance) otherwise."""
    lines = decoded_lines(raw)
    check_header(lines[0], labels, others)
    found = Findings()
    for number, line in enumerate(lines[1:], start=2):
        if line.strip():  # a blank line holds nothing to score
            read_line(number, line, labels, others, found)
    if problems := verdict(found, labels):
        raise BadFile(problems)
    return found.predicted


def score_task(folder: Path, labels: Labels, others: list[Labels]) -> TaskScore:
    """One task of a submission folder, scored with the task's own metric (``Task.metric``,
    what the driver's evaluation uses), or its floor and the problem."""
    task, name = labels.task, prediction_file(labels.task.name)
    try:
        predicted = parse_predictions(
            read_limited(folder / name, labels.size_limit), labels, others
        )
    except BadFile as err:
        return TaskScore(task.name, floor(task), f"{name}: {err}; {task.name} scores 0")
    ids = list(labels.values)
    metric = task.metric([predicted[i] for i in ids], [labels.values[i] for i in ids])
    return TaskScore(task.name, metric)


def score_folder(folder: Path, labels: dict[str, Labels]) -> dict[str, TaskScore]:
    """Every scored task of one submission folder (see ``score_task``)."""
    return {
        name: score_task(folder, own, [o for o in labels.values() if o is not own])
        for name, own in labels.items()
    }
