"""benchmarks/multitask_runs.py running a suite: several configurations at once (--jobs), each in
its own process with its own log, every row landing in the one results file."""

from __future__ import annotations

import json

import multitask_runs
import pytest


def test_jobs_runs_configurations_at_once_into_one_results_file(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    tiny = ["--checkpoint", str(tiny_checkpoint), "--batch_size", "4", "--max_length", "32"]
    tiny += ["--epochs", "1", "--steps_per_epoch", "2", "--no_plots"]
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
