"""Checks of ``minbert/sampling.py`` (the ``sampler`` exercise): the annealed exponent and the
task probabilities against stored values."""

from __future__ import annotations

import math

import torch

from course.locate import locate
from course.measure import Measurement, grade, shortest
from course.observed import Observed
from course.outcome import Outputs, problem
from course.registry import Context, check, student_functions

# The inputs: every epoch e of E epochs, and example training-set sizes with exponents (the
# grading needs numbers; the sampler itself never has any).
EPOCHS = (1, 2, 3, 5, 10)
SAMPLER_SIZES = ({"sst": 8544, "para": 141506, "sts": 6040}, {"only": 17}, {"a": 1, "b": 3})
ALPHAS = (1.0, 0.6, 0.2, 0.0)
# float64 closed forms: any correct form agrees to about 1e-16. A known mistake's outputs (the
# weights N_i^α left undivided) reach 141,506, where a float64 ulp is 2.9e-11: 1e-9 names them
# when another CPU rounds them a few ulps otherwise, and still tells every mistake apart.
SAMPLER_TOLERANCE = 1e-9
RESOLUTION = SAMPLER_TOLERANCE / 100  # digits a message prints: 0.2, not 0.19999999999999996


ALPHA_PAIRS = [(e, E) for E in EPOCHS for e in range(1, E + 1)]
PROBABILITY_LABELS = [
    f"p[{task!r}] with α = {alpha} and sizes {sizes}"
    for sizes in SAMPLER_SIZES
    for alpha in ALPHAS
    for task in sizes
]


def judge_alpha(ctx: Context, out: Outputs) -> Measurement:
    """α against the stored values; the first epoch outside the tolerance named, or the first
    ZeroDivisionError (graded as NaN: a known mistake gives it, and is named by it)."""
    case, got = ctx.course_data["sampler"]["alpha"], out["α"]
    measurement = grade(case, {"α": got})
    i = first_outside(got, case, "α")
    if errors := out.get("errors"):
        measurement.hint = f"{errors[0]}{f' ({len(errors)} cases)' if len(errors) > 1 else ''}"
    elif i is not None:
        e, E = ALPHA_PAIRS[i]
        value = shortest(got[i].item(), resolution=RESOLUTION)
        measurement.hint = (
            f"α at epoch {e} of {E}: got {value}, not within the tolerance of the expected value"
        )
    return measurement


@check(
    "sampler: annealed_alpha vs 1 − 0.8·(e − 1)/(E − 1)",
    tolerance=SAMPLER_TOLERANCE,
    judge=judge_alpha,
    hint="epochs count from 1; α falls linearly from 1 at the first epoch to 0.2 at the last "
    "(1 when E = 1)",
    exercises=("sampler",),
    functions=("annealed_alpha",),
)
def check_annealed_alpha(ctx: Context) -> Outputs:
    """annealed_alpha(e, E) for every epoch of several E (``ALPHA_PAIRS``). A ZeroDivisionError
    (E − 1 = 0 when E = 1) is graded as the NaN of x/0, with where it was raised, so the known
    mistake that gives it is named rather than the exception alone."""
    from minbert.sampling import annealed_alpha

    values, errors = [], []
    for e, E in ALPHA_PAIRS:
        try:
            values.append(float(annealed_alpha(e, E)))
        except ZeroDivisionError as err:
            where = locate(err, student_functions(ctx))
            errors.append(f"ZeroDivisionError: {err} at epoch {e} of {E} ({where})")
            values.append(math.nan)
    return {"α": torch.tensor(values, dtype=torch.float64), "errors": errors}


def first_outside(got: torch.Tensor, case: dict, name: str) -> int | None:
    """The first value of ``got`` not within the tolerance of the stored one (sealed: the file
    says whether a value is near, not what it is), or None."""
    seen = Observed(name, got, case["expected"][name])
    if seen.form is None:
        return None
    offsets = seen.offsets(case["expected"][name])
    return offsets.index(None) if None in offsets else None


def judge_probabilities(ctx: Context, out: Outputs) -> Measurement:
    """The probabilities against the stored values; the first outside the tolerance named, and
    the ZeroDivisionErrors (graded as NaN) said."""
    case, got = ctx.course_data["sampler"]["probabilities"], out["p"]
    measurement = grade(case, {"p": got})
    i = first_outside(got, case, "p")
    if i is not None:
        value = shortest(got[i].item(), resolution=RESOLUTION)
        measurement.hint = (
            f"{PROBABILITY_LABELS[i]}: got {value}, not within the tolerance of the expected value"
        )
    if errors := out["errors"]:
        measurement.hint = f"{errors[0]} ({len(errors)} cases); {measurement.hint}"
    return measurement


@check(
    "sampler: task_probabilities vs N_i^α / Σ_j N_j^α",
    tolerance=SAMPLER_TOLERANCE,
    judge=judge_probabilities,
    hint="each task's weight is its size to the power α; the probabilities are the weights "
    "normalised to sum to 1, keyed like sizes",
    exercises=("sampler",),
    functions=("task_probabilities",),
)
def check_task_probabilities(ctx: Context) -> Outputs:
    """task_probabilities(sizes, α) for several sizes and α (``PROBABILITY_LABELS``). α = 0
    is among them (uniform sampling); a ZeroDivisionError there (every weight 0, as α·N_i
    gives) is graded as the NaN that 0/0 is, so the known mistake that gives it is named."""
    from minbert.sampling import task_probabilities

    values, errors = [], []
    for sizes in SAMPLER_SIZES:
        for alpha in ALPHAS:
            try:
                got = task_probabilities(sizes, alpha)
            except ZeroDivisionError as err:  # graded as NaN (0/0), so the mistake can be named
                errors.append(f"ZeroDivisionError: {err} with α = {alpha} and sizes {sizes}")
                got = dict.fromkeys(sizes, math.nan)
            if list(got) != list(sizes):
                return problem(f"tasks {list(got)}, expected {list(sizes)} (in order)")
            values += [float(got[task]) for task in sizes]
    return {"p": torch.tensor(values, dtype=torch.float64), "errors": errors}
