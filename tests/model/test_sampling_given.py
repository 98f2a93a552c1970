"""What the course gives the student in minbert/sampling.py (round-robin, the checks on arguments);
the student tree leaves these out."""

from __future__ import annotations

import pytest

from minbert.sampling import TaskSampler, task_probabilities
from tests.model.test_sampling import SIZES


def test_task_probabilities_reject_empty_tasks():
    with pytest.raises(ValueError, match="'b' has 0 training examples"):
        task_probabilities({"a": 5, "b": 0}, 1.0)
    with pytest.raises(ValueError, match="at least one task"):
        task_probabilities({}, 1.0)


def test_round_robin_cycles_in_the_given_order():
    sampler = TaskSampler("round-robin", SIZES, epochs=3, seed=0)
    assert sampler.schedule(1, 7) == ["sst", "para", "sts", "sst", "para", "sts", "sst"]
    assert sampler.schedule(2, 7) == sampler.schedule(1, 7)
    assert sampler.schedule(1, 0) == []


def test_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown sampling mode 'random'"):
        TaskSampler("random", SIZES, 3, 0)
    with pytest.raises(ValueError, match="epochs must be at least 1"):
        TaskSampler("annealed", SIZES, 0, 0)
    with pytest.raises(ValueError, match="has 0 training examples"):
        TaskSampler("proportional", {"sst": 0}, 1, 0)
    with pytest.raises(ValueError, match=r"epoch must be in 1..2"):
        TaskSampler("annealed", SIZES, 2, 0).schedule(3, 10)
