"""Reference equations of the course exercises, and the known mistakes students make in each.
INSTRUCTOR ONLY: this file is a solution and is not copied into the student tree
(``course.authoring.scaffold.INSTRUCTOR_ONLY``); ``make_course_references.py`` beside it runs
it to write the stored outputs that the student's grader compares with.

Every equation is written out here with plain torch operations and never calls the code it
grades. Each takes ``mistake``: None for the correct output, or the key of one known mistake
(the ``MISTAKES`` tables of ``make_course_references.py`` say what each one means), so that the
grader can say which mistake a student's output matches. Dropout is called as
``torch.nn.functional.dropout(x, p, training)`` exactly where the model calls it, so that under
``course.dropout.recorded_dropout`` the reference draws the same masks as correct code.
"""

from __future__ import annotations

import math
from functools import partial

import torch


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Looked up at call time, so that ``recorded_dropout`` replaces it."""
    return torch.nn.functional.dropout(x, p, training)


def linear(x: torch.Tensor, module: torch.nn.Linear) -> torch.Tensor:
    """x Wᵀ + b."""
    return x @ module.weight.T + module.bias


def layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """γ ⊙ (x − mean) / √(var + eps) + β over the last dimension (biased variance)."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def gelu(x: torch.Tensor) -> torch.Tensor:
    """x · Φ(x), the exact (erf) form."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) of 1/0 -> (B, 1, 1, T) of 0 / the most negative float32."""
    return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


# ----------------------------------------------------------------------------------------------
# bert.py


def embeddings(module, input_ids, token_type_ids, training, mistake=None):
    """dropout(LayerNorm(word[ids] + position[0..T−1] + type[type ids]))."""
    T = input_ids.shape[1]
    x = module.word_embeddings.weight[input_ids]
    if mistake == "norm_word_only":
        x = layer_norm(x, module.LayerNorm)
    if mistake == "positions_from_one":
        x = x + module.position_embeddings.weight[1 : T + 1][None]
    elif mistake != "no_positions":
        x = x + module.position_embeddings.weight[:T][None]
    if mistake == "token_types_zero":  # right for a single sentence, wrong for a pair
        x = x + module.token_type_embeddings.weight[torch.zeros_like(token_type_ids)]
    elif mistake != "no_token_types":
        x = x + module.token_type_embeddings.weight[token_type_ids]
    p = module.dropout.p
    if mistake == "dropout_before_norm":
        return layer_norm(dropout(x, p, training), module.LayerNorm)
    if mistake not in ("no_norm", "norm_word_only"):
        x = layer_norm(x, module.LayerNorm)
    return x if mistake == "no_dropout" else dropout(x, p, training)


def attention(q, k, v, mask, dropout_p, training=True, mistake=None):
    """softmax(Q Kᵀ / √d_k + M) V, dropout on the probabilities, the softmax written out."""
    scores = q @ k.transpose(-2, -1)
    d_k = q.shape[-1]
    if mistake in ("no_scale", "scale_after_softmax"):
        pass
    elif mistake == "scale_by_dk":
        scores = scores / d_k
    else:
        scores = scores / math.sqrt(d_k)
    if mistake == "mask_subtracted":
        scores = scores - mask
    elif mistake == "mask_on_queries":  # (B, 1, T, 1): each padded query row is masked
        scores = scores + mask.transpose(-2, -1)
    elif mistake == "mask_as_keep":  # M read as 1 = keep: the real tokens are masked out
        scores = scores.masked_fill(mask == 0, -math.inf)
    elif mistake not in ("no_mask", "mask_after_softmax"):
        scores = scores + mask
    axis = -2 if mistake == "softmax_wrong_axis" else -1
    if mistake == "dropout_before_softmax":
        scores = dropout(scores, dropout_p, training)
    weights = torch.exp(scores - scores.amax(axis, keepdim=True))
    probs = weights / weights.sum(axis, keepdim=True)
    if mistake == "mask_after_softmax":
        probs = probs + mask
    if mistake == "scale_after_softmax":
        probs = probs / math.sqrt(d_k)
    if mistake not in ("no_dropout", "dropout_before_softmax", "dropout_on_output"):
        probs = dropout(probs, dropout_p, training)
    out = probs @ v
    if mistake == "dropout_on_output":
        out = dropout(out, dropout_p, training)
    return out


