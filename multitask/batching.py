"""Batches of example indices, grouped by length so that little compute goes to padding.

A batch is padded to its longest sequence, so a batch of one long and many short sentences spends
most of its positions on padding. ``length_grouped_batches`` puts sequences of similar length in
the same batch while keeping training random:

1. shuffle all indices (with ``generator``);
2. cut the shuffled list into pools of ``pool_factor · batch_size`` indices;
3. sort each pool by length (longest first);
4. cut each pool into batches of ``batch_size`` (every pool but the last is a whole number of
   batches, so at most one batch is short);
5. shuffle the order of the batches, so that training does not see all long (or all short)
   batches together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from multitask.collate import Batch, EncodedSplit, random_flips

__all__ = [
    "BatchStream",
    "derived_seed",
    "fixed_batches",
    "length_grouped_batches",
    "make_batch",
    "padding_fraction",
]


def derived_seed(seed: int, counter: int, stream: int = 0) -> int:
    """seed·1,000,003 + stream·1,009 + counter: one stream of random numbers per purpose.

    A draw that must not depend on what else the run drew (each task's batch order in each pass,
    an update's order of the tasks at a step, the masks of an MLM step) gets a generator of its own,
    seeded by this, with the counter (a pass, a step) and the stream (a task's place) told apart
    by the two primes."""
    return seed * 1_000_003 + stream * 1009 + counter


def make_batch(encoded: EncodedSplit, indices: Sequence[int], swap_pairs: bool = False) -> Batch:
    """The examples at ``indices`` of a split tokenized once (``EncodedSplit``), cut and padded
    on the split's device (``EncodedSplit.to`` moves its tables there once); with
    ``swap_pairs``, a symmetric pair task's pairs each in a random order, drawn as
    ``swap_at_random`` draws them (so a seeded run sees the same batches)."""
    swap = None
    if swap_pairs and encoded.task.symmetric:
        swap = random_flips(len(indices))
    return encoded.batch(indices, swap)


def length_grouped_batches(
    lengths: Sequence[int],
    batch_size: int,
    generator: torch.Generator | None,
    pool_factor: int = 50,
) -> list[list[int]]:
    """Batches of indices into ``lengths``, grouped by length (see the module docstring).

    Every index 0..n−1 appears in exactly one batch; every batch has ``batch_size`` indices except
    possibly one shorter batch.
    """
    _check_batch_size(batch_size)
    if pool_factor < 1:
        raise ValueError(f"pool_factor must be at least 1, got {pool_factor}")
    n = len(lengths)
    if generator is None:
        order = sorted(range(n), key=lambda i: -lengths[i])  # stable: ties keep index order
        return _cut(order, batch_size)

    shuffled = torch.randperm(n, generator=generator).tolist()
    pool_size = pool_factor * batch_size
    batches: list[list[int]] = []
    for start in range(0, n, pool_size):
        pool = sorted(shuffled[start : start + pool_size], key=lambda i: -lengths[i])
        batches.extend(_cut(pool, batch_size))
    return [batches[i] for i in torch.randperm(len(batches), generator=generator).tolist()]


def fixed_batches(n: int, batch_size: int, generator: torch.Generator | None) -> list[list[int]]:
    """Plain batches of ``batch_size`` consecutive indices of a shuffled 0..n−1 (no shuffling
    with ``generator=None``); the reference that length grouping is measured against."""
    _check_batch_size(batch_size)
    order = list(range(n)) if generator is None else torch.randperm(n, generator=generator).tolist()
    return _cut(order, batch_size)


def padding_fraction(lengths: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Fraction of padded positions when each batch is padded to its longest sequence:

        Σ_batches (|b| · max_{i∈b} L_i − Σ_{i∈b} L_i) / Σ_batches |b| · max_{i∈b} L_i

    0.0 when there are no positions at all.
    """
    total = 0
    real = 0
    for batch in batches:
        if not batch:
            continue
        batch_lengths = [lengths[i] for i in batch]
        total += len(batch) * max(batch_lengths)
        real += sum(batch_lengths)
    return 0.0 if total == 0 else (total - real) / total


class BatchStream:
    """Endless length-grouped batches of one task's training set.

    Pass p over the data is shuffled with a generator seeded from (seed, task, p), so the stream's
    position is two integers (pass, index) and resuming rebuilds it exactly. Under torchrun every
    process draws the same batches and takes its shard of each: examples rank, rank + world, ...
    (``Distributed``: DistributedDataParallel averages the shards' gradients)."""

    def __init__(
        self,
        name: str,
        lengths: list[int],
        batch_size: int,
        seed: int,
        make_batches: Callable[..., list[list[int]]] = length_grouped_batches,
        rank: int = 0,
        world: int = 1,
    ) -> None:
        self.name, self.lengths, self.batch_size, self.seed = name, lengths, batch_size, seed
        self.rank, self.world = rank, world
        self.make_batches = make_batches  # (lengths, batch_size, generator) -> index lists
        self.pass_number, self.index = 0, 0
        self._batches = self._make_batches()

    def _make_batches(self) -> list[list[int]]:
        task_offset = sum(ord(c) for c in self.name)
        g = torch.Generator().manual_seed(derived_seed(self.seed, self.pass_number, task_offset))
        return self.make_batches(self.lengths, self.batch_size, g)

    def next(self) -> list[int]:
        if self.index >= len(self._batches):
            self.pass_number, self.index = self.pass_number + 1, 0
            self._batches = self._make_batches()
        self.index += 1
        return self._batches[self.index - 1][self.rank :: self.world]

    def state_dict(self) -> dict:
        return {"pass_number": self.pass_number, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.pass_number, self.index = state["pass_number"], state["index"]
        self._batches = self._make_batches()


def _check_batch_size(batch_size: int) -> None:
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


def _cut(order: list[int], batch_size: int) -> list[list[int]]:
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
