"""Turn a list of examples into a model batch: tokenized inputs, labels and ids.

A batch is a dict:
    inputs          list of tokenized sequences, each {input_ids, token_type_ids, attention_mask}
                    of shape (B, T): one for single sentences and cross-encoded pairs
                    ([CLS] a [SEP] b [SEP]), two for pairs encoded separately
    labels          (B,) tensor, or None when the split has no labels
    ids             the examples' ids, for prediction files
    num_truncated   how many sequences were cut to the tokenizer's max_length
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import torch

from minbert.tokenizer import Tokenizer
from tasks.base import Task
from tasks.reader import Example


def token_lengths(
    task: Task, examples: Sequence[Example], tokenizer: Tokenizer, separate: bool
) -> list[int]:
    """Length of each example in tokens (the longer side for separately encoded pairs); used to
    group examples of similar length into batches so that little compute goes to padding."""
    if not task.is_pair:
        return tokenizer.count_tokens([e.texts[0] for e in examples])
    firsts = [e.texts[0] for e in examples]
    seconds = [e.texts[1] for e in examples]
    if separate:
        return [
            max(a, b)
            for a, b in zip(tokenizer.count_tokens(firsts), tokenizer.count_tokens(seconds))
        ]
    return tokenizer.count_tokens(firsts, seconds)


def collate(task: Task, examples: Sequence[Example], tokenizer: Tokenizer, separate: bool) -> dict:
    """Tokenize a list of examples into one batch (see the module docstring)."""
    if not task.is_pair:
        encoded = [tokenizer([e.texts[0] for e in examples])]
    elif separate:
        encoded = [tokenizer([e.texts[i] for e in examples]) for i in (0, 1)]
    else:
        encoded = [tokenizer([e.texts[0] for e in examples], [e.texts[1] for e in examples])]
    labels = [e.label for e in examples]
    return {
        "inputs": [{k: v for k, v in enc.items() if k != "num_truncated"} for enc in encoded],
        "labels": None if any(label is None for label in labels) else task.label_tensor(labels),
        "ids": [e.id for e in examples],
        "num_truncated": sum(enc["num_truncated"] for enc in encoded),
    }


def swap_at_random(examples: Sequence[Example]) -> list[Example]:
    """Each pair in its given order or swapped, (a, b) or (b, a), with probability ½ each (drawn
    from torch's global generator, so a seeded run is reproducible). Only for tasks whose label
    does not depend on the order (``Task.symmetric``): a cheap augmentation that shows a
    cross-encoder both orders of the same pair."""
    flips = (torch.rand(len(examples)) < 0.5).tolist()
    return [
        replace(e, texts=(e.texts[1], e.texts[0])) if flip else e
        for e, flip in zip(examples, flips)
    ]


def batch_to(batch: dict, device: torch.device) -> dict:
    """Move a batch to ``device``. For a GPU the tensors are pinned first and copied without
    blocking, so the copy overlaps the work the GPU still has queued."""

    def move(t: torch.Tensor) -> torch.Tensor:
        if device.type != "cuda":
            return t.to(device)
        return t.pin_memory().to(device, non_blocking=True)

    moved = dict(batch)
    moved["inputs"] = [{k: move(v) for k, v in seq.items()} for seq in batch["inputs"]]
    if batch["labels"] is not None:
        moved["labels"] = move(batch["labels"])
    return moved
