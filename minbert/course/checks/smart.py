"""Check of ``minbert/smart.py`` (the ``smart`` exercise): SMART's adversarial step on a small
model defined here, against the ascent written out in ``ref_perturbation``."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from minbert.course.registry import Context, Measurement, check, compare, worst_of

if TYPE_CHECKING:
    from minbert.smart import SmartConfig


def ref_perturbation(
    forward: Callable[[list[torch.Tensor]], torch.Tensor],
    embeddings: list[torch.Tensor],
    clean: torch.Tensor,
    kind: str,
    config: SmartConfig,
    seed: int,
) -> list[torch.Tensor]:
    """Steps 2-3 of SMART written out: δ₀ = Π_ε(σ·ν) with ν drawn from a generator seeded with
    ``seed`` (one (B, T, D) float32 draw per embedding tensor, in order), then K times
    δ ← Π_ε(δ + η·g/‖g‖) per token, g = ∇_δ ℓ_s(f(e), f(e + δ))."""
    eps, norm = config.epsilon, config.norm

    def token_norm(t: torch.Tensor) -> torch.Tensor:
        if norm == "linf":
            return t.abs().amax(-1, keepdim=True)
        return t.square().sum(-1, keepdim=True).sqrt()

    def project(d: torch.Tensor) -> torch.Tensor:
        if norm == "linf":
            return torch.clamp(d, -eps, eps)
        return d * (eps / torch.clamp(token_norm(d), min=eps))

    def divergence(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if kind == "regression":
            return (a - b).square().sum(-1).mean()
        log_p, log_q = torch.log_softmax(a, -1), torch.log_softmax(b, -1)
        return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()

    generator = torch.Generator().manual_seed(seed)
    base = [e.detach() for e in embeddings]
    deltas = [
        project(config.sigma * torch.randn(e.shape, generator=generator, dtype=torch.float32))
        for e in base
    ]
    for _ in range(config.ascent_steps):
        deltas = [d.detach().requires_grad_(True) for d in deltas]
        with torch.enable_grad():
            perturbed = forward([e + d for e, d in zip(base, deltas)])
            grads = torch.autograd.grad(divergence(clean.detach().float(), perturbed), deltas)
        deltas = [
            project(d.detach() + config.step_size * g / token_norm(g).clamp(min=1e-30))
            for d, g in zip(deltas, grads)
        ]
    return [d.detach() for d in deltas]


@check(
    "smart: adversarial perturbation vs reference ascent",
    tolerance=1e-6,
    hint="δ ← Π_ε(δ + η·g/‖g‖), g the gradient of divergence(clean, f(e + δ)) w.r.t. δ",
    exercises=("smart",),
)
def check_smart(ctx: Context) -> Measurement:
    """adversarial_perturbation on a small fixed model (two embedding tensors, as for a pair
    encoded sentence by sentence) against ``ref_perturbation``: ℓ∞ and ℓ2 balls, 1 to 3 ascent
    steps, multiclass and regression outputs."""
    from minbert.smart import SmartConfig, adversarial_perturbation

    g = torch.Generator().manual_seed(10)
    B, T, D, C = 3, 4, 8, 5
    embeddings = [torch.randn(B, T, D, generator=g) for _ in range(2)]
    weights = [torch.randn(D, D, generator=g) * 0.7 for _ in range(2)]
    head = torch.randn(D, C, generator=g)

    def forward(es: list[torch.Tensor]) -> torch.Tensor:  # (B, T, D) x 2 -> (B, C)
        h = sum(torch.tanh(e @ w) for e, w in zip(es, weights))
        return h.mean(1) @ head

    clean = forward(embeddings)
    found = []
    for norm, steps, kind in (
        ("linf", 1, "multiclass"),
        ("l2", 3, "multiclass"),
        ("linf", 2, "regression"),
    ):
        config = SmartConfig(sigma=0.05, epsilon=0.1, step_size=0.04, ascent_steps=steps, norm=norm)
        got = adversarial_perturbation(
            forward, embeddings, clean, kind, config, torch.Generator().manual_seed(11)
        )
        expected = ref_perturbation(forward, embeddings, clean, kind, config, seed=11)
        if not isinstance(got, (list, tuple)) or len(got) != len(expected):
            return Measurement(math.inf, f"expected a list of {len(expected)} perturbations")
        for j, (d, e) in enumerate(zip(got, expected)):
            found.append(compare(f"δ of embedding {j} ({norm}, K = {steps}, {kind})", d, e))
    return worst_of(found)
