"""Bad input to sanity_check.py, the grader's runner (the promise and how a case is run:
tests/commands/bad_input.py)."""

from __future__ import annotations

import pytest

from tests.commands.bad_input import (
    Case,
    Ctx,
    case_ids,
    check,
    plain,
)

CASES = [
    Case("g-checkpoint-missing", "grader", plain("--checkpoint", "{tmp}/nope"), "--checkpoint"),
    Case("g-checkpoint-empty", "grader", plain("--checkpoint", ""), "--checkpoint"),
    Case("g-reference-missing", "grader", plain("--reference", "{tmp}/nope.pt"), "--reference"),
    Case("g-only-unknown", "grader", plain("--only", "nothing-like-this"), "--only"),
    Case("g-bad-flag", "grader", plain("--nope"), "--nope"),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)
