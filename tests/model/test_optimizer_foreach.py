"""AdamW's multi-tensor path (minbert/optimizer_foreach.py) against the per-parameter loop and
against ``torch.optim.AdamW(foreach=True)``: 100 steps on the parameter groups of a real
multitask model (decayed and undecayed groups, layer-wise rates, task heads that receive a
gradient only in their own task's steps), within 1e-7. Instructor-only, as the path it tests."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable

import pytest
import torch

from extras.fused_adamw import FusedAdamW
from minbert.optimizer import AdamW, param_groups
from minbert.optimizer_foreach import ForeachAdamW
from multitask import extras
from multitask.config import parse_args
from multitask.model import ModelSettings, build_model
from multitask.step import optimizer_for


def drivers_optimizer(model: torch.nn.Module, *flags: str) -> torch.optim.Optimizer:
    """The optimizer the driver builds for a run of ``flags``: the one the extras' parts choose
    (``choose_optimizer``), else the hand-written loop."""
    hooks = extras.Hooks(parse_args(["--out_dir", "unused", *flags]))
    return optimizer_for(
        model, 1e-3, 0.01, choose=functools.partial(hooks.fire, "choose_optimizer")
    )


pytestmark = pytest.mark.numerics  # the optimizer against torch: a second pass in CI

TASKS = ["sst", "para", "sts"]


@pytest.fixture(scope="module")
def model(tiny_checkpoint):
    settings = ModelSettings(option="finetune", checkpoint=str(tiny_checkpoint))
    torch.manual_seed(0)
    return build_model(settings, TASKS, dropout=0.0)


# What ``apply`` returns for a step that draws its gradients and then takes no optimizer step.
DROPPED = "dropped"


def train_steps(model, optimizer, steps: int, apply: Callable[[int], object]) -> None:
    """``steps`` updates with seeded random gradients: the shared encoder gets one every step, a
    task's head only in its own steps (task = step mod 3), so step counts differ between
    parameters, as in a multitask run. ``apply(step)``: None, a plain step; True or False, a
    step through the device flag (False: a skipped step, its gradients NaN); DROPPED, none."""
    generator = torch.Generator().manual_seed(1)
    for step in range(steps):
        task = TASKS[step % len(TASKS)]
        for name, p in model.named_parameters():
            other_head = name.startswith("heads.") and not name.startswith(f"heads.{task}.")
            grad = torch.randn(p.shape, generator=generator)
            p.grad = None if other_head else grad
        flag = apply(step)
        if flag is None:
            optimizer.step()
        elif flag is not DROPPED:
            if not flag:
                for p in model.parameters():
                    if p.grad is not None:
                        p.grad.fill_(float("nan"))
            optimizer.step(apply_if=torch.tensor(flag))


def train(
    model, make_optimizer, steps: int = 100, apply: Callable[[int], object] = lambda s: None
) -> dict[str, torch.Tensor]:
    """The parameters of a copy of ``model`` after ``train_steps``."""
    model = copy.deepcopy(model)
    train_steps(model, make_optimizer(model), steps, apply)
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def largest_difference(a: dict, b: dict) -> float:
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_foreach_path_equals_the_per_parameter_loop(model):
    def groups(m):
        return param_groups(m, weight_decay=0.01, lr=1e-3, layer_decay=0.8)

    loop = train(model, lambda m: AdamW(groups(m), lr=1e-3))
    multi = train(model, lambda m: ForeachAdamW(groups(m), lr=1e-3))
    torch_foreach = train(model, lambda m: torch.optim.AdamW(groups(m), lr=1e-3, foreach=True))
    assert len(groups(model)) > 2  # several rates and decays, not one group
    assert largest_difference(multi, loop) <= 1e-7
    assert largest_difference(multi, torch_foreach) <= 1e-7
    start = {name: p.detach() for name, p in model.named_parameters()}
    assert largest_difference(loop, start) > 1e-3  # the weights did move


def test_state_dicts_interchange_and_the_driver_uses_the_foreach_path(model):
    model = copy.deepcopy(model)
    optimizer = drivers_optimizer(model)  # the default
    assert isinstance(optimizer, ForeachAdamW)
    assert type(drivers_optimizer(model, "--optimizer", "adamw")) is AdamW
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    optimizer.step()
    loop = AdamW(param_groups(model, 0.01, 1e-3), lr=1e-3)
    loop.load_state_dict(optimizer.state_dict())
    assert loop.state_dict()["state"].keys() == optimizer.state_dict()["state"].keys()


def groups_of(m):
    return param_groups(m, weight_decay=0.01, lr=1e-3, layer_decay=0.8)


def test_the_device_flag_path_equals_the_host_path(model):
    """apply_if=True every step (t and the bias corrections on the device) gives the host
    path's numbers up to float rounding."""
    host = train(model, lambda m: ForeachAdamW(groups_of(m), lr=1e-3))
    flagged = train(model, lambda m: ForeachAdamW(groups_of(m), lr=1e-3), apply=lambda s: True)
    assert largest_difference(flagged, host) <= 1e-6


def test_a_step_flagged_off_changes_nothing(model):
    """Steps whose flag is False (their gradients NaN) leave θ, m, v and t exactly as they were:
    skipping steps 0 (the very first, t = 0), 40 and 41 equals never drawing them, which is
    training with those steps' gradients left out of the sequence."""
    skipped = {0, 40, 41}

    def apply(step: int) -> bool:
        return step not in skipped

    flagged = train(model, lambda m: ForeachAdamW(groups_of(m), lr=1e-3), apply=apply)
    reference = copy.deepcopy(model)
    optimizer = ForeachAdamW(groups_of(reference), lr=1e-3)
    # the same gradients, the skipped steps' drawn and dropped
    train_steps(reference, optimizer, 100, lambda step: DROPPED if step in skipped else True)
    expected = {name: p.detach() for name, p in reference.named_parameters()}
    assert largest_difference(flagged, expected) == 0.0
    counts = {float(s["step"]) for s in optimizer.state.values()}
    assert max(counts) == 100 - len(skipped)


def test_the_fused_path_equals_the_foreach_path_and_obeys_the_flag(model):
    """``--optimizer fused`` (torch's fused AdamW, extras/fused_adamw.py): the same 100 steps
    within 1e-6 of the foreach path (its kernel rounds in its own order); through the device
    flag, a skipped step changes nothing: equal, exactly, to never drawing it."""
    foreach = train(model, lambda m: ForeachAdamW(groups_of(m), lr=1e-3))
    fused = train(model, lambda m: FusedAdamW(groups_of(m), lr=1e-3))
    assert largest_difference(fused, foreach) <= 1e-6
    skipped = {0, 40, 41}
    flagged = train(
        model, lambda m: FusedAdamW(groups_of(m), lr=1e-3), apply=lambda s: s not in skipped
    )
    dropped = train(
        model,
        lambda m: FusedAdamW(groups_of(m), lr=1e-3),
        apply=lambda s: DROPPED if s in skipped else True,
    )
    assert largest_difference(flagged, dropped) == 0.0
    assert largest_difference(flagged, fused) > 1e-4  # the skipped steps did count
    assert isinstance(drivers_optimizer(copy.deepcopy(model), "--optimizer", "fused"), FusedAdamW)
