"""Checks of ``minbert/optimizer.py``: the hand-written AdamW (the ``adamw`` exercise) against a
stored float64 trajectory, and the warmup/decay schedule (not an exercise) against hand values."""

from __future__ import annotations

import torch

from minbert.course.measure import Measurement, Observed, measure_sealed
from minbert.course.registry import Context, check

# The AdamW problem: a small float64 regression model, two parameter groups (module index, lr,
# weight decay), ``steps`` steps. In float64 every correct formulation of AdamW (torch's, the
# paper's Algorithm 2, in place or not) agrees with the stored trajectory to about 1e-14, far
# below the tolerance, while every mistake moves it by far more (1e-4 or more at the first step).
ADAMW_SETTINGS = {
    "groups": [(0, 3e-2, 0.1), (2, 1e-2, 0.3)],
    "betas": (0.9, 0.99),
    "eps": 1e-8,
    "steps": 30,
}
ADAMW_TOLERANCE = 1e-9


def adamw_model() -> torch.nn.Sequential:
    """4 -> 6 -> 1 with tanh, in float64."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 6), torch.nn.Tanh(), torch.nn.Linear(6, 1)]
    return torch.nn.Sequential(*layers).double()


@check(
    "adamw: AdamW vs torch.optim.AdamW, float64, 30 steps",
    tolerance=ADAMW_TOLERANCE,
    hint="steps 1-6 of the AdamW docstring, in order: decoupled weight decay scaled by the "
    "learning rate, both moments, their bias corrections with the step count t, then the update",
    exercises=("adamw",),
)
def check_adamw(ctx: Context) -> Measurement:
    """Hand AdamW on a float64 regression problem with two parameter groups (different lr and
    weight decay) against the stored trajectory of torch.optim.AdamW: the parameters after every
    step, the first step that differs reported."""
    from minbert.optimizer import AdamW

    data = ctx.course_data["adamw"]
    model = adamw_model()
    model.load_state_dict(data["state"])
    settings = ADAMW_SETTINGS
    groups = [
        {"params": list(model[i].parameters()), "lr": lr, "weight_decay": decay}
        for i, lr, decay in settings["groups"]
    ]
    opt = AdamW(groups, betas=settings["betas"], eps=settings["eps"])
    rows = []
    for _ in range(settings["steps"]):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data["x"]), data["y"]).backward()
        opt.step()
        rows.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    got = torch.stack(rows)
    expected = data["expected"]["θ"]
    seen = Observed("θ", got, expected)
    measurement = measure_sealed("θ", seen, expected, ("step", "parameter"))
    # the first step that differs: a value outside the tolerance (seal.py's digests), or a
    # projected difference above it
    projected = (seen.form - expected["values"]).abs().amax(-1)  # (steps,)
    outside = torch.tensor([j is None for j in seen.offsets(expected)]).view(got.shape)
    bad = (outside.any(1) | (projected > ADAMW_TOLERANCE) | projected.isnan()).nonzero()
    hint = ""
    if len(bad):
        step = int(bad[0])
        hint = f"the parameters first differ after step {step + 1} (of {len(rows)})"
        if outside[step].any():
            i = int(outside[step].nonzero()[0])
            hint += f": {parameter(groups, i)} is {got[step, i].item():.10g}, more than the "
            hint += "tolerance from the expected value"
        else:
            hint += f", by at least {projected[step].item():.3g} (fixed random projections)"
    mistakes = {
        name: seen.distance(outputs.get("θ", expected))
        for name, outputs in data["mistakes"].items()
    }
    return Measurement(measurement.max_abs_diff, hint, mistakes)


def parameter(groups: list[dict], i: int) -> str:
    """ "element 3 of parameter 1 of group 0 (lr 0.03, weight decay 0.1)" for the i-th number of
    all the parameters in order."""
    n = 0
    for group, g in enumerate(groups):
        for j, p in enumerate(g["params"]):
            if n <= i < n + p.numel():
                return (
                    f"element {i - n} of parameter {j} of group {group} (lr {g['lr']}, weight "
                    f"decay {g['weight_decay']})"
                )
            n += p.numel()
    return f"number {i}"


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
