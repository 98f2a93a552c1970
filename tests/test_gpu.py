"""The CUDA path of the driver: every option and SMART under bf16 autocast, and the resume of a
GPU run. Skipped where no CUDA device is visible (the CI machines); run on a GPU machine with
``python -m pytest tests/test_gpu.py``."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tests.helpers import kill_when_resumable, run_driver

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA_BF16 = ("--device", "cuda", "--bf16", "--no_plots")


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "flags",
    [
        *[
            ("--option", option)
            for option in ("pretrain", "finetune", "adapter", "pals", "lhuc", "lora")
        ],
        ("--option", "finetune", "--smart"),
        ("--option", "adapter", "--smart"),
        ("--option", "finetune", "--step_gradient", "pcgrad"),
    ],
    ids=lambda flags: "-".join(f.lstrip("-") for f in flags[1:]),
)
def test_every_option_trains_under_bf16_on_the_gpu(flags, tiny_checkpoint, tiny_data, tmp_path):
    extra = ("--epochs", "2", "--steps_per_epoch", "3", *CUDA_BF16, *flags)
    assert run_driver(tiny_checkpoint, tiny_data, tmp_path, *extra) == 0
    assert [m["step"] for m in metrics(tmp_path)] == [3, 6]
    for m in metrics(tmp_path):
        assert all(m[k] == m[k] for k in ("sst", "para", "sts", "overall"))  # no NaN
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["steps"] == 6


def test_a_killed_gpu_run_resumes(tiny_checkpoint, tiny_data, tmp_path):
    """Kill -9 a GPU run once it has a resumable checkpoint, resume it, and compare with a run
    never interrupted: the same evaluation steps, and weights that agree to bf16's precision
    (GPU kernels such as the embedding backward add in a nondeterministic order)."""
    extra = [
        "--epochs",
        "2",
        "--steps_per_epoch",
        "6",
        "--eval_every",
        "3",
        "--save_every",
        "1",
        "--option",
        "finetune",
        *CUDA_BF16,
    ]
    reference = tmp_path / "reference"
    assert run_driver(tiny_checkpoint, tiny_data, reference, *extra) == 0
    killed = tmp_path / "killed"
    code = kill_when_resumable(tiny_checkpoint, tiny_data, killed, *extra)
    assert code == -signal.SIGKILL, "the run finished before it could be killed"
    assert run_driver(tiny_checkpoint, tiny_data, killed, *CUDA_BF16, "--resume") == 0
    assert [m["step"] for m in metrics(killed)] == [m["step"] for m in metrics(reference)]
    resumed, whole = (
        load_file(killed / "best.safetensors"),
        load_file(reference / "best.safetensors"),
    )
    assert resumed.keys() == whole.keys()
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=2e-2)
