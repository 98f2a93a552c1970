"""Write ``course/reference_data.pt``: the stored cases the course checks grade against.
INSTRUCTOR ONLY (``course.authoring.scaffold.INSTRUCTOR_ONLY``): with ``course_references.py``
beside it, it is the solution, so the student tree has neither, only the data they produce.

    python -m course.authoring.make_course_references   # writes course/reference_data.pt

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from pathlib import Path

import torch

from course.authoring import course_references as ref
from course.dropout import MODES, recorded_dropout
from course.registry import COURSE_DATA
from course.seal import seal
from minbert.checkpoint import atomic_write, load_trusted
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command

ROOT = Path(__file__).resolve().parents[2]

# What the grader prints for each known mistake, by exercise (the key is course_references'
# ``mistake`` argument). A mistake made in some cases only (one path of a check) is declared as
# (description, the labels of those cases): it is stored in those cases alone, and the grader
# names it when they match it and the other cases are right (``measure.worst_of``).
MISTAKES: dict[str, dict[str, str | tuple[str, tuple[str, ...]]]] = {
    "embeddings": {
        "no_positions": "the position embeddings are not added",
        "no_token_types": "the token type embeddings are not added",
        "no_norm": "the LayerNorm is missing",
        "no_dropout": "the dropout is missing",
        "dropout_before_norm": "the dropout comes before the LayerNorm instead of after it",
        "positions_from_one": "the positions count from 1 instead of 0",
        "token_types_zero": "every token gets the type-0 embedding: the token_type_ids are "
        "ignored, which is right for single sentences and wrong for the second sentence of a pair",
        "norm_word_only": "the LayerNorm is applied to the word embeddings alone, before the "
        "position and token type embeddings are added",
    },
    "attention_function": {
        "no_scale": "QKᵀ is not divided by √d_k",
        "scale_by_dk": "QKᵀ is divided by d_k instead of √d_k",
        "softmax_wrong_axis": "the softmax runs over the queries (dim −2) instead of the keys",
        "no_mask": "the attention mask M is not added",
        "mask_subtracted": "the mask is subtracted (wrong sign) instead of added",
        "mask_after_softmax": "the mask is added after the softmax instead of before it",
        "no_dropout": "the dropout on the attention probabilities is missing",
        "dropout_before_softmax": "the dropout is applied to the scores before the softmax",
        "dropout_on_output": "the dropout is applied to the output instead of the probabilities",
        "mask_as_keep": "the additive mask M is read as 1 = keep (masked_fill(M == 0, −inf)): "
        "the real tokens are masked out and a row of real tokens only becomes NaN",
        "scale_after_softmax": "the division by √d_k comes after the softmax instead of before",
        "mask_on_queries": "the mask is applied along the queries (rows, M transposed) instead "
        "of the keys (columns)",
    },
    "self_attention": {
        "merge_without_transpose": "the heads are merged without transposing (B, nh, T, hs) "
        "back to (B, T, nh, hs)",
        "split_without_transpose": "the heads are split by reshaping to (B, nh, T, hs) directly, "
        "without the transpose",
        "query_key_swapped": "the query and key projections are swapped",
        "no_dropout": "the attention dropout is not passed on in training mode",
        "value_uses_key": "the values are projected with the key projection",
        # partial: made on the fused path only, so the written-out path is right
        "fused_no_mask": (
            "the mask is not passed to F.scaled_dot_product_attention (fused path only)",
            ("fused",),
        ),
        "fused_scale_one": (
            "scale=1.0 is passed to F.scaled_dot_product_attention, so QKᵀ is not divided by "
            "√d_k (fused path only): leave scale out, its default is 1/√d_k",
            ("fused",),
        ),
    },
    "layer": {
        "norm_before_residual": "the LayerNorm is applied before the residual is added "
        "(x + LayerNorm(h) instead of LayerNorm(x + h))",
        "no_attention_residual": "the residual around the attention sub-layer is missing",
        "no_ffn_residual": "the residual around the feed-forward sub-layer is missing",
        "ffn_on_x": "the feed-forward network is applied to the layer input x instead of a",
        "ffn_residual_from_x": "the feed-forward residual adds x instead of a",
        "no_attention_dropout": "the dropout on the attention output projection is missing",
        "no_output_dropout": "the dropout on the feed-forward output is missing",
        "dropout_after_add": "the dropout is applied after the residual add instead of before it",
        "residual_adds_heads": "the residual around the attention adds the heads (the "
        "self-attention's output) instead of the layer input x",
        "norm_before_residual_attention": "in the attention sub-layer only, the LayerNorm is "
        "applied before the residual is added (x + LayerNorm(h))",
        "norm_before_residual_ffn": "in the feed-forward sub-layer only, the LayerNorm is applied "
        "before the residual is added (a + LayerNorm(h))",
    },
    "adamw": {
        "no_bias_correction": "the bias corrections 1 − β₁ᵗ and 1 − β₂ᵗ are missing",
        "l2_decay": "the weight decay is added to the gradient (L2) instead of decoupled",
        "decay_not_scaled_by_lr": "the decoupled decay is not scaled by the learning rate "
        "(θ ← θ − λθ instead of θ − lr·λ·θ)",
        "eps_inside_sqrt": "ε is added inside the square root instead of after it",
        "beta1_swapped": "β₁ and 1 − β₁ are swapped in the first moment",
        "v_not_squared": "the second moment accumulates |g| instead of g²",
        "step_count_from_zero": "the bias corrections use t − 1 (the step count before "
        "incrementing)",
        "decay_after_update": "the decay is applied after the Adam update instead of before it",
        "only_m_corrected": "only the first moment is bias-corrected (v̂ = v)",
        "only_v_corrected": "only the second moment is bias-corrected (m̂ = m)",
        "corrections_swapped": "the bias corrections are swapped (m / (1 − β₂ᵗ), v / (1 − β₁ᵗ))",
        "tf_epsilon_hat": "the update is Adam's ε̂ form (TensorFlow's: lr·√(1 − β₂ᵗ)/(1 − β₁ᵗ) "
        "· m / (√v + ε)), where ε is not scaled by √(1 − β₂ᵗ)",
        "decay_sign": "the decay has the wrong sign (θ ← θ + lr·λ·θ)",
        "beta2_swapped": "β₂ and 1 − β₂ are swapped in the second moment",
        "corrected_in_place": "the bias corrections are applied to the stored moments in place "
        "(m and v are overwritten by m̂ and v̂)",
        "no_eps": "ε is missing from the denominator",
        "betas_swapped": "β₁ and β₂ are swapped: the first moment decays with β₂ and the second "
        "with β₁",
        "v_correction_unrooted": "v's bias correction is outside the square root (√v / (1 − β₂ᵗ) "
        "instead of √(v / (1 − β₂ᵗ)))",
    },
    "sampler_alpha": {
        "epoch_off_by_one": "α is off by one epoch (e instead of e − 1)",
        "divided_by_epochs": "α divides by E instead of E − 1",
        "ends_at_zero": "α goes from 1 to 0 instead of from 1 to 0.2",
        "rising": "α rises from 0.2 to 1 instead of falling from 1 to 0.2",
        "no_single_epoch": "α divides by E − 1, which is 0 when E = 1: return 1.0 there",
    },
    "sampler_probabilities": {
        "not_normalised": "the weights N_i^α are not divided by their sum",
        "alpha_multiplies": "α multiplies the sizes (α·N_i) instead of being their exponent",
        "normalised_by_sizes": "the weights are divided by Σ N_j instead of Σ N_j^α",
        "normalised_by_max": "the weights are divided by the largest weight instead of their sum "
        "Σ N_j^α",
    },
    "adapter": {
        "no_skip": "the adapter has no skip connection (h + ...)",
        "no_activation": "the GELU between the down and up projections is missing",
        "relu": "ReLU is used instead of GELU",
        "tanh_gelu": "GELU's tanh approximation is used instead of the exact (erf) GELU",
        "gelu_after_up": "the GELU comes after the up-projection instead of between the "
        "projections",
    },
    "lhuc": {
        "no_factor_2": "the factor 2 of 2·σ(r) is missing",
        "no_sigmoid": "the sigmoid of r is missing",
        "sigmoid_of_2r": "the scale is σ(2r) instead of 2·σ(r)",
        "added": "the scale 2·σ(r) is added to h instead of multiplying it",
        "exp": "the scale is exp(r) instead of 2·σ(r)",
        "two_exp": "the scale is 2·exp(r) instead of 2·σ(r): exp where the sigmoid belongs",
        "first_row": "every layer is scaled with layer 0's r (r[0]): each layer has its own "
        "row, r[layer]",
        "previous_row": "each layer is scaled with the row of the layer before it (r[layer − 1]): "
        "layer l's row is r[l]",
    },
    "lora_update": {},  # B A x alone: its mistakes are the linear site's
    "lora_linear": {
        "no_scale": "the update is not scaled by α/r",
        "scale_inverted": "the update is scaled by r/α instead of α/r",
        "no_dropout": "the dropout on the update's input is missing",
        "dropout_on_update": "the dropout is applied to the update's output B A x instead of "
        "its input x",
        "scale_one_over_rank": "the update is scaled by 1/r instead of α/r",
    },
    "lora_merge": {
        "no_scale": "the merged update is not scaled by α/r",
        "delta_transposed": "ΔW is transposed ((B A)ᵀ instead of B A)",
        "scaled_twice": "ΔW is scaled twice: delta_weight scales B A by α/r (LoRA's default, "
        "16/8 = 2) and merge scales it by α/r again; delta_weight returns B A alone",
    },
    "pals": {
        "no_mask": "the attention mask is not passed to the PAL's attention",
        "no_dropout": "the attention dropout is not passed to the PAL's attention in training",
        "layer_0_attention": "every layer uses layer 0's projected attention (pal.layers[0]): "
        "layer l uses its own, pal.layers[layer]",
        "adds_x": "the PAL term is returned added to x (x + V_D·g(V_E·x)): return the term "
        "alone; the layer adds it",
    },
    "symmetric_kl": {
        "one_sided": "the KL is one-sided (KL(P‖Q) only), not symmetric",
        "sum_over_batch": "the divergence is summed over the batch instead of averaged",
        "mean_over_classes": "the divergence is averaged over the classes too (F.kl_div with "
        'reduction="mean"), not summed over them and averaged over the batch',
        "softmax_over_batch": "the softmax runs over the batch (dim 0) instead of the classes",
    },
    "smart": {
        "not_normalised": "the ascent step is not normalised by the gradient's norm",
        "global_norm": "the gradient is normalised by its norm over the whole tensor instead of "
        "per token",
        "no_projection": "δ is not projected back onto the ε-ball",
        "descent": "δ moves down the gradient (descent) instead of up",
        "one_step_too_many": "one ascent step too many (K + 1)",
        "no_zero_guard": "the per-token normalisation divides by a zero norm where the gradient "
        "is zero (padding), which puts NaN into δ",
        "sign": "the step is sign(g) instead of g normalised per token",
        "l2_always": "the gradient is normalised by its ℓ2 norm whatever config.norm says",
    },
    "masking": {
        "specials_chosen": "special tokens ([CLS], [SEP], ...) can be chosen",
        "all_to_mask": "every chosen token becomes [MASK] (no 80/10/10 split)",
        "random_and_keep_swapped": "the 10% random and 10% kept cases are swapped (random when "
        "a ≥ 0.9)",
        "labels_everywhere": "the labels are the original ids everywhere, not only at the chosen "
        "positions",
        "labels_at_mask_only": "only the tokens replaced by [MASK] are labelled, not every chosen "
        "token",
        "whole_word_ignored": "with whole-word masking, each piece is chosen on its own",
        "labels_from_masked": "the labels are taken from the masked ids instead of the original "
        "ids",
        "labels_zero": "the positions not chosen are labelled 0 instead of −100",
        "kept_unlabelled": "the chosen tokens left unchanged (the 10% kept) are not labelled; "
        "every chosen token is, whatever it became",
        "draws_swapped": "the random draws are made in another order than mask_tokens' "
        "docstring says (the 80/10/10 draw before the choice's)",
    },
    "mlm_loss": {
        "all_positions": "the loss is averaged over all positions instead of the masked ones",
        "sum": "the loss is summed over the masked positions instead of averaged",
        "no_log_softmax": "the logits are used as log-probabilities (no log-softmax)",
        "softmax_first": "cross_entropy is given probabilities (a softmax before cross_entropy, "
        "which applies its own log-softmax)",
        "mean_of_sentence_means": "the loss is a mean of per-sentence means: average over all "
        "the masked positions of the batch at once, so that a sentence with more of them "
        "counts more",
    },
    # -- the multitask heads and losses (tasks/heads.py, tasks/base.py) -------------------------
    "pooling": {
        "padding_averaged": "the padding is averaged in: the mean runs over all T positions "
        "instead of the real tokens (attention mask 1) only",
        "divided_by_length": "the masked sum is divided by T (the padded length) instead of each "
        "sentence's number of real tokens Σ_t m_t",
        "not_divided": "the masked sum Σ_t m_t h_t is not divided by the number of real tokens",
        "cls_left_out": "[CLS] (position 0) is left out of the mean: every real token counts, "
        "[CLS] too",
    },
    "pair_features": {
        "no_abs": "|u − v| is written without the absolute value (u − v)",
        "difference_and_product_swapped": "the features are in another order: [u; v; u ⊙ v; "
        "|u − v|] instead of [u; v; |u − v|; u ⊙ v]",
    },
    "cosine_head": {
        "wrong_axis": "the cosine runs over the wrong dimension (dim 0, the pairs of the batch) "
        "instead of the hidden dimension (dim −1)",
        "dot_product": "u · v is not divided by ‖u‖ ‖v‖ (a dot product, not the cosine)",
        "no_affine": "the cosine is returned as it is, without a·cos + b (self.scale, self.shift)",
    },
    "task_losses": {
        "softmax_first": "MultiClassTask: cross_entropy is given probabilities (a softmax before "
        "cross_entropy, which applies its own log-softmax)",
        "no_log_softmax": "MultiClassTask: the logits are used as log-probabilities (no "
        "log-softmax: nll_loss of the logits)",
        "sigmoid_first": "BinaryTask: a sigmoid before binary_cross_entropy_with_logits, which "
        "applies its own (it expects logits, not probabilities)",
        "labels_truncated": "RegressionTask: the labels are cast to an integer type (long), "
        "which truncates the scores (3.8 becomes 3)",
        "broadcast": "RegressionTask: the (B, 1) outputs are compared with the (B,) labels "
        "without taking column 0, so the squared error broadcasts to (B, B)",
    },
}

SEED = 1234  # of the recorded dropout masks


def no_more_mistakes(component: str) -> dict:
    return {}


# What ``declared`` adds to a component's known mistakes: nothing, but while
# ``operator_mistakes.py`` runs this script, the one-change variants of the equations that the
# component's expected outputs were just computed with (every case computes those first).
more_mistakes: Callable[[str], dict] = no_more_mistakes


def declared(component: str, scope: str | None = None) -> dict:
    """key -> description of the known mistakes of ``component`` that belong to the case
    ``scope``: every mistake declared for all cases, and those declared for ``scope``."""
    found = {}
    for key, value in MISTAKES[component].items():
        text, scopes = (value, None) if isinstance(value, str) else value
        if scopes is None or scope in scopes:
            found[key] = text
    return found | more_mistakes(component)


def normal(*shape: int, generator: torch.Generator) -> torch.Tensor:
    """N(0, 1) float32 values, drawn in float64: torch's float32 normal sampler takes a vectorized
    path whose last bits depend on the CPU's instruction set (``ATEN_CPU_CAPABILITY``), its
    float64 sampler does not, so the inputs are the same on every machine."""
    return torch.randn(*shape, generator=generator, dtype=torch.float64).float()


def randomize(module: torch.nn.Module, generator: torch.Generator, std: float = 0.5) -> None:
    """Every parameter N(0, std²) (LayerNorm gains 1 + noise)."""
    with torch.no_grad():
        for sub in module.modules():
            for name, p in sub.named_parameters(recurse=False):
                noise = normal(*p.shape, generator=generator) * std
                if isinstance(sub, torch.nn.LayerNorm) and name == "weight":
                    noise = noise + 1.0
                p.copy_(noise)


def state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# The check (the start of its name) that grades each component's stored case: its tolerance
# sets the buckets of the sealed outputs (course.seal).
GRADED_BY = {
    "embeddings": "embeddings:",
    "attention_function": "attention: scaled_dot_product_attention",
    "self_attention": "attention: BertSelfAttention",
    "layer": "layer:",
    "adapter": "adapter:",
    "lhuc": "lhuc:",
    "lora_linear": "lora: LoRA linear",
    "lora_update": "lora: LoRA linear",
    "lora_merge": "lora: merge",
    "pals": "pals:",
    "smart": "smart: adversarial",
    # the multitask heads and losses
    "pooling": "pooling:",
    "pair_features": "pair-features:",
    "cosine_head": "cosine-head:",
    "task_losses": "task-losses:",
}


def check_tolerance(name_start: str) -> float:
    """The smallest tolerance of the checks whose name starts with ``name_start``."""
    from course.checks import CHECKS

    found = [c.tolerance for c in CHECKS if c.name.startswith(name_start)]
    if not found:
        raise ValueError(f"no check named {name_start}...")
    return min(found)


def case(
    component: str,
    compute,
    modes=MODES,
    scope: str | None = None,
    tolerance: float | None = None,
) -> dict:
    """{mode: {"expected": compute(mode, None), "mistakes": {description: compute(mode, key)}}},
    with the mistakes ``declared`` for ``scope``, sealed (``with_mistakes``); in training mode
    also the reference's "dropout calls" (shape, p), which a check prints when the student's
    calls draw other masks."""

    calls = {}

    def run(mode: str, mistake):
        context = recorded_dropout(SEED) if mode == "train" else contextlib.nullcontext()
        with context as recorder, torch.no_grad():
            out = compute(mode, mistake)
        if recorder is not None and mistake is None:
            calls[mode] = [(list(shape), p) for shape, p in recorder.calls]
        return out

    if tolerance is None:
        tolerance = check_tolerance(GRADED_BY[component])
    stored = {}
    for mode in modes:
        expected = run(mode, None)
        mistakes = {t: run(mode, k) for k, t in declared(component, scope).items()}
        stored[mode] = with_mistakes(expected, mistakes, tolerance)
        if mode in calls:  # the dropout calls of the reference, for the messages
            stored[mode]["dropout calls"] = calls[mode]
    return stored


def with_mistakes(expected: dict, mistakes: dict, tolerance: float | None = None) -> dict:
    """A stored case: the expected outputs and, per mistake, only the outputs that differ from
    them (the grader takes a left-out one as expected), each sealed (``course.seal``:
    the file is copied into the student tree, so it holds no output in full). ``tolerance``: the
    check's, needed to seal a small floating-point output."""
    return {
        "expected": {name: seal(name, t, tolerance) for name, t in expected.items()},
        "mistakes": {
            text: {
                name: seal(name, t, tolerance, answer=False)
                for name, t in outputs.items()
                if t.shape != expected[name].shape or not torch.equal(t, expected[name])
            }
            for text, outputs in mistakes.items()
        },
    }


