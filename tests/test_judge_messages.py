"""What the judge says when what a student's function returned cannot be graded: the output
named, with what it is instead of a tensor, not an error inside the grader's message code."""

from __future__ import annotations

import dataclasses

import torch

from course.checks import CHECKS
from course.registry import FAIL, Context, run_check
from sanity_check import DEFAULT_REFERENCE


def check_named(start: str):
    return next(c for c in CHECKS if c.name.startswith(start))


def test_a_masking_that_returns_a_number_for_its_labels_is_named():
    masking = check_named("masking:")
    ids = torch.ones(32, 20, dtype=torch.int64)
    wrong = {"masked inputs (tokens, p 0.15)": ids, "labels (tokens, p 0.15)": 3}
    result = run_check(
        dataclasses.replace(masking, compute=lambda ctx: wrong), Context(None, DEFAULT_REFERENCE)
    )
    assert result.status == FAIL
    assert "labels (tokens, p 0.15) is of type int, expected a tensor" in result.detail


def test_a_layer_that_returns_none_is_named():
    layer = check_named("layer: BertLayer")
    cases = [{"got": {"layer output": None}, "label": "", "axes": [], "calls": None}] * 2
    broken = dataclasses.replace(layer, compute=lambda ctx: {"cases": cases})
    result = run_check(broken, Context(None, DEFAULT_REFERENCE))
    assert result.status == FAIL and "layer output is a NoneType" in (result.detail or "")
