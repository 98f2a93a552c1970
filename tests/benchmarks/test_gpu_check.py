"""benchmarks/gpu_check.py, the one prepared call on a GPU machine, run end to end on the CPU
(--dry_run: every stage, tiny), so that the call cannot fail on a typo: every stage runs and
is recorded, a failing stage does not stop the next, and the budget skips what does not fit."""

from __future__ import annotations

import json

import gpu_check

# In order of importance: the graphed default run first, the Inductor path last
STAGES = ["wheel", "graphed", "eager", "plain-loop", "profile-graphed", "gpu-tests", "compiled"]


def dry_run(tiny_checkpoint, tiny_data, tmp_path, *extra: str) -> dict:
    argv = ["--dry_run", "--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data)]
    argv += ["--work_dir", str(tmp_path / "work"), "--results_dir", str(tmp_path / "results")]
    assert gpu_check.main([*argv, *extra]) == 0
    report = json.loads((tmp_path / "results" / "gpu-check-dry-run.json").read_text())
    assert (tmp_path / "results" / "gpu-check-dry-run.md").is_file()
    return report


def test_every_stage_runs_and_is_recorded(tiny_checkpoint, tiny_data, tmp_path, monkeypatch):
    monkeypatch.setenv("OUT", str(tmp_path / "out"))
    report = dry_run(tiny_checkpoint, tiny_data, tmp_path)
    stages = {r["name"]: r for r in report["stages"]}
    assert list(stages) == STAGES
    assert stages["wheel"]["status"] == "skipped"  # a dry run installs nothing
    for name in set(STAGES) - {"wheel"}:
        assert stages[name]["status"] == "ok", stages[name].get("error")
    for name in ("graphed", "compiled", "eager", "plain-loop"):
        summary = stages[name]["summary"]
        assert summary["steps"] > 0 and summary["train_examples_per_s"] > 0
        assert set(stages[name]["evaluations"][-1]) >= {"sst", "para", "sts", "overall"}
    assert stages["compiled"]["summary"]["compiled_graphs"] >= 1
    assert stages["compiled"]["summary"]["compile_s"] > 0
    assert "eval_s" in stages["eager"]["summary"]
    for name in ("profile-graphed",):
        profile = stages[name]["profile"]
        assert profile["steps"] == 2 and profile["step_ms"] > 0 and profile["host_ms"] > 0
        assert profile["cpu_ops_per_step"] > 0 and profile["kernels_per_step"] is None  # no GPU
    assert stages["eager"]["command"].startswith("python train_multitask.py --device cpu")
    assert "--cuda_graphs off" in stages["eager"]["command"]
    # on a GPU the graphed stage asks for on (auto is off until measured); on a CPU, auto
    assert "--cuda_graphs auto" in stages["graphed"]["command"]
    assert report["command"].startswith("python benchmarks/gpu_check.py --dry_run")
    assert {"GPU", "CUDA", "torch", "python"} <= set(report["machine"])
    markdown = (tmp_path / "results" / "gpu-check-dry-run.md").read_text()
    assert all(f"| {name} |" in markdown for name in STAGES)
    side_by_side = markdown.split("## The graphed default run against")[1].split("##")[0]
    rows = [line for line in side_by_side.splitlines() if line.startswith("| ")][1:]
    assert [row.split(" | ")[0] for row in rows] == ["| graphed", "| eager", "| plain-loop"]
    assert rows[0].split(" | ")[2] == "1.00" and rows[2].split(" | ")[5] == "1.00 |"
    assert (tmp_path / "out" / "gpu-check-dry-run.json").is_file()  # and a copy into $OUT
    assert (tmp_path / "out" / "gpu-check-dry-run-logs" / "eager.log").is_file()


def test_a_failing_stage_is_recorded_and_the_next_runs(tiny_checkpoint, tiny_data, tmp_path):
    report = dry_run(tiny_checkpoint, tmp_path / "nowhere", tmp_path, "--only", "eager,gpu-tests")
    stages = {r["name"]: r for r in report["stages"]}
    assert list(stages) == ["wheel", "eager", "gpu-tests"]
    assert stages["eager"]["status"] == "failed" and "not found" in stages["eager"]["error"]
    assert stages["gpu-tests"]["status"] == "ok"


def test_a_stage_that_does_not_fit_the_budget_is_skipped(tiny_checkpoint, tiny_data, tmp_path):
    report = dry_run(tiny_checkpoint, tiny_data, tmp_path, "--budget", "0")
    stages = {r["name"]: r for r in report["stages"]}
    assert list(stages) == STAGES
    assert all(stages[name]["status"] == "skipped" for name in ("compiled", "eager", "plain-loop"))
