"""Bad input to sanity_check.py, the grader's runner (the promise and how a case is run:
tests/commands/bad_input.py)."""

from __future__ import annotations

import pytest

from tests.commands.bad_input import (
    Case,
    Ctx,
    case_ids,
    check,
    files,
    plain,
    then,
)

CASES = [
    Case("g-checkpoint-missing", "grader", plain("--checkpoint", "{tmp}/nope"), "--checkpoint"),
    Case("g-checkpoint-empty", "grader", plain("--checkpoint", ""), "--checkpoint"),
    Case("g-reference-missing", "grader", plain("--reference", "{tmp}/nope.pt"), "--reference"),
    Case("g-only-unknown", "grader", plain("--only", "nothing-like-this"), "--only"),
    Case("g-bad-flag", "grader", plain("--nope"), "--nope"),
    # --html PAGE: refused before any check runs; a file of the user's is never replaced
    Case("g-html-folder", "grader", plain("--html", "{tmp}"), "a folder; give the file's name"),
    Case(
        "g-html-no-folder",
        "grader",
        plain("--html", "{tmp}/nowhere/page.html"),
        "/nowhere does not exist",
    ),
    Case(
        "g-html-users-file",
        "grader",
        then(files("notes.html"), plain("--html", "{tmp}/notes.html")),
        "notes.html exists and is not a file this command wrote; pass --overwrite",
    ),
    Case(
        "g-results-json-users-file",
        "grader",
        then(files("notes.json"), plain("--results-json", "{tmp}/notes.json")),
        "notes.json exists and is not a file this command wrote; pass --overwrite",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_a_failing_check_makes_the_exit_code_1(monkeypatch, capsys):
    """The grader's command says a FAIL in its exit code (scripts and CI read it), and 0 only
    when every check passes: here the sampler's checks, one of them made to fail."""
    import sanity_check
    from course.registry import Result

    def failing(check, ctx):
        passed = check.name.startswith("sampler: annealed_alpha")
        return Result(check, "PASS" if passed else "FAIL", 0.0 if passed else 1.0, "made to fail")

    assert sanity_check.main(["--only", "sampler"]) == 0
    monkeypatch.setattr(sanity_check, "run_check", failing)
    assert sanity_check.main(["--only", "sampler"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == "1 passed, 1 failed"
