"""benchmarks/plain_loop.py, the plain Hugging Face loop the driver is compared with in the
batching comparison: its batches, and a run that benchmarks/multitask_runs.py can collect like a
driver's."""

from __future__ import annotations

import multitask_runs
import numpy as np
import plain_loop
import pytest


def test_passes_cover_every_example_once_per_pass():
    batches = plain_loop.Batches(10, 5, "passes", np.random.default_rng(0))
    first = [i for _ in range(2) for i in batches.next()]
    second = [i for _ in range(2) for i in batches.next()]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # a new shuffle each pass


def test_random_draws_are_distinct_within_a_batch_and_fresh_each_step():
    batches = plain_loop.Batches(10, 8, "random", np.random.default_rng(0))
    draws = [list(batches.next()) for _ in range(20)]
    assert all(len(set(d)) == 8 and set(d) <= set(range(10)) for d in draws)
    assert len({tuple(sorted(d)) for d in draws}) > 1


@pytest.mark.parametrize("draw", ["random", "passes"])
def test_a_run_writes_what_the_results_writer_collects(tiny_checkpoint, tiny_data, tmp_path, draw):
    out = tmp_path / "run"
    flags = {
        "--checkpoint": tiny_checkpoint,
        "--data_dir": tiny_data,
        "--out_dir": out,
        "--batch_size": 4,
        "--epochs": 2,
        "--draw": draw,
    }
    argv = [str(word) for flag_and_value in flags.items() for word in flag_and_value]
    assert plain_loop.main(argv) == 0
    row = multitask_runs.collect(out)
    assert [e["epoch"] for e in row["evaluations"]] == [1, 2]
    # ceil(3 tasks x 40 training rows / 4) steps an epoch
    assert row["summary"]["steps"] == 2 * 30
    for metric in ("sst", "para", "sts", "overall"):
        assert np.isfinite(row["best"][metric])
    with pytest.raises(SystemExit):  # a used folder needs --overwrite
        plain_loop.main(argv)
