"""Checks of ``minbert/smart.py`` (the ``smart`` exercise): the symmetric KL divergence; the
parts of one ascent (direction, projection, step) each alone; and SMART's adversarial ascent on a
small model defined here; all against stored outputs."""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable

import torch

from course.gradients import gradient_failure
from course.measure import (
    Measurement,
    autograd_nodes,
    grade,
    not_float32,
    under_autocast,
    worst_of,
)
from course.outcome import Outputs, graded, outputs, problem, with_gradient
from course.registry import Context, calling, check
from course.untouched import Untouched

# (norm, ascent steps K, output kind, model of ``smart_problem``, caller's grad mode) of each
# perturbation graded. They hold what SMART meets in training: padded tokens, whose gradient is
# exactly zero (a per-token normalisation without a guard puts NaN there); a caller under
# torch.no_grad() (evaluation code, or a caller that computed the clean outputs without a graph);
# and an embedding tensor the outputs do not read (its δ gets no gradient at all).
SMART_CASES = (
    ("linf", 1, "multiclass", "pair", "grad"),
    ("l2", 3, "multiclass", "pair", "no_grad"),
    ("linf", 2, "regression", "first only", "grad"),
)
# Each token's weight in the models' pooled vector: a sentence's real tokens share it, a padded
# token has none (sentence 1 ends one token early, sentence 2 two).
SMART_WEIGHTS = ((1 / 4,) * 4, (1 / 3,) * 3 + (0.0,), (1 / 2,) * 2 + (0.0,) * 2)
KL_TOLERANCE = 1e-6
SMART_TOLERANCE = 1e-6
ASCENT = ("adversarial_perturbation",)  # what a problem of the whole ascent blames
# The functions of one ascent, each called alone on fixed inputs (the divergence on the KL check's
# logits, the others by ``part_outputs``) before the whole ascent, in the order an ascent calls
# them: (the student's function, its stored case). The first whose outputs are wrong is the one a
# FAIL names (a wrong _normalise makes every later part wrong too).
SMART_PARTS = (
    ("symmetric_kl", "kl"),
    ("_normalise", "direction"),
    ("project", "projection"),
    ("_ascent_step", "step"),
    ("adversarial_perturbation", "perturbation"),
)
PART_CONFIG = {"sigma": 0.05, "epsilon": 0.1, "step_size": 0.04, "ascent_steps": 1}


def smart_problem() -> tuple[
    list[torch.Tensor], dict[str, Callable[[list[torch.Tensor]], torch.Tensor]]
]:
    """Two (B, T, D) embedding tensors (as for a pair encoded sentence by sentence) and small
    fixed models from them to (B, C) outputs, by name: "pair" reads both and pools the real
    tokens only (``SMART_WEIGHTS``), so a padded token's gradient is exactly zero, as in BERT;
    "first only" reads the first tensor alone, so the second's δ gets no gradient."""
    g = torch.Generator().manual_seed(10)
    B, T, D, C = 3, 4, 8, 5
    embeddings = [torch.randn(B, T, D, generator=g) for _ in range(2)]
    weights = [torch.randn(D, D, generator=g) * 0.7 for _ in range(2)]
    head = torch.randn(D, C, generator=g)
    token_weights = torch.tensor(SMART_WEIGHTS)  # (B, T)

    def pooled(h: torch.Tensor) -> torch.Tensor:  # (B, T, D) -> (B, C), padding left out
        return torch.einsum("bt,btd->bd", token_weights, h) @ head

    def pair(es: list[torch.Tensor]) -> torch.Tensor:
        return pooled(sum(torch.tanh(e @ w) for e, w in zip(es, weights)))

    def first_only(es: list[torch.Tensor]) -> torch.Tensor:
        return pooled(torch.tanh(es[0] @ weights[0]))

    return embeddings, {"pair": pair, "first only": first_only}


