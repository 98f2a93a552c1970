"""Evaluation metrics: accuracy, Pearson's r, and the course's overall score.

    accuracy  = (1/n) Σ_i [ŷ_i = y_i]
    pearson r = Σ_i (x_i − x̄)(y_i − ȳ) / √(Σ_i (x_i − x̄)² · Σ_i (y_i − ȳ)²)
    overall   = (sst_acc + para_acc + (sts_r + 1) / 2) / 3

The overall score is the CS224N default final project's leaderboard score: STS's r ∈ [−1, 1] is
mapped onto [0, 1] so that the three terms share a scale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import numpy as np

__all__ = ["OVERALL_TASKS", "accuracy", "overall_score", "pearson"]


def accuracy(predictions: Sequence[int | float], labels: Sequence[int | float]) -> float:
    """Fraction of predictions equal to their label (labels and predictions are class indices)."""
    _check_lengths(predictions, labels, minimum=1)
    correct = sum(int(p == y) for p, y in zip(predictions, labels, strict=True))
    return correct / len(labels)


def pearson(predictions: Sequence[float], labels: Sequence[float]) -> float:
    """Pearson's correlation coefficient r between predictions and labels (see module docstring).

    Computed in float64 on centred values. When either side is constant the formula is 0/0;
    we return 0.0 then, on purpose: a constant predictor (a typical state early in training or
    after a collapse) carries no information about the ordering of the pairs, which is what r
    measures, and a NaN would poison everything downstream (the overall score, "best checkpoint"
    comparisons, where ``nan > x`` is always False, and JSON metric logs). ``scipy.stats.pearsonr``
    returns NaN with a warning in this case instead.

    Raises:
        ValueError: different lengths, fewer than two values, or a non-finite value (NaN or ±inf
            predictions mean training has diverged; failing loudly beats a silent NaN metric).
    """
    _check_lengths(predictions, labels, minimum=2)
    x = np.asarray(predictions, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("pearson: predictions and labels must be finite (found NaN or inf)")
    xc = x - x.mean()
    yc = y - y.mean()
    denominator = math.sqrt(float(np.dot(xc, xc)) * float(np.dot(yc, yc)))
    if denominator == 0.0:
        return 0.0  # constant input: see the docstring
    r = float(np.dot(xc, yc)) / denominator
    return min(1.0, max(-1.0, r))  # rounding can step just outside [−1, 1]


OVERALL_TASKS: dict[str, Callable[[float], float]] = {
    "sst": lambda acc: acc,
    "para": lambda acc: acc,
    "sts": lambda r: (r + 1.0) / 2.0,
}
"""Each task of the overall score and how its metric maps onto [0, 1]."""


def overall_score(metrics: Mapping[str, float]) -> float:
    """The course's overall score from per-task metrics keyed by task name.

    ``metrics`` maps task names to their dev metric: ``{"sst": acc, "para": acc, "sts": r}``.
    The score is the mean of the terms sst_acc, para_acc and (sts_r + 1) / 2 over the tasks that
    are present; with all three it is the course's (sst_acc + para_acc + (sts_r + 1) / 2) / 3, and
    with a subset (say a run on sst and sts only) it is the average of the present terms, so it
    stays on the same 0..1 scale. Other keys (e.g. "cfimdb") are ignored.

    Raises:
        ValueError: none of sst, para, sts is present.
    """
    terms = [term(metrics[name]) for name, term in OVERALL_TASKS.items() if name in metrics]
    if not terms:
        raise ValueError(
            f"overall_score needs at least one of {sorted(OVERALL_TASKS)}; got {sorted(metrics)}"
        )
    return sum(terms) / len(terms)


def _check_lengths(predictions: Sequence, labels: Sequence, minimum: int) -> None:
    if len(predictions) != len(labels):
        raise ValueError(f"{len(predictions)} predictions but {len(labels)} labels")
    if len(labels) < minimum:
        raise ValueError(f"need at least {minimum} prediction(s), got {len(labels)}")
