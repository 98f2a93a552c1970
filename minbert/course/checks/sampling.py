"""Checks of ``minbert/sampling.py`` (the ``sampler`` exercise): the annealed exponent and the
task probabilities against their equations."""

from __future__ import annotations

import math

from minbert.course.registry import Context, Measurement, check, worst_of


@check(
    "sampler: annealed_alpha vs 1 − 0.8·(e − 1)/(E − 1)",
    tolerance=1e-12,
    hint="epochs count from 1; α = 1 at the first epoch and 0.2 at the last (1 when E = 1)",
    exercises=("sampler",),
)
def check_annealed_alpha(ctx: Context) -> Measurement:
    """annealed_alpha(e, E) against 1 − 0.8·(e − 1)/(E − 1) (1 when E = 1), every epoch."""
    from minbert.sampling import annealed_alpha

    found = []
    for epochs in (1, 2, 3, 5, 10):
        for epoch in range(1, epochs + 1):
            expected = 1.0 if epochs == 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)
            got = float(annealed_alpha(epoch, epochs))
            found.append(
                Measurement(
                    abs(got - expected),
                    f"α at epoch {epoch} of {epochs}: got {got:.6g}, expected {expected:.6g}",
                )
            )
    return worst_of(found)


# Example training-set sizes (the grading needs numbers; the sampler itself never has any).
SAMPLER_SIZES = ({"sst": 8544, "para": 141506, "sts": 6040}, {"only": 17}, {"a": 1, "b": 3})


@check(
    "sampler: task_probabilities vs N_i^α / Σ_j N_j^α",
    tolerance=1e-12,
    hint="raise every size to the power α, then divide by the sum",
    exercises=("sampler",),
)
def check_task_probabilities(ctx: Context) -> Measurement:
    """task_probabilities(sizes, α) against N_i^α / Σ_j N_j^α, for several sizes and α."""
    from minbert.sampling import task_probabilities

    found = []
    for sizes in SAMPLER_SIZES:
        for alpha in (1.0, 0.6, 0.2, 0.0):
            got = task_probabilities(sizes, alpha)
            if list(got) != list(sizes):
                found.append(
                    Measurement(math.inf, f"tasks {list(got)}, expected {list(sizes)} (in order)")
                )
                continue
            total = sum(n**alpha for n in sizes.values())
            for task, n in sizes.items():
                expected = n**alpha / total
                found.append(
                    Measurement(
                        abs(float(got[task]) - expected),
                        f"p[{task!r}] with α = {alpha} and sizes {sizes}: got "
                        f"{float(got[task]):.6g}, expected {expected:.6g}",
                    )
                )
    return worst_of(found)
