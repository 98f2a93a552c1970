"""PCGrad (minbert/pcgrad.py) on hand-computed vectors, and steps that train on a batch of every
task (``--step_gradient summed`` / ``pcgrad``) in the model layer and the driver."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from extras.pcgrad_update import PCGrad
from minbert.optimizer import adamw_for
from minbert.pcgrad import project_conflicting, surgery
from multitask.step import HostChecked, TrainingStep, train_step
from tests.helpers import run_driver


def order(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_two_conflicting_gradients_by_hand():
    # g1 = (1, 0), g2 = (-1, 1): g1·g2 = -1 < 0.
    # g1' = g1 - (-1 / 2)·g2 = (0.5, 0.5); g2' = g2 - (-1 / 1)·g1 = (0, 1); sum (0.5, 1.5).
    g1, g2 = torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 1.0])
    assert torch.equal(project_conflicting([g1, g2], order()), torch.tensor([0.5, 1.5]))


def test_without_a_conflict_the_sum_is_unchanged():
    grads = [
        torch.tensor([1.0, 2.0, 0.0]),
        torch.tensor([0.5, 0.0, 3.0]),
        torch.tensor([0, 1.0, 1]),
    ]
    assert torch.equal(project_conflicting(grads, order()), sum(grads))


def test_each_projected_gradient_is_orthogonal_to_the_other_it_conflicted_with():
    torch.manual_seed(0)
    for _ in range(20):
        g1, g2 = torch.randn(50, dtype=torch.float64), torch.randn(50, dtype=torch.float64)
        if torch.dot(g1, g2) >= 0:
            g2 = g2 - 2 * torch.dot(g1, g2) / torch.dot(g1, g1) * g1  # make them conflict
        assert torch.dot(g1, g2) < 0
        only_1 = project_conflicting([g1, torch.zeros_like(g2)], order())  # g1 as it is
        both = project_conflicting([g1, g2], order())
        g1_projected = g1 - torch.dot(g1, g2) / torch.dot(g2, g2) * g2
        g2_projected = g2 - torch.dot(g2, g1) / torch.dot(g1, g1) * g1
        assert torch.equal(only_1, g1)
        torch.testing.assert_close(both, g1_projected + g2_projected, rtol=0, atol=1e-12)
        assert abs(torch.dot(g1_projected, g2)) < 1e-10 and abs(torch.dot(g2_projected, g1)) < 1e-10


def test_surgery_projects_only_what_every_task_reaches():
    shared_1, shared_2 = torch.tensor([[1.0, 0.0]]), torch.tensor([[-1.0, 1.0]])
    own = torch.tensor([3.0])
    per_task = [
        [shared_1, own, None, torch.tensor([2.0])],
        [shared_2, None, None, torch.zeros(1)],  # a zero gradient: the task does not reach it
    ]
    combined = surgery(per_task, order())
    assert torch.equal(combined[0], torch.tensor([[0.5, 1.5]]))  # projected, as by hand above
    assert torch.equal(combined[1], own)  # one task's own parameter: its gradient as it is
    assert combined[2] is None  # no task reaches it: no gradient, so no update
    assert torch.equal(combined[3], torch.tensor([2.0]))


def parameters_after(model, step, batches, pcgrad=None, manual=False, sgd=False):
    """The parameters after one AdamW step (with ``sgd``: θ ← θ − g, which shows g itself)."""
    optimizer = (
        torch.optim.SGD(model.parameters(), lr=1.0)
        if sgd
        else adamw_for(model, lr=1e-3, weight_decay=0.0)
    )
    if manual:  # the gradient of the summed losses, one backward
        optimizer.zero_grad()
        sum(step(task, batch) for task, batch in batches).backward()
        optimizer.step()
    else:
        update = HostChecked() if pcgrad is None else PCGrad(lambda: pcgrad)
        train_step(step, batches, optimizer, update)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def test_summed_step_is_the_step_on_the_summed_losses(model_and_batch):
    model, batches = model_and_batch
    twin = copy.deepcopy(model)
    stepped = parameters_after(model, TrainingStep(model), batches)
    reference = parameters_after(twin, TrainingStep(twin), batches, manual=True)
    for name in reference:
        torch.testing.assert_close(stepped[name], reference[name], rtol=0, atol=1e-7)


class Opposed(nn.Module):
    """The task loss in the first call of a step, −2 × the same loss in the second: two tasks
    whose gradients point exactly against each other (g and −2g)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.step, self.calls = TrainingStep(model), 0

    def forward(self, task, batch):
        self.calls += 1
        return self.step(task, batch) * (1.0 if self.calls % 2 else -2.0)


def test_pcgrad_cancels_exactly_opposed_tasks_where_summing_does_not(model_and_batch):
    model, batches = model_and_batch
    one_batch_twice = [batches[0], batches[0]]
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    twin = copy.deepcopy(model)
    # g1' = g − (g·(−2g) / ‖2g‖²)(−2g) = 0 and g2' = −2g − (−2g·g / ‖g‖²) g = 0.
    projected = parameters_after(model, Opposed(model), one_batch_twice, pcgrad=0, sgd=True)
    summed = parameters_after(twin, Opposed(twin), one_batch_twice, sgd=True)
    encoder = [name for name in before if name.startswith("bert.")]
    moved = {name: (summed[name] - before[name]).abs().max().item() for name in encoder}
    left = {name: (projected[name] - before[name]).abs().max().item() for name in encoder}
    assert max(moved.values()) > 1e-3  # summed: the gradient −g moves the encoder
    assert max(left.values()) < 1e-7  # projected: both gradients vanish, up to float rounding


def test_pcgrad_with_agreeing_tasks_is_the_summed_step(model_and_batch):
    model, batches = model_and_batch
    one_batch_twice = [batches[0], batches[0]]  # identical gradients: no conflict
    twin = copy.deepcopy(model)
    projected = parameters_after(model, TrainingStep(model), one_batch_twice, pcgrad=0)
    summed = parameters_after(twin, TrainingStep(twin), one_batch_twice)
    for name in summed:
        torch.testing.assert_close(projected[name], summed[name], rtol=0, atol=1e-7)


@pytest.mark.parametrize("mode", ["summed", "pcgrad"])
def test_driver_trains_on_every_task_in_every_step(mode, tiny_checkpoint, tiny_data, tmp_path):
    out = tmp_path / mode
    flags = ("--option", "finetune", "--epochs", "1", "--step_gradient", mode, "--no_plots")
    assert run_driver(tiny_checkpoint, tiny_data, out, "--log_every", "1", *flags) == 0
    # 3 tasks of 40 training examples in batches of 4, one batch of each task a step: 10 steps.
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [10]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["train_examples"] == 120
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert {entry["task"] for entry in log} == {"sst", "para", "sts"}