# ----------------------------------------------------------------------------------------------


def embeddings_data() -> dict:
    from course.checks.bert import EMBEDDINGS_CONFIG
    from minbert.bert import BertConfig, BertEmbeddings

    g = torch.Generator().manual_seed(1)
    config = BertConfig.tiny(**EMBEDDINGS_CONFIG)
    module = BertEmbeddings(config)
    randomize(module, g)
    input_ids = torch.randint(1, config.vocab_size, (3, 7), generator=g)
    input_ids[1, 5:] = config.pad_token_id
    token_type_ids = torch.tensor([[0] * 3 + [1] * 4, [0] * 2 + [1] * 5, [0] * 7])

    def compute(mode, mistake):
        out = ref.embeddings(module, input_ids, token_type_ids, mode == "train", mistake)
        return {"embeddings": out}

    data = {"state": state(module), "input_ids": input_ids, "token_type_ids": token_type_ids}
    return data | case("embeddings", compute)


def padded_mask() -> torch.Tensor:
    return torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])


def attention_function_data() -> dict:
    g = torch.Generator().manual_seed(2)
    q, k, v = (normal(3, 2, 6, 5, generator=g) for _ in range(3))
    mask = ref.additive_mask(padded_mask())
    p = 0.2

    def compute(mode, mistake):
        dropout_p = p if mode == "train" else 0.0
        return {"attention output": ref.attention(q, k, v, mask, dropout_p, True, mistake)}

    data = {"q": q, "k": k, "v": v, "mask": mask, "dropout_p": p}
    return data | case("attention_function", compute)


