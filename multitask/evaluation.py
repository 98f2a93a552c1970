"""Evaluation and prediction with a multitask model: each head's outputs over a list of examples,
the task's predictions from them, the dev metrics, and the fit of the cosine-similarity heads
before training.

    outputs = head_outputs(model, task, examples, tokenizer, batch_size=64, device=device)
    labels = predictions(model, task, examples, tokenizer, 64, device)   # classes, 0/1, scores
    metrics = evaluate(model, {"sst": dev}, tokenizer, 64, device)     # {"sst": ..., "overall"}
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from tqdm import tqdm

from minbert.tokenizer import Tokenizer
from multitask.batching import length_grouped_batches, make_batch
from multitask.collate import EncodedSplit
from multitask.model import MultitaskModel
from tasks.base import Task, get_task
from tasks.heads import CosineSimilarityHead
from tasks.metrics import OVERALL_TASKS, overall_score
from tasks.reader import Example

if TYPE_CHECKING:
    from multitask.run import RunFolder


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Eval mode (no dropout) inside the block, then the mode the model had: the one place where
    a run switches between training and evaluation."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@torch.no_grad()
def head_outputs(
    model: MultitaskModel,
    task: Task,
    examples: Sequence[Example],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    progress: bool = False,
    encoded: EncodedSplit | None = None,
) -> torch.Tensor:
    """The head's (N, C) outputs for the examples, in their order, in eval mode (float32, CPU);
    batches grouped by length for speed (the longest first). An output depends on its batch's
    padding in the last float bits, so the same batch size gives the same outputs bit for bit.
    ``encoded``: the examples already tokenized (``EncodedSplit``, e.g. on the device since the
    run's set-up), else they are tokenized here. The outputs stay on the device until the
    last batch, then come to the host in one copy (no read of the device per batch).
    ``progress`` shows a bar (standard error) when there are at least 10 batches."""
    if encoded is None:
        encoded = EncodedSplit(task, examples, tokenizer, model.encodes_separately(task))
    encoded = encoded.to(device)  # once; nothing to do for a split moved at the run's set-up
    batches = length_grouped_batches(encoded.full_lengths, batch_size, None)
    chunks = []
    bar = tqdm(batches, desc=task.name, unit="batch", disable=not progress or len(batches) < 10)
    with evaluating(model):
        for indices in bar:
            batch = make_batch(encoded, indices)
            with autocast or contextlib.nullcontext():
                chunks.append(model(task.name, batch).float())
    outputs = torch.empty(len(examples), task.num_outputs)
    if chunks:
        outputs[[i for indices in batches for i in indices]] = torch.cat(chunks).cpu()
    return outputs


def predictions(
    model: MultitaskModel,
    task: Task,
    examples: Sequence[Example],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    encoded: EncodedSplit | None = None,
) -> list:
    """The task's predictions (class, 0/1, score) of ``head_outputs``, in the examples' order."""
    return task.outputs_to_labels(
        head_outputs(
            model, task, examples, tokenizer, batch_size, device, autocast, encoded=encoded
        )
    )


def evaluate(
    model: MultitaskModel,
    dev: dict[str, Sequence[Example]],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    encoded: dict[str, EncodedSplit] | None = None,
) -> dict[str, float]:
    """Each task's dev metric (task -> dev examples) and the overall score: the course's
    (tasks/metrics.py), or for tasks outside it alone (``--tasks cfimdb``) the mean metric.
    ``encoded``: task -> its dev examples already tokenized (``encode_splits``)."""
    metrics = {}
    for name, examples in dev.items():
        task, cached = get_task(name), (encoded or {}).get(name)
        found = predictions(model, task, examples, tokenizer, batch_size, device, autocast, cached)
        metrics[name] = task.metric(found, [e.label for e in examples])
    scored = any(name in OVERALL_TASKS for name in metrics)
    metrics["overall"] = overall_score(metrics) if scored else sum(metrics.values()) / len(metrics)
    return metrics


def calibrate_similarity_heads(
    model: MultitaskModel,
    train: dict[str, Sequence[Example]],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    examples: int = 2048,
) -> dict[str, tuple[float, float]]:
    """Fit the a and b of every cosine-similarity head (``CosineSimilarityHead.calibrate``) to
    ``examples`` training pairs of its task spread evenly over its file (task -> training
    examples), with the model as it is before the first step, and say so; returns task -> (a, b)
    for the heads it set."""
    fitted = {}
    for name, task_examples in train.items():
        head = model.heads[name]
        if not isinstance(head, CosineSimilarityHead) or not task_examples:
            continue
        sample = list(task_examples[:: -(-len(task_examples) // examples)])
        outputs = head_outputs(model, model.tasks[name], sample, tokenizer, batch_size, device)
        cosine = (outputs.squeeze(-1) - head.shift.detach().cpu()) / head.scale.detach().cpu()
        if head.calibrate(cosine, torch.tensor([float(e.label) for e in sample])):
            fitted[name] = (head.scale.item(), head.shift.item())
            print(
                f"[{name}] cosine head fitted to {len(sample)} training pairs: "
                f"ŷ = {fitted[name][0]:.3f}·cos + {fitted[name][1]:.3f}"
            )
    return fitted


def write_predictions(
    folder: RunFolder, model, data, tokenizer, batch_size: int, device, autocast
) -> None:
    """<task>-<split>-output.csv in ``folder`` for the dev and test files (task -> split ->
    examples) in the course's format, as ``predictions`` gives them."""
    if not folder.writes:
        return
    folder.path.mkdir(parents=True, exist_ok=True)
    for name, splits in data.items():
        for split in ("dev", "test"):
            if split in splits:
                task, examples = get_task(name), splits[split]
                found = predictions(model, task, examples, tokenizer, batch_size, device, autocast)
                path = folder.file(f"{name}-{split}-output.csv")
                task.write_predictions(path, [e.id for e in examples], found)
    print(f"predictions written to {folder.path}")
