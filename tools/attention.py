"""Attention maps for your own sentence: a page a student opens and a figure a lecture shows.

    python -m tools.attention RUN_DIR --task sst --input "a gorgeous, witty film" --out film
    python -m tools.attention RUN_DIR --task sts --input "A man plays a guitar." \\
        --pair "Someone plays music." --out guitar
    python -m tools.attention --checkpoint default --input "the cat sat on the mat" --out cat

For every layer l and head h the attention probabilities are

    P = softmax(Q Kᵀ / √d_k + M),   Q = X W_h^Q,  K = X W_h^K,  X the layer's input

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from minbert.attention_maps import attention_maps
from minbert.bert import BertModel
from minbert.checkpoint import atomic_write, atomic_write_text
from minbert.flags import ArgumentParser
from minbert.pretrained import (
    CheckpointError,
    load_config,
    load_pretrained,
    resolve_checkpoint_dir,
)
from minbert.tokenizer import Tokenizer
from multitask.collate import Batch
from multitask.devices import THREADS_RANGE, set_threads
from multitask.errors import UsageError, run_command
from multitask.model import MultitaskModel
from multitask.run import folder_kind
from multitask.trained import TrainedRun
from tasks.base import TASKS, Task, get_task
from tasks.reader import empty_text_problem

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PAGE_TEMPLATE = Path(__file__).with_name("attention_page.html")
DATA_MARK = "__ATTENTION_DATA__"
CHECKPOINT_MAX_LENGTH = 128  # --checkpoint: the driver's default --max_length
ENCODER = "encoder"  # the name of BERT's own attention among the page's maps


@dataclass
class Subject:
    """What is looked at: the encoder, its tokenizer, and with a run the task and its model."""

    bert: BertModel
    tokenizer: Tokenizer
    source: str  # where it came from, in words
    task: Task | None = None
    model: MultitaskModel | None = None
    separate: bool = False  # a pair encoded one sentence at a time
    protected: list[Path] = field(default_factory=list)  # folders --out never writes into


@dataclass
class Encoded:
    """One encoded sequence: its tokens and its attention maps, name -> (L, nh, T, T)."""

    label: str
    tokens: list[str]
    maps: dict[str, torch.Tensor] = field(default_factory=dict)
    truncated: bool = False


def open_run(run_dir: str, task_name: str | None) -> Subject:
    """The task's model of a finished run, as ``python -m tools.predict`` uses it."""
    if task_name is None:
        raise UsageError("--task: name the task of RUN_DIR whose model to look inside")
    run = TrainedRun(run_dir)
    run.check_task(task_name)
    task = get_task(task_name)
    model, tokenizer = run.task_model(task_name), run.tokenizer()
    source = f"run {run.path} (--option {run.settings.option}), task {task_name}"
    separate = model.encodes_separately(task)
    protected = [run.path.resolve()]
    with contextlib.suppress(CheckpointError):
        protected.append(resolve_checkpoint_dir(run.settings.checkpoint).resolve())
    return Subject(model.bert, tokenizer, source, task, model, separate, protected)


def open_checkpoint(checkpoint: str, task_name: str | None) -> Subject:
    """A plain pretrained encoder, without a run (pairs as one sequence, as BERT reads them)."""
    if task_name is not None:
        raise UsageError(
            f"--task {task_name} goes with RUN_DIR: a checkpoint has no task heads (train a run "
            "and give its folder to see the task's model and prediction)"
        )
    directory = resolve_checkpoint_dir(checkpoint)
    bert = load_pretrained(directory).eval()
    length = min(CHECKPOINT_MAX_LENGTH, load_config(directory).max_position_embeddings)
    try:
        tokenizer = Tokenizer.from_checkpoint(directory, length)
    except ValueError as err:
        raise UsageError(f"--checkpoint {checkpoint}: {err}") from None
    source = f"checkpoint {directory} (no task head)"
    return Subject(bert, tokenizer, source, protected=[Path(directory).resolve()])


