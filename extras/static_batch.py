"""A captured step's inputs: fixed device buffers that each replay reads, and which each step's
batch is copied into first (extras/cuda_graphs.py).

    static = StaticBatch(batch, widths, pad_id)  # buffers as ``batch``'s, ``widths`` tokens wide
    static.copy_in(next_batch)                   # the same task and batch size, T <= width
    loss = captured_step(static.batch)           # a graph replay reads static.batch's tensors

A sequence narrower than its width (the task's one length when ``--pad_multiple`` is 1) fills the
rest of each row with [PAD], token type 0 and mask 0: padding the model masks, as
``EncodedSplit.batch`` pads to a batch's longest sequence.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from multitask.collate import Batch


def padded_width(T: int, pad_multiple: int, task_width: int) -> int:
    """A captured step's width for a batch of ``T`` tokens: T where --pad_multiple already keeps
    the shapes few, else the task's one length ``task_width`` (its longest sequence)."""
    return T if pad_multiple > 1 else task_width


class StaticBatch:
    """Buffers with ``batch``'s batch size and dtypes, sequence k ``widths[k]`` tokens wide."""

    def __init__(self, batch: Batch, widths: tuple[int, ...], pad_id: int) -> None:
        self.fill = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0}
        self.inputs = [
            {key: t.new_empty((t.shape[0], width)) for key, t in sequence.items()}
            for sequence, width in zip(batch.inputs, widths, strict=True)
        ]
        self.labels = None if batch.labels is None else torch.empty_like(batch.labels)
        self.batch = replace(batch, inputs=self.inputs, labels=self.labels)

    def copy_in(self, batch: Batch) -> None:
        """``batch``'s tensors into the buffers (device copies, no read of the host)."""
        for buffers, sequence in zip(self.inputs, batch.inputs, strict=True):
            for key, buffer in buffers.items():
                given = sequence[key]
                T = given.shape[1]
                buffer[:, :T].copy_(given)
                if T < buffer.shape[1]:
                    buffer[:, T:].fill_(self.fill[key])
        if self.labels is not None:
            self.labels.copy_(batch.labels)