def multi_head(x, mask, query, key, value, heads, dropout_p, training, mistake=None):
    """Concatenated heads of attention over x (B, T, D) with the given projections."""
    B, T, D = x.shape
    hs = D // heads

    def split(t):
        if mistake == "split_without_transpose":
            return t.reshape(B, heads, T, hs)
        return t.reshape(B, T, heads, hs).permute(0, 2, 1, 3)

    q, k = split(query(x)), split(key(x))
    v = split(key(x) if mistake == "value_uses_key" else value(x))
    if mistake == "query_key_swapped":
        q, k = k, q
    p = 0.0 if mistake == "no_dropout" else dropout_p
    # mistakes of the fused call (declared for its path only), as the equation makes them
    made = {"fused_no_mask": "no_mask", "fused_scale_one": "no_scale"}.get(mistake)
    y = attention(q, k, v, mask, p, training, made)
    if mistake == "merge_without_transpose":
        return y.reshape(B, T, D)
    return y.permute(0, 2, 1, 3).reshape(B, T, D)


def layer(layer_module, heads, x, mask, sites, training, mistake=None):
    """The post-norm encoder layer with every plug-in site in its place:

    a = norm(x + after_attention(dropout(W_O · heads)))
    y = after_layer(norm(a + after_feed_forward(dropout(W_2 · GELU(W_1 · a))) + parallel(x)))

    ``heads`` is the output of the layer's (stand-in) self-attention; ``sites`` the reference
    sites (``ScalingSites``) or None.
    """
    p = layer_module.attention.output.dropout.p

    def lin(name, module, t):
        return linear(t, module) if sites is None else sites.linear(0, None, name, module, t, None)

    def norm(name, module, t):
        return (
            layer_norm(t, module) if sites is None else sites.norm(0, None, name, module, t, None)
        )

    identity = lambda t: t  # noqa: E731
    after_attention = identity if sites is None else partial(sites.after_attention, 0, None)
    after_feed_forward = identity if sites is None else partial(sites.after_feed_forward, 0, None)
    after_layer = identity if sites is None else partial(sites.after_layer, 0, None)

    out1 = layer_module.attention.output
    h = lin("attention_output", out1.dense, heads)
    if mistake not in ("no_attention_dropout", "dropout_after_add"):
        h = dropout(h, p, training)
    if mistake == "residual_adds_heads":
        a = norm("attention", out1.LayerNorm, heads + after_attention(h))
    elif mistake in ("norm_before_residual", "norm_before_residual_attention"):
        a = x + norm("attention", out1.LayerNorm, after_attention(h))
    elif mistake == "no_attention_residual":
        a = norm("attention", out1.LayerNorm, after_attention(h))
    else:
        s = x + after_attention(h)
        if mistake == "dropout_after_add":
            s = dropout(s, p, training)
        a = norm("attention", out1.LayerNorm, s)
    inner = a if mistake != "ffn_on_x" else x
    f = gelu(lin("intermediate", layer_module.intermediate.dense, inner))
    out2 = layer_module.output
    h = lin("output", out2.dense, f)
    if mistake not in ("no_output_dropout", "dropout_after_add"):
        h = dropout(h, p, training)
    residual = x if mistake == "ffn_residual_from_x" else a
    parallel = 0.0 if sites is None else sites.parallel(0, None, x, mask)
    if mistake in ("norm_before_residual", "norm_before_residual_ffn"):
        y = residual + norm("feed_forward", out2.LayerNorm, after_feed_forward(h) + parallel)
    elif mistake == "no_ffn_residual":
        y = norm("feed_forward", out2.LayerNorm, after_feed_forward(h) + parallel)
    else:
        s = residual + after_feed_forward(h) + parallel
        if mistake == "dropout_after_add":
            s = dropout(s, p, training)
        y = norm("feed_forward", out2.LayerNorm, s)
    return after_layer(y)