def check_inputs(subject: Subject, first: str, second: str | None) -> list[str]:
    """The sentences to encode, or a UsageError saying what is missing or empty."""
    if problem := empty_text_problem("sentence", first):
        raise UsageError(f"--input: {problem}; give the sentence to look at")
    if second is not None and (problem := empty_text_problem("sentence", second)):
        raise UsageError(f"--pair: {problem}; give the second sentence, or leave --pair out")
    task = subject.task
    if task is not None and task.is_pair and second is None:
        raise UsageError(f"--task {task.name} reads two sentences: give the second with --pair")
    if task is not None and not task.is_pair and second is not None:
        raise UsageError(f"--task {task.name} reads one sentence: leave --pair out")
    return [first.strip()] + ([] if second is None else [second.strip()])


def tokenize(subject: Subject, sentences: list[str]) -> tuple[list[str], list[dict]]:
    """(label, tokenized batch of one) of each sequence the model encodes: one for a sentence or
    a pair read as one sequence ([CLS] a [SEP] b [SEP]), two for a pair encoded apart."""
    tok = subject.tokenizer
    if len(sentences) == 1:
        return ["sentence"], [tok(sentences)]
    if subject.separate:
        return ["sentence 1", "sentence 2"], [tok([s]) for s in sentences]
    return ["the pair, one sequence"], [tok([sentences[0]], [sentences[1]])]


@torch.no_grad()
def look(subject: Subject, sentences: list[str]) -> tuple[list[Encoded], dict[str, Any] | None]:
    """Each encoded sequence with its attention maps, and the task's prediction (None without a
    run): the fields of ``Task.describe`` with the class probabilities."""
    labels, batches = tokenize(subject, sentences)
    task_name = None if subject.task is None else subject.task.name
    sequences = []
    for label, batch in zip(labels, batches):
        inputs = {k: v for k, v in batch.items() if k != "num_truncated"}
        try:
            with attention_maps(subject.bert) as captured:
                subject.bert(**inputs, task=task_name)
        except NotImplementedError as err:  # the course's student tree, an exercise not done yet
            raise UsageError(f"the model needs an exercise that is not done yet: {err}") from None
        maps = {ENCODER: torch.stack(captured.attentions)[:, 0]}  # L×(1, nh, T, T) -> (L, nh, T, T)
        for name, per_layer in captured.plugin_attentions.items():
            maps[name] = torch.stack(per_layer)[:, 0]
        for name, probs in maps.items():
            if not torch.isfinite(probs).all():
                raise UsageError(f"the {name} attention is not finite: the weights hold NaN or inf")
        tokens = [subject.tokenizer.backend.id_to_token(i) for i in inputs["input_ids"][0].tolist()]
        sequences.append(Encoded(label, tokens, maps, batch["num_truncated"] > 0))
    if subject.model is None or subject.task is None:
        return sequences, None
    inputs = [{k: v for k, v in b.items() if k != "num_truncated"} for b in batches]
    outputs = subject.model(subject.task.name, Batch(inputs, None)).float()
    return sequences, subject.task.describe(outputs, probabilities=True)[0]


def prediction_text(task: Task | None, fields: dict[str, Any] | None) -> str:
    """The prediction in one line, e.g. ``class 4; probabilities 0: 0.012, 1: 0.020, ...``."""
    if task is None or fields is None:
        return "none: a checkpoint has no task head (give a run folder to see a prediction)"
    parts = []
    for key, value in fields.items():
        if key == "probabilities":
            parts.append("probabilities " + ", ".join(f"{c}: {p:.3f}" for c, p in enumerate(value)))
        else:
            parts.append(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}")
    return "; ".join(parts)


def json_numbers(values: torch.Tensor) -> str:
    """A float32 tensor as nested JSON arrays, each number the shortest decimal that reads back
    as the same float32 (so the page holds the model's values exactly, in few characters)."""
    text = values.detach().float().cpu().numpy().astype(np.float32).astype(str)
    rows = ["[" + ",".join(row) + "]" for row in text.reshape(-1, text.shape[-1])]
    for size in reversed(values.shape[:-1]):
        rows = ["[" + ",".join(rows[i : i + size]) + "]" for i in range(0, len(rows), size)]
    return rows[0]