def self_attention_data() -> dict:
    from course.checks.bert import ATTENTION_CONFIG, PATHS, site_variants
    from minbert.bert import BertConfig, BertSelfAttention

    g = torch.Generator().manual_seed(3)
    config = BertConfig.tiny(**ATTENTION_CONFIG)
    module = BertSelfAttention(config)
    randomize(module, g)
    x = normal(3, 6, config.hidden_size, generator=g)
    mask = ref.additive_mask(padded_mask())

    def compute(mode, mistake):
        out = {}
        for label, sites in site_variants():

            def projection(name, sites=sites):
                lin = getattr(module, name)
                if sites is None:
                    return lambda t: ref.linear(t, lin)
                return lambda t: sites.linear(0, None, name, lin, t, None)

            y = ref.multi_head(
                x,
                mask,
                projection("query"),
                projection("key"),
                projection("value"),
                config.num_attention_heads,
                config.attention_probs_dropout_prob,
                mode == "train",
                mistake,
            )
            out[label] = y
        return out

    # one case per path: a mistake made on one path only is stored in that path's case alone
    data = {"state": state(module), "x": x, "mask": mask}
    return data | {path: case("self_attention", compute, scope=path) for path in PATHS}


def layer_data() -> dict:
    from course.checks.bert import LAYER_CONFIG, ScalingSites, StandInSelfAttention
    from minbert.bert import BertConfig, BertLayer

    g = torch.Generator().manual_seed(4)
    config = BertConfig.tiny(**LAYER_CONFIG)
    module = BertLayer(config)
    module.attention.self = StandInSelfAttention(config.hidden_size)
    randomize(module, g)
    x = normal(3, 6, config.hidden_size, generator=g)
    mask = ref.additive_mask(padded_mask())
    data = {"state": state(module), "x": x, "mask": mask}
    for label, sites in (("plain", None), ("sites", ScalingSites())):

        def compute(mode, mistake, sites=sites):
            heads = module.attention.self(x, mask)
            return {
                "layer output": ref.layer(module, heads, x, mask, sites, mode == "train", mistake)
            }

        data[label] = case("layer", compute)
    return data


