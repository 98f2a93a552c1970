"""Turn a list of examples into a model batch (``Batch``): tokenized inputs, labels and ids."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import torch

from minbert.tokenizer import Tokenizer
from tasks.base import Task
from tasks.reader import Example


@dataclass
class Batch:
    """The examples of one step or one evaluation batch, as the model reads them.

    inputs          tokenized sequences, each {input_ids, token_type_ids, attention_mask} of
                    shape (B, T): one for single sentences and cross-encoded pairs
                    ([CLS] a [SEP] b [SEP]), two for pairs encoded separately
    labels          (B,) tensor, or None when the split has no labels
    ids             the examples' ids, for prediction files
    rows            the examples' positions in their split (what outputs computed
                    once per example, a teacher's, are indexed by)
    num_truncated   how many sequences were cut to the tokenizer's max_length
    """

    inputs: list[dict[str, torch.Tensor]]
    labels: torch.Tensor | None
    ids: list[str] = field(default_factory=list)
    rows: list[int] = field(default_factory=list)
    num_truncated: int = 0


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

    The sequences are also kept as one padded table of ids, types and masks (a row per sequence
    of each kind), which ``to(device)`` moves to the run's device once: a batch is then cut
    there with one gather per tensor, and only its row numbers cross from the host (one small
    copy), instead of every batch being built on the host and copied each step. With
    ``pad_multiple`` N > 1 a batch is padded to the next multiple of N (at most the tokenizer's
    max_length) rather than to its longest sequence, so that steps take a handful of shapes
    (``--pad_multiple``: what a step captured as a graph needs); the extra positions are
    [PAD] with mask 0, which attention and the mean over real tokens ignore.
    """

    def __init__(
        self,
        task: Task,
        examples: Sequence[Example],
        tokenizer: Tokenizer,
        separate: bool,
        swappable: bool = False,
        pad_multiple: int = 1,
    ) -> None:
        self.task, self.examples, self.separate = task, examples, separate
        self.pad_id, self.tokenizer = tokenizer.pad_token_id, tokenizer
        self.pad_multiple, self.cap = pad_multiple, tokenizer.max_length
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
        rows = [s for kind in [*self.sequences, *(self.swapped or [])] for s in kind]
        self.lengths = [len(ids) for ids, _, _ in rows]  # on the host: a batch's width
        self.truncated = [truncated for _, _, truncated in rows]
        self.table = self._padded(rows, self.padded_length(max(self.lengths, default=1)))
        labels = [e.label for e in examples]
        self.labels = None if None in labels else task.label_tensor(labels)
        self.device = torch.device("cpu")

    def to(self, device: torch.device) -> EncodedSplit:
        """The tables (and labels) moved to ``device``, once; later calls do nothing."""
        if device != self.device:
            self.table = {k: v.to(device) for k, v in self.table.items()}
            if self.labels is not None:
                self.labels = self.labels.to(device)
            self.device = device
        return self

    def padded_length(self, longest: int) -> int:
        """The width of a batch whose longest sequence has ``longest`` tokens: that, or with
        ``pad_multiple`` N the next multiple of N, at most the tokenizer's max_length."""
        N = self.pad_multiple
        return longest if N <= 1 else max(longest, min(self.cap, -(-longest // N) * N))

    def row(self, k: int, i: int, flip: bool) -> int:
        """The table row of sequence ``k`` of example ``i``, taken in the other order if
        ``flip``: rows hold each kind of sequence in turn (sequences, then swapped pairs)."""
        n = len(self.examples)
        if flip and self.separate:
            return (1 - k) * n + i
        if flip:
            return (len(self.sequences) + k) * n + i
        return k * n + i

    @functools.cached_property
    def full_lengths(self) -> list[int]:
        """Each example's length before truncation (``token_lengths``): what evaluation sorts
        by."""
        return token_lengths(self.task, self.examples, self.tokenizer, self.separate)

    def batch(self, indices: Sequence[int], swap: Sequence[bool] | None = None) -> Batch:
        """The examples at ``indices`` as one batch (see the module docstring), on the tables'
        device; ``swap`` says, per example, whether a pair is taken in the other order."""
        swap = swap or [False] * len(indices)
        columns = [
            [self.row(k, i, flip) for i, flip in zip(indices, swap)]
            for k in range(len(self.sequences))
        ]
        # One copy to the device for every index of the batch (the rows, then the examples).
        flat = torch.tensor([r for column in columns for r in column] + list(indices))
        flat = to_device(flat, self.device)
        B = len(indices)
        inputs = []
        for k, column in enumerate(columns):
            T = self.padded_length(max(self.lengths[r] for r in column))
            rows = flat[k * B : (k + 1) * B]
            inputs.append({key: table[:, :T][rows] for key, table in self.table.items()})
        return Batch(
            inputs,
            None if self.labels is None else self.labels[flat[-B:]],
            [self.examples[i].id for i in indices],
            list(indices),
            sum(self.truncated[r] for column in columns for r in column),
        )

    def _padded(self, rows: list[Sequence_], T: int) -> dict[str, torch.Tensor]:
        """(R, T) tensors: [PAD] ids, type 0 and mask 0 after each sequence."""
        ids = [s + [self.pad_id] * (T - len(s)) for s, _, _ in rows]
        types = [t + [0] * (T - len(t)) for _, t, _ in rows]
        mask = [[1] * len(s) + [0] * (T - len(s)) for s, _, _ in rows]
        return {
            "input_ids": torch.tensor(ids, dtype=torch.long).reshape(len(rows), T),
            "token_type_ids": torch.tensor(types, dtype=torch.long).reshape(len(rows), T),
            "attention_mask": torch.tensor(mask, dtype=torch.long).reshape(len(rows), T),
        }


def collate(task: Task, examples: Sequence[Example], tokenizer: Tokenizer, separate: bool) -> Batch:
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
    would), so it prepares the next batch while the GPU still runs the current step. A tensor
    already on a GPU stays where it is."""
    if device.type != "cuda" or t.is_cuda:
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def batch_to(batch: Batch, device: torch.device) -> Batch:
    """Move a batch to ``device`` (``to_device`` each tensor)."""
    move = functools.partial(to_device, device=device)
    inputs = [{k: move(v) for k, v in seq.items()} for seq in batch.inputs]
    labels = None if batch.labels is None else move(batch.labels)
    return replace(batch, inputs=inputs, labels=labels)
