"""Which task each training step works on: round-robin, proportional, square-root or annealed
sampling.

With K tasks of training-set sizes N_1..N_K, a step draws task i with probability

    p_i = N_i^α / Σ_j N_j^α

α = 1 is proportional sampling (every example is equally likely to be seen; big tasks dominate),
α = 0 is uniform (small tasks are seen as often as big ones and risk over-fitting). Square-root
sampling fixes α = 0.5 in between (p_i ∝ √N_i, which Stickland & Murray also discuss). Annealed
sampling (Stickland & Murray 2019, "BERT and PALs: Projected Attention Layers for Efficient
Adaptation in Multi-Task Learning", ICML 2019) moves from one to the other over training:

    α(e) = 1 − 0.8 · (e − 1) / (E − 1),   e = 1..E  (α = 1 when E = 1)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["MODES", "TaskSampler", "annealed_alpha", "task_probabilities"]

MODES = ("round-robin", "proportional", "square-root", "annealed")
FIXED_ALPHA = {"proportional": 1.0, "square-root": 0.5}


def validate_sizes(sizes: Mapping[str, int]) -> None:
    """At least one task, each with a positive number of training examples (a ValueError)."""
    if not sizes:
        raise ValueError("need at least one task")
    for name, size in sizes.items():
        if size <= 0:
            raise ValueError(f"task {name!r} has {size} training examples; cannot sample it")


def validate_epoch(epoch: int, epochs: int) -> None:
    """1 ≤ epoch ≤ epochs (a ValueError)."""
    if epochs < 1:
        raise ValueError(f"epochs must be at least 1, got {epochs}")
    if not 1 <= epoch <= epochs:
        raise ValueError(f"epoch must be in 1..{epochs}, got {epoch}")


def task_probabilities(sizes: Mapping[str, int], alpha: float) -> dict[str, float]:
    """p_i = N_i^α / Σ_j N_j^α for each task (same key order as ``sizes``)."""
    validate_sizes(sizes)
    # HINT: the docstring's p_i for every task, keyed and ordered like sizes (a size is an int:
    # HINT: take it as a float before the power).
    # BEGIN SOLUTION: sampler
    weights = {name: float(size) ** alpha for name, size in sizes.items()}
    total = sum(weights.values())
    return {name: weight / total for name, weight in weights.items()}
    # END SOLUTION


def annealed_alpha(epoch: int, epochs: int) -> float:
    """α(e) = 1 − 0.8 · (e − 1) / (E − 1) for e = 1..E; 1.0 when E = 1 (Stickland & Murray 2019)."""
    validate_epoch(epoch, epochs)
    # HINT: α falls linearly with the epoch e = 1..E, from 1 at the first epoch to 0.2 at the
    # HINT: last; with a single epoch (E = 1) α is 1.
    # BEGIN SOLUTION: sampler
    if epochs == 1:
        return 1.0
    return 1.0 - 0.8 * (epoch - 1) / (epochs - 1)
    # END SOLUTION


class TaskSampler:
    """Chooses the task of each training step.

    Args:
        mode: "round-robin", "proportional" (α = 1), "square-root" (α = 0.5) or "annealed"
            (α from ``annealed_alpha``).
        sizes: task name -> number of training examples N_i; the key order is the round-robin
            order.
        epochs: E, the number of epochs (annealing needs it).
        seed: the run's seed; with the epoch it fixes the schedule.
    """

    def __init__(self, mode: str, sizes: Mapping[str, int], epochs: int, seed: int) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown sampling mode {mode!r}; choose one of {', '.join(MODES)}")
        if epochs < 1:
            raise ValueError(f"epochs must be at least 1, got {epochs}")
        if seed < 0:
            raise ValueError(f"seed must be non-negative, got {seed}")
        validate_sizes(sizes)
        self.mode = mode
        self.sizes = dict(sizes)
        self.tasks = list(sizes)
        self.epochs = epochs
        self.seed = seed

    def alpha(self, epoch: int) -> float | None:
        """The exponent α of ``epoch`` (None for round-robin, which does not sample)."""
        validate_epoch(epoch, self.epochs)
        if self.mode in FIXED_ALPHA:
            return FIXED_ALPHA[self.mode]
        if self.mode == "annealed":
            return annealed_alpha(epoch, self.epochs)
        return None

    def probabilities(self, epoch: int) -> dict[str, float]:
        """The task probabilities of ``epoch`` (1..E); round-robin: uniform (its long-run share),
        computed here so that round-robin needs no ``sampler`` exercise."""
        alpha = self.alpha(epoch)
        if alpha is None:
            return {name: 1.0 / len(self.tasks) for name in self.tasks}
        return task_probabilities(self.sizes, alpha)

    def schedule(self, epoch: int, steps: int) -> list[str]:
        """The task of each of the ``steps`` steps of ``epoch``.

        Round-robin: tasks[0], tasks[1], ..., tasks[K−1], tasks[0], ... (restarting each epoch).
        Otherwise ``steps`` i.i.d. draws from ``probabilities(epoch)`` with a generator seeded from
        (seed, epoch) alone (``numpy.random.default_rng((seed, epoch))``), so the schedule is the
        same every time it is asked for (for a given NumPy version).
        """
        if steps < 0:
            raise ValueError(f"steps must be non-negative, got {steps}")
        if self.mode == "round-robin":
            validate_epoch(epoch, self.epochs)
            return [self.tasks[step % len(self.tasks)] for step in range(steps)]
        probabilities = self.probabilities(epoch)
        rng = np.random.default_rng((self.seed, epoch))
        p = np.array([probabilities[name] for name in self.tasks], dtype=np.float64)
        draws = rng.choice(len(self.tasks), size=steps, replace=True, p=p / p.sum())
        return [self.tasks[i] for i in draws]

    def __repr__(self) -> str:
        return f"TaskSampler(mode={self.mode!r}, sizes={self.sizes}, epochs={self.epochs})"