def parts_problem() -> tuple[torch.Tensor, torch.Tensor]:
    """A (B, T, D) gradient whose last token of sentence 1 is all zero (padding), and a δ whose
    tokens lie inside and outside the ε-ball (``PART_CONFIG``) of either norm."""
    g = torch.Generator().manual_seed(13)
    shape = (3, 4, 8)  # more values than course/seal.py's SMALL: sealed as projections, not digests
    gradient = torch.randn(shape, generator=g, dtype=torch.float64).float()
    gradient[1, 3] = 0.0
    scales = torch.tensor([0.2, 0.5, 1.0, 3.0]).view(1, 4, 1)  # per token
    delta = torch.randn(shape, generator=g, dtype=torch.float64).float() * 0.05 * scales
    return gradient, delta


def part_outputs(
    normalise: Callable, project: Callable, ascent_step: Callable
) -> list[dict[str, torch.Tensor]]:
    """The outputs of the parts of ``SMART_PARTS`` but the first and last on ``parts_problem``'s
    inputs, by the functions given (the student's, or the instructor's generator's reference):
    the per-token direction for each norm, the projection for ε = 0.1 and 0, and one ascent step
    with a gradient and without one. Each call gets copies of the inputs."""
    from minbert.smart import NORMS, SmartConfig

    gradient, delta = parts_problem()
    configs = {norm: SmartConfig(norm=norm, **PART_CONFIG) for norm in NORMS}
    with calling("_normalise"):
        direction = {f"g/‖g‖ per token ({n})": normalise(gradient.clone(), n) for n in NORMS}
    projection = {}
    with calling("project"):
        for norm, epsilon in itertools.product(NORMS, (PART_CONFIG["epsilon"], 0.0)):
            projection[f"Π_ε(δ) ({norm}, ε = {epsilon})"] = project(delta.clone(), epsilon, norm)
    step = {}
    with calling("_ascent_step"):
        for norm, config in configs.items():
            step[f"δ after a step ({norm})"] = ascent_step(delta.clone(), gradient.clone(), config)
            step[f"δ after a step with no gradient ({norm})"] = ascent_step(
                delta.clone(), None, config
            )
    return [direction, projection, step]


def judge_smart(ctx: Context, out: Outputs) -> Measurement:
    """Each part of ``SMART_PARTS`` against its stored outputs, in order: the first outside the
    tolerance is the check's measurement, naming that function alone; else the worst of them."""
    cases = out["cases"]
    if len(cases) != len(SMART_PARTS):
        raise ValueError(f"{len(cases)} cases computed, {len(SMART_PARTS)} expected")
    found = []
    for (function, key), case in zip(SMART_PARTS, cases, strict=True):
        expected = ctx.course_data["smart"][key]
        label, axes, calls = case["label"], tuple(case["axes"]), case["calls"]
        measured = grade(expected, case["got"], label, axes, calls, case.get("names"))
        if not measured.max_abs_diff <= SMART_TOLERANCE:  # NaN included
            measured.functions = (function,)
            return measured
        found.append(measured)
    return worst_of(found)


def smart_label(norm: str, steps: int, kind: str, model: str, grad_mode: str) -> str:
    """The case's part of its outputs' names, shared with the instructor's generator."""
    return f"({norm}, K = {steps}, {kind}, {model}, {grad_mode.replace('_', ' ')})"


def judge_symmetric_kl(ctx: Context, out: Outputs) -> Measurement:
    """The divergence under autocast in float32, and against the stored value; a negative one,
    which no divergence can be, is said in those words."""
    low = not_float32("symmetric_kl", out["divergence under autocast"], "divergence")
    measured = low or grade(ctx.course_data["smart"]["kl"], out)
    got = out.get("divergence")
    if low or not isinstance(got, torch.Tensor) or got.numel() != 1 or not got.item() < 0:
        return measured
    return Measurement(
        measured.max_abs_diff,
        f"a KL divergence is never negative, and symmetric_kl returned {got.item():.7g}: "
        "KL(P‖Q) = Σ_c p_c (log p_c − log q_c) ≥ 0, and so is KL(Q‖P); a sign is flipped "
        "(a log difference, or the difference of the probabilities)",
        measured.mistakes,
    )


