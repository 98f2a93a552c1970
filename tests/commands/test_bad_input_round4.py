"""Round four of the bad-input promise (tests/commands/test_bad_input_commands.py's table, same
assertions): the attention command's --out, the distillation flags, the suite runner
(benchmarks/multitask_runs.py), input that holds nothing, and flags at their extremes.

A last test sends SIGINT to the suite runner's real process group, as Ctrl-C in a terminal does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import multitask_runs
import pytest
import torch

import multitask.attention
import train_multitask
from minbert.checkpoint import save_tensors
from tests.commands.test_bad_input_commands import (
    MAINS,
    Case,
    Ctx,
    driver,
    interrupt,
    invoke,
    make_runs,
    mlm,
    plain,
    predict,
    snapshot,
    then,
)
from tests.helpers import short_run

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = {**MAINS, "attention": multitask.attention.main, "runner": multitask_runs.main}
INVISIBLE = "only invisible characters"


def attention(*extra: str, run: str = "run", task: str | None = "sst", text: str = "a good film"):
    """The attention command on a copy of a finished run (``run=""``: --checkpoint instead)."""

    def argv(ctx: Ctx) -> list[str]:
        names = {"tmp": ctx.tmp, "ckpt": ctx.checkpoint, "cwd": ctx.cwd}
        where = [str(ctx.copy(run))] if run else []
        asked = [] if task is None else ["--task", task]
        return [*where, *asked, "--input", text, *[e.format(**names) for e in extra]]

    return argv


def files(*names: str):
    """Files (and folders, named with a trailing /) of the user's under the case's folder."""

    def make(ctx: Ctx) -> None:
        for name in names:
            path = ctx.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if name.endswith("/"):
                path.mkdir()
            else:
                path.write_text("the user's own\n")

    return make


# -- the suite runner: a tiny suite of one row, the results file under {tmp}/res --------------


def tiny_suite(monkeypatch, ctx: Ctx) -> None:
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


# -- the scaffold: a small source tree with one exercise ----------------------------------------

EXERCISE = """def area(width, height):
    # HINT: the area of a width x height rectangle.
    # BEGIN SOLUTION: area
    return width * height
    # END SOLUTION
"""


def source_tree(*extra: tuple[str, bytes]):
    def make(ctx: Ctx) -> None:
        src = ctx.tmp / "src"
        (src / "pkg").mkdir(parents=True)
        (src / "pkg" / "geometry.py").write_text(EXERCISE)
        (src / "README.md").write_text("a course\n")
        for name, content in extra:
            (src / name).write_bytes(content)

    return make


# -- distillation ------------------------------------------------------------------------------


def taught_run(ctx: Ctx) -> None:
    """A copy of the adapter run (sst, para) whose config says sst and para were taught, with a
    teacher cache that holds sst's outputs only."""
    run = ctx.copy("adapter", "taught")
    teacher = str(ctx.copy("adapter"))
    ctx.edit_json(
        run / "config.json",
        lambda c: c.__setitem__("teachers", [f"sst={teacher}", f"para={teacher}"]),
    )
    save_tensors({"sst": torch.zeros(3, 5)}, run / "teacher-outputs.safetensors")


def cut_teacher(ctx: Ctx) -> None:
    path = ctx.copy("adapter") / "task-sst.safetensors"
    path.write_bytes(path.read_bytes()[:100])


NEW = ("--out_dir", "{tmp}/new")