def page_data(
    subject: Subject,
    sentences: list[str],
    sequences: list[Encoded],
    fields: dict[str, Any] | None,
) -> str:
    """The page's data as JSON text, safe inside a script element (every ``<`` escaped)."""
    arrays: dict[str, str] = {}
    described = []
    for s in sequences:
        maps = {}
        for name, probs in s.maps.items():
            mark = f"@@{len(arrays)}@@"
            arrays[mark] = json_numbers(probs)
            maps["PAL (projected space)" if name == "pals" else name] = mark
        described.append({"label": s.label, "tokens": s.tokens, "maps": maps})
    task = subject.task
    data = {
        "source": subject.source,
        "task": None if task is None else task.name,
        "task_description": None if task is None else task.description,
        "prediction": prediction_text(task, fields),
        "fields": fields,
        "inputs": sentences,
        "max_length": subject.tokenizer.max_length,
        "truncated": any(s.truncated for s in sequences),
        "sequences": described,
    }
    text = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    for mark, numbers in arrays.items():
        text = text.replace(f'"{mark}"', numbers, 1)
    return text


def attention_figure(tokens: list[str], maps: torch.Tensor, title: str) -> Figure:
    """A matplotlib figure: one image per layer (row) and head (column) of the (L, nh, T, T)
    maps, queries down and keys across, on one colour scale 0..1, the tokens along the first
    column and the last row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L, nh, T, _ = maps.shape
    cell = min(max(1.3, 0.13 * T), 4.0)  # inches per matrix
    font = max(2.0, min(8.0, 0.75 * 72 * cell / T))
    fig, axes = plt.subplots(
        L, nh, figsize=(nh * cell + 2.5, L * cell + 1.5), squeeze=False, layout="constrained"
    )
    for l in range(L):
        for h in range(nh):
            ax = axes[l, h]
            image = ax.imshow(maps[l, h].cpu().numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
            ax.set_xticks(range(T), tokens if l == L - 1 else [], rotation=90, fontsize=font)
            ax.set_yticks(range(T), tokens if h == 0 else [], fontsize=font)
            ax.tick_params(length=0)
            if l == 0:
                ax.set_title(f"head {h + 1}", fontsize=9)
            if h == 0:
                ax.set_ylabel(f"layer {l + 1}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight (row: query, column: key)")
    fig.suptitle(title, fontsize=11)
    return fig


def write_figure(path: Path, tokens: list[str], maps: torch.Tensor, title: str) -> None:
    import matplotlib.pyplot as plt

    fig = attention_figure(tokens, maps, title)
    try:
        atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100))
    finally:
        plt.close(fig)


def output_paths(out: str, figures: int, overwrite: bool, protected: list[Path]) -> list[Path]:
    """The files ``--out`` names (OUT.html, then OUT.png and OUT-2.png ... one per figure),
    checked before anything is computed: never a folder, never inside a run, export or
    checkpoint folder (``protected``: the run looked at and its checkpoint, at any depth), and
    an existing file only with ``--overwrite``. Missing folders above OUT are made when writing."""
    if out == "":
        raise UsageError(
            "--out: an empty path; give a file name (OUT.html and OUT.png are written)"
        )
    given = Path(out)
    if given.is_dir() or out.endswith(("/", os.sep)):
        raise UsageError(
            f"--out {out} is a folder; give a file name in it (e.g. --out {given / 'attention'}: "
            f"{given / 'attention.html'} and {given / 'attention.png'} are written)"
        )
    stem = given.with_suffix("") if given.suffix.lower() in (".html", ".png") else given
    if not stem.name or stem.name in (".", ".."):
        raise UsageError(f"--out {out!r}: give a file name (OUT.html and OUT.png are written)")
    names = [f"{stem.name}.html"] + [
        f"{stem.name}{'' if n == 1 else f'-{n}'}.png" for n in range(1, figures + 1)
    ]
    paths = [stem.with_name(name) for name in names]
    check_output_folder(out, stem.parent, protected)
    if odd := [p for p in paths if p.exists() and not p.is_file()]:
        raise UsageError(f"--out {out}: {odd[0]} exists and is not a file; choose another --out")
    if (existing := [str(p) for p in paths if p.exists()]) and not overwrite:
        raise UsageError(
            f"--out {out}: {', '.join(existing)} already exist(s); this command writes "
            f"{', '.join(str(p) for p in paths)}: pass --overwrite to replace them, or another "
            "--out"
        )
    return paths


def check_output_folder(out: str, folder: Path, protected: list[Path]) -> None:
    """The folder --out writes into: not under a file, not a run, export or checkpoint folder
    nor inside one (a checkpoint folder is recognised where it is OUT's own folder)."""
    existing = folder.resolve()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"--out {out}: {existing} is a file, not a folder; choose another --out")
    for depth, above in enumerate([existing, *existing.parents]):
        kind = folder_kind(above)
        if kind == "a checkpoint folder" and depth > 0:
            kind = None
        if above in protected:
            kind = kind or "the folder of the run or checkpoint looked at"
        if kind:
            raise UsageError(
                f"--out {out}: {above} is {kind}, which this command never writes into; choose "
                "a file elsewhere"
            )


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m tools.attention",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "run_dir", metavar="RUN_DIR", nargs="?", help="a finished train_multitask.py run folder"
    )
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        help="instead of RUN_DIR: a pretrained checkpoint directory ('default': the packaged one)",
    )
    p.add_argument(
        "--task", metavar="TASK", help=f"the run's task whose model to look at ({', '.join(TASKS)})"
    )
    p.add_argument("--input", required=True, metavar="TEXT", help="the sentence")
    p.add_argument("--pair", metavar="TEXT", help="the second sentence, for a pair task")
    p.add_argument(
        "--out",
        required=True,
        metavar="OUT",
        help="writes OUT.html and OUT.png (and OUT-2.png for a pair encoded apart); an existing "
        "folder is refused (name a file in it), so is an existing file without --overwrite, and "
        "anything inside a run, export or checkpoint folder",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace OUT.html and OUT.png where they exist"
    )
    p.add_argument(
        "--threads", type=int, default=None, help=f"CPU threads for torch ({THREADS_RANGE})"
    )
    return p