# ----------------------------------------------------------------------------------------------
# optimizer.py


def adamw_trajectory(model, groups, x, y, steps, betas, eps, mistake=None):
    """θ after each of ``steps`` AdamW steps (Loshchilov & Hutter 2019, with torch's defaults:
    decoupled decay θ ← θ − lr·λ·θ, bias-corrected moments), on the mean squared error of
    ``model`` on (x, y). ``groups``: [(parameters, lr, λ)]. Returns (steps, n) float64."""
    beta1, beta2 = betas[::-1] if mistake == "betas_swapped" else betas
    state = {id(p): (torch.zeros_like(p), torch.zeros_like(p)) for ps, _, _ in groups for p in ps}
    rows = []
    for t in range(1, steps + 1):
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        with torch.no_grad():
            for params, lr, decay in groups:
                for p in params:
                    g = p.grad.clone()
                    m, v = state[id(p)]
                    if mistake == "l2_decay":
                        g = g + decay * p
                    elif mistake == "decay_not_scaled_by_lr":
                        p -= decay * p
                    elif mistake == "decay_sign":
                        p += lr * decay * p
                    elif mistake != "decay_after_update":
                        p -= lr * decay * p
                    if mistake == "beta1_swapped":
                        m.mul_(1 - beta1).add_(beta1 * g)
                    else:
                        m.mul_(beta1).add_((1 - beta1) * g)
                    g2 = g.abs() if mistake == "v_not_squared" else g * g
                    if mistake == "beta2_swapped":
                        v.mul_(1 - beta2).add_(beta2 * g2)
                    else:
                        v.mul_(beta2).add_((1 - beta2) * g2)
                    tt = t - 1 if mistake == "step_count_from_zero" else t
                    m_hat, v_hat = bias_corrected(m, v, beta1**tt, beta2**tt, mistake)
                    if mistake == "corrected_in_place":  # the corrected moments are stored
                        m.copy_(m_hat)
                        v.copy_(v_hat)
                    if mistake == "eps_inside_sqrt":
                        p -= lr * m_hat / torch.sqrt(v_hat + eps)
                    elif mistake == "no_eps":
                        p -= lr * m_hat / torch.sqrt(v_hat)
                    elif mistake == "v_correction_unrooted":  # √v / (1 − β₂ᵗ): outside the root
                        p -= lr * m_hat / (torch.sqrt(v) / (1 - beta2**tt) + eps)
                    elif mistake == "tf_epsilon_hat":  # Adam's ε̂ form: ε not scaled by √(1 − β₂ᵗ)
                        step = lr * math.sqrt(1 - beta2**tt) / (1 - beta1**tt)
                        p -= step * m / (torch.sqrt(v) + eps)
                    else:
                        p -= lr * m_hat / (torch.sqrt(v_hat) + eps)
                    if mistake == "decay_after_update":
                        p -= lr * decay * p
        rows.append(torch.cat([p.detach().reshape(-1) for ps, _, _ in groups for p in ps]))
    return torch.stack(rows)


def bias_corrected(m, v, beta1_t, beta2_t, mistake=None):
    """m̂ = m / (1 − β₁ᵗ), v̂ = v / (1 − β₂ᵗ) (β₁ᵗ, β₂ᵗ given)."""
    c1, c2 = 1 - beta1_t, 1 - beta2_t
    if mistake == "no_bias_correction":
        c1 = c2 = 1.0
    elif mistake == "only_m_corrected":
        c2 = 1.0
    elif mistake == "only_v_corrected":
        c1 = 1.0
    elif mistake == "corrections_swapped":
        c1, c2 = c2, c1
    return m / c1, v / c2


# ----------------------------------------------------------------------------------------------
# sampling.py


