"""benchmarks/multitask_runs.py running a suite: several configurations at once (--jobs), each in
its own process with its own log, every row landing in the one results file."""

from __future__ import annotations

import json

import multitask_runs
import pytest

from tests.helpers import run_driver, short_run

# A row the driver's parser reads (the runner checks that before any row runs) and the run then
# refuses: --option fusion without its stage-1 run.
FAILS = ["--option", "fusion"]


def test_jobs_runs_configurations_at_once_into_one_results_file(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    tiny = ["--checkpoint", str(tiny_checkpoint), "--batch_size", "4", "--max_length", "32"]
    tiny += short_run(1, 2)
    suite = [(f"{s}-sampled", [*tiny, "--sampling", s]) for s in ("round-robin", "proportional")]
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", suite)
    runs, stem = tmp_path / "runs", tmp_path / "results" / "tiny"
    argv = ["tiny", "--jobs", "2", "--seeds", "1,2", "--data_dir", str(tiny_data)]
    assert multitask_runs.main([*argv, "--runs_dir", str(runs), "--results", str(stem)]) == 0
    results = json.loads(stem.with_suffix(".json").read_text())
    names = [f"{s}-sampled-seed-{seed}" for s in ("round-robin", "proportional") for seed in (1, 2)]
    assert sorted(results) == sorted(names)  # no row lost to another writing at the same time
    for name in names:
        assert results[name]["settings"]["seed"] == int(name[-1])
        assert results[name]["settings"]["sampling"] == name.split("-sampled")[0]
        assert "done:" in (runs / f"tiny-{name}.log").read_text()
    text = stem.with_suffix(".md").read_text()
    assert all(f"| {name} |" in text for name in names)


def test_jobs_below_one_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        multitask_runs.main(["multitask", "--jobs", "0"])
    assert exit_info.value.code == 2
    assert "--jobs must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--only", "finetune,no-such-row"], "has no row no-such-row; its rows:"),
        (["--seeds", "1,x"], "--seeds '1,x': give distinct whole numbers"),
        (["--seeds", "1,1"], "--seeds '1,1': give distinct whole numbers"),
        (["--seeds", ""], "--seeds '': give distinct whole numbers"),
        (["--data_dir", "no/such/folder"], "--data_dir no/such/folder: no such folder"),
    ],
)
def test_a_bad_flag_is_one_line_before_anything_runs(flags, words, tmp_path, capsys):
    stem = tmp_path / "results" / "multitask"
    with pytest.raises(SystemExit) as exit_info:
        multitask_runs.main(["multitask", "--results", str(stem), *flags])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and err.startswith("error:")
    assert words in err
    assert not stem.parent.exists()  # nothing written


def test_results_in_a_run_folder_and_a_cut_off_results_file_are_refused(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    run = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, run, *short_run(1, 1)) == 0
    argv = ["multitask", "--data_dir", str(tiny_data), "--results"]
    with pytest.raises(SystemExit) as exit_info:
        multitask_runs.main([*argv, str(run / "mine")])
    assert (
        exit_info.value.code == 2
        and "is a train_multitask.py run folder" in capsys.readouterr().err
    )
    cut = tmp_path / "cut"
    cut.with_suffix(".json").write_text('{"row": {"comm')
    with pytest.raises(SystemExit) as exit_info:
        multitask_runs.main([*argv, str(cut), "--render"])
    assert exit_info.value.code == 2 and "is corrupted (not JSON)" in capsys.readouterr().err


def test_a_failed_row_makes_the_runner_fail(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys
):
    tiny = ["--checkpoint", str(tiny_checkpoint), "--batch_size", "4", "--epochs", "1"]
    suite = [
        ("good", [*tiny, "--steps_per_epoch", "1", "--no_plots"]),
        ("bad", [*tiny, *FAILS]),
    ]
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", suite)
    argv = ["tiny", "--data_dir", str(tiny_data), "--runs_dir", str(tmp_path / "runs")]
    assert multitask_runs.main([*argv, "--results", str(tmp_path / "tiny")]) == 1
    assert "error: 1 row(s) failed: bad" in capsys.readouterr().err
    assert list(json.loads((tmp_path / "tiny.json").read_text())) == ["good"]