def adamw_data() -> dict:
    from course.checks.optimizer import ADAMW_SETTINGS, ADAMW_TOLERANCE, adamw_model

    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 4, generator=g, dtype=torch.float64)
    y = torch.sin(x @ torch.randn(4, 1, generator=g, dtype=torch.float64))
    model = adamw_model()
    randomize(model, g)
    start = state(model)
    steps, betas, eps = ADAMW_SETTINGS["steps"], ADAMW_SETTINGS["betas"], ADAMW_SETTINGS["eps"]

    def trajectory(mistake):
        m = adamw_model()
        m.load_state_dict(start)
        groups = [(list(m[i].parameters()), lr, decay) for i, lr, decay in ADAMW_SETTINGS["groups"]]
        return ref.adamw_trajectory(m, groups, x, y, steps, betas, eps, mistake)

    # the reference against torch's own AdamW (foreach off), in float64
    m = adamw_model()
    m.load_state_dict(start)
    opt = torch.optim.AdamW(
        [
            {"params": list(m[i].parameters()), "lr": lr, "weight_decay": decay}
            for i, lr, decay in ADAMW_SETTINGS["groups"]
        ],
        betas=betas,
        eps=eps,
        foreach=False,
    )
    rows = []
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x), y).backward()
        opt.step()
        rows.append(torch.cat([p.detach().reshape(-1) for p in m.parameters()]))
    expected = trajectory(None)
    assert (torch.stack(rows) - expected).abs().max() < 1e-12, "reference AdamW != torch's"
    mistakes = {text: {"θ": trajectory(key)} for key, text in declared("adamw").items()}
    return {"state": start, "x": x, "y": y} | with_mistakes(
        {"θ": expected}, mistakes, ADAMW_TOLERANCE
    )