def annealed_alpha(epoch: int, epochs: int, mistake=None) -> float:
    """α(e) = 1 − 0.8·(e − 1)/(E − 1), 1 when E = 1 (where a division by E − 1 raises
    ZeroDivisionError: the check grades it as the NaN of x/0)."""
    if epochs == 1:
        return math.nan if mistake == "no_single_epoch" else 1.0
    if mistake == "epoch_off_by_one":
        return 1.0 - 0.8 * epoch / (epochs - 1)
    if mistake == "divided_by_epochs":
        return 1.0 - 0.8 * (epoch - 1) / epochs
    if mistake == "ends_at_zero":
        return 1.0 - (epoch - 1) / (epochs - 1)
    if mistake == "rising":
        return 0.2 + 0.8 * (epoch - 1) / (epochs - 1)
    return 1.0 - 0.8 * (epoch - 1) / (epochs - 1)


def task_probabilities(sizes: list[int], alpha: float, mistake=None) -> list[float]:
    """p_i = N_i^α / Σ_j N_j^α."""
    if mistake == "alpha_multiplies":
        weights = [n * alpha for n in sizes]
    else:
        weights = [float(n) ** alpha for n in sizes]
    if mistake == "not_normalised":
        return weights
    total = sum(sizes) if mistake == "normalised_by_sizes" else sum(weights)
    total = max(weights) if mistake == "normalised_by_max" else total
    if total == 0:
        return [math.nan] * len(sizes)
    return [w / total for w in weights]


# ----------------------------------------------------------------------------------------------
# plug-ins


def adapter(h, adapter_module, mistake=None):
    """h + W_up · GELU(W_down · h + b_down) + b_up."""
    act = {"relu": torch.relu, "tanh_gelu": gelu_tanh}.get(mistake, gelu)
    z = linear(h, adapter_module.down)
    z = z if mistake in ("no_activation", "gelu_after_up") else act(z)
    out = linear(z, adapter_module.up)
    if mistake == "gelu_after_up":
        out = gelu(out)
    return out if mistake == "no_skip" else h + out


def gelu_tanh(x):
    """GELU's tanh approximation (GPT-2's), ≈ 1e-3 from the exact erf form."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def lhuc(h, rows, layer, mistake=None):
    """h ⊙ 2·σ(r), r = rows[layer]: this layer's row of the task's (L, D) parameter."""
    r = rows[{"first_row": 0, "previous_row": layer - 1}.get(mistake, layer)]
    if mistake == "two_exp":
        return h * (2.0 * torch.exp(r))
    if mistake == "no_factor_2":
        return h * torch.sigmoid(r)
    if mistake == "no_sigmoid":
        return h * 2.0 * r
    if mistake == "sigmoid_of_2r":
        return h * (1.0 / (1.0 + torch.exp(-2.0 * r)))
    if mistake == "exp":
        return h * torch.exp(r)
    if mistake == "added":
        return h + 2.0 / (1.0 + torch.exp(-r))
    return h * (2.0 / (1.0 + torch.exp(-r)))


def low_rank_update(x, update):
    """B A x for row vectors x: (..., d_in) -> (..., d_out), through rank r."""
    return (x @ update.A.T) @ update.B.T


def lora(x, y, update, scale, alpha, rank, p, training, mistake=None):
    """y + (α/r)·B A dropout(x)."""
    if mistake not in ("no_dropout", "dropout_on_update"):
        x = dropout(x, p, training)
    delta = low_rank_update(x, update)
    if mistake == "dropout_on_update":
        delta = dropout(delta, p, training)
    if mistake == "no_scale":
        return y + delta
    if mistake == "scale_one_over_rank":
        return y + delta / rank
    if mistake == "scale_inverted":
        return y + (rank / alpha) * delta
    return y + scale * delta


def lora_merged(weight, update, scale, mistake=None):
    """W + (α/r)·B A."""
    delta = update.B @ update.A
    if mistake == "delta_transposed":
        delta = delta.T if delta.shape[0] == delta.shape[1] else delta
    if mistake == "no_scale":
        return weight + delta
    if mistake == "scaled_twice":  # delta_weight scales by the default α/r, merge scales again
        return weight + scale * (default_scale() * delta)
    return weight + scale * delta


def default_scale() -> float:
    """α/r of LoRA's default settings (16 / 8): what a delta_weight that scales ΔW itself,
    without the plug-in's α and r, multiplies by."""
    from minbert.plugins.lora import LoRASettings

    settings = LoRASettings()
    return settings.alpha / settings.rank