@check(
    "smart: symmetric KL vs KL(P‖Q) + KL(Q‖P)",
    tolerance=KL_TOLERANCE,
    judge=judge_symmetric_kl,
    hint="the KL divergence in both directions between the two softmax distributions, summed "
    "over classes, averaged over the batch",
    exercises=("smart",),
    functions=("symmetric_kl",),
)
def check_symmetric_kl(ctx: Context) -> Outputs:
    """symmetric_kl on stored logits, and on them in bfloat16 under autocast; the gradients must
    reach both logits (``course/gradients.py``)."""
    from minbert.smart import symmetric_kl

    data = ctx.course_data["smart"]["kl"]
    kept = Untouched({"p_logits": data["p"].clone(), "q_logits": data["q"].clone()})
    with torch.no_grad():
        got = symmetric_kl(*kept.arguments.values())
    if said := kept.problem():
        return problem(f"symmetric_kl {said}")
    bf16 = data["p"].bfloat16(), data["q"].bfloat16()
    low = under_autocast(lambda: symmetric_kl(*bf16))
    return with_gradient(
        {"divergence": got, "divergence under autocast": low}, kl_gradient_failure(ctx)
    )


def kl_gradient_failure(ctx: Context) -> Outputs | None:
    """The failing outputs when the gradients of symmetric_kl do not reach both logits
    (``course/gradients.py``), else None; the perturbation check asks it first, so that its
    ascent (which differentiates the divergence) is not blamed for a cut inside symmetric_kl."""
    from minbert.smart import symmetric_kl

    data = ctx.course_data["smart"]["kl"]
    logits = {"p_logits": data["p"], "q_logits": data["q"]}
    divergence = lambda _, p, q: symmetric_kl(p, q)
    return gradient_failure(divergence, logits, where="symmetric_kl") or ignored_logits(logits)


def ignored_logits(logits: dict[str, torch.Tensor]) -> Outputs | None:
    """The failing outputs when symmetric_kl's value does not move with one of its logits (it
    reads one distribution twice, or neither: the ascent then has nothing to differentiate),
    else None. Each is moved along a fixed direction; a divergence of both always moves."""
    from minbert.smart import symmetric_kl

    with torch.no_grad():
        base = symmetric_kl(*(t.clone() for t in logits.values()))
        for name in logits:
            bump = torch.randn(logits[name].shape, generator=torch.Generator().manual_seed(5))
            moved = {n: t.clone() + (bump if n == name else 0) for n, t in logits.items()}
            if torch.equal(symmetric_kl(*moved.values()), base):
                return problem(
                    f"symmetric_kl's value does not change when {name} does (it stays "
                    f"{base.item():.6g}): the divergence must read both distributions, P from "
                    "p_logits and Q from q_logits",
                    "",
                    ("symmetric_kl",),
                )
    return None


def noting_graphs(forward: Callable, graphs: list[int]) -> Callable:
    """``forward``, noting in ``graphs`` how many autograd nodes stand behind the embeddings of
    each call (``autograd_nodes``)."""

    def noted(embeddings: list[torch.Tensor]) -> torch.Tensor:
        graphs.append(autograd_nodes(embeddings))
        return forward(embeddings)

    return noted


def non_finite_problem() -> str:
    """Why ``_normalise`` breaks its docstring's rule that a NaN or infinite gradient entry counts
    as 0 ("" when it keeps it): on a gradient with NaN, +inf and −inf entries, its step must be
    finite and equal to its step on the same gradient with those entries 0. The rule is checked
    against the student's own function, so nothing of the reference is computed here."""
    from minbert.smart import _normalise

    g = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(3))
    broken = g.clone()
    broken[0, 0, 1], broken[0, 2, 3], broken[1, 1, 0] = math.nan, math.inf, -math.inf
    zeroed = torch.nan_to_num(broken, nan=0.0, posinf=0.0, neginf=0.0)
    for norm in ("l2", "linf"):
        step, expected = _normalise(broken.clone(), norm), _normalise(zeroed, norm)
        if not isinstance(step, torch.Tensor) or not bool(step.isfinite().all()):
            return (
                f"_normalise (norm {norm}) of a gradient with NaN and infinite entries returned "
                "non-finite values: a NaN or infinite entry counts as 0 (its docstring)"
            )
        if not torch.allclose(step, expected, rtol=1e-6, atol=1e-7):
            return (
                f"_normalise (norm {norm}) of a gradient with NaN and infinite entries differs "
                "from its step on the same gradient with those entries 0: they count as 0"
            )
    return ""


