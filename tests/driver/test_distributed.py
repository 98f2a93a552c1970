"""torchrun with 2 CPU processes (gloo) against 1 process on the same global batches.

Dropout is off so that both runs compute the same function; each rank takes every second example
of the global batch, so the averaged gradient equals the 1-process gradient up to float rounding.
Tolerance: 1e-4 absolute on every logged training loss and every dev metric."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.parametrize("option", ["finetune", "adapter"])
def test_two_processes_match_one(option, tiny_checkpoint, tiny_data, tmp_path):
    common = [
        "train_multitask.py",
        "--checkpoint",
        str(tiny_checkpoint),
        "--data_dir",
        str(tiny_data),
        "--batch_size",
        "8",
        "--max_length",
        "32",
        "--epochs",
        "1",
        "--steps_per_epoch",
        "6",
        "--dropout",
        "0",
        "--log_every",
        "1",
        "--no_plots",
        "--option",
        option,
    ]
    single, double = tmp_path / "one", tmp_path / "two"
    subprocess.run(
        [sys.executable, *common, "--out_dir", str(single)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    torchrun = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_port=29517",
    ]
    result = subprocess.run(
        [*torchrun, *common, "--out_dir", str(double)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]

    losses_1 = read_jsonl(single / "train_log.jsonl")
    losses_2 = read_jsonl(double / "train_log.jsonl")
    assert [(r["step"], r["task"]) for r in losses_1] == [(r["step"], r["task"]) for r in losses_2]
    for a, b in zip(losses_1, losses_2):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-4)
    for a, b in zip(read_jsonl(single / "metrics.jsonl"), read_jsonl(double / "metrics.jsonl")):
        for key in ("sst", "para", "sts", "overall"):
            assert b[key] == pytest.approx(a[key], abs=1e-4)
    summary_1 = json.loads((single / "summary.json").read_text())
    summary_2 = json.loads((double / "summary.json").read_text())
    assert summary_2["processes"] == 2
    # The processes split each global batch between them rather than each taking all of it.
    assert summary_2["train_examples"] == summary_1["train_examples"] == 6 * 8