def pal(x, mask, encoder, layers, layer, decoder, dropout_p, training, mistake=None):
    """V_D · g_l(V_E · x): ``layers[layer]`` (a stand-in) plays layer l's projected attention."""
    z = linear(x, encoder)
    if mistake == "no_mask":
        mask = torch.zeros_like(mask)
    p = dropout_p if training and mistake != "no_dropout" else 0.0
    z = layers[0 if mistake == "layer_0_attention" else layer](z, mask, p, True)
    return x + decoder(z) if mistake == "adds_x" else decoder(z)


# ----------------------------------------------------------------------------------------------
# smart.py


def symmetric_kl(p_logits, q_logits, mistake=None):
    """KL(P‖Q) + KL(Q‖P) for P, Q the softmax of the logits; summed over classes, mean over the
    batch."""
    axis = 0 if mistake == "softmax_over_batch" else -1
    log_p, log_q = torch.log_softmax(p_logits, axis), torch.log_softmax(q_logits, axis)
    if mistake == "mean_over_classes":  # F.kl_div(..., reduction="mean"): over B·C elements
        return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).mean()
    if mistake == "one_sided":
        return (log_p.exp() * (log_p - log_q)).sum(-1).mean()
    if mistake == "sum_over_batch":
        return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum()
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()


def perturbation(forward, embeddings, clean, kind, config, seed, mistake=None):
    """Steps 2-3 of SMART written out: δ₀ = Π_ε(σ·ν) with ν drawn from a generator seeded with
    ``seed`` (one (B, T, D) float32 draw per embedding tensor, in order), then K times
    δ ← Π_ε(δ + η·g/‖g‖) per token, g = ∇_δ ℓ_s(f(e), f(e + δ))."""

    def divergence(a, b):
        if kind == "regression":
            return (a - b).square().sum(-1).mean()
        return symmetric_kl(a, b)

    generator = torch.Generator().manual_seed(seed)
    base = [e.detach() for e in embeddings]
    deltas = [  # δ₀ is projected outside the exercise: always
        project(
            config.sigma * torch.randn(e.shape, generator=generator, dtype=torch.float32),
            config.epsilon,
            config.norm,
        )
        for e in base
    ]
    steps = config.ascent_steps + (1 if mistake == "one_step_too_many" else 0)
    for _ in range(steps):
        deltas = [d.detach().requires_grad_(True) for d in deltas]
        with torch.enable_grad():
            perturbed = forward([e + d for e, d in zip(base, deltas)])
            objective = divergence(clean.detach().float(), perturbed)
            grads = torch.autograd.grad(objective, deltas, allow_unused=True)
        deltas = [ascent_step(d, g, config, mistake) for d, g in zip(deltas, grads)]
    return [d.detach() for d in deltas]


def token_norm(t, norm):
    """Each token's ℓ∞ or ℓ2 norm, (B, T, D) -> (B, T, 1)."""
    if norm == "linf":
        return t.abs().amax(-1, keepdim=True)
    return t.square().sum(-1, keepdim=True).sqrt()


def project(d, eps, norm, mistake=None):
    """Π_ε per token: ℓ∞ clamps each coordinate to [−ε, ε], ℓ2 scales a vector longer than ε
    down to length ε; ε = 0 leaves 0."""
    if mistake == "no_projection":
        return d
    if eps == 0:
        return torch.zeros_like(d)
    if norm == "linf":
        return torch.clamp(d, -eps, eps)
    return d * (eps / torch.clamp(token_norm(d, "l2"), min=eps))


