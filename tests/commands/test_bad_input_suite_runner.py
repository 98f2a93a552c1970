"""Bad input to the suite runner, ``python benchmarks/multitask_runs.py``: its flags, its
results file, and every row's flags read by its script's parser before any row starts (the
promise and how a case is run: tests/commands/bad_input.py). Tests of their own below, in real
processes: a read-only results file or folder, and Ctrl-C to the runner's process group."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import multitask_runs
import pytest

from tests.commands.bad_input import (
    ROOT,
    Case,
    Ctx,
    case_ids,
    check,
    snapshot,
    then,
)
from tests.helpers import short_run

RUNS = ("run",)


def tiny_suite(monkeypatch, ctx: Ctx) -> None:
    """A tiny suite of one row; the cases' results file is under {tmp}/res."""
    tiny = ["--checkpoint", str(ctx.checkpoint), "--batch_size", "4", "--max_length", "32"]
    tiny += short_run(1, 1)
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", [("good", tiny)])


def runner(*extra: str, results: str = "{tmp}/res/tiny"):
    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "run": ctx.tmp / "run"}
        if "{run}" in results:
            ctx.run()
        words = ["tiny", "--data_dir", str(ctx.data), "--runs_dir", str(ctx.tmp / "runs")]
        words += ["--results", results.format(**names)]
        return words + [e.format(**names) for e in extra]

    return argv


def results_row(command: str, name: str = "good"):
    """A results file already holding row ``name``, recorded with ``command``."""

    def make(ctx: Ctx) -> None:
        (ctx.tmp / "res").mkdir(exist_ok=True)
        row = {"command": command, "settings": {}}
        (ctx.tmp / "res" / "tiny.json").write_text(json.dumps({name: row}))

    return make


def suite_with(bad: list[str], script: str | None = None):
    """A tiny suite: a good row, then a row with the flags ``bad`` (of ``script``, else the
    driver's)."""

    def patch(monkeypatch, ctx) -> None:
        tiny = ["--checkpoint", str(ctx.checkpoint), "--max_length", "32"]
        rows = [("good", [*tiny, "--batch_size", "4", *short_run(1, 1)])]
        if script == multitask_runs.MLM:
            rows.append(("bad", [script, *tiny, "--steps", "1", "--tasks", "sst", *bad]))
        elif script == multitask_runs.PLAIN_LOOP:
            rows.append(("bad", [script, *tiny, "--epochs", "1", "--limit", "4", *bad]))
        else:
            rows.append(("bad", [*tiny, "--batch_size", "4", *short_run(1, 1), *bad]))
        monkeypatch.setitem(multitask_runs.SUITES, "tiny", rows)

    return patch


# -- every row's flags, read by its script's parser before any row starts --
ROW_FLAGS = [
    Case(
        f"r-{label}",
        "runner",
        runner(*after),
        f"row bad: {script or 'train_multitask.py'} refuses its flags: {words}",
        patch=suite_with(bad, script),
    )
    for label, bad, after, script, words in [
        ("unknown-flag", ["--nope"], (), None, "unrecognized arguments: --nope"),
        ("value-out-of-range", ["--lr", "-1"], (), None, "--lr"),
        ("choice-unknown", ["--sampling", "bogus"], (), None, "argument --sampling: invalid"),
        ("value-not-a-number", ["--epochs", "x"], (), None, "argument --epochs: invalid int"),
        ("mlm-unknown-flag", ["--nope"], (), multitask_runs.MLM, "unrecognized arguments"),
        ("mlm-out-of-range", ["--warmup", "1"], (), multitask_runs.MLM, "--warmup"),
        (
            "plain-loop-choice",
            ["--draw", "bogus"],
            (),
            multitask_runs.PLAIN_LOOP,
            "argument --draw: invalid choice",
        ),
    ]
] + [
    Case(
        "r-flags-after-dashes",
        "runner",
        runner("--", "--nope"),
        "row good: train_multitask.py refuses its flags: unrecognized arguments: --nope",
        patch=suite_with([]),
    ),
]