def sampler_data() -> dict:
    from course.checks.sampling import ALPHAS, EPOCHS, SAMPLER_SIZES, SAMPLER_TOLERANCE

    pairs = [(e, E) for E in EPOCHS for e in range(1, E + 1)]

    def alphas(mistake):
        return torch.tensor(
            [ref.annealed_alpha(e, E, mistake) for e, E in pairs], dtype=torch.float64
        )

    def probabilities(mistake):
        values = [
            p
            for sizes in SAMPLER_SIZES
            for alpha in ALPHAS
            for p in ref.task_probabilities(list(sizes.values()), alpha, mistake)
        ]
        return torch.tensor(values, dtype=torch.float64)

    return {
        "alpha": with_mistakes(
            {"α": alphas(None)},
            {t: {"α": alphas(k)} for k, t in declared("sampler_alpha").items()},
            SAMPLER_TOLERANCE,
        ),
        "probabilities": with_mistakes(
            {"p": probabilities(None)},
            {t: {"p": probabilities(k)} for k, t in declared("sampler_probabilities").items()},
            SAMPLER_TOLERANCE,
        ),
    }


def adapter_data() -> dict:
    from course.checks.adapter import ADAPTER_OPTIONS
    from course.registry import PLUGIN_TASKS
    from minbert.bert import BertConfig
    from minbert.plugins.adapter import HoulsbyAdapter

    g = torch.Generator().manual_seed(5)
    config = BertConfig.tiny()
    plugin = HoulsbyAdapter(config, PLUGIN_TASKS, **ADAPTER_OPTIONS)
    randomize(plugin, g)
    inputs = {}
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            for position in ("attention", "feed_forward"):
                inputs[f"{task} layer {layer} {position}"] = normal(
                    2, 5, config.hidden_size, generator=g
                )

    def compute(mode, mistake):
        out = {}
        for key, h in inputs.items():
            task, _, layer, position = key.split()
            module = plugin.by_task[task][position][int(layer)]
            out[key] = ref.adapter(h, module, mistake)
        return out

    return {"state": state(plugin), "h": inputs} | case("adapter", compute, modes=("eval",))


