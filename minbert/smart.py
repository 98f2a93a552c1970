"""SMART (Jiang et al. 2020, "SMART: Robust and Efficient Fine-Tuning for Pre-trained Natural
Language Models through Principled Regularized Optimization"), as a loss term.

Objective, for the parameters θ that train (trainable plug-ins, heads, or all of BERT):

    min_θ  L(θ) + λ_s·R_s(θ) + μ·D_Breg(θ, θ̃_t)
    L(θ)             = 1/n Σ_i ℓ(f(x_i; θ), y_i)                              the task loss
    R_s(θ)           = 1/n Σ_i max_{‖x̃_i − x_i‖ ≤ ε} ℓ_s(f(x_i; θ), f(x̃_i; θ))   smoothness
    D_Breg(θ, θ̃_t)   = 1/n Σ_i ℓ_s(f(x_i; θ), f(x_i; θ̃_t))                    Bregman proximal
    θ̃_{t+1}          = β·θ̃_t + (1 − β)·θ_{t+1}                                 momentum teacher

The defaults are the paper's: λ_s = μ = 1, σ = ε = 1e-5, η = 1e-3, K = 1, β = 0.99. Pass the
attached output of ``embed`` and R_s also trains a trainable embedding layer; detached, only L does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from minbert.flags import check_ranges, setting

KINDS = ("multiclass", "binary", "regression")
NORMS = ("linf", "l2")


@dataclass
class SmartConfig:
    """Hyperparameters of SMART; the defaults are the paper's (see the module docstring). Each
    field is also a driver flag (``--smart_<name>``)."""

    sigma: float = setting(1e-5, "σ: std of the random start ν ~ N(0, σ²I)", within="[0, inf)")
    epsilon: float = setting(
        1e-5, "ε: radius of the per-token perturbation ball", within="[0, inf)"
    )
    step_size: float = setting(
        1e-3, "η: step of the normalised gradient ascent on δ", within="[0, inf)"
    )
    ascent_steps: int = setting(1, "K: ascent steps", flag="steps", within="[0, inf)")
    weight: float = setting(
        1.0, "λ_s: weight of the adversarial term R_s in the loss", within="[0, inf)"
    )
    bregman_weight: float = setting(
        1.0, "μ: weight of the Bregman term D_Breg", flag="bregman", within="[0, inf)"
    )
    momentum: float = setting(0.99, "β: EMA coefficient of the teacher θ̃", within="[0, 1]")
    norm: Literal["linf", "l2"] = setting(
        "linf", "per-token norm of the ε-ball and of the ascent's gradient normalisation"
    )

    def __post_init__(self) -> None:
        if self.norm not in NORMS:
            raise ValueError(f"unknown SMART norm {self.norm!r}; choose one of {NORMS}")
        check_ranges(self)


# --------------------------------------------------------------------------------------------
# Divergences ℓ_s
# --------------------------------------------------------------------------------------------


def symmetric_kl(p_logits: torch.Tensor, q_logits: torch.Tensor) -> torch.Tensor:
    """KL(P‖Q) + KL(Q‖P) = Σ_c (p_c − q_c)(log p_c − log q_c) for P = softmax(p_logits),
    Q = softmax(q_logits); (B, C) x 2 -> scalar, the mean over the batch. Computed in float32."""
    if p_logits.shape != q_logits.shape or p_logits.dim() != 2:
        raise ValueError(
            f"symmetric_kl needs two (B, C) tensors, got {tuple(p_logits.shape)} and "
            f"{tuple(q_logits.shape)}"
        )
    # HINT: KL(P‖Q) + KL(Q‖P) between the softmax distributions of the two float32 logits:
    # HINT: summed over the classes, averaged over the batch.
    # BEGIN SOLUTION: smart
    log_p = F.log_softmax(p_logits.float(), dim=-1)
    log_q = F.log_softmax(q_logits.float(), dim=-1)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()
    # END SOLUTION


def _per_example(x: torch.Tensor) -> torch.Tensor:
    """(B,) or (B, C, ...) -> (B, C') in float32, so outputs sum over everything but the batch."""
    return x.float().reshape(x.shape[0], -1)


def divergence(a_outputs: torch.Tensor, b_outputs: torch.Tensor, kind: str) -> torch.Tensor:
    """ℓ_s between two batches of head outputs, summed over outputs, mean over the batch.

    kind "multiclass": symmetric KL of softmax(a) and softmax(b), inputs (B, C).
    kind "binary": symmetric KL of Bernoulli(sigmoid(a)) and Bernoulli(sigmoid(b)), inputs (B,)
        or (B, 1) logits. With p = sigmoid(a), q = sigmoid(b):
        (p − q)(log p − log q) + (q − p)(log(1 − p) − log(1 − q)) = (p − q)(a − b),
        since log p − log(1 − p) = a.
    kind "regression": squared difference (a − b)², inputs (B,) or (B, C).
    """
    if a_outputs.shape != b_outputs.shape:
        raise ValueError(
            f"divergence needs outputs of the same shape, got {tuple(a_outputs.shape)} and "
            f"{tuple(b_outputs.shape)}"
        )
    if kind == "multiclass":
        return symmetric_kl(a_outputs, b_outputs)
    a, b = _per_example(a_outputs), _per_example(b_outputs)
    if kind == "binary":
        return ((torch.sigmoid(a) - torch.sigmoid(b)) * (a - b)).sum(-1).mean()
    if kind == "regression":
        return (a - b).square().sum(-1).mean()
    raise ValueError(f"unknown divergence kind {kind!r}; choose one of {KINDS}")


# --------------------------------------------------------------------------------------------
# R_s: the smoothness-inducing adversarial regularizer
# --------------------------------------------------------------------------------------------


def _gaussian_like(x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """N(0, 1) noise shaped like x, drawn from ``generator`` (on its own device) when given."""
    device = generator.device if generator is not None else x.device
    noise = torch.randn(x.shape, generator=generator, device=device, dtype=torch.float32)
    return noise.to(device=x.device, dtype=x.dtype)


def _token_norm(x: torch.Tensor, norm: str) -> torch.Tensor:
    """The norm of each token's D-vector: (B, T, D) -> (B, T, 1)."""
    if norm == "linf":
        return x.abs().amax(dim=-1, keepdim=True)
    return torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def _normalise(g: torch.Tensor, norm: str) -> torch.Tensor:
    """g / ‖g‖ per token (the ``norm`` of each token's D-vector, ``_token_norm``), (B, T, D) ->
    (B, T, D); a token whose gradient is exactly 0 (padding) gets a 0 step, and a NaN or
    infinite entry (an overflow upstream) counts as 0."""
    # HINT: divide each token's gradient by its own norm; a token whose gradient is all zero
    # HINT: must get a zero step, not 0/0, and a NaN or infinite entry counts as zero.
    # BEGIN SOLUTION: smart
    g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)
    return g / _token_norm(g, norm).clamp_min(torch.finfo(g.dtype).tiny)
    # END SOLUTION


def project(delta: torch.Tensor, epsilon: float, norm: str) -> torch.Tensor:
    """Π_ε: the nearest point of the per-token ball {‖δ_t‖ ≤ ε}, (B, T, D) -> (B, T, D).

    linf: clamp every coordinate to [−ε, ε]; l2: scale a token's vector down to length ε when it
    is longer. ε = 0 leaves only δ = 0.
    """
    if norm not in NORMS:
        raise ValueError(f"unknown SMART norm {norm!r}; choose one of {NORMS}")
    # HINT: the nearest point of the ball for each norm, token by token, as the docstring says;
    # HINT: a vector already inside stays as it is, and ε = 0 must not divide by zero.
    # BEGIN SOLUTION: smart
    if epsilon == 0:
        return torch.zeros_like(delta)
    if norm == "linf":
        return delta.clamp(-epsilon, epsilon)
    return delta * (epsilon / _token_norm(delta, "l2").clamp_min(epsilon))
    # END SOLUTION


def _ascent_step(
    delta: torch.Tensor, grad: torch.Tensor | None, config: SmartConfig
) -> torch.Tensor:
    """δ ← Π_ε(δ + η · g / ‖g‖), per token; an embedding the outputs ignore (g None) keeps δ."""
    # HINT: move the (detached) δ a step of config.step_size along the gradient normalised per
    # HINT: token (none when the gradient is None), then project it back onto the ε-ball.
    # BEGIN SOLUTION: smart
    delta = delta.detach()
    if grad is not None:
        delta = delta + config.step_size * _normalise(grad, config.norm)
    return project(delta, config.epsilon, config.norm)
    # END SOLUTION


def adversarial_perturbation(
    forward_from_embeddings: Callable[[list[torch.Tensor]], torch.Tensor],
    embeddings: list[torch.Tensor],
    clean_outputs: torch.Tensor,
    kind: str,
    config: SmartConfig,
    generator: torch.Generator | None = None,
) -> list[torch.Tensor]:
    """Steps 2-3 of the algorithm: the perturbations δ_j (detached), one per embedding tensor,
    each with the shape of its (B, T, D) embeddings and inside the per-token ε-ball."""
    base = [e.detach() for e in embeddings]
    target = clean_outputs.detach()
    deltas = [
        project(config.sigma * _gaussian_like(e, generator), config.epsilon, config.norm)
        for e in base
    ]
    # HINT: K = config.ascent_steps times: the gradient, with respect to every δ, of the
    # HINT: divergence between the target and the outputs on the perturbed embeddings (with
    # HINT: gradients enabled even if the caller disabled them; an unused δ has none), then one
    # HINT: ascent step of each δ. Return the δs detached.
    # BEGIN SOLUTION: smart
    for _ in range(config.ascent_steps):
        for d in deltas:
            d.requires_grad_(True)
        with torch.enable_grad():  # the ascent needs gradients even if the caller disabled them
            perturbed = forward_from_embeddings([e + d for e, d in zip(base, deltas, strict=True)])
            ascent_objective = divergence(target, perturbed, kind)
            grads = torch.autograd.grad(ascent_objective, deltas, allow_unused=True)
        deltas = [_ascent_step(d, g, config) for d, g in zip(deltas, grads, strict=True)]
    return [d.detach() for d in deltas]
    # END SOLUTION


def smart_regularizer(
    forward_from_embeddings: Callable[[list[torch.Tensor]], torch.Tensor],
    embeddings: list[torch.Tensor],
    clean_outputs: torch.Tensor,
    kind: str,
    config: SmartConfig,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """R_s = ℓ_s(f(e; θ), f(e + δ; θ)) with δ from K steps of normalised projected gradient ascent.

    forward_from_embeddings: maps a list of (B, T, D) embeddings to (B, C) head outputs by running
        ``encode`` and the head, never ``embed`` (the embeddings are computed once, by the caller).
    embeddings: the output(s) of ``embed`` for this batch; a pair encoded sentence by sentence
        has two, and each gets its own perturbation. Attached or detached; see the module
        docstring for what each means for the embedding layer's gradient.
    clean_outputs: f(e; θ), the (B, C) outputs the task loss was computed from (not detached:
        R_s's gradient flows through both of its arguments).
    kind: "multiclass", "binary" or "regression" (picks ℓ_s).
    generator: random source for the start ν, for reproducible runs.
    Returns a scalar (mean over the batch), not yet multiplied by λ_s.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown divergence kind {kind!r}; choose one of {KINDS}")
    deltas = adversarial_perturbation(
        forward_from_embeddings, embeddings, clean_outputs, kind, config, generator
    )
    perturbed = forward_from_embeddings([e + d for e, d in zip(embeddings, deltas, strict=True)])
    return divergence(clean_outputs, perturbed, kind)


# --------------------------------------------------------------------------------------------
# D_Breg: the momentum Bregman proximal point term
# --------------------------------------------------------------------------------------------


class MomentumTeacher:
    """θ̃, an exponential moving average of the trainable parameters (the paper's momentum
    Bregman proximal point): θ̃ ← β·θ̃ + (1 − β)·θ after every optimizer step, θ̃ = θ at the start.

    Only parameters with ``requires_grad`` are tracked (duplicates once): a frozen parameter never
    changes, so its average is itself and the live tensor serves the teacher exactly. Create the
    teacher after the model is on its device and frozen/unfrozen the way it will train.
    """

    def __init__(
        self, parameters: Iterable[nn.Parameter], momentum: float = SmartConfig.momentum
    ) -> None:
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"teacher momentum must be in [0, 1], got {momentum}")
        seen: set[int] = set()
        self.parameters: list[nn.Parameter] = []
        for p in parameters:
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                self.parameters.append(p)
        if not self.parameters:
            raise ValueError("MomentumTeacher got no trainable parameters (none requires grad)")
        self.shadow: list[torch.Tensor] = [p.detach().clone() for p in self.parameters]
        self.momentum = momentum
        self.num_updates = 0
        self._swapped = False

    @torch.no_grad()
    def update(self) -> None:
        """θ̃ ← β·θ̃ + (1 − β)·θ; call once after every optimizer step."""
        if self._swapped:
            raise RuntimeError("MomentumTeacher.update() called inside swapped_in()")
        beta = self.momentum
        for t, p in zip(self.shadow, self.parameters, strict=True):
            t.mul_(beta).add_(p.detach(), alpha=1.0 - beta)
        self.num_updates += 1

    @contextmanager
    def swapped_in(self) -> Iterator[None]:
        """Temporarily make the live parameters hold θ̃ (for a forward pass under no_grad).

        The swap exchanges each parameter's ``.data`` tensor rather than copying values in place:
        an in-place copy would bump the parameters' version counters and break the backward of any
        graph built before the swap (the student's forward), even after restoring the values. The
        live tensors are put back bit for bit on exit, exceptions included. Autocast's cache of
        low-precision weight casts is keyed by the parameter, not its data, so it is switched off
        inside (otherwise a teacher forward inside the student's autocast region would reuse the
        student's cached bf16 weights). Do not step an optimizer inside.
        """
        live = [p.data for p in self.parameters]
        for p, t in zip(self.parameters, self.shadow, strict=True):
            if p.shape != t.shape or p.dtype != t.dtype or p.device != t.device:
                raise RuntimeError(
                    f"teacher tensor {tuple(t.shape)} {t.dtype} {t.device} does not match its "
                    f"parameter {tuple(p.shape)} {p.dtype} {p.device}; create the teacher after "
                    "moving the model"
                )
        cache_enabled = torch.is_autocast_cache_enabled()
        torch.set_autocast_cache_enabled(False)
        self._swapped = True
        try:
            for p, t in zip(self.parameters, self.shadow, strict=True):
                p.data = t
            yield
        finally:
            for p, d in zip(self.parameters, live, strict=True):
                p.data = d
            self._swapped = False
            torch.set_autocast_cache_enabled(cache_enabled)

    def state_dict(self) -> dict[str, Any]:
        """β, the update count and θ̃ (a list in parameter order; the tensors themselves, like
        ``nn.Module.state_dict``)."""
        return {"momentum": self.momentum, "num_updates": self.num_updates, "shadow": self.shadow}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore θ̃ saved by ``state_dict`` (same trainable parameters, same order)."""
        shadow = state["shadow"]
        if len(shadow) != len(self.shadow):
            raise ValueError(
                f"teacher state has {len(shadow)} tensors, this teacher tracks {len(self.shadow)}"
            )
        for i, (mine, saved) in enumerate(zip(self.shadow, shadow, strict=True)):
            if mine.shape != saved.shape:
                raise ValueError(
                    f"teacher tensor {i}: saved shape {tuple(saved.shape)}, "
                    f"expected {tuple(mine.shape)}"
                )
        with torch.no_grad():
            for mine, saved in zip(self.shadow, shadow, strict=True):
                mine.copy_(saved)
        self.momentum = float(state["momentum"])
        self.num_updates = int(state["num_updates"])


def bregman_term(
    forward: Callable[[], torch.Tensor],
    outputs: torch.Tensor,
    teacher: MomentumTeacher,
    kind: str,
) -> torch.Tensor:
    """D_Breg = ℓ_s(f(x; θ), f(x; θ̃)) on this batch: scalar, mean over the batch, not yet
    multiplied by μ.

    forward: computes the (B, C) head outputs of the batch with whatever parameters are live; it
        is called once, under no_grad, with the teacher swapped in. If the embedding layer is
        frozen it may reuse the step's embeddings (``encode`` + head on ``e.detach()``), which is
        exact and embeds nothing twice; if the embedding layer trains, the teacher's embeddings
        differ from the student's and the forward must call ``embed`` itself.
    outputs: f(x; θ), the student's (B, C) outputs (the gradient flows through these only).
    """
    with torch.no_grad(), teacher.swapped_in():
        teacher_outputs = forward()
    return divergence(outputs, teacher_outputs.detach(), kind)
