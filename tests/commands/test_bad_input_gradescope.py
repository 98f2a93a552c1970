"""Bad input to ``python -m course.grading.autograder``, the Gradescope zip: never over a file
of the user's without --overwrite (the promise and how a case is run:
tests/commands/bad_input.py). A test of its own below: --overwrite replaces an earlier zip."""

from __future__ import annotations

import zipfile

import pytest

from course.grading import autograder
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
    Case(
        "g-zip-exists",
        "gradescope",
        then(files("autograder.zip"), plain("{tmp}/autograder.zip")),
        "autograder.zip exists; pass --overwrite",
    ),
    Case(
        "g-zip-is-a-link",
        "gradescope",
        then(
            lambda c: (files("mine.zip")(c), (c.tmp / "a.zip").symlink_to(c.tmp / "mine.zip")),
            plain("{tmp}/a.zip"),
        ),
        "a.zip exists; pass --overwrite",
    ),
    Case(
        "g-leaderboard-zip-exists",
        "gradescope",
        then(
            files("autograder.zip", "labels/"),
            plain("{tmp}/autograder.zip", "--leaderboard", "--labels", "{tmp}/labels"),
        ),
        "autograder.zip exists; pass --overwrite",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_overwrite_replaces_an_earlier_zip(tmp_path, capsys):
    """With --overwrite the zip is written over the earlier one, whole."""
    out = tmp_path / "autograder.zip"
    out.write_bytes(b"an earlier zip")
    assert autograder.main([str(out), "--overwrite"]) == 0
    with zipfile.ZipFile(out) as archive:
        assert {"setup.sh", "run_autograder"} <= set(archive.namelist())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["autograder.zip"]