def lhuc_data() -> dict:
    from course.registry import PLUGIN_TASKS
    from minbert.bert import BertConfig
    from minbert.plugins.lhuc import LHUC

    g = torch.Generator().manual_seed(6)
    config = BertConfig.tiny()
    plugin = LHUC(config, PLUGIN_TASKS)
    randomize(plugin, g, std=1.0)
    inputs = {
        f"{task} layer {layer}": normal(2, 5, config.hidden_size, generator=g)
        for task in PLUGIN_TASKS
        for layer in range(config.num_hidden_layers)
    }

    def compute(mode, mistake):
        out = {}
        for key, h in inputs.items():
            task, _, layer = key.split()
            out[key] = ref.lhuc(h, plugin.by_task[task].r, int(layer), mistake)
        return out

    return {"state": state(plugin), "h": inputs} | case("lhuc", compute, modes=("eval",))


def lora_data() -> dict:
    from course.checks.lora import LORA_NAMES, LORA_OPTIONS
    from course.registry import PLUGIN_TASKS
    from minbert.bert import BertConfig
    from minbert.plugins.lora import LoRA, target_shape

    g = torch.Generator().manual_seed(7)
    config = BertConfig.tiny()
    plugin = LoRA(config, PLUGIN_TASKS, **LORA_OPTIONS)
    randomize(plugin, g)
    plugin.double()  # float64: outputs of size 20-60, where float32 steps are about 1e-6
    bases, inputs = {}, {}
    for name in LORA_NAMES:
        d_in, d_out = target_shape(config, name)
        bases[name] = torch.nn.Linear(d_in, d_out)
        randomize(bases[name], g)
        bases[name].double()
        for task in PLUGIN_TASKS:
            for layer in range(config.num_hidden_layers):
                x = normal(2, 5, d_in, generator=g)
                inputs[f"{task} layer {layer} {name}"] = x.double()
    scale = LORA_OPTIONS["alpha"] / LORA_OPTIONS["rank"]

    def compute(mode, mistake):
        out = {}
        for key, x in inputs.items():
            task, _, layer, name = key.split()
            y = ref.linear(x, bases[name])
            if name in LORA_OPTIONS["targets"]:
                update = plugin.by_task[task][int(layer)][name]
                y = ref.lora(
                    x,
                    y,
                    update,
                    scale,
                    LORA_OPTIONS["alpha"],
                    LORA_OPTIONS["rank"],
                    LORA_OPTIONS["dropout"],
                    mode == "train",
                    mistake,
                )
            out[key] = y
        return out

    linear = {
        "state": state(plugin),
        "bases": {n: state(b) for n, b in bases.items()},
        "x": inputs,
    } | case("lora_linear", compute)

    def updates(mode, mistake):  # LowRankUpdate.forward alone, B A x, on the targets' inputs
        out = {}
        for key, x in inputs.items():
            task, _, layer, name = key.split()
            if name in LORA_OPTIONS["targets"]:
                out[f"update {key}"] = ref.low_rank_update(
                    x, plugin.by_task[task][int(layer)][name]
                )
        return out

    linear["update"] = case("lora_update", updates, modes=("eval",))
    return {"linear": linear, "merge": lora_merge_data(scale)}


def lora_merge_data(scale: float) -> dict:
    """Merging: a tiny model with the plug-in attached, each adapted weight W + (α/r)·B A."""
    from course.checks.lora import LORA_MERGE_CONFIG, LORA_OPTIONS
    from course.registry import PLUGIN_TASKS
    from minbert.bert import BertConfig, BertModel
    from minbert.plugins import add_plugin
    from minbert.plugins.lora import target_module

    g = torch.Generator().manual_seed(8)
    model = BertModel(BertConfig.tiny(**LORA_MERGE_CONFIG))
    randomize(model, g)
    model.double()
    model_state = state(model)
    merge_plugin = add_plugin(model, "lora", PLUGIN_TASKS, **LORA_OPTIONS)
    randomize(merge_plugin, g)
    merge_plugin.double()
    layers = list(model.encoder.layer)

    def merged(mode, mistake):
        out = {}
        for task in PLUGIN_TASKS:
            for i, layer in enumerate(layers):
                for name in LORA_OPTIONS["targets"]:
                    w = target_module(layer, name).weight.detach()
                    update = merge_plugin.by_task[task][i][name]
                    out[f"merged {task} layer {i} {name}"] = ref.lora_merged(
                        w, update, scale, mistake
                    )
        return out

    return {"model": model_state, "plugin": state(merge_plugin)} | case(
        "lora_merge", merged, modes=("eval",)
    )


def pals_data() -> dict:
    from course.checks.pals import graded_pal
    from course.registry import PLUGIN_TASKS
    from minbert.bert import BertConfig

    g = torch.Generator().manual_seed(9)
    config = BertConfig.tiny()
    plugin = graded_pal(config, PLUGIN_TASKS)
    randomize(plugin, g)
    x = normal(3, 6, config.hidden_size, generator=g)
    mask = ref.additive_mask(padded_mask())

    def compute(mode, mistake):
        out = {}
        for task in PLUGIN_TASKS:
            pal = plugin.by_task[task]
            for layer in range(config.num_hidden_layers):
                out[f"{task} layer {layer} PAL term"] = ref.pal(
                    x,
                    mask,
                    pal.encoder,
                    pal.layers,
                    layer,
                    pal.decoder,
                    plugin.dropout_p,
                    mode == "train",
                    mistake,
                )
        return out

    return {"state": state(plugin), "x": x, "mask": mask} | case("pals", compute)


