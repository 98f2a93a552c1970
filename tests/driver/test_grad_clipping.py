"""--max_grad_norm: before each update the step's gradients are scaled so that their total L2 norm
is at most the bound (``torch.nn.utils.clip_grad_norm_``), one line in ``train_step`` whatever
makes the step: one task, a summed step, PCGrad, bf16 autocast, the device-flagged update. Each
clipped step equals the same step written out: backward, clip_grad_norm_, the update."""

from __future__ import annotations

import contextlib
import copy

import pytest
import torch

from extras.pcgrad_update import PCGrad
from minbert.optimizer import adamw_for
from minbert.optimizer_foreach import ForeachAdamW
from minbert.pcgrad import surgery
from multitask.step import DeviceFlagged, HostChecked, TrainingStep, parameters, train_step

BOUND = 1e-2  # far below the tiny model's gradient norm: the clip binds


def after(model) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def written_out(model, batches, bound, autocast=None, pcgrad_seed=None, sgd=False):
    """The step by hand: each loss's backward (PCGrad: the tasks' gradients projected and
    summed), clip_grad_norm_ to ``bound``, the update."""
    step = TrainingStep(model)
    optimizer = optimizer_for(model, sgd)
    optimizer.zero_grad(set_to_none=True)
    per_task = []
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        loss.backward()
        if pcgrad_seed is not None:
            per_task.append([p.grad for p in parameters(optimizer)])
            optimizer.zero_grad(set_to_none=True)
    if pcgrad_seed is not None:
        order = torch.Generator().manual_seed(pcgrad_seed)
        for p, grad in zip(parameters(optimizer), surgery(per_task, order)):
            p.grad = grad
    torch.nn.utils.clip_grad_norm_(parameters(optimizer), bound)
    optimizer.step()
    return after(model)


def optimizer_for(model, sgd: bool):
    if sgd:  # θ ← θ − g: the change is the clipped gradient itself
        return torch.optim.SGD(model.parameters(), lr=1.0)
    return adamw_for(model, lr=1e-3, weight_decay=0.0)


def stepped(model, batches, bound, update=None, autocast=None, sgd=False, foreach=False):
    optimizer = optimizer_for(model, sgd)
    if foreach:  # the driver's optimizer: it updates where a device flag allows (apply_if)
        optimizer = ForeachAdamW(optimizer.param_groups, lr=1e-3)
    update = update or HostChecked()
    train_step(TrainingStep(model), batches, optimizer, update, None, autocast, bound)
    return after(model)


CASES = {
    "one task": (1, None, None),
    "summed": (2, None, None),
    "pcgrad": (2, 7, None),
    "bf16": (2, None, torch.bfloat16),
}


@pytest.mark.parametrize("case", CASES)
def test_a_clipped_step_is_clip_grad_norm_then_the_update(case, model_and_batch):
    model, batches = model_and_batch
    tasks, seed, dtype = CASES[case]
    batches = batches[:tasks]
    autocast = torch.autocast("cpu", dtype=dtype) if dtype else None
    twin = copy.deepcopy(model)
    update = PCGrad(lambda: seed) if seed is not None else None
    got = stepped(model, batches, BOUND, update, autocast)
    expected = written_out(twin, batches, BOUND, autocast, seed)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=0)


def test_the_device_flagged_update_clips_the_same(model_and_batch):
    model, batches = model_and_batch
    twin = copy.deepcopy(model)
    healthy = torch.tensor(True)
    got = stepped(model, batches, BOUND, DeviceFlagged(healthy), foreach=True)
    expected = stepped(twin, batches, BOUND, foreach=True)
    for name in expected:  # the flagged update blends old and new values: float32 rounding
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-6)
    assert bool(healthy)


def test_the_clipped_gradient_has_the_bounds_norm(model_and_batch):
    """With SGD at lr 1 the change of the parameters is the clipped gradient: its norm is the
    bound, where the gradient's own norm is far above it."""
    model, batches = model_and_batch
    before = after(model)
    changed = stepped(model, batches, BOUND, sgd=True)
    change = torch.cat([(before[n] - changed[n]).reshape(-1) for n in before])
    torch.testing.assert_close(change.norm().item(), BOUND, rtol=1e-5, atol=0)


def test_zero_leaves_the_step_unclipped(model_and_batch):
    model, batches = model_and_batch
    twin = copy.deepcopy(model)
    got = stepped(model, batches, 0.0)
    expected = stepped(twin, batches, float("inf"))  # clip_grad_norm_ to ∞ scales by 1
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=1e-9)


def test_the_driver_trains_with_a_clip_and_refuses_a_negative_one(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    import json

    from tests.helpers import run_driver, tiny_run

    out = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "clipped", "--max_grad_norm", "0.5")
    assert json.loads((out / "config.json").read_text())["max_grad_norm"] == 0.5
    assert run_driver(tiny_checkpoint, tiny_data, tmp_path / "no", "--max_grad_norm", "-1") == 2
    assert "--max_grad_norm" in capsys.readouterr().err