def ascent_step(d, g, config, mistake=None):
    """δ ← Π_ε(δ + η·g/‖g‖) per token; no step where g is None (an embedding the outputs do not
    read)."""
    if g is not None:
        sign = -1.0 if mistake == "descent" else 1.0
        d = d.detach() + sign * config.step_size * ascent_direction(g, config.norm, mistake)
    return project(d.detach(), config.epsilon, config.norm, mistake)


def ascent_direction(g, norm, mistake=None):
    """g / ‖g‖ per token, 0 where g is 0 (padding)."""
    if mistake == "not_normalised":
        return g
    if mistake == "global_norm":
        return g / g.square().sum().sqrt().clamp(min=1e-30)
    if mistake == "sign":
        return torch.sign(g)
    if norm == "linf" and mistake != "l2_always":
        size = g.abs().amax(-1, keepdim=True)
    else:
        size = g.square().sum(-1, keepdim=True).sqrt()
    return g / size if mistake == "no_zero_guard" else g / size.clamp(min=1e-30)


# ----------------------------------------------------------------------------------------------
# mlm.py


def mask_tokens(
    input_ids,
    attention_mask,
    special_ids,
    mask_id,
    vocab_size,
    seed,
    probability,
    continuation=None,
    mistake=None,
):
    """BERT's masking, token by token: the three draws of ``mask_tokens``' docstring (u, a, r from
    a generator seeded with ``seed``), then for each position: candidate = real and not special;
    chosen = candidate and u < p (u of the word's first token for a "##" piece); a chosen token
    becomes [MASK] (a < 0.8), r (0.8 ≤ a < 0.9) or stays; label = the original id if chosen."""
    B, T = input_ids.shape
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(B, T, generator=g)
    a = torch.rand(B, T, generator=g)
    if mistake == "draws_swapped":  # the 80/10/10 draw made before the choice's
        u, a = a, u
    r = torch.randint(vocab_size, (B, T), generator=g)
    masked, labels = input_ids.clone(), torch.full_like(input_ids, -100)
    for b in range(B):
        for t in range(T):
            token = int(input_ids[b, t])
            real = bool(attention_mask[b, t])
            candidate = real and (mistake == "specials_chosen" or token not in special_ids)
            if not candidate:
                continue
            start = t
            if continuation is not None and mistake != "whole_word_ignored":
                while start > 0 and bool(continuation[int(input_ids[b, start])]):
                    start -= 1
            if not u[b, start] < probability:
                continue
            unlabelled = (mistake == "labels_at_mask_only" and a[b, t] >= 0.8) or (
                mistake == "kept_unlabelled" and a[b, t] >= 0.9
            )
            if not unlabelled:
                labels[b, t] = token
            if mistake == "all_to_mask" or a[b, t] < 0.8:
                masked[b, t] = mask_id
            elif mistake == "random_and_keep_swapped":
                masked[b, t] = token if a[b, t] < 0.9 else r[b, t]
            elif a[b, t] < 0.9:
                masked[b, t] = r[b, t]
    if mistake == "labels_everywhere":
        labels = input_ids.clone()
    if mistake == "labels_from_masked":
        labels = torch.where(labels != -100, masked, labels)
    if mistake == "labels_zero":
        labels = torch.where(labels != -100, labels, 0)
    return masked, labels


def mlm_loss(logits, labels, mistake=None):
    """−(1/|M|) Σ_{i∈M} log softmax(logits_i)[label_i], M the positions whose label is not −100."""
    if mistake == "mean_of_sentence_means" and labels.dim() > 1:  # each sentence's mean, averaged
        means = [mlm_loss(s, y) for s, y in zip(logits, labels) if (y != -100).any()]
        return torch.stack(means).mean()
    logits, labels = logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1)
    chosen = labels != -100
    log_probs = logits - logits.logsumexp(-1, keepdim=True)
    if mistake == "no_log_softmax":
        log_probs = logits
    if mistake == "softmax_first":  # cross_entropy of probabilities: log-softmax of a softmax
        probs = log_probs.exp()
        log_probs = probs - probs.logsumexp(-1, keepdim=True)
    picked = log_probs[chosen].gather(1, labels[chosen][:, None])[:, 0]
    if mistake == "sum":
        return -picked.sum()
    if mistake == "all_positions":
        return -picked.sum() / len(labels)
    return -picked.mean()


