"""Checks of ``minbert/smart.py`` (the ``smart`` exercise): the symmetric KL divergence, and
SMART's adversarial step on a small model defined here, against stored outputs."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from minbert.course.registry import Context, Measurement, check, grade

# (norm, ascent steps K, output kind) of each perturbation graded.
SMART_CASES = (("linf", 1, "multiclass"), ("l2", 3, "multiclass"), ("linf", 2, "regression"))
KL_TOLERANCE = 1e-6


def smart_problem() -> tuple[list[torch.Tensor], Callable[[list[torch.Tensor]], torch.Tensor]]:
    """Two (B, T, D) embedding tensors (as for a pair encoded sentence by sentence) and a small
    fixed model from them to (B, C) outputs."""
    g = torch.Generator().manual_seed(10)
    B, T, D, C = 3, 4, 8, 5
    embeddings = [torch.randn(B, T, D, generator=g) for _ in range(2)]
    weights = [torch.randn(D, D, generator=g) * 0.7 for _ in range(2)]
    head = torch.randn(D, C, generator=g)

    def forward(es: list[torch.Tensor]) -> torch.Tensor:  # (B, T, D) x 2 -> (B, C)
        h = sum(torch.tanh(e @ w) for e, w in zip(es, weights))
        return h.mean(1) @ head

    return embeddings, forward


@check(
    "smart: symmetric KL vs KL(P‖Q) + KL(Q‖P)",
    tolerance=KL_TOLERANCE,
    hint="the KL divergence in both directions between the two softmax distributions, summed "
    "over classes, averaged over the batch",
    exercises=("smart",),
)
def check_symmetric_kl(ctx: Context) -> Measurement:
    """symmetric_kl on stored logits against the stored value."""
    from minbert.smart import symmetric_kl

    data = ctx.course_data["smart"]["kl"]
    with torch.no_grad():
        got = symmetric_kl(data["p"], data["q"])
    return grade(data, {"divergence": got})


@check(
    "smart: adversarial perturbation vs reference ascent",
    tolerance=1e-6,
    hint="K times: the gradient of the divergence between the clean and perturbed outputs with "
    "respect to δ, a step of size η along it normalised per token, then back onto the ε-ball",
    exercises=("smart",),
)
def check_smart(ctx: Context) -> Measurement:
    """adversarial_perturbation on the small fixed model of ``smart_problem`` against the stored
    perturbations: ℓ∞ and ℓ2 balls, 1 to 3 ascent steps, multiclass and regression outputs."""
    from minbert.smart import SmartConfig, adversarial_perturbation

    embeddings, forward = smart_problem()
    clean = forward(embeddings)
    got = {}
    for norm, steps, kind in SMART_CASES:
        config = SmartConfig(sigma=0.05, epsilon=0.1, step_size=0.04, ascent_steps=steps, norm=norm)
        deltas = adversarial_perturbation(
            forward, embeddings, clean, kind, config, torch.Generator().manual_seed(11)
        )
        if not isinstance(deltas, (list, tuple)) or len(deltas) != len(embeddings):
            return Measurement(math.inf, f"expected a list of {len(embeddings)} perturbations")
        for j, d in enumerate(deltas):
            got[f"δ of embedding {j} ({norm}, K = {steps}, {kind})"] = d
    return grade(ctx.course_data["smart"]["perturbation"], got)
