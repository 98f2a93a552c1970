"""The shape of an error (course/shapes.py): each generic diagnosis names an output made wrong in
its way, from the sealed expected output alone, and names nothing for an output that is right or
wrong in no such way."""

from __future__ import annotations

import pytest
import torch

from course import seal
from course.measure import Measurement, diagnose, grade
from course.shapes import Given

TOLERANCE = 1e-5
AXES = ("sentence", "token", "dim")


def expected_of(shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def named(got: torch.Tensor, expected: torch.Tensor, given: Given | None = None, axes=()) -> str:
    """The diagnosis a check of tolerance ``TOLERANCE`` gives ``got`` against ``expected``
    (``given``: what the check says the output is built on; ``axes``: the output's axis names)."""
    case = {"expected": {"y": seal.seal("y", expected, TOLERANCE)}}
    measured = grade(case, {"y": got}, axes=axes, given=given)
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


@pytest.mark.parametrize("shape", [(3, 5, 8), (2, 3, 4)], ids=["projection", "digests"])
def test_an_update_of_the_wrong_sign_or_scale_is_named_by_its_base(shape):
    """h + u where h − u (or h + 2u) was returned: named from the base h the check gives; a
    shift b that broadcasts is a base too."""
    h, update = expected_of(shape, seed=2), expected_of(shape, seed=3)
    given = Given({"y": ("h", h)})
    said = named(h - update, h + update, given)
    assert said.startswith("your output minus h is the negative of what it should be"), said
    assert named(h + 2 * update, h + update, given).startswith("your output minus h is 2 times")
    b = torch.tensor(0.7, dtype=torch.float64)
    said = named(b + 2 * update, b + update, Given({"y": ("the shift b", b)}))
    assert said.startswith("your output minus the shift b is 2 times"), said
    assert named(h - update, h + update) == ""  # without the base, no such shape


@pytest.mark.parametrize(
    "factor, says",
    [
        (lambda n: n / (n + 1), "a mean over one more than it has (n + 1)"),
        (lambda n: n, "a sum where the mean belongs (not divided by n)"),
    ],
    ids=["n + 1", "sum"],
)
def test_a_mean_over_the_wrong_count_is_named_by_each_sentences_count(factor, says):
    """Mean pooling of four sentences of 7, 3, 5 and 1 real tokens, divided by another count:
    each sentence's own factor, which only the counts the check gives can explain."""
    counts = torch.tensor([7, 3, 5, 1])
    expected = expected_of((4, 8))
    got = expected * factor(counts.double())[:, None]
    given, axes = Given(counts={"y": counts}), ("sentence", "dim")
    said = named(got, expected, given, axes)
    assert said == f"at each sentence your output is {says}, n the sentence's count"
    assert named(got, expected, axes=axes) == ""
    assert named(expected_of((4, 8), seed=1), expected, given, axes) == ""
