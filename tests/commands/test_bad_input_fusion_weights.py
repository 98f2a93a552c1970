"""Bad input to ``python -m tools.fusion_weights``: --out as the attention command checks
it, --limit, the run it reads, a fault (the promise and how a case is run:
tests/commands/bad_input.py). Tests of their own below: the missing run named as RUN_DIR, and a
name without a suffix written as .png."""

from __future__ import annotations

import pytest

from tests.commands.bad_input import (
    Case,
    Ctx,
    case_ids,
    check,
    config_cases,
    disk_full,
    files,
    plain,
    then,
)
from tools import fusion_weights

RUNS = ("run", "fusion")


def weights(*extra: str, run: str = "fusion"):
    """The fusion-weights command on a copy of a finished run (``run``: its name in ``made``)."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint}
        return [str(ctx.copy(run)), "--limit", "4", *[e.format(**names) for e in extra]]

    return argv


def run_file(name: str, file: str):
    """A file the run ``name`` (a copy) holds as its own, e.g. its learning curves."""

    def make(ctx: Ctx) -> None:
        (ctx.copy(name) / file).write_bytes(b"\x89PNG the run's own figure")

    return make


CASES = [
    Case(
        "w-out-run-own-file-overwrite",
        "weights",
        then(
            run_file("fusion", "learning_curves.png"),
            weights("--out", "{tmp}/fusion/learning_curves.png", "--overwrite"),
        ),
        "--out",
    ),
    Case("w-out-in-run", "weights", weights("--out", "{tmp}/fusion/w.png"), "--out"),
    Case(
        "w-out-in-other-run",
        "weights",
        then(lambda c: c.copy("run"), weights("--out", "{tmp}/run/w.png", "--overwrite")),
        "--out",
    ),
    Case("w-out-under-run", "weights", weights("--out", "{tmp}/fusion/a/w.png"), "--out"),
    Case("w-out-in-checkpoint", "weights", weights("--out", "{ckpt}/w.png"), "--out"),
    Case(
        "w-out-stem-png-exists",
        "weights",
        then(files("fig.png"), weights("--out", "{tmp}/fig")),
        "fig.png",
    ),
    Case(
        "w-out-folder-overwrite",
        "weights",
        then(files("figs/", "figs.png"), weights("--out", "{tmp}/figs", "--overwrite")),
        "--out",
    ),
    Case("w-out-slash", "weights", weights("--out", "{tmp}/new/"), "--out"),
    Case("w-out-empty", "weights", weights("--out", ""), "--out"),
    Case("w-out-txt", "weights", weights("--out", "{tmp}/w.txt"), "--out"),
    Case("w-limit-zero", "weights", weights("--out", "{tmp}/w", "--limit", "0"), "--limit 0"),
    Case("w-limit-negative", "weights", weights("--out", "{tmp}/w", "--limit", "-5"), "--limit -5"),
    Case("w-bad-flag", "weights", weights("--out", "{tmp}/w", "--nope"), "--nope"),
    Case("w-run-missing", "weights", plain("{tmp}/nope", "--out", "{tmp}/w"), "RUN_DIR"),
    Case("w-run-not-fusion", "weights", weights("--out", "{tmp}/w", run="run"), "RUN_DIR"),
    Case(
        "w-disk-full",
        "weights",
        weights("--out", "{tmp}/w.png"),
        "w.png: cannot write",
        1,
        disk_full("fsync"),
    ),
    # -- the run's config.json, one reader for all commands --
    *config_cases("weights", "fusion", ("../fusion", "--limit", "4", "--out", "{tmp}/w.png")),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_the_missing_run_line_names_the_folder_not_resume(tmp_path, capsys):
    """The fusion-weights command reads a finished run: the missing one is RUN_DIR's mistake,
    never a flag the user did not give (the driver's --resume, which it reads the run with)."""
    assert fusion_weights.main([str(tmp_path / "nope"), "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert f"RUN_DIR: {tmp_path / 'nope'}" in err and "--resume" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_name_without_suffix_is_checked_and_written_as_png(made, tmp_path, capsys):
    """``--out fig`` writes fig.png, atomically (no temporary file stays), and the same name is
    the one that needs --overwrite the second time."""
    argv = [str(made["fusion"]), "--limit", "4", "--out", str(tmp_path / "fig")]
    assert fusion_weights.main(argv) == 0
    assert f"wrote {tmp_path / 'fig.png'}" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png"]
    assert (tmp_path / "fig.png").read_bytes()[:4] == b"\x89PNG"
    assert fusion_weights.main(argv) == 2
    assert f"{tmp_path / 'fig.png'} exists; pass --overwrite" in capsys.readouterr().err
    assert fusion_weights.main([*argv, "--overwrite"]) == 0
