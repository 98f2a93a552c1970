"""The CUDA path of the driver: every option and SMART under bf16 autocast, and the resume of a
GPU run. Skipped where no CUDA device is visible (the CI machines); run on a GPU machine with
``python -m pytest tests/driver/test_gpu.py``."""

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


# The whole step as CUDA graphs (extras/cuda_graphs.py) against the eager step, 50 steps of the
# three tasks in turn on the tiny model. Tolerances: fp32 within 1e-4 relative (the float32 device
# rate rounds 1 - lr·λ once more, and the embedding backward adds in a nondeterministic order);
# bf16 to bf16's precision, as the resume test above.
GRAPH_TASKS = ["sst", "para", "sts"]
GRAPH_TOLERANCE = {False: {"rtol": 1e-4, "atol": 1e-5}, True: {"rtol": 2e-2, "atol": 2e-2}}


def graph_batches(model, steps: int, nan_at: int | None = None) -> list:
    """``steps`` (task, batch) pairs, tasks in turn, 8 examples of 16 tokens (real lengths vary,
    the rest masked); at step ``nan_at`` an STS batch whose labels are NaN."""
    from multitask.collate import Batch

    generator = torch.Generator().manual_seed(0)
    vocab = model.bert.config.vocab_size
    batches = []
    for s in range(steps):
        name = "sts" if s == nan_at else GRAPH_TASKS[s % 3]
        task = model.tasks[name]
        lengths = torch.randint(4, 17, (8,), generator=generator)
        mask = (torch.arange(16)[None, :] < lengths[:, None]).long()
        ids = torch.randint(1, vocab, (8, 16), generator=generator) * mask
        labels = task.label_tensor(
            [float(x) for x in torch.rand(8, generator=generator) * 5]
            if name == "sts"
            else [
                int(x)
                for x in torch.randint(0, 2 if name == "para" else 5, (8,), generator=generator)
            ]
        )
        if s == nan_at:
            labels[:] = float("nan")
        inputs = [
            {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}
        ]
        inputs = [{k: v.cuda() for k, v in inputs[0].items()}]
        batches.append((task, Batch(inputs, labels.cuda())))
    return batches


def train_graphed_or_eager(checkpoint, graphed: bool, bf16: bool, batches, dropout=0.0, lr=1e-3):
    """A fresh tiny model trained on ``batches`` by the eager step or the graphed one; the model,
    the losses (on the host) and the weights after each step."""
    import contextlib

    from extras.cuda_graphs import GraphedSteps
    from extras.device_lr import DeviceRates
    from minbert.optimizer_foreach import ForeachAdamW
    from multitask.model import ModelSettings, build_model
    from multitask.step import (
        DeviceFlagged,
        TrainingStep,
        linear_warmup_decay,
        optimizer_for,
        train_step,
    )

    torch.manual_seed(0)
    settings = ModelSettings(option="finetune", checkpoint=str(checkpoint))
    model = build_model(settings, GRAPH_TASKS, dropout=dropout).cuda().train()
    optimizer = optimizer_for(model, lr, 0.01, choose=lambda g, rate: ForeachAdamW(g, lr=rate))
    scheduler = linear_warmup_decay(optimizer, 5, len(batches))
    update = DeviceFlagged(torch.ones((), dtype=torch.bool, device="cuda"), skip=True)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    step = TrainingStep(model)
    run_step = train_step
    if graphed:
        widths = dict.fromkeys(GRAPH_TASKS, 16)
        rates = DeviceRates(optimizer, torch.device("cuda"))
        run_step = GraphedSteps(widths, 1, 0, rates, bf16)
    losses, weights = [], []
    for pair in batches:
        out = run_step(step, [pair], optimizer, update, scheduler, autocast, 1.0)
        losses.append(out[0].item())
        weights.append([p.detach().clone() for p in model.parameters()])
    return model, losses, weights, run_step


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_the_captured_step_equals_the_eager_step_over_50_steps(tiny_checkpoint, bf16):
    batches = graph_batches_for(tiny_checkpoint, 50)
    _, eager, eager_weights, _ = train_graphed_or_eager(tiny_checkpoint, False, bf16, batches)
    _, graphed, graphed_weights, steps = train_graphed_or_eager(
        tiny_checkpoint, True, bf16, batches
    )
    assert len(steps.graphs) == 3  # one graph a task, captured at its third step
    torch.testing.assert_close(graphed, eager, **GRAPH_TOLERANCE[bf16])
    for a, b in zip(graphed_weights[-1], eager_weights[-1]):
        torch.testing.assert_close(a, b, **GRAPH_TOLERANCE[bf16])
    assert not all(torch.equal(a, b) for a, b in zip(graphed_weights[0], graphed_weights[-1]))


def graph_batches_for(checkpoint, steps: int, nan_at: int | None = None) -> list:
    from multitask.model import ModelSettings, build_model

    settings = ModelSettings(option="finetune", checkpoint=str(checkpoint))
    return graph_batches(build_model(settings, GRAPH_TASKS, dropout=0.0), steps, nan_at)


def test_a_skipped_nonfinite_replay_changes_nothing(tiny_checkpoint):
    """At step 31 (a replay of the STS graph) the labels are NaN: the weights after it are
    exactly those before it, and the run goes on as the eager step's with the same skip."""
    batches = graph_batches_for(tiny_checkpoint, 40, nan_at=31)
    _, eager, eager_weights, _ = train_graphed_or_eager(tiny_checkpoint, False, False, batches)
    _, graphed, weights, steps = train_graphed_or_eager(tiny_checkpoint, True, False, batches)
    assert ("sts", 8, (16,)) in steps.graphs and steps.seen[("sts", 8, (16,))] > 3
    assert graphed[31] != graphed[31] and eager[31] != eager[31]  # NaN, read by the log
    assert all(torch.equal(a, b) for a, b in zip(weights[30], weights[31]))
    for a, b in zip(weights[-1], eager_weights[-1]):
        torch.testing.assert_close(a, b, **GRAPH_TOLERANCE[False])


def test_dropout_draws_anew_in_each_replay(tiny_checkpoint):
    """At learning rate 0 (the weights never move) the same batch replayed gives a different
    loss each time with dropout (the generator's offset advances per replay), and the same
    loss without."""
    repeated = graph_batches_for(tiny_checkpoint, 1) * 6
    kept = train_graphed_or_eager(tiny_checkpoint, True, False, repeated, dropout=0.0, lr=0.0)[1]
    noisy = train_graphed_or_eager(tiny_checkpoint, True, False, repeated, dropout=0.3, lr=0.0)[1]
    assert len(set(kept[2:])) == 1  # the replays (steps 3 to 6) of one batch, nothing drawn
    assert len(set(noisy[2:])) == 4  # four different draws