def smart_data() -> dict:
    from course.checks.smart import (
        KL_TOLERANCE,
        SMART_CASES,
        SMART_PARTS,
        part_outputs,
        smart_label,
        smart_problem,
    )
    from minbert.smart import SmartConfig

    embeddings, models = smart_problem()

    def deltas(mistake):
        out = {}
        for norm, steps, kind, model, grad_mode in SMART_CASES:
            config = SmartConfig(
                sigma=0.05, epsilon=0.1, step_size=0.04, ascent_steps=steps, norm=norm
            )
            forward = models[model]
            clean = forward(embeddings)
            found = ref.perturbation(forward, embeddings, clean, kind, config, 11, mistake)
            for j, d in enumerate(found):
                out[f"δ of embedding {j} {smart_label(norm, steps, kind, model, grad_mode)}"] = d
        return out

    def parts(mistake):
        return part_outputs(
            lambda g, norm: ref.ascent_direction(g, norm, mistake),
            lambda d, eps, norm: ref.project(d, eps, norm, mistake),
            lambda d, g, config: ref.ascent_step(d, g, config, mistake),
        )

    tolerance = check_tolerance(GRADED_BY["smart"])
    expected_outputs = [*parts(None), deltas(None)]  # before the mistakes, as in every case
    mistakes = {t: [*parts(k), deltas(k)] for k, t in declared("smart").items()}
    stored = {}
    between = SMART_PARTS[1:]  # the first, the divergence, is the KL check's case
    for i, (expected, (_, key)) in enumerate(zip(expected_outputs, between)):
        their = {t: outputs[i] for t, outputs in mistakes.items()}
        stored[key] = with_mistakes(expected, their, tolerance)
    g = torch.Generator().manual_seed(12)
    p, q = normal(4, 5, generator=g), normal(4, 5, generator=g)
    return stored | {
        "kl": {"p": p, "q": q}
        | with_mistakes(
            {"divergence": ref.symmetric_kl(p, q)},
            {
                t: {"divergence": ref.symmetric_kl(p, q, k)}
                for k, t in declared("symmetric_kl").items()
            },
            KL_TOLERANCE,
        ),
    }


def mlm_data() -> dict:
    from course.checks.mlm import (
        MASKING_CASES,
        MLM_LOSS_TOLERANCE,
        MLM_VOCAB,
        masking_counts,
        mlm_batch,
    )

    input_ids, attention_mask, continuation = mlm_batch()
    v = MLM_VOCAB

    def masks(mistake):
        out = {}
        for label, seed, p, whole_word in MASKING_CASES:
            masked, labels = ref.mask_tokens(
                input_ids,
                attention_mask,
                v["special"],
                v["mask"],
                v["size"],
                seed,
                p,
                continuation if whole_word else None,
                mistake,
            )
            out[f"masked inputs ({label})"] = masked
            out[f"labels ({label})"] = labels
        return out

    g = torch.Generator().manual_seed(13)
    logits = normal(4, 9, 30, generator=g) * 3
    labels = torch.randint(30, (4, 9), generator=g)
    labels[torch.rand(4, 9, generator=g) < 0.7] = -100
    labels[0, 0] = 5  # at least one chosen position

    def losses(mistake):
        chosen = labels != -100
        return {
            "loss (B, T, V)": ref.mlm_loss(logits, labels, mistake),
            "loss (N, V)": ref.mlm_loss(logits[chosen], labels[chosen], mistake),
        }

    expected = masks(None)
    return {
        "masking": with_mistakes(expected, {t: masks(k) for k, t in declared("masking").items()}),
        "masking_counts": {  # per sentence, how many chosen and what each became: no position
            label: masking_counts(
                input_ids, expected[f"masked inputs ({label})"], expected[f"labels ({label})"]
            )
            for label, *_ in MASKING_CASES
        },
        "loss": {"logits": logits, "labels": labels}
        | with_mistakes(
            losses(None),
            {t: losses(k) for k, t in declared("mlm_loss").items()},
            MLM_LOSS_TOLERANCE,
        ),
    }


# ----------------------------------------------------------------------------------------------
# The multitask heads and losses (tasks/heads.py, tasks/base.py): stored inputs, the outputs of
# course_references' equations, and those of the known mistakes (MISTAKES: pooling,
# pair_features, cosine_head, task_losses).


def heads_data() -> dict:
    """The stored cases of course/checks/heads.py, one per exercise."""
    return {
        "pooling": pooling_data(),
        "pair_features": pair_features_data(),
        "cosine": cosine_data(),
        "losses": losses_data(),
    }


def pooling_data() -> dict:
    from course.checks.heads import POOLING_LENGTHS, POOLING_SHAPE

    g = torch.Generator().manual_seed(31)
    B, T, _ = POOLING_SHAPE
    hidden = normal(*POOLING_SHAPE, generator=g) + 0.5  # the padding's states are not zero
    lengths = torch.tensor(POOLING_LENGTHS)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()

    def compute(mode, mistake):
        return {"mean pooling r": ref.mean_pooling(hidden, mask, mistake)}

    data = {"hidden": hidden, "attention_mask": mask}
    return data | case("pooling", compute, modes=("eval",))


def pair_features_data() -> dict:
    from course.checks.heads import PAIR_HEAD, pair_heads

    g = torch.Generator().manual_seed(32)
    heads = pair_heads()
    randomize(heads, g)
    u = normal(6, PAIR_HEAD["hidden"], generator=g).double()
    v = normal(6, PAIR_HEAD["hidden"], generator=g).double()

    def compute(mode, mistake):
        training = mode == "train"
        return {
            f"logits, {label}": ref.pair_head(u, v, head, PAIR_HEAD["dropout"], training, mistake)
            for label, head in heads.items()
        }

    return {"state": state(heads), "u": u, "v": v} | case("pair_features", compute)


