"""Per-task loss weights (``--loss_weights``, ``multitask.step.loss_weights`` and ``TrainingStep``):
the parsed entries, the weighted loss and gradient of one batch, and the driver's use of them."""

from __future__ import annotations

import json

import pytest
import torch

from multitask.step import TrainingStep, loss_weights
from tests.helpers import run_driver

TASKS = ["sst", "para", "sts"]


def test_entries_become_a_weight_per_named_task():
    assert loss_weights([], TASKS) == {}
    assert loss_weights(["sst=2", "sts=0.5"], TASKS) == {"sst": 2.0, "sts": 0.5}


@pytest.mark.parametrize(
    "entry",
    ["nope=2", "sst", "sst=", "sst=two", "sst=0", "sst=-1", "sst=nan", "sst=inf", "=2"],
)
def test_a_bad_entry_is_named(entry):
    with pytest.raises(ValueError, match=f"--loss_weights '{entry}'"):
        loss_weights([entry], TASKS)


def test_a_task_named_twice_is_refused():
    with pytest.raises(ValueError, match="sst=3"):
        loss_weights(["sst=2", "sst=3"], TASKS)


def test_weighted_loss_and_gradient_are_the_weight_times_the_plain_ones(model_and_batch):
    model, [(sst, sst_batch), (para, para_batch)] = model_and_batch

    def loss_and_gradient(step: TrainingStep, task, batch) -> tuple[torch.Tensor, list]:
        model.zero_grad(set_to_none=True)
        loss = step(task, batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    weighted = TrainingStep(model, weights={"sst": 2.0})  # a power of two: exact in floats
    plain_loss, plain_grads = loss_and_gradient(TrainingStep(model), sst, sst_batch)
    loss, grads = loss_and_gradient(weighted, sst, sst_batch)
    assert torch.equal(loss, 2 * plain_loss)
    assert all(torch.equal(g, 2 * p) for g, p in zip(grads, plain_grads, strict=True))
    # A task the weights do not name keeps its loss.
    unnamed = loss_and_gradient(weighted, para, para_batch)[0]
    assert torch.equal(unnamed, loss_and_gradient(TrainingStep(model), para, para_batch)[0])


def first_logged_loss(out_dir) -> float:
    return json.loads((out_dir / "train_log.jsonl").read_text().splitlines()[0])["loss"]


def test_driver_weights_the_task_loss(tiny_checkpoint, tiny_data, tmp_path, capsys):
    flags = (
        "--option",
        "finetune",
        "--tasks",
        "sst",
        "--epochs",
        "1",
        "--steps_per_epoch",
        "1",
        "--log_every",
        "1",
        "--no_plots",
    )
    assert run_driver(tiny_checkpoint, tiny_data, tmp_path / "plain", *flags) == 0
    weighted = tmp_path / "weighted"
    assert run_driver(tiny_checkpoint, tiny_data, weighted, *flags, "--loss_weights", "sst=2") == 0
    # The first step's loss is logged before any update: same batch, same dropout, twice the loss.
    assert first_logged_loss(weighted) == 2 * first_logged_loss(tmp_path / "plain")
    assert json.loads((weighted / "config.json").read_text())["loss_weights"] == ["sst=2"]
    capsys.readouterr()
    bad = ("--loss_weights", "sts=2")  # sts is not among --tasks
    assert run_driver(tiny_checkpoint, tiny_data, tmp_path / "bad", *flags, *bad) == 2
    assert "--loss_weights 'sts=2'" in capsys.readouterr().err