# ----------------------------------------------------------------------------------------------
# tasks/heads.py and tasks/base.py: the multitask heads and each task kind's loss


def mean_pooling(hidden, attention_mask, mistake=None):
    """r_b = Σ_t m_bt h_bt / Σ_t m_bt: (B, T, D) hidden states, (B, T) mask -> (B, D)."""
    m = attention_mask.to(hidden.dtype)
    if mistake == "padding_averaged":
        m = torch.ones_like(m)
    if mistake == "cls_left_out":
        m = torch.cat([torch.zeros_like(m[:, :1]), m[:, 1:]], dim=1)
    total = torch.einsum("btd,bt->bd", hidden, m)
    if mistake == "not_divided":
        return total
    if mistake == "divided_by_length":
        return total / hidden.shape[1]
    if mistake == "cls_left_out":  # a sentence of [CLS] alone: 0 / 0, which the clamp keeps at 0
        return total / m.sum(1, keepdim=True).clamp(min=1.0)
    return total / m.sum(1, keepdim=True)


def pair_head(u, v, head, p, training, mistake=None):
    """W · dropout([u; v; |u − v|; u ⊙ v]) + b, or with the head's hidden layer
    W · dropout(tanh(W_h · dropout(features) + b_h)) + b (``LinearHead``): (B, D) x 2 -> (B, C)."""
    difference = u - v if mistake == "no_abs" else torch.sqrt((u - v) ** 2)
    parts = [u, v, difference, u * v]
    if mistake == "difference_and_product_swapped":
        parts = [u, v, u * v, difference]
    x = dropout(torch.cat(parts, dim=-1), p, training)
    if head.hidden is not None:
        x = dropout(torch.tanh(linear(x, head.hidden)), p, training)
    return linear(x, head.linear)


def cosine_head(u, v, scale, shift, mistake=None):
    """ŷ_b = a · (u_b · v_b) / (‖u_b‖ ‖v_b‖) + b: (B, D) x 2 -> (B, 1)."""
    axis = 0 if mistake == "wrong_axis" else -1
    dot = (u * v).sum(axis)
    cosine = dot if mistake == "dot_product" else dot / (u.norm(dim=axis) * v.norm(dim=axis))
    y = cosine if mistake == "no_affine" else scale * cosine + shift
    return y[:, None]


def cross_entropy(logits, labels, mistake=None):
    """−(1/B) Σ_b log softmax(o_b)[y_b], in float32."""
    o = logits.float()
    if mistake == "softmax_first":  # cross_entropy given probabilities: a second log-softmax
        o = o.softmax(-1)
    log_p = o if mistake == "no_log_softmax" else o - o.logsumexp(-1, keepdim=True)
    return -log_p[torch.arange(len(labels)), labels].mean()


def binary_cross_entropy(logits, labels, mistake=None):
    """−(1/B) Σ_b [y_b log σ(z_b) + (1 − y_b) log(1 − σ(z_b))], z = logits[:, 0], with
    log σ(z) = −softplus(−z) and log(1 − σ(z)) = −softplus(z); in float32."""
    z = logits[:, 0].float()
    if mistake == "sigmoid_first":  # the logits loss given σ(z): a second sigmoid
        z = torch.sigmoid(z)
    y = labels.float()
    softplus = torch.nn.functional.softplus
    return (y * softplus(-z) + (1 - y) * softplus(z)).mean()


def squared_error(scores, labels, mistake=None):
    """(1/B) Σ_b (ŷ_b − y_b)², ŷ = scores[:, 0]; in float32."""
    y = labels.float()
    if mistake == "labels_truncated":  # labels.long(): 3.8 becomes 3
        y = torch.trunc(y)
    if mistake == "broadcast":  # (B, 1) − (B,): every score against every label, (B, B)
        return (scores.float() - y[None, :]).square().mean()
    return (scores[:, 0].float() - y).square().mean()
