"""Checks of ``minbert/optimizer.py``: the hand-written AdamW (the ``adamw`` exercise) against
torch.optim.AdamW, and the warmup/decay schedule (not an exercise) against hand values."""

from __future__ import annotations

import copy

import torch

from minbert.course.registry import Context, Measurement, check


@check(
    "adamw: AdamW vs torch.optim.AdamW, 100 steps",
    tolerance=1e-6,
    hint="steps 1-6 of the AdamW docstring in that order: decay by (1 − lr·λ) first; bias "
    "corrections with the step count t",
    exercises=("adamw",),
)
def check_adamw(ctx: Context, steps: int = 100) -> Measurement:
    """Hand AdamW against torch.optim.AdamW on a regression problem with two parameter groups
    (different lr and weight decay): max |θ_ours − θ_torch| over all parameters and steps."""
    from minbert.optimizer import AdamW

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = torch.sin(x @ torch.randn(8, 1, generator=g))
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    theirs = copy.deepcopy(ours)

    def groups(model: torch.nn.Module) -> list[dict]:
        return [
            {"params": list(model[0].parameters()), "lr": 3e-3, "weight_decay": 0.1},
            {"params": list(model[2].parameters()), "lr": 1e-2, "weight_decay": 0.01},
        ]

    opt_ours = AdamW(groups(ours), betas=(0.9, 0.99), eps=1e-8)
    opt_theirs = torch.optim.AdamW(groups(theirs), betas=(0.9, 0.99), eps=1e-8, foreach=False)
    worst = Measurement(0.0)
    for step in range(1, steps + 1):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        for group, (a, b) in enumerate(
            zip(opt_ours.param_groups, opt_theirs.param_groups, strict=True)
        ):
            for i, (p, q) in enumerate(zip(a["params"], b["params"], strict=True)):
                diff = (p - q).abs().max().item()
                m = Measurement(
                    diff,
                    f"parameter {i} of group {group} (lr {a['lr']}, weight decay "
                    f"{a['weight_decay']}) differs by {diff:.2e} after step {step}",
                )
                if m.is_worse_than(worst):
                    worst = m
    return worst


# (warmup_steps, total_steps) -> {step: learning-rate factor}, worked out by hand from
# factor(s) = s / w for s < w, else max(0, (N − s) / (N − w)).
SCHEDULE_VALUES = {
    (4, 10): {0: 0.0, 1: 0.25, 3: 0.75, 4: 1.0, 7: 0.5, 9: 1 / 6, 10: 0.0, 11: 0.0},
    (0, 8): {0: 1.0, 2: 0.75, 4: 0.5, 8: 0.0},
}


@check(
    "schedule: warmup/decay vs hand values",
    tolerance=1e-12,
    hint="not an exercise: check LinearWarmupDecay in minbert/optimizer.py",
)
def check_schedule(ctx: Context) -> Measurement:
    """linear_warmup_decay stepped along with an optimizer (base lr 1) against hand values."""
    from minbert.optimizer import linear_warmup_decay

    worst = Measurement(0.0)
    for (warmup, total), expected in SCHEDULE_VALUES.items():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = linear_warmup_decay(opt, warmup, total)
        for step in range(max(expected) + 1):
            lr = opt.param_groups[0]["lr"]
            if step in expected:
                m = Measurement(
                    abs(lr - expected[step]),
                    f"warmup {warmup}, total {total}: lr factor {lr:.6f} at step {step}, "
                    f"expected {expected[step]:.6f}",
                )
                if m.is_worse_than(worst):
                    worst = m
            opt.step()
            scheduler.step()
    return worst
