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

import functools
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


# One tokenized sequence of an example: (token ids, token types, whether it was truncated).
Sequence_ = tuple[list[int], list[int], bool]


class EncodedSplit:
    """A list of examples tokenized once, as the task batches them: per example, each encoded
    sequence's token ids and types, truncated but not padded. ``batch(indices)`` cuts a batch
    from them and pads it to its longest sequence, which gives exactly the tensors tokenizing
    those examples together would (``collate``), without tokenizing again.

    With ``swappable`` a cross-encoded symmetric pair task also keeps each pair tokenized in the
    other order, (b, a), for ``--swap_pairs``; pairs encoded apart swap their two sequences.
    """

    def __init__(
        self,
        task: Task,
        examples: Sequence[Example],
        tokenizer: Tokenizer,
        separate: bool,
        swappable: bool = False,
    ) -> None:
        self.task, self.examples, self.separate = task, examples, separate
        self.pad_id = tokenizer.pad_token_id
        firsts = [e.texts[0] for e in examples]
        seconds = [e.texts[1] for e in examples] if task.is_pair else []
        if not task.is_pair:
            self.sequences = [tokenizer.encode_unpadded(firsts)]
        elif separate:
            self.sequences = [tokenizer.encode_unpadded(firsts), tokenizer.encode_unpadded(seconds)]
        else:
            self.sequences = [tokenizer.encode_unpadded(firsts, seconds)]
        self.swapped = None
        if swappable and task.is_pair and not separate:
            self.swapped = [tokenizer.encode_unpadded(seconds, firsts)]

    def batch(self, indices: Sequence[int], swap: Sequence[bool] | None = None) -> dict:
        """The examples at ``indices`` as one batch (see the module docstring); ``swap`` says,
        per example, whether a pair is taken in the other order."""
        swap = swap or [False] * len(indices)
        columns = []
        for k in range(len(self.sequences)):
            column = []
            for i, flip in zip(indices, swap):
                if flip and self.separate:
                    column.append(self.sequences[1 - k][i])
                elif flip:
                    column.append(self.swapped[k][i])
                else:
                    column.append(self.sequences[k][i])
            columns.append(column)
        labels = [self.examples[i].label for i in indices]
        return {
            "inputs": [self._padded(column) for column in columns],
            "labels": None if None in labels else self.task.label_tensor(labels),
            "ids": [self.examples[i].id for i in indices],
            "num_truncated": sum(truncated for column in columns for _, _, truncated in column),
        }

    def _padded(self, column: list[Sequence_]) -> dict[str, torch.Tensor]:
        """(B, T) tensors, T the longest sequence: [PAD] ids, type 0 and mask 0 after each."""
        T = max(len(ids) for ids, _, _ in column)
        ids = [s + [self.pad_id] * (T - len(s)) for s, _, _ in column]
        types = [t + [0] * (T - len(t)) for _, t, _ in column]
        mask = [[1] * len(s) + [0] * (T - len(s)) for s, _, _ in column]
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long),
            "token_type_ids": torch.tensor(types, dtype=torch.long),
            "attention_mask": torch.tensor(mask, dtype=torch.long),
        }


def collate(task: Task, examples: Sequence[Example], tokenizer: Tokenizer, separate: bool) -> dict:
    """Tokenize a list of examples into one batch (see the module docstring)."""
    return EncodedSplit(task, examples, tokenizer, separate).batch(range(len(examples)))


def swap_at_random(examples: Sequence[Example]) -> list[Example]:
    """Each pair in its given order or swapped, (a, b) or (b, a), with probability ½ each (drawn
    from torch's global generator, so a seeded run is reproducible). Only for tasks whose label
    does not depend on the order (``Task.symmetric``): a cheap augmentation that shows a
    cross-encoder both orders of the same pair."""
    flips = random_flips(len(examples))
    return [
        replace(e, texts=(e.texts[1], e.texts[0])) if flip else e
        for e, flip in zip(examples, flips)
    ]


def random_flips(n: int) -> list[bool]:
    """n fair coin flips from torch's global generator (one ``torch.rand(n)`` draw)."""
    return (torch.rand(n) < 0.5).tolist()


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``. For a GPU it is pinned first and copied without blocking: the host
    does not wait for the GPU to finish the work it has queued (a copy from ordinary memory
    would), so it prepares the next batch while the GPU still runs the current step."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def batch_to(batch: dict, device: torch.device) -> dict:
    """Move a batch to ``device`` (``to_device`` each tensor)."""
    move = functools.partial(to_device, device=device)
    moved = dict(batch)
    moved["inputs"] = [{k: move(v) for k, v in seq.items()} for seq in batch["inputs"]]
    if batch["labels"] is not None:
        moved["labels"] = move(batch["labels"])
    return moved