def attention_command(args: argparse.Namespace) -> list[Path]:
    """Write the page and the figures (see the module docstring); returns their paths."""
    if (args.run_dir is None) == (args.checkpoint is None):
        raise UsageError("give either RUN_DIR (a finished run) or --checkpoint DIR, not both")
    set_threads(args.threads)
    if args.run_dir is not None:
        subject = open_run(args.run_dir, args.task)
    else:
        subject = open_checkpoint(args.checkpoint, args.task)
    sentences = check_inputs(subject, args.input, args.pair)
    figures = 2 if len(sentences) == 2 and subject.separate else 1
    written = output_paths(args.out, figures, args.overwrite, subject.protected)
    sequences, fields = look(subject, sentences)
    page = PAGE_TEMPLATE.read_text(encoding="utf-8")
    html = page.replace(DATA_MARK, page_data(subject, sentences, sequences, fields), 1)
    try:
        written[0].parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"--out {args.out}: cannot make its folder ({err.strerror})") from None
    atomic_write_text(written[0], html)
    for path, s in zip(written[1:], sequences, strict=True):
        title = f"{subject.source}: {s.label}, P = softmax(QKᵀ/√d_k + M)"
        write_figure(path, s.tokens, s.maps[ENCODER], title)
    print(f"prediction: {prediction_text(subject.task, fields)}")
    if any(s.truncated for s in sequences):
        print(f"note: the input was cut to {subject.tokenizer.max_length} tokens", file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in written) + f" (open {written[0]} in a browser)")
    return written


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(lambda: attention_command(args))


if __name__ == "__main__":
    sys.exit(main())
