"""Bad input to ``python -m tools.attention``: --out never into a run or checkpoint, never
over a file unasked; input that holds nothing; flags at their extremes; Ctrl-C (the promise and
how a case is run: tests/commands/bad_input.py). A test of its own below: the files it writes,
and --overwrite."""

from __future__ import annotations

import pytest

import tools.attention
from tests.commands.bad_input import (
    INVISIBLE,
    Case,
    Ctx,
    case_ids,
    check,
    config_cases,
    files,
    interrupt,
    then,
)

RUNS = ("run", "adapter", "mlm")


def attention(*extra: str, run: str = "run", task: str | None = "sst", text: str = "a good film"):
    """The attention command on a copy of a finished run (``run=""``: --checkpoint instead)."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "cwd": ctx.cwd}
        where = [str(ctx.copy(run))] if run else []
        asked = [] if task is None else ["--task", task]
        return [*where, *asked, "--input", text, *[e.format(**names) for e in extra]]

    return argv


CASES = [
    Case("a-out-folder", "attention", attention("--out", "{cwd}"), "--out"),
    Case("a-out-new-folder-slash", "attention", attention("--out", "{tmp}/figs/"), "--out"),
    Case("a-out-dot", "attention", attention("--out", "."), "--out"),
    Case("a-out-empty", "attention", attention("--out", ""), "--out"),
    Case(
        "a-out-html-beside-png",
        "attention",
        then(files("fig.png"), attention("--out", "{tmp}/fig.html")),
        "fig.png",
    ),
    Case(
        "a-out-html-exists",
        "attention",
        then(files("fig.html"), attention("--out", "{tmp}/fig")),
        "fig.html",
    ),
    Case(
        "a-out-png-suffix-html-exists",
        "attention",
        then(files("fig.html"), attention("--out", "{tmp}/fig.png")),
        "--overwrite",
    ),
    Case(
        "a-out-second-figure-exists",
        "attention",
        then(
            files("pair-2.png"),
            attention(
                "--out", "{tmp}/pair", "--pair", "c d", run="adapter", task="para", text="a b"
            ),
        ),
        "pair-2.png",
    ),
    Case(
        "a-out-png-is-folder",
        "attention",
        then(files("fig.png/"), attention("--out", "{tmp}/fig", "--overwrite")),
        "fig.png",
    ),
    Case("a-out-in-run", "attention", attention("--out", "{tmp}/run/fig"), "--out"),
    Case(
        "a-out-in-run-overwrite",
        "attention",
        attention("--out", "{tmp}/run/fig", "--overwrite"),
        "--out",
    ),
    Case("a-out-under-run", "attention", attention("--out", "{tmp}/run/new/fig"), "--out"),
    Case(
        "a-out-in-other-run",
        "attention",
        then(lambda c: c.copy("adapter"), attention("--out", "{tmp}/adapter/fig")),
        "--out",
    ),
    Case(
        "a-out-in-mlm-run",
        "attention",
        then(lambda c: c.copy("mlm"), attention("--out", "{tmp}/mlm/fig")),
        "MLM pretraining run folder",
    ),
    Case("a-out-in-checkpoint", "attention", attention("--out", "{ckpt}/fig"), "--out"),
    Case("a-out-under-checkpoint", "attention", attention("--out", "{ckpt}/a/b/fig"), "--out"),
    Case(
        "a-checkpoint-out-in-it",
        "attention",
        lambda c: [
            "--checkpoint",
            str(c.checkpoint),
            "--input",
            "a film",
            "--out",
            f"{c.checkpoint}/f",
        ],
        "--out",
    ),
    Case(
        "a-out-under-file",
        "attention",
        then(files("f.txt"), attention("--out", "{tmp}/f.txt/fig")),
        "f.txt",
    ),
    Case("a-bad-flag", "attention", attention("--out", "{tmp}/fig", "--nope"), "--nope"),
    Case("a-no-out", "attention", attention(), "--out"),
    Case(
        "a-threads-huge",
        "attention",
        attention("--out", "{tmp}/f", "--threads", "100000"),
        "--threads",
    ),
    Case(
        "a-threads-zero", "attention", attention("--out", "{tmp}/f", "--threads", "0"), "--threads"
    ),
    Case(
        "a-threads-text", "attention", attention("--out", "{tmp}/f", "--threads", "x"), "--threads"
    ),
    Case(
        "a-input-zero-width",
        "attention",
        attention("--out", "{tmp}/f", text="\u200b\u200b"),
        f"--input: empty sentence ({INVISIBLE}",
    ),
    Case(
        "a-input-combining",
        "attention",
        attention("--out", "{tmp}/f", text="\u0301"),
        f"--input: empty sentence ({INVISIBLE}",
    ),
    Case(
        "a-input-marks-and-joiners",
        "attention",
        attention("--out", "{tmp}/f", text="\u200e\u0301\u2060\u200d"),
        INVISIBLE,
    ),
    Case(
        "a-pair-combining",
        "attention",
        attention("--out", "{tmp}/f", "--pair", "\u0301\u0308", task="sts", text="a film"),
        f"--pair: empty sentence ({INVISIBLE}",
    ),
    Case(
        "a-checkpoint-input-invisible",
        "attention",
        lambda c: ["--checkpoint", str(c.checkpoint), "--input", "\ufeff\u200b", "--out", "x"],
        INVISIBLE,
    ),
    Case(
        "a-ctrl-c",
        "attention",
        attention("--out", "{tmp}/f"),
        "interrupted",
        130,
        interrupt(tools.attention, "look"),
    ),
    # -- the run's config.json, one reader for all commands --
    *config_cases(
        "attention", "run", ("../run", "--task", "sst", "--input", "a good film", "--out", "a.html")
    ),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_attention_writes_only_the_files_it_names_and_overwrites_only_when_asked(
    made, tmp_path, capsys
):
    """``--out fig.html`` says which files it writes; with --overwrite it replaces exactly those
    (a folder's files beside them stay), and a combining mark on a letter is text."""
    (tmp_path / "fig-2.png").write_text("the user's own\n")
    argv = [str(made["run"]), "--task", "sst", "--input", "cafe\u0301", "--out"]
    assert tools.attention.main([*argv, str(tmp_path / "fig.html")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'fig.html'}, {tmp_path / 'fig.png'}" in out
    page = (tmp_path / "fig.html").read_bytes()
    assert tools.attention.main([*argv, str(tmp_path / "fig.html")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    argv[argv.index("cafe\u0301")] = "a good film"
    assert tools.attention.main([*argv, str(tmp_path / "fig"), "--overwrite"]) == 0
    assert (tmp_path / "fig.html").read_bytes() != page
    assert (tmp_path / "fig-2.png").read_text() == "the user's own\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig-2.png", "fig.html", "fig.png"]
