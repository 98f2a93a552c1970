"""The data of a run: every split of the chosen tasks, read, limited and reported.

    data = load_data(["sst", "sts"], path_of, strict=False, limit=None)
    data["sst"]["train"]   # list[Example]; "test" is absent when its file is

Every skipped row is reported (the first few and a count on the console, all of them in a file
the caller names); inputs longer than the model's ``max_length`` are counted and reported, since
they are truncated, not dropped.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from multitask.collate import EncodedSplit, token_lengths
from multitask.errors import UsageError
from tasks.base import SPLITS, Task, get_task
from tasks.reader import Example, format_skip_report

Data = dict[str, dict[str, list[Example]]]  # task -> split -> examples


def load_data(
    tasks: list[str],
    path_of: Callable[[Task, str], Path],
    strict: bool,
    limit: int | None,
    explicit: Collection[str] = (),
    train_fraction: float = 1.0,
) -> tuple[Data, str]:
    """Read every split of every task in ``tasks`` from ``path_of(task, split)``; at most
    ``limit`` examples per split, and of the training split only ``train_fraction``
    (``subsample``). A missing test file is skipped with a message unless the user
    named it (its flag ``<task>_<split>`` in ``explicit``); any other missing or empty file is a
    UsageError naming its flag. Returns the data and the full report of skipped rows ("" if
    none), for the caller to store; the console gets its first lines."""
    data: Data = {}
    all_skipped = []
    for name in tasks:
        task, data[name] = get_task(name), {}
        for split in SPLITS:
            path = path_of(task, split)
            if not path.is_file():
                if split == "test" and f"{name}_{split}" not in explicit:
                    print(f"[{name}] no test file at {path}: test predictions are skipped")
                    continue
                raise UsageError(
                    f"--{name}_{split}: file {path} not found; put the course file there, point "
                    f"--data_dir at the folder that holds it, or run: python scripts/get_data.py"
                )
            examples, skipped = task.read(path, strict=strict, require_label=split != "test")
            all_skipped += skipped
            examples = examples[:limit] if limit else examples
            if split == "train" and train_fraction < 1:
                examples = subsample(examples, train_fraction)
            data[name][split] = examples
            if not data[name][split]:
                raise UsageError(f"--{name}_{split}: {path} has no usable rows")
        sizes = ", ".join(f"{s} {len(e)}" for s, e in data[name].items())
        print(f"[{name}] {task.description}: {sizes}")
    report = format_skip_report(all_skipped) if all_skipped else ""
    lines = report.splitlines()
    if lines:
        print("\n".join(lines if len(lines) <= 11 else [*lines[:10], "...", lines[-1]]))
    return data, report


def subsample(examples: list[Example], fraction: float) -> list[Example]:
    """round(fraction · n) of ``examples`` (at least one), chosen at random with a generator of
    its own fixed seed, so the same file always gives the same subsample whatever the run's seed;
    the chosen rows keep their order in the file."""
    keep = max(1, round(fraction * len(examples)))
    chosen = torch.randperm(len(examples), generator=torch.Generator().manual_seed(0))[:keep]
    return [examples[i] for i in sorted(chosen.tolist())]


def report_truncation(
    data: Data,
    encoded: dict[str, dict[str, EncodedSplit]],
    tokenizer,
    separately: Callable[[Task], bool],
    max_length: int,
) -> None:
    """Say how many inputs of each split are longer than ``max_length`` and so truncated; the
    splits already tokenized (``encoded``: split -> task -> ``EncodedSplit``) are not tokenized
    again (their ``full_lengths`` are what batches are grouped and evaluations sorted by)."""
    for name, splits in data.items():
        task = get_task(name)
        for split, examples in splits.items():
            if name in encoded.get(split, {}):
                counts = encoded[split][name].full_lengths
            else:
                counts = token_lengths(task, examples, tokenizer, separately(task))
            if over := sum(1 for n in counts if n > max_length):
                print(
                    f"[{name}] {over} of {len(examples)} {split} inputs are longer than "
                    f"{max_length} tokens and are truncated (longest: {max(counts)})"
                )


def encode_train(
    data: Data,
    tokenizer,
    separately: Callable[[Task], bool],
    swap_pairs: bool,
    pad_multiple: int = 1,
) -> dict[str, EncodedSplit]:
    """Each task's training split tokenized once (``EncodedSplit``), the batches of every step
    cut from it; with ``swap_pairs`` also each symmetric pair in the other order; each batch
    padded to a multiple of ``pad_multiple`` tokens (``--pad_multiple``)."""
    encoded = {}
    for name, splits in data.items():
        task = get_task(name)
        swappable = swap_pairs and task.symmetric
        encoded[name] = EncodedSplit(
            task, splits["train"], tokenizer, separately(task), swappable, pad_multiple
        )
    return encoded


def encode_split(
    data: Data, tokenizer, separately: Callable[[Task], bool], split: str
) -> dict[str, EncodedSplit]:
    """Each task's ``split`` (e.g. dev, which every evaluation reads) tokenized once."""
    return {
        name: EncodedSplit(get_task(name), splits[split], tokenizer, separately(get_task(name)))
        for name, splits in data.items()
        if split in splits
    }


def on_device(splits: dict[str, EncodedSplit], device: torch.device) -> dict[str, EncodedSplit]:
    """``splits`` with their token tables moved to ``device`` once, at set-up: every batch is
    then cut there (``EncodedSplit.batch``), and only its row numbers cross from the host."""
    return {name: split.to(device) for name, split in splits.items()}


def fingerprints(paths: list[Path]) -> dict[str, str]:
    """sha256 of each file, so that a resumed run notices a training file that changed."""
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}
