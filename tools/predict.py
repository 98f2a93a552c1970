"""Predictions of a trained run on your own sentences.

    python -m tools.predict RUN_DIR --task sts --input pairs.txt [--output FILE [--overwrite]]
    echo "a gorgeous, witty film" | python -m tools.predict RUN_DIR --task sst --input -

Output, to standard output or ``--output FILE``: one line per input line (a csv header gives the
output's header), in the input's order and format, with the task's fields:

    sst-like (classes)   class, and with --probabilities each class's probability
    para (binary)        probability: of a paraphrase
    sts (regression)     score: the similarity on the task's scale

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from minbert.checkpoint import write_output
from minbert.flags import ArgumentParser
from minbert.pretrained import CheckpointError, resolve_checkpoint_dir
from multitask.devices import THREADS_RANGE, pick_device, set_threads
from multitask.errors import UsageError, run_command
from multitask.evaluation import head_outputs
from multitask.run import folder_kind
from multitask.trained import TrainedRun
from tasks.base import TASKS, RegressionTask, Task, get_task
from tasks.reader import Example, SkippedRow, _check_is_utf8_text, empty_text_problem

FORMATS = ("text", "csv", "jsonl")
SUFFIXES = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}


@dataclass
class Lines:
    """An input read line by line: the examples, the bad lines, and how to write the output."""

    format: str
    examples: list[Example] = field(default_factory=list)  # Example.line: its input line
    bad: list[SkippedRow] = field(default_factory=list)
    total: int = 0  # input lines, a csv header included
    delimiter: str = ","  # csv only


def physical_lines(raw: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based number, bytes) of each line; a final newline ends the last line, it starts none;
    CRLF reads as LF; a UTF-8 byte-order mark before the first line is dropped."""
    raw = raw.removeprefix(b"\xef\xbb\xbf")
    pieces = raw.split(b"\n")
    if pieces[-1] == b"":
        pieces.pop()
    for number, piece in enumerate(pieces, start=1):
        yield number, piece.removesuffix(b"\r")


def read_input(raw: bytes, name: str, task: Task, format: str) -> Lines:
    """Every line of ``raw`` as an example of ``task`` or a bad line (see the module docstring).
    A whole file the training reader refuses (UTF-16, NUL bytes, CR-only line ends) is refused
    here in the same words."""
    _check_is_utf8_text(name, raw)
    lines = Lines(format)
    columns = ["sentence1", "sentence2"] if task.is_pair else ["sentence"]
    header: list[str] | None = None
    for number, data in physical_lines(raw):
        lines.total += 1
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            lines.bad.append(SkippedRow(name, number, f"not valid UTF-8 at byte {err.start}"))
            if format == "csv" and header is None:
                raise UsageError(f"{name}:1: the csv header is not valid UTF-8") from None
            continue
        if format == "csv" and header is None:
            lines.delimiter = "\t" if "\t" in text else ","
            header = [c.strip() for c in next(csv.reader([text], delimiter=lines.delimiter))]
            if missing := [c for c in columns if c not in header]:
                raise UsageError(
                    f"{name}:1: the header names no column {' or '.join(missing)} (task "
                    f"{task.name} reads {', '.join(columns)}); it has: {', '.join(header)}"
                )
            continue
        try:
            texts = _sentences(text, format, columns, header, lines.delimiter)
        except ValueError as err:
            lines.bad.append(SkippedRow(name, number, str(err)))
            continue
        lines.examples.append(Example(id=str(number), texts=texts, label=None, line=number))
    if format == "csv" and header is None:
        raise UsageError(f"{name}: empty: a csv input needs a header line naming its columns")
    return lines


def _sentences(
    text: str, format: str, columns: list[str], header: list[str] | None, delimiter: str
) -> tuple[str, ...]:
    """The sentences of one line, or a ValueError saying what is wrong with it."""
    if not text.strip():
        raise ValueError("empty line")
    if format == "text":
        values = text.split("\t")
        if len(values) != len(columns):
            want = "two sentences separated by one tab" if len(columns) == 2 else "one sentence"
            raise ValueError(f"expected {want}, found {len(values)} tab-separated fields")
    elif format == "csv":
        assert header is not None
        try:
            row = next(csv.reader([text], delimiter=delimiter, strict=True), [])
        except csv.Error:
            raise ValueError(
                "a quoted field is not closed on its line (none may span lines)"
            ) from None
        if len(row) != len(header):
            raise ValueError(f"expected {len(header)} fields as in the header, found {len(row)}")
        values = [row[header.index(c)] for c in columns]
    else:
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"not valid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(record, dict) or any(c not in record for c in columns):
            raise ValueError(f"expected a JSON object with the key(s) {', '.join(columns)}")
        values = [record[c] for c in columns]
        if not all(isinstance(v, str) for v in values):
            raise ValueError(f"the values of {', '.join(columns)} must be strings")
    empty = [problem for c, v in zip(columns, values) if (problem := empty_text_problem(c, v))]
    if empty:
        raise ValueError("; ".join(empty))
    return tuple(v.strip() for v in values)


def field_names(task: Task, probabilities: bool) -> list[str]:
    """The output's columns for the task: what ``Task.describe`` gives, probabilities spread."""
    described = task.describe(torch.zeros(1, task.num_outputs), probabilities)[0]
    names = [k for k in described if k != "probabilities"]
    return names + [f"p_{c}" for c in range(len(described.get("probabilities", [])))]


def flat_values(row: dict[str, Any]) -> list[str]:
    values = [v for k, v in row.items() if k != "probabilities"] + row.get("probabilities", [])
    return [repr(v) if isinstance(v, float) else str(v) for v in values]


