"""Checks of ``minbert/optimizer.py``: the hand-written AdamW (the ``adamw`` exercise) against a
stored float64 trajectory."""

from __future__ import annotations

import torch

from course.measure import Measurement, measure_sealed
from course.observed import Observed
from course.outcome import Outputs, problem
from course.registry import Context, check
from course.untouched import Untouched

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


def adamw_groups(model: torch.nn.Sequential) -> list[dict]:
    """The parameter groups of ``ADAMW_SETTINGS`` over ``model``."""
    return [
        {"params": list(model[i].parameters()), "lr": lr, "weight_decay": decay}
        for i, lr, decay in ADAMW_SETTINGS["groups"]
    ]


def judge_adamw(ctx: Context, out: Outputs) -> Measurement:
    """The trajectory against the stored one, and the first step that differs: a value outside
    the tolerance (seal.py's digests), or a projected difference above it."""
    data = ctx.course_data["adamw"]
    got, expected = out["θ"], data["expected"]["θ"]
    seen = Observed("θ", got, expected)
    measurement = measure_sealed("θ", seen, expected, ("step", "parameter"))
    mistakes = {
        name: seen.distance(outputs.get("θ", expected))
        for name, outputs in data["mistakes"].items()
    }
    if seen.form is None:
        return Measurement(measurement.max_abs_diff, measurement.hint, mistakes)
    projected = (seen.form - expected["values"]).abs().amax(-1)  # (steps,)
    outside = torch.tensor([j is None for j in seen.offsets(expected)]).view(got.shape)
    bad = (outside.any(1) | (projected > ADAMW_TOLERANCE) | projected.isnan()).nonzero()
    hint = ""
    if len(bad):
        step = int(bad[0])
        hint = f"the parameters first differ after step {step + 1} (of {len(got)})"
        if outside[step].any():
            i = int(outside[step].nonzero()[0])
            hint += f": {parameter(adamw_groups(adamw_model()), i)} is "
            hint += f"{got[step, i].item():.10g}, more than the tolerance from the expected value"
        else:
            hint += f", by at least {projected[step].item():.3g}"
    return Measurement(measurement.max_abs_diff, hint, mistakes)


@check(
    "adamw: AdamW vs torch.optim.AdamW, float64, 30 steps",
    tolerance=ADAMW_TOLERANCE,
    judge=judge_adamw,
    hint="steps 1-6 of the AdamW docstring, in order: decoupled weight decay scaled by the "
    "learning rate, both moments, their bias corrections with the step count t, then the update",
    exercises=("adamw",),
    raises={
        "ZeroDivisionError": "the step count t is 0 in the bias corrections (1 − β^t = 0): count "
        "the step first, t ← t + 1, then use it",
    },
)
def check_adamw(ctx: Context) -> Outputs:
    """Hand AdamW on a float64 regression problem with two parameter groups (different lr and
    weight decay): the parameters after every step, for the stored trajectory of
    torch.optim.AdamW (``judge_adamw``). A step must leave the gradients as they were."""
    from minbert.optimizer import AdamW

    data = ctx.course_data["adamw"]
    model = adamw_model()
    model.load_state_dict(data["state"])
    settings = ADAMW_SETTINGS
    opt = AdamW(adamw_groups(model), betas=settings["betas"], eps=settings["eps"])
    rows = []
    for step in range(settings["steps"]):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(data["x"]), data["y"]).backward()
        grads = {f"p.grad (parameter {i})": p.grad for i, p in enumerate(model.parameters())}
        kept = Untouched(grads)
        opt.step()
        if said := kept.problem():
            return problem(f"AdamW.step (step {step + 1}) {said}")
        rows.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
    return {"θ": torch.stack(rows)}


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
