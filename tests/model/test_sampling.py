"""Task sampling: probabilities, annealing, empirical frequencies and reproducibility."""

from __future__ import annotations

from collections import Counter

import pytest

from minbert.sampling import TaskSampler, annealed_alpha, task_probabilities

# The sizes of the course's training files as they read here (sizes never live in library code).
SIZES = {"sst": 8544, "para": 15998, "sts": 6040}


def test_task_probabilities_hand_values():
    assert task_probabilities({"a": 1, "b": 3}, 1.0) == pytest.approx({"a": 0.25, "b": 0.75})
    assert task_probabilities({"a": 1, "b": 3}, 0.0) == pytest.approx({"a": 0.5, "b": 0.5})
    # α = 0.5: √4 = 2, √16 = 4 -> 1/3, 2/3
    assert task_probabilities({"a": 4, "b": 16}, 0.5) == pytest.approx({"a": 1 / 3, "b": 2 / 3})
    assert list(task_probabilities(SIZES, 0.3)) == ["sst", "para", "sts"]
    assert sum(task_probabilities(SIZES, 0.3).values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("epochs", "alphas"),
    [
        (2, [1.0, 0.2]),
        (3, [1.0, 0.6, 0.2]),
        (5, [1.0, 0.8, 0.6, 0.4, 0.2]),
        (9, [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]),
    ],
)
def test_annealed_alpha_formula(epochs, alphas):
    """α by hand: from 1 at the first epoch down to 0.2 at the last, in equal steps."""
    assert [annealed_alpha(epoch, epochs) for epoch in range(1, epochs + 1)] == pytest.approx(
        alphas
    )
    assert annealed_alpha(1, epochs) == 1.0


def test_annealed_alpha_single_epoch_and_bad_epochs():
    assert annealed_alpha(1, 1) == 1.0
    with pytest.raises(ValueError, match=r"epoch must be in 1..3"):
        annealed_alpha(0, 3)
    with pytest.raises(ValueError, match=r"epoch must be in 1..3"):
        annealed_alpha(4, 3)


def test_sampler_probabilities_per_mode():
    epochs = 5
    proportional = TaskSampler("proportional", SIZES, epochs, seed=0)
    annealed = TaskSampler("annealed", SIZES, epochs, seed=0)
    round_robin = TaskSampler("round-robin", SIZES, epochs, seed=0)
    for epoch in range(1, epochs + 1):
        assert proportional.probabilities(epoch) == pytest.approx(task_probabilities(SIZES, 1.0))
        assert annealed.probabilities(epoch) == pytest.approx(
            task_probabilities(SIZES, annealed_alpha(epoch, epochs))
        )
        assert round_robin.probabilities(epoch) == pytest.approx({name: 1 / 3 for name in SIZES})
    # Square-root: p_i = √N_i / Σ_j √N_j, by hand, every epoch.
    roots = {name: size**0.5 for name, size in SIZES.items()}
    expected = {name: root / sum(roots.values()) for name, root in roots.items()}
    square_root = TaskSampler("square-root", SIZES, epochs, seed=0)
    assert all(square_root.probabilities(e) == pytest.approx(expected) for e in (1, epochs))
    # Annealing moves towards uniform: the largest task's share falls epoch by epoch.
    shares = [annealed.probabilities(e)["para"] for e in range(1, epochs + 1)]
    assert shares == sorted(shares, reverse=True)


@pytest.mark.parametrize("mode", ["proportional", "square-root", "annealed"])
def test_empirical_frequencies_match_the_probabilities(mode):
    """Over 100k draws every task's frequency is within 0.01 (absolute) of p_i ∝ N_i^α.

    The standard error of a frequency over n = 100,000 draws is at most √(0.25/n) ≈ 0.0016, so
    0.01 is over 6 standard errors: a correct sampler essentially never fails this.
    """
    epochs, steps = 4, 100_000
    sampler = TaskSampler(mode, SIZES, epochs, seed=1234)
    for epoch in (1, epochs):
        counts = Counter(sampler.schedule(epoch, steps))
        expected = sampler.probabilities(epoch)
        for name in SIZES:
            assert abs(counts[name] / steps - expected[name]) < 0.01, (epoch, name)


def test_schedule_is_a_pure_function_of_seed_and_epoch():
    a = TaskSampler("annealed", SIZES, epochs=3, seed=7)
    b = TaskSampler("annealed", SIZES, epochs=3, seed=7)
    assert a.schedule(2, 500) == b.schedule(2, 500)
    # Asking for other epochs first (as a resumed run does not) changes nothing.
    a.schedule(1, 1000)
    assert a.schedule(2, 500) == b.schedule(2, 500)
    # Epochs and seeds differ from one another.
    assert a.schedule(1, 500) != a.schedule(2, 500)
    assert TaskSampler("annealed", SIZES, epochs=3, seed=8).schedule(2, 500) != a.schedule(2, 500)
    # A prefix of a longer schedule is the shorter schedule.
    assert a.schedule(3, 1000)[:500] == a.schedule(3, 500)