def cosine_data() -> dict:
    from course.checks.heads import COSINE_PAIRS
    from tasks.heads import CosineSimilarityHead

    g = torch.Generator().manual_seed(33)
    head = CosineSimilarityHead()
    with torch.no_grad():  # a and b as training leaves them, not the 2.5 they start at
        head.scale.fill_(1.7)
        head.shift.fill_(0.9)
    u = normal(COSINE_PAIRS, COSINE_PAIRS, generator=g)
    v = normal(COSINE_PAIRS, COSINE_PAIRS, generator=g) * 3.0 + 0.5 * u  # other norms, cos ≠ 0

    def compute(mode, mistake):
        return {"ŷ": ref.cosine_head(u, v, head.scale, head.shift, mistake)}

    data = {"state": state(head), "u": u, "v": v}
    return data | case("cosine_head", compute, modes=("eval",))


def losses_data() -> dict:
    from course.checks.heads import LOSS_BATCH, LOSS_CLASSES, SCORE_RANGE

    g = torch.Generator().manual_seed(34)
    B, (low, high) = LOSS_BATCH, SCORE_RANGE
    inputs = {
        "cross-entropy": {
            "outputs": normal(B, LOSS_CLASSES, generator=g) * 2.0,
            "labels": torch.randint(LOSS_CLASSES, (B,), generator=g),
        },
        "binary cross-entropy": {
            "outputs": normal(B, 1, generator=g) * 2.0,
            "labels": torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0]),
        },
        "squared error": {  # scores between the labels, which are not integers (STS's are not)
            "outputs": low
            + (high - low) * torch.rand(B, 1, generator=g, dtype=torch.float64).float(),
            "labels": torch.tensor([3.8, 1.2, 4.6, 0.4, 2.5, 5.0]),
        },
    }
    equations = {
        "cross-entropy": ref.cross_entropy,
        "binary cross-entropy": ref.binary_cross_entropy,
        "squared error": ref.squared_error,
    }

    def compute(mode, mistake):
        return {
            name: equation(inputs[name]["outputs"], inputs[name]["labels"], mistake)
            for name, equation in equations.items()
        }

    return inputs | case("task_losses", compute, modes=("eval",))


def exercise_functions() -> dict[str, list[list[str]]]:
    """exercise -> [path, qualified name] of each function that holds a part of it: the student
    tree has no markers, and the grader names the student's functions by them (where an error
    was raised, and under every FAIL of the exercise's checks)."""
    from course.authoring.scaffold import find_exercises

    found: dict[str, list[list[str]]] = {}
    for regions in find_exercises(ROOT).values():
        for region in regions:
            places = found.setdefault(region.exercise, [])
            if [region.path, region.function] not in places:
                places.append([region.path, region.function])
    return {exercise: found[exercise] for exercise in sorted(found)}


def make() -> dict:
    """The stored data, computed on one thread (as the grader runs): float sums on more threads
    may differ in the last bit. The up-to-date test compares it with the stored data within
    float32 rounding, since another CPU rounds otherwise."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _make()
    finally:
        torch.set_num_threads(threads)


def _make() -> dict:
    torch.manual_seed(0)
    return {
        "seed": SEED,
        "exercise functions": exercise_functions(),
        "embeddings": embeddings_data(),
        "attention_function": attention_function_data(),
        "self_attention": self_attention_data(),
        "layer": layer_data(),
        "adamw": adamw_data(),
        "sampler": sampler_data(),
        "adapter": adapter_data(),
        "lhuc": lhuc_data(),
        "lora": lora_data(),
        "pals": pals_data(),
        "smart": smart_data(),
        "mlm": mlm_data(),
        "heads": heads_data(),
    }


def written_here(path: Path) -> bool:
    """Whether ``path`` is a file this script wrote: stored cases (plain tensors and containers)
    holding its seed and exercise functions."""
    try:
        data = load_trusted(path)
    except Exception:  # noqa: BLE001 - anything that is not such a file is not ours
        return False
    return isinstance(data, dict) and {"seed", "exercise functions"} <= set(data)


def check_out(
    out: Path,
    overwrite: bool,
    ours: Callable[[Path], bool] = written_here,
    what: str = "a file of stored cases",
) -> None:
    """--out: a file in an existing folder, never over a file of the user's without --overwrite
    (the script's own earlier output, which ``ours`` tells and ``what`` names, is replaced); a
    UsageError before anything is computed. scripts/make_reference.py checks its --out here too."""
    if out.is_dir():
        raise UsageError(f"--out {out}: a folder; give the file to write")
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: its folder {out.parent} does not exist")
    if (out.exists() or out.is_symlink()) and not overwrite and not ours(out):
        raise UsageError(
            f"--out {out} exists and is not {what} this script wrote; pass --overwrite to "
            "replace it, or give another name"
        )


def writer_parser(module: str, description: str, default: Path) -> ArgumentParser:
    """The command line of a script that writes one file (``--out``, ``--overwrite``, checked by
    ``check_out``): this one's and ``operator_mistakes.py``'s."""
    parser = ArgumentParser(prog=f"python -m {module}", description=description)
    parser.add_argument("--out", type=nonempty_path, default=default, help="the file to write")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out that this script did not write",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = writer_parser(
        "course.authoring.make_course_references", __doc__.split("\n\n")[0], COURSE_DATA
    )

    def body() -> None:
        args = parser.parse_args(argv)
        check_out(args.out, args.overwrite)
        data = make()
        atomic_write(args.out, lambda stream: torch.save(data, stream))
        print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")

    return run_command(body, "--out is as it was")


if __name__ == "__main__":
    sys.exit(main())