def format_output(
    lines: Lines, rows: dict[int, dict], bad: dict[int, str], names: list[str]
) -> str:
    """The output text: line N answers input line N (``rows``: line -> fields; ``bad``: line ->
    what was wrong)."""
    out = io.StringIO()
    writer = csv.writer(out, delimiter=lines.delimiter, lineterminator="\n")
    for number in range(1, lines.total + 1):
        row = rows.get(number)
        if lines.format == "text":
            out.write("\t".join(flat_values(row)) + "\n" if row else "\n")
        elif lines.format == "jsonl":
            out.write(json.dumps(row if row else {"error": bad[number]}) + "\n")
        elif number == 1:
            writer.writerow(names)
        else:
            writer.writerow(flat_values(row) if row else [""] * len(names))
    return out.getvalue()


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m tools.predict",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished train_multitask.py run folder")
    p.add_argument("--task", required=True, choices=sorted(TASKS), help="the task to predict")
    p.add_argument("--input", required=True, metavar="FILE", help="input file, or - for stdin")
    p.add_argument("--output", metavar="FILE", help="output file (default: standard output)")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an --output file that already exists"
    )
    p.add_argument(
        "--format",
        choices=FORMATS,
        help="input (and output) format (default: from the suffix: "
        ".csv csv, .jsonl/.json jsonl, else text; standard input: text)",
    )
    p.add_argument(
        "--probabilities", action="store_true", help="classifiers: also each class's probability"
    )
    p.add_argument(
        "--batch_size",
        type=int,
        default=None,
        help="examples per batch (default: the run's evaluation batch size, twice its "
        "--batch_size, which reproduces its prediction files bit for bit)",
    )
    p.add_argument("--strict", action="store_true", help="a line that cannot be read is an error")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N or auto")
    p.add_argument(
        "--threads", type=int, default=None, help=f"CPU threads for torch ({THREADS_RANGE})"
    )
    return p


def check_output(output: str, input: str, run: TrainedRun, overwrite: bool = False) -> None:
    """--output names a new or ordinary file of the user's: never the input, a folder, nor a file
    inside the run, its checkpoint, or any other run, checkpoint or export folder; an existing
    file (or a link to one) only with ``overwrite``. A FIFO or a name under /dev (/dev/stdout,
    whatever it points to) is written through."""
    path = Path(output)
    if output == "":
        raise UsageError("--output: an empty path; give a file name, or leave --output out")
    if path.is_dir():
        raise UsageError(f"--output {output} is a folder; give a file name")
    if input != "-" and path.resolve() == Path(input).resolve():
        raise UsageError(f"--output {output} is the input file; choose another file")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise UsageError(f"--output {output}: the folder {parent} does not exist")
    try:
        protected = [run.path.resolve(), resolve_checkpoint_dir(run.settings.checkpoint).resolve()]
    except CheckpointError:
        protected = [run.path.resolve()]
    inside = [p for p in protected if p == parent or p in parent.parents]
    if inside or folder_kind(parent):
        what = f"the folder {inside[0]}" if inside else folder_kind(parent)
        raise UsageError(
            f"--output {output} is inside {what}, which predict never writes into; choose a "
            "file elsewhere"
        )
    if path.is_file() and not overwrite and path.parts[:2] != ("/", "dev"):  # /dev/stdout too
        raise UsageError(f"--output {output} exists; pass --overwrite to replace it")


def read_raw(input: str) -> bytes:
    """The bytes of --input: a file, or standard input for ``-``."""
    if input == "-":
        try:
            return sys.stdin.buffer.read()
        except (AttributeError, OSError, ValueError):  # no stdin (<&-), or a closed one
            raise UsageError("--input -: standard input is closed; give a file") from None
    if input == "":
        raise UsageError("--input: an empty path; give a file, or - for standard input")
    if not Path(input).is_file():
        raise UsageError(f"--input {input}: file not found")
    try:
        return Path(input).read_bytes()
    except OSError as err:
        raise UsageError(f"--input {input}: cannot read ({err.strerror})") from None


def predict_command(args: argparse.Namespace) -> None:
    if args.batch_size is not None and args.batch_size < 1:
        raise UsageError(f"--batch_size {args.batch_size}: must be at least 1")
    set_threads(args.threads)
    run = TrainedRun(args.run_dir)
    if args.output is not None:
        check_output(args.output, args.input, run, args.overwrite)
    run.check_task(args.task)
    task, device = get_task(args.task), pick_device(args.device)
    if args.probabilities and isinstance(task, RegressionTask):
        raise UsageError(f"--probabilities: task {task.name} gives a score, not classes")
    from_stdin = args.input == "-"
    name = "<stdin>" if from_stdin else args.input
    raw = read_raw(args.input)
    format = args.format or ("text" if from_stdin else SUFFIXES.get(Path(name).suffix, "text"))
    lines = read_input(raw, name, task, format)
    for row in lines.bad:
        if args.strict:
            raise UsageError(f"{row} (--strict)")
        print(row, file=sys.stderr)
    model, tokenizer = run.task_model(args.task).to(device), run.tokenizer()
    batch_size = args.batch_size or run.eval_batch_size
    outputs = head_outputs(model, task, lines.examples, tokenizer, batch_size, device, None, True)
    described = task.describe(outputs, args.probabilities)
    rows = {e.line: fields for e, fields in zip(lines.examples, described, strict=True)}
    bad = {row.line: row.reason for row in lines.bad}
    text = format_output(lines, rows, bad, field_names(task, args.probabilities))
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)
    if lines.bad:
        print(
            f"{len(lines.bad)} of {lines.total} lines could not be read (listed above); their "
            "output lines are empty",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: predict_command(args), "no output was written")


if __name__ == "__main__":
    sys.exit(main())