@check(
    "smart: adversarial perturbation vs reference ascent",
    tolerance=SMART_TOLERANCE,
    judge=judge_smart,
    hint="K times: the gradient of the divergence between the clean and perturbed outputs with "
    "respect to δ (enabled even under the caller's torch.no_grad(); none for an unused δ), a step "
    "of size η along it normalised per token (a zero step where the gradient is zero, as on "
    "padding), then back onto the ε-ball",
    exercises=("smart",),
    seen={
        "non-finite": "a NaN or infinite gradient entry is not counted as 0 in _normalise "
        "(torch.nan_to_num first)",
    },
    raises={
        "does not require grad": "the divergence has no gradient with respect to δ: either it is "
        "taken with gradients off (the caller may run under torch.no_grad(): take it inside "
        "torch.enable_grad()), or it does not read δ (a divergence of the clean outputs with "
        "themselves is 0 whatever δ)",
        "appears to not have been used in the graph": "an embedding the outputs do not read has "
        "no gradient: ask torch.autograd.grad with allow_unused=True, and step 0 there",
        "not NoneType": "the gradient of an embedding the outputs do not read is None: take a "
        "zero step there",
    },
)
def check_smart(ctx: Context) -> Outputs:
    """The parts of one ascent alone (``part_outputs``), then adversarial_perturbation on the
    small fixed models of ``smart_problem`` against the stored perturbations: ℓ∞ and ℓ2 balls,
    1 to 3 ascent steps, multiclass and regression outputs, padded tokens, a caller under
    torch.no_grad() and an embedding the outputs do not read (``SMART_CASES``)."""
    from minbert.smart import (
        SmartConfig,
        _ascent_step,
        _normalise,
        adversarial_perturbation,
        project,
        symmetric_kl,
    )

    if said := non_finite_problem():
        return problem(said, "non-finite", ("_normalise",))
    if failed := kl_gradient_failure(ctx):
        return failed | {"functions": ["symmetric_kl"]}
    data = ctx.course_data["smart"]["kl"]
    with torch.no_grad():
        divergence = symmetric_kl(data["p"].clone(), data["q"].clone())
    parts = [{"divergence": divergence}, *part_outputs(_normalise, project, _ascent_step)]
    embeddings, models = smart_problem()
    got = {}
    for norm, steps, kind, model, grad_mode in SMART_CASES:
        graphs: list[int] = []  # the autograd nodes behind each ascent step's embeddings
        forward = noting_graphs(models[model], graphs)
        clean = models[model](embeddings)
        kept = Untouched(
            {f"embeddings[{j}]": e for j, e in enumerate(embeddings)} | {"clean": clean}
        )
        config = SmartConfig(sigma=0.05, epsilon=0.1, step_size=0.04, ascent_steps=steps, norm=norm)
        caller = torch.no_grad() if grad_mode == "no_grad" else contextlib.nullcontext()
        with caller:
            deltas = adversarial_perturbation(
                forward, embeddings, clean, kind, config, torch.Generator().manual_seed(11)
            )
        if not isinstance(deltas, (list, tuple)) or len(deltas) != len(embeddings):
            return problem(f"expected a list of {len(embeddings)} perturbations", "", ASCENT)
        if said := kept.problem():
            return problem(f"adversarial_perturbation {said}", "", ASCENT)
        ascents = [size for size in graphs if size]  # the calls on perturbed embeddings
        if ascents and max(ascents) > ascents[0]:
            return problem(
                f"adversarial_perturbation kept δ's graph from one ascent step to the next (the "
                f"perturbed embeddings of its steps reach {', '.join(map(str, ascents))} autograd "
                "nodes; each step's should be as small as the first's): detach δ after each "
                "step, or every backward goes through all the steps before it",
                "",
                ASCENT,
            )
        for j, d in enumerate(deltas):
            got[f"δ of embedding {j} {smart_label(norm, steps, kind, model, grad_mode)}"] = d
    return outputs(*(graded(part) for part in parts), graded(got))