def test_rows_run_at_once_start_after_their_first_stage(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys
):
    """With --jobs 2 a row that starts from another row's run folder waits until that row has
    ended (started earlier, --init_from would find no finished run) and is not started when it
    failed (a teacher of --teachers is a first stage too); rows without one run at once."""
    tiny = ["--checkpoint", str(tiny_checkpoint), "--batch_size", "4", *short_run(1, 2)]
    suite = [
        ("first", tiny),
        (
            "taught",
            ["--tasks", "sst", "--teachers", "sst={runs_dir}/tiny-first-seed-{seed}", *tiny],
        ),
        ("bad", [*tiny, *FAILS]),
        ("then", ["--init_from", "{runs_dir}/tiny-first-seed-{seed}", "--tasks", "sst", *tiny]),
        ("after-bad", ["--init_from", "{runs_dir}/tiny-bad-seed-{seed}", *tiny]),
    ]
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", suite)
    argv = ["tiny", "--jobs", "2", "--seeds", "1", "--data_dir", str(tiny_data)]
    argv += ["--runs_dir", str(tmp_path / "runs"), "--results", str(tmp_path / "tiny")]
    assert multitask_runs.main(argv) == 1
    out, err = capsys.readouterr()
    assert "after-bad-seed-1: not started: bad-seed-1 did not end well" in out
    assert "error: 2 row(s) failed: bad-seed-1, after-bad-seed-1" in err
    results = json.loads((tmp_path / "tiny.json").read_text())
    assert sorted(results) == ["first-seed-1", "taught-seed-1", "then-seed-1"]
    assert results["then-seed-1"]["settings"]["init_from"].endswith("tiny-first-seed-1")


def test_a_row_whose_process_had_the_ctrl_c_stops_the_queue(tiny_checkpoint, tmp_path, monkeypatch):
    """A row whose process ended by Ctrl-C (exit 130) stops its worker from starting the next
    queued row, also before the runner's main thread has seen the Ctrl-C itself."""
    started = []

    def interrupted(cmd, out):
        started.append(cmd[cmd.index("--out_dir") + 1])
        return 130

    monkeypatch.setattr(multitask_runs, "run_child", interrupted)
    tiny = ["--checkpoint", str(tiny_checkpoint), "--epochs", "1"]
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", [("a", tiny), ("b", tiny)])
    argv = ["tiny", "--data_dir", str(tmp_path), "--runs_dir", str(tmp_path / "runs")]
    assert multitask_runs.main([*argv, "--results", str(tmp_path / "tiny")]) != 0
    assert len(started) == 1  # b never started


def test_a_pretraining_row_feeds_the_next_row_of_its_seed(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """A suite row may run pretrain_mlm.py (further pretraining): its results row holds the MLM
    settings and held-out evaluations, and the next row trains from its checkpoint folder, as
    the sharing suite's MLM → multitask → each task chain does."""
    mlm = [multitask_runs.MLM, "--checkpoint", str(tiny_checkpoint), "--steps", "2"]
    mlm += ["--eval_every", "1", "--batch_size", "4", "--max_length", "32"]
    then = [
        "--checkpoint",
        "{runs_dir}/tiny-mlm-seed-{seed}",
        "--batch_size",
        "4",
        *short_run(1, 2),
    ]
    monkeypatch.setitem(multitask_runs.SUITES, "tiny", [("mlm", mlm), ("then", then)])
    runs, stem = tmp_path / "runs", tmp_path / "tiny"
    argv = ["tiny", "--seeds", "3", "--data_dir", str(tiny_data), "--runs_dir", str(runs)]
    assert multitask_runs.main([*argv, "--results", str(stem)]) == 0
    results = json.loads(stem.with_suffix(".json").read_text())
    pretrained, trained = results["mlm-seed-3"], results["then-seed-3"]
    assert pretrained["command"].split()[1] == "pretrain_mlm.py"
    assert pretrained["settings"]["seed"] == 3 and pretrained["settings"]["steps"] == 2
    assert [e["step"] for e in pretrained["evaluations"]] == [0, 1, 2]
    assert trained["settings"]["checkpoint"] == str(runs / "tiny-mlm-seed-3")
    assert "overall" in trained["best"]
    text = stem.with_suffix(".md").read_text()
    assert "| mlm-seed-3 | - | - | - | - | - |" in text and "| then-seed-3 |" in text


@pytest.mark.parametrize("suite", sorted(multitask_runs.SUITES))
def test_every_row_of_every_suite_passes_its_scripts_parser(suite):
    """The check that runs before any row (the flags of each row, read by the parser of the
    script it runs) accepts every row of the suites as recorded, with and without --seeds."""
    import argparse

    parser = argparse.ArgumentParser()
    for seeds in (None, "1,2"):
        args = argparse.Namespace(suite=suite, only=None, seeds=seeds, runs_dir="runs/bench")
        args.data_dir = "data"
        multitask_runs.check_flags(parser, multitask_runs.chosen_runs(parser, args), args, [])