@pytest.fixture(scope="module")
def made(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    """The table's tiny finished runs: finetune, adapter (sst,para), pretrain_mlm.py."""
    return make_runs(tiny_checkpoint, tiny_data, tmp_path_factory.mktemp("made"))


HUGE = str(10**9)

CASES = [
    # -- the attention command: --out never into a run or checkpoint, never over a file unasked --
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
    # -- input that holds nothing, reported as the training reader reports such a row --
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
        interrupt(multitask.attention, "look"),
    ),
    Case(
        "p-combining-line",
        "predict",
        then(
            lambda c: c.file("m.txt", "a good film\n\u0301\u0301\n"),
            predict("--strict", input="{tmp}/m.txt"),
        ),
        f"m.txt:2: empty sentence ({INVISIBLE}",
    ),
    Case(
        "p-csv-invisible-sentence2",
        "predict",
        then(
            lambda c: c.file("q.csv", "sentence1,sentence2\na film,a movie\na film,\u200b\u200b\n"),
            predict("--strict", task="sts", input="{tmp}/q.csv"),
        ),
        f"q.csv:3: empty sentence2 ({INVISIBLE}",
    ),
    Case("p-threads-huge", "predict", predict("--threads", "100000"), "--threads"),
    Case(
        "m-text-invisible",
        "mlm",
        then(
            lambda c: c.file("inv.txt", "\u200b\u200b\n\u0301\n\ufeff\n" * 8),
            mlm("--text", "{tmp}/inv.txt"),
        ),
        "--text",
    ),
    Case(
        "m-text-blank",
        "mlm",
        then(lambda c: c.file("blank.txt", " \n\t\n\n" * 6), mlm("--text", "{tmp}/blank.txt")),
        "--text",
    ),
    Case("m-threads-huge", "mlm", mlm("--threads", "100000"), "--threads"),
    # -- the driver: extremes, a flag given twice, teachers --
    Case("d-threads-huge", "driver", driver("--threads", "100000", *NEW), "--threads"),
    Case(
        "d-adapter-size-huge",
        "driver",
        driver("--option", "adapter", "--adapter_size", HUGE, *NEW),
        "--adapter_size",
    ),
    Case(
        "d-lora-rank-huge",
        "driver",
        driver("--option", "lora", "--lora_rank", HUGE, *NEW),
        "--lora_rank",
    ),
    Case(
        "d-pal-size-huge",
        "driver",
        driver("--option", "pals", "--pal_size", HUGE, *NEW),
        "--pal_size",
    ),
    Case("d-head-hidden-huge", "driver", driver("--head_hidden", HUGE, *NEW), "--head_hidden"),
    Case(
        "d-teachers-twice-first-kept",
        "driver",
        driver("--teachers", "sst={tmp}/nope", "--teachers", "para={run}", *NEW),
        "--teachers sst=",
    ),
    Case(
        "d-teachers-twice-equals-first-kept",
        "driver",
        driver("--teachers=sst={tmp}/nope", "--teachers=para={run}", *NEW),
        "--teachers sst=",
    ),
    Case(
        "d-teachers-twice-one-task-two-runs",
        "driver",
        driver(
            "--teachers", "sst={run}", "--teachers", "sst={adapter}", *NEW, runs=("run", "adapter")
        ),
        "--teachers",
    ),
    Case(
        "d-teacher-is-overwritten-run",
        "driver",
        driver("--out_dir", "{run}", "--overwrite", "--tasks", "sst", "--teachers", "sst={run}"),
        "--teachers",
    ),
    Case(
        "d-teacher-is-new-out-dir",
        "driver",
        driver("--out_dir", "{tmp}/new", "--tasks", "sst", "--teachers", "sst={tmp}/new", runs=()),
        "--teachers",
    ),
    Case(
        "d-teacher-inside-out-dir",
        "driver",
        driver("--out_dir", "{tmp}", "--overwrite", "--tasks", "sst", "--teachers", "sst={run}"),
        "--teachers",
    ),
    Case(
        "d-overwrite-teacher-missing",
        "driver",
        driver("--out_dir", "{run}", "--overwrite", "--teachers", "sst={tmp}/nope"),
        "--teachers",
    ),
    Case(
        "d-overwrite-teacher-cut",
        "driver",
        then(
            cut_teacher,
            driver("--out_dir", "{run}", "--overwrite", "--teachers", "sst={tmp}/adapter"),
        ),
        "task-sst.safetensors",
    ),
    Case(
        "d-resume-cache-lacks-a-task",
        "driver",
        then(taught_run, driver("--out_dir", "{tmp}/taught", "--resume", runs=())),
        "--teachers",
    ),
    # -- the suite runner --
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
    # -- the scaffold --
    Case(
        "s-latin1-source",
        "scaffold",
        then(
            source_tree(("latin.py", b"# caf\xe9\nx = 1\n")),
            plain("{tmp}/out", "--source", "{tmp}/src"),
        ),
        "latin.py",
    ),
    Case(
        "s-force-file-where-folder",
        "scaffold",
        then(
            lambda c: (source_tree()(c), files("out/pkg")(c)),
            plain("{tmp}/out", "--source", "{tmp}/src", "--force"),
        ),
        "pkg",
    ),
    Case(
        "s-force-folder-where-file",
        "scaffold",
        then(
            lambda c: (source_tree()(c), files("out/README.md/")(c)),
            plain("{tmp}/out", "--source", "{tmp}/src", "--force"),
        ),
        "README.md",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    ctx = Ctx(tmp_path, made, tiny_checkpoint, tiny_data)
    before = invoke(case, ctx, COMMANDS, monkeypatch, capsys)
    assert snapshot(tmp_path, tiny_checkpoint) == before  # nothing changed, lost or left behind


def test_at_least_fifty_cases():
    assert len(CASES) >= 50
    assert len({c.name for c in CASES}) == len(CASES)


def test_teachers_given_twice_are_merged(made, tiny_checkpoint, tiny_data, tmp_path):
    """Both --teachers count (documented in --help); the same entry twice counts once."""
    run = made["run"]
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data)]
    argv += ["--max_length", "32", "--out_dir", str(tmp_path / "new")]
    argv += ["--teachers", f"sst={run}", "--teachers", f"para={run},sst={run}"]
    teachers = train_multitask.parse_args(argv).extras["distillation"].teachers
    assert teachers == [f"sst={run}", f"para={run}"]
    assert "merged" in train_multitask.build_parser().format_help()


def test_attention_writes_only_the_files_it_names_and_overwrites_only_when_asked(
    made, tmp_path, capsys
):
    """``--out fig.html`` says which files it writes; with --overwrite it replaces exactly those
    (a folder's files beside them stay), and a combining mark on a letter is text."""
    (tmp_path / "fig-2.png").write_text("the user's own\n")
    argv = [str(made["run"]), "--task", "sst", "--input", "cafe\u0301", "--out"]
    assert multitask.attention.main([*argv, str(tmp_path / "fig.html")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'fig.html'}, {tmp_path / 'fig.png'}" in out
    page = (tmp_path / "fig.html").read_bytes()
    assert multitask.attention.main([*argv, str(tmp_path / "fig.html")]) == 2
    assert "--overwrite" in capsys.readouterr().err
    argv[argv.index("cafe\u0301")] = "a good film"
    assert multitask.attention.main([*argv, str(tmp_path / "fig"), "--overwrite"]) == 0
    assert (tmp_path / "fig.html").read_bytes() != page
    assert (tmp_path / "fig-2.png").read_text() == "the user's own\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig-2.png", "fig.html", "fig.png"]


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