CASES = [
    Case(
        "r-row-other-command",
        "runner",
        then(results_row("python train_multitask.py --lr 1"), runner()),
        "--replace",
        patch=tiny_suite,
    ),
    Case(
        "r-seeded-row-other-command",
        "runner",
        then(results_row("python x.py", "good-seed-1"), runner("--seeds", "1")),
        "good-seed-1",
        patch=tiny_suite,
    ),
    Case("r-bad-flag", "runner", runner("--nope"), "--nope", patch=tiny_suite),
    Case("r-jobs-zero", "runner", runner("--jobs", "0"), "--jobs", patch=tiny_suite),
    Case("r-only-unknown", "runner", runner("--only", "bad"), "--only", patch=tiny_suite),
    Case("r-results-in-run", "runner", runner(results="{run}/tiny"), "--results", patch=tiny_suite),
    Case(
        "r-results-in-checkpoint",
        "runner",
        runner(results="{ckpt}/tiny"),
        "--results",
        patch=tiny_suite,
    ),
    Case(
        "r-results-cut",
        "runner",
        then(lambda c: c.folder("res") and c.file("res/tiny.json", '{"good": {"comm'), runner()),
        "corrupted",
        patch=tiny_suite,
    ),
    Case(
        "r-results-not-rows",
        "runner",
        then(lambda c: c.folder("res") and c.file("res/tiny.json", "[1, 2]"), runner()),
        "corrupted",
        patch=tiny_suite,
    ),
    *ROW_FLAGS,
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


READ_ONLY_RESULTS = """
import contextlib, io, json, sys
import multitask_runs
checkpoint, data, runs, stem = sys.argv[1:5]
tiny = ["--checkpoint", checkpoint, "--batch_size", "4", "--max_length", "32", "--epochs", "1",
        "--steps_per_epoch", "1", "--no_plots"]
multitask_runs.SUITES["tiny"] = [("good", tiny)]
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        code = multitask_runs.main(["tiny", "--data_dir", data, "--runs_dir", runs,
                                    "--results", stem])
    except SystemExit as exit:
        code = exit.code
print(json.dumps([code, err.getvalue()]))
"""


@pytest.mark.parametrize("read_only", ["tiny.md", "tiny.json", "."])
def test_the_runner_checks_its_results_files_are_writable_before_a_row_runs(
    read_only, tiny_checkpoint, tiny_data, tmp_path
):
    """Root's permission bypass dropped (setpriv): a read-only results file (the Markdown one
    beside the JSON one, or the JSON one) or folder is one line naming it, exit 2, before any
    row runs, and both files stay as they were (never the JSON file changed and not the other)."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    res, runs = tmp_path / "res", tmp_path / "runs"
    res.mkdir()
    (res / "tiny.json").write_text(json.dumps({"old": {"command": "python x.py"}}))
    (res / "tiny.md").write_text("# the old table\n")
    before = snapshot(res)
    (res / read_only).chmod(0o555 if read_only == "." else 0o444)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c"]
    command += [READ_ONLY_RESULTS, str(tiny_checkpoint), str(tiny_data), str(runs)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    try:
        done = subprocess.run(
            [*command, str(res / "tiny")], cwd=ROOT, capture_output=True, text=True, env=env
        )
    finally:
        (res / read_only).chmod(0o755 if read_only == "." else 0o644)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    assert done.returncode == 0, done.stderr
    code, err = json.loads(done.stdout.splitlines()[-1])
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --results"), err
    named = res if read_only == "." else res / read_only
    assert str(named) in lines[0] and "Traceback" not in err
    assert snapshot(res) == before
    assert not runs.exists()  # no row ran


RUNNER_SCRIPT = """
import sys
import multitask_runs
checkpoint, data, runs, results = sys.argv[1:5]
tiny = ["--checkpoint", checkpoint, "--batch_size", "4", "--max_length", "32", "--epochs", "1",
        "--steps_per_epoch", "100000", "--no_plots"]
multitask_runs.SUITES["tiny"] = [("first", tiny), ("second", tiny), ("third", tiny)]
sys.exit(multitask_runs.main(["tiny", "--jobs", "2", "--data_dir", data, "--runs_dir", runs,
                              "--results", results]))
"""


def test_ctrl_c_to_the_runners_process_group_is_one_line_and_a_whole_results_file(
    tiny_checkpoint, tiny_data, tmp_path
):
    """SIGINT to the runner's whole process group (what Ctrl-C in a terminal sends): the runner
    and its rows stop, no queued row starts, one line on its standard error, exit 130, and the
    results file it already had is whole and unchanged."""
    runs, stem = tmp_path / "runs", tmp_path / "res" / "tiny"
    stem.parent.mkdir()
    kept = json.dumps({"earlier": {"command": "python train_multitask.py", "settings": {}}})
    stem.with_suffix(".json").write_text(kept)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")])}
    argv = [sys.executable, "-c", RUNNER_SCRIPT, str(tiny_checkpoint), str(tiny_data)]
    runner_process = subprocess.Popen(
        [*argv, str(runs), str(stem)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        # a shell without job control starts background commands (CI's make) with SIGINT
        # ignored, which Python keeps: the runner gets the default back, as a terminal gives it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.time() + 120
        logs = [runs / "tiny-first.log", runs / "tiny-second.log"]
        # both rows in their epoch ("steps per task" opens it), which they cannot finish before
        # the SIGINT: 100,000 steps (400 took a tiny row 2 s, and one finished first under load)
        while not all(p.exists() and "steps per task" in p.read_text() for p in logs):
            assert runner_process.poll() is None and time.time() < deadline
            time.sleep(0.2)
        os.killpg(runner_process.pid, signal.SIGINT)
        _, err = runner_process.communicate(timeout=120)
    finally:
        if runner_process.poll() is None:
            os.killpg(runner_process.pid, signal.SIGKILL)
    lines = [line for line in err.splitlines() if line.strip()]
    assert runner_process.returncode == 130, err
    assert len(lines) == 1 and lines[0].startswith("error: interrupted"), err
    assert str(stem.with_suffix(".json")) in lines[0]
    assert stem.with_suffix(".json").read_text() == kept  # whole, and no stopped row in it
    assert not (runs / "tiny-third.log").exists()  # the queued row never started
