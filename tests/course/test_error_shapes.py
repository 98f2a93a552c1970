"""The shape of an error (course/shapes.py): each generic diagnosis names an output made wrong in
its way, from the sealed expected output alone, and names nothing for an output that is right or
wrong in no such way."""

from __future__ import annotations

import pytest
import torch

from course import seal
from course.measure import Measurement, diagnose, grade

TOLERANCE = 1e-5
AXES = ("sentence", "token", "dim")


def expected_of(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def named(got: torch.Tensor, expected: torch.Tensor) -> str:
    """The diagnosis a check of tolerance ``TOLERANCE`` gives ``got`` against ``expected``."""
    measured = grade({"expected": {"y": seal.seal("y", expected, TOLERANCE)}}, {"y": got})
    assert measured.max_abs_diff > TOLERANCE  # the output is wrong
    return diagnose(measured, TOLERANCE)


# (shape, transform that makes the mistake, a phrase of its diagnosis): small outputs are
# sealed by digests, large ones by projections.
CASES = [
    ((3, 5, 8), lambda e: 4 * e, "4 times the expected"),
    ((3, 5, 8), lambda e: e / 8, "1/8 of the expected"),
    ((2, 3, 4), lambda e: 3 * e, "3 times the expected"),
    ((2, 3, 4), lambda e: e / 2, "1/2 of the expected"),
    ((), lambda e: 6 * e, "6 times the expected"),
    ((5, 6, 8), lambda e: torch.roll(e, -1, 1), "the expected one of the next token"),
    ((5, 6, 8), lambda e: torch.roll(e, 1, 0), "the expected one of the sentence before"),
    ((4, 6, 6), lambda e: e.transpose(1, 2), "token and dim axes swapped"),
    ((2, 3, 4), lambda e: e.abs().sqrt(), "square root of the expected"),
    (
        (4, 6, 16),  # each sentence's mean over one token more than it has: n / (n + 1)
        lambda e: e * torch.tensor([7 / 8, 3 / 4, 5 / 6, 1 / 2]).double()[:, None, None],
        "at each sentence your output is the expected one times a factor of its own",
    ),
]


@pytest.mark.parametrize("shape, mistake, says", CASES, ids=[c[2] for c in CASES])
def test_a_mistake_of_a_shape_is_named_by_it(shape, mistake, says):
    expected = expected_of(shape)
    if "square root" in says:
        expected = expected.abs()
    assert says in named(mistake(expected), expected)


def test_right_but_at_the_last_token_is_named():
    expected = expected_of((2, 4, 3))
    got = expected.clone()
    got[:, -1] += 1.0
    assert named(got, expected) == "your output is right everywhere but the last token"


def test_an_output_wrong_in_no_such_way_is_not_named():
    expected = expected_of((3, 5, 8))
    other = expected_of((3, 5, 8), seed=1)
    assert named(other, expected) == ""


def test_a_right_output_has_no_shape():
    expected = expected_of((3, 5, 8))
    sealed = seal.seal("y", expected, TOLERANCE)
    assert grade({"expected": {"y": sealed}}, {"y": expected + 1e-9}).shapes == {}


def test_a_known_mistake_is_named_before_a_shape():
    measured = Measurement(1.0, mistakes={"the known one": 0.0}, shapes={"a shape": 0.0})
    assert diagnose(measured, TOLERANCE) == "the known one"
