"""The grader's own checks as tests: one test per check of ``python sanity_check.py`` that grades
an exercise, with the same tolerance and the same message, so that this project's tests and the
grader cannot disagree. A check whose exercise is not written yet fails here with its hint, as
it is NOT IMPLEMENTED there. The other tests of each exercise (in this folder, by file) check
what a reference cannot: statistics over many draws, identities, shapes, gradients."""

from __future__ import annotations

import pytest

from course.checks import CHECKS
from course.registry import PASS, Context, format_result, run_check
from sanity_check import DEFAULT_REFERENCE

GRADED = [check for check in CHECKS if check.exercises]  # the tokenizer's is not an exercise


@pytest.fixture(scope="module")
def ctx() -> Context:
    """One context for the module: the model is loaded once, as in ``sanity_check.py``."""
    return Context(None, DEFAULT_REFERENCE)


@pytest.mark.parametrize("check", GRADED, ids=[check.name.split(":")[0] for check in GRADED])
def test_check(check, ctx) -> None:
    result = run_check(check, ctx)
    width = len(check.name)
    assert result.status == PASS, format_result(result, width)
