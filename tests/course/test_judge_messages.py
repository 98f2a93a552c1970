"""What the judge says when what a student's function returned cannot be graded: the output
named, with what it is instead of a tensor, not an error inside the grader's message code."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
import torch

from course.checks import CHECKS
from course.grading.sandbox import Output
from course.registry import FAIL, MESSAGE_CHARS, Context, judge_check, run_check
from sanity_check import DEFAULT_REFERENCE

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_fail_names_the_def_of_each_function_the_check_ran():
    """The lines come from the runner (the student's tree), the names from the judge's data."""
    pooling = check_named("pooling:")
    ctx = Context(None, DEFAULT_REFERENCE)
    broken = dataclasses.replace(pooling, compute=lambda ctx: {"pooled": None})
    result = run_check(broken, ctx)
    line = next(
        n
        for n, text in enumerate(open(ROOT / "tasks/heads.py", encoding="utf-8"), 1)
        if text.startswith("def sentence_representation(")
    )
    assert (
        result.status == FAIL and result.where == f"tasks/heads.py:{line} (sentence_representation)"
    )


def test_a_runners_lines_are_taken_only_as_positive_ints():
    """A hostile runner's lines cannot put text of its own into the report."""
    pooling = check_named("pooling:")
    ctx = Context(None, DEFAULT_REFERENCE)
    for lines in ({"tasks/heads.py:sentence_representation": "1\nPASS"}, ["x"], {"a": 5}, None):
        computed = {"error": "ValueError: no (tasks/heads.py:1)", "lines": lines}
        result = judge_check(pooling, ctx, computed)
        assert result.where == "tasks/heads.py:? (sentence_representation)"


@pytest.mark.parametrize(
    "check_name, function",
    [
        ("sampler: annealed_alpha", "annealed_alpha"),
        ("sampler: task_probabilities", "task_probabilities"),
        ("attention: scaled_dot_product_attention", "scaled_dot_product_attention"),
        ("smart: symmetric KL", "symmetric_kl"),
    ],
)
def test_a_fail_names_only_the_function_the_check_judges(check_name, function):
    """Where an exercise has several functions, a check that judges one names that one alone."""
    check = check_named(check_name)
    ctx = Context(None, DEFAULT_REFERENCE)
    broken = dataclasses.replace(check, compute=lambda ctx: {"nothing": None})
    result = run_check(broken, ctx)
    assert result.status == FAIL
    assert re.fullmatch(rf"[\w/.]+:\d+ \({function}\)", result.where), result.where


def test_a_huge_raised_message_is_cut_with_the_cut_said():
    """A submission's 12 MiB exception text is kept to its first MESSAGE_CHARS characters, with
    how many more there were: a results file or a report stays small."""
    layer = check_named("layer: BertLayer")
    message = "x" * (12 * 2**20)

    def raises(ctx):
        raise RuntimeError(message)

    result = run_check(dataclasses.replace(layer, compute=raises), Context(None, DEFAULT_REFERENCE))
    assert result.status == FAIL
    assert len(result.detail) < MESSAGE_CHARS + 200
    assert result.detail.endswith(" more characters)") and "... (cut: " in result.detail


def test_what_a_runner_prints_past_the_limit_is_dropped_and_said():
    """The grader keeps the first ``limit`` bytes of a runner's output and says how many more
    it read and dropped."""
    log = Output(100)
    read, write = os.pipe()
    with os.fdopen(read, "rb") as stream:
        drained = log.drain(stream)
        os.write(write, b"y" * 1000)
        os.close(write)
        drained.join(timeout=10)
    assert log.text() == "y" * 100 + "\n(cut: 900 more bytes printed past the first 100)\n"
