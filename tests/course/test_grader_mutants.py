"""The grader against planted mistakes: a mutant corpus of the course exercises.

Each mutant is a student's typical mistake, written as textual replacements inside the solution
regions of one file. Its source is compiled in-process under the file's own path and put in
place of the module while that exercise's own checks run (no subprocess, torch imported once),
so the whole file takes seconds. A mutant must make at least one of its exercise's own checks
FAIL, and where the grader knows the mistake, the failing check's diagnosis must name it.
Correct but different implementations (einsum attention, AdamW as Algorithm 2, out-of-place
updates, ...) must pass every check of their exercise.

This file quotes solution lines, so it is instructor-only (``INSTRUCTOR_ONLY`` of
``course/authoring/scaffold.py``).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import re
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import minbert.plugins
from course import seal
from course.authoring import scaffold
from course.checks import CHECKS
from course.observed import Observed
from course.registry import COURSE_DATA, FAIL, PASS, Context, run_check
from minbert.plugins.kinds import available, plugin_class
from tests.course.forked_pytest import ForkedPytest

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    """``edits`` (old, new) applied to ``path``, each ``old`` once and inside a region of
    ``exercise``; ``named``: a phrase of the diagnosis the grader must print (None: caught is
    enough)."""

    id: str
    exercise: str
    path: str
    edits: tuple[tuple[str, str], ...]
    named: str | None = None


def m(id, exercise, path, *edits, named=None):  # noqa: A002
    return Mutant(id, exercise, path, tuple(edits), named)


BERT, OPT, SAMPLING = "minbert/bert.py", "minbert/optimizer.py", "minbert/sampling.py"
ADAPTER, LHUC, LORA = (
    "minbert/plugins/adapter.py",
    "minbert/plugins/lhuc.py",
    "minbert/plugins/lora.py",
)
PALS, SMART = "minbert/plugins/pals.py", "minbert/smart.py"

SCORES = "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + mask"
PROBS = "probs = F.dropout(scores.softmax(dim=-1), p=dropout_p)"
SPLIT = "t.view(B, T, self.num_heads, D // self.num_heads).transpose(1, 2)"
MERGE = "y.transpose(1, 2).reshape(B, T, D)"
TRAIN_P = "dropout_p = self.dropout_p if self.training else 0.0"
OUT1 = "return self.LayerNorm(x + self.dropout(self.dense(heads)))"
OUT2 = "return self.LayerNorm(x + self.dropout(self.dense(h)))"
CALL_FFN = "return self.output(self.intermediate(a), a)"
DECAY = "p.mul_(1 - lr * weight_decay)"
ALPHA = "return 1.0 - 0.8 * (epoch - 1) / (epochs - 1)"
LORA_ADD = "return y + self.scale * update(self.dropout(x))"
KL = "return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()"

MUTANTS = [
    # embeddings
    m(
        "emb-no-positions",
        "embeddings",
        BERT,
        ("            + self.position_embeddings(positions)\n", ""),
        named="position embeddings are not added",
    ),
    m(
        "emb-no-types",
        "embeddings",
        BERT,
        ("            + self.token_type_embeddings(token_type_ids)\n", ""),
        named="token type embeddings",
    ),
    m(
        "emb-no-norm",
        "embeddings",
        BERT,
        ("return self.dropout(self.LayerNorm(x))", "return self.dropout(x)"),
        named="LayerNorm is missing",
    ),
    m(
        "emb-no-dropout",
        "embeddings",
        BERT,
        ("return self.dropout(self.LayerNorm(x))", "return self.LayerNorm(x)"),
        named="dropout is missing",
    ),
    m(
        "emb-dropout-first",
        "embeddings",
        BERT,
        ("return self.dropout(self.LayerNorm(x))", "return self.LayerNorm(self.dropout(x))"),
        named="before the LayerNorm",
    ),
    m(
        "emb-positions-shifted",
        "embeddings",
        BERT,
        ("self.position_ids[:, :T]", "self.position_ids[:, 1 : T + 1]"),
        named="count from 1",
    ),
    # attention: the equation
    m(
        "att-no-scale",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) + mask"),
        named="not divided by √d_k",
    ),
    m(
        "att-scale-dk",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) / q.size(-1) + mask"),
        named="divided by d_k instead",
    ),
    m(
        "att-softmax-axis",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores.softmax(dim=-2), p=dropout_p)"),
        named="over the queries",
    ),
    m(
        "att-no-mask",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"),
        named="mask M is not added",
    ),
    m(
        "att-mask-sign",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) - mask"),
        named="subtracted",
    ),
    m(
        "att-no-dropout",
        "attention",
        BERT,
        (PROBS, "probs = scores.softmax(dim=-1)"),
        named="dropout on the attention probabilities is missing",
    ),
    m(
        "att-dropout-scores",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores, p=dropout_p).softmax(dim=-1)"),
        named="before the softmax",
    ),
    m(
        "att-dropout-output",
        "attention",
        BERT,
        (PROBS, "probs = scores.softmax(dim=-1)"),
        ("return probs @ v", "return F.dropout(probs @ v, p=dropout_p)"),
        named="applied to the output",
    ),
    # attention: the heads
    m(
        "heads-merge-no-transpose",
        "attention",
        BERT,
        (MERGE, "y.reshape(B, T, D)"),
        named="merged without transposing",
    ),
    m(
        "heads-split-no-transpose",
        "attention",
        BERT,
        (SPLIT, "t.reshape(B, self.num_heads, T, D // self.num_heads)"),
        named="split by reshaping",
    ),
    m(
        "heads-query-key-swapped",
        "attention",
        BERT,
        ("split_heads(self.query(x))", "split_heads(self.key(x))"),
        ("k = split_heads(self.key(x))", "k = split_heads(self.query(x))"),
        named="swapped",
    ),
    m(
        "heads-no-train-dropout",
        "attention",
        BERT,
        (TRAIN_P, "dropout_p = 0.0"),
        named="not passed on in training",
    ),
    m(
        "heads-dropout-in-eval",
        "attention",
        BERT,
        (TRAIN_P, "dropout_p = self.dropout_p"),
        named="dropout still acts in eval mode",
    ),
    m(  # right numbers without plug-ins, but LoRA's hook on self.value never runs
        "heads-value-module-bypassed",
        "attention",
        BERT,
        ("self.value(x)", "F.linear(x, self.value.weight, self.value.bias)"),
    ),
    m(  # a partial mistake: the written-out path is right
        "heads-fused-no-mask",
        "attention",
        BERT,
        ("attn_mask=mask, dropout_p=dropout_p", "dropout_p=dropout_p"),
        named="fused path only",
    ),
    # layer
    m(
        "layer-norm-before-residual",
        "layer",
        BERT,
        (OUT1, "return x + self.LayerNorm(self.dropout(self.dense(heads)))"),
        (OUT2, "return x + self.LayerNorm(self.dropout(self.dense(h)))"),
        named="before the residual",
    ),
    m(
        "layer-no-attention-residual",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(self.dropout(self.dense(heads)))"),
        named="residual around the attention",
    ),
    m(
        "layer-no-ffn-residual",
        "layer",
        BERT,
        (OUT2, "return self.LayerNorm(self.dropout(self.dense(h)))"),
        named="residual around the feed-forward",
    ),
    m(
        "layer-ffn-on-x",
        "layer",
        BERT,
        (CALL_FFN, "return self.output(self.intermediate(x), a)"),
        named="applied to the layer input x",
    ),
    m(
        "layer-ffn-residual-x",
        "layer",
        BERT,
        (CALL_FFN, "return self.output(self.intermediate(a), x)"),
        named="residual adds x",
    ),
    m(
        "layer-no-attention-dropout",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(x + self.dense(heads))"),
        named="attention output projection is missing",
    ),
    m(
        "layer-no-output-dropout",
        "layer",
        BERT,
        (OUT2, "return self.LayerNorm(x + self.dense(h))"),
        named="feed-forward output is missing",
    ),
    m(  # right numbers without plug-ins, but an adapter's hook on self.dropout never runs
        "layer-dropout-module-bypassed",
        "layer",
        BERT,
        (
            OUT2,
            "return self.LayerNorm(x + F.dropout(self.dense(h), self.dropout.p, self.training))",
        ),
    ),
    m(  # right numbers without plug-ins, but a plug-in's hook on self.LayerNorm never runs
        "layer-layernorm-module-bypassed",
        "layer",
        BERT,
        (
            OUT1,
            "n = self.LayerNorm\n        h = x + self.dropout(self.dense(heads))\n"
            "        return F.layer_norm(h, n.normalized_shape, n.weight, n.bias, n.eps)",
        ),
    ),
    # adamw
    m(
        "adamw-no-bias-correction",
        "adamw",
        OPT,
        ("bias_correction1 = 1 - beta1**t", "bias_correction1 = 1.0"),
        ("bias_correction2 = 1 - beta2**t", "bias_correction2 = 1.0"),
        named="bias corrections",
    ),
    m(
        "adamw-l2",
        "adamw",
        OPT,
        (DECAY, "grad = grad.add(p, alpha=weight_decay)"),
        named="added to the gradient (L2)",
    ),
    m(
        "adamw-decay-no-lr",
        "adamw",
        OPT,
        (DECAY, "p.mul_(1 - weight_decay)"),
        named="not scaled by the learning rate",
    ),
    m(
        "adamw-eps-inside",
        "adamw",
        OPT,
        (
            "denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)",
            "denom = (v / bias_correction2 + eps).sqrt()",
        ),
        named="inside the square root",
    ),
    m(
        "adamw-beta1-swapped",
        "adamw",
        OPT,
        ("m.lerp_(grad, 1 - beta1)", "m.lerp_(grad, beta1)"),
        named="β₁ and 1 − β₁ are swapped",
    ),
    m(
        "adamw-v-abs",
        "adamw",
        OPT,
        (
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
            "v.mul_(beta2).add_(grad.abs(), alpha=1 - beta2)",
        ),
        named="|g| instead of g²",
    ),
    m(
        "adamw-decay-after",
        "adamw",
        OPT,
        (
            "                if weight_decay != 0:\n"
            "                    p.mul_(1 - lr * weight_decay)\n",
            "",
        ),
        (
            "p.addcdiv_(m, denom, value=-step_size)",
            "p.addcdiv_(m, denom, value=-step_size)\n                p.mul_(1 - lr * weight_decay)",
        ),
        named="after the Adam update",
    ),
    m(
        "adamw-t-zero",
        "adamw",
        OPT,
        ('t = float(state["step"])', 't = float(state["step"]) - 1'),
        named="step count t is 0",
    ),
    m("adamw-no-lr", "adamw", OPT, ("value=-step_size", "value=-1 / bias_correction1")),
    # sampler
    m(
        "alpha-off-by-one",
        "sampler",
        SAMPLING,
        (ALPHA, "return 1.0 - 0.8 * epoch / (epochs - 1)"),
        named="off by one epoch",
    ),
    m(
        "alpha-over-epochs",
        "sampler",
        SAMPLING,
        (ALPHA, "return 1.0 - 0.8 * (epoch - 1) / epochs"),
        named="divides by E",
    ),
    m(
        "alpha-to-zero",
        "sampler",
        SAMPLING,
        (ALPHA, "return 1.0 - (epoch - 1) / (epochs - 1)"),
        named="from 1 to 0 instead",
    ),
    m(  # a ZeroDivisionError at E = 1: graded as NaN, named by the NaN it gives
        "alpha-single-epoch",
        "sampler",
        SAMPLING,
        ("    if epochs == 1:\n        return 1.0\n", ""),
        named="α divides by E − 1, which is 0 when E = 1: return 1.0 there",
    ),
    m(
        "probs-not-normalised",
        "sampler",
        SAMPLING,
        ("return {name: weight / total for name, weight in weights.items()}", "return weights"),
        named="not divided by their sum",
    ),
    m(
        "probs-by-sizes",
        "sampler",
        SAMPLING,
        ("total = sum(weights.values())", "total = sum(sizes.values())"),
        named="divided by Σ N_j instead",
    ),
    m(  # α = 0 divides 0 by 0 (ZeroDivisionError): graded as NaN, named by the NaN it gives
        "probs-alpha-times",
        "sampler",
        SAMPLING,
        ("float(size) ** alpha", "float(size) * alpha"),
        named="α multiplies the sizes",
    ),
    # adapter, LHUC, LoRA, PALs
    m(
        "adapter-no-skip",
        "adapter",
        ADAPTER,
        ("return h + self.up(z)", "return self.up(z)"),
        named="no skip connection",
    ),
    m(
        "adapter-no-gelu",
        "adapter",
        ADAPTER,
        ("z = gelu(self.down(h))", "z = self.down(h)"),
        named="GELU between the down and up",
    ),
    m(
        "adapter-relu",
        "adapter",
        ADAPTER,
        ("z = gelu(self.down(h))", "z = torch.relu(self.down(h))"),
        named="ReLU is used",
    ),
    m(
        "lhuc-no-2",
        "lhuc",
        LHUC,
        ("h * (2.0 * torch.sigmoid(r))", "h * torch.sigmoid(r)"),
        named="factor 2",
    ),
    m(
        "lhuc-no-sigmoid",
        "lhuc",
        LHUC,
        ("h * (2.0 * torch.sigmoid(r))", "h * (2.0 * r)"),
        named="sigmoid of r is missing",
    ),
    m("lhuc-first-layer", "lhuc", LHUC, ("r[layer]", "r[0]"), named="layer 0's r (r[0])"),
    m(
        "lora-no-scale",
        "lora",
        LORA,
        (LORA_ADD, "return y + update(self.dropout(x))"),
        named="not scaled by α/r",
    ),
    m(
        "lora-scale-inverted",
        "lora",
        LORA,
        (LORA_ADD, "return y + (self.rank / self.alpha) * update(self.dropout(x))"),
        named="r/α instead",
    ),
    m(
        "lora-no-dropout",
        "lora",
        LORA,
        (LORA_ADD, "return y + self.scale * update(x)"),
        named="dropout on the update's input",
    ),
    m(  # the intermediate map is not square: named before the given merge code raises
        "lora-delta-transposed",
        "lora",
        LORA,
        ("return self.B @ self.A", "return (self.B @ self.A).T"),
        named="ΔW is transposed",
    ),
    m(  # LoRA's default α/r (16/8 = 2) baked into delta_weight, then merge scales by α/r
        "lora-delta-scaled",
        "lora",
        LORA,
        ("return self.B @ self.A", "return 2 * self.B @ self.A"),
        named="ΔW is scaled twice",
    ),
    m(
        "pals-no-mask",
        "pals",
        PALS,
        (
            "z = pal.layers[layer](z, mask, dropout_p, self.use_fast_path)",
            "z = pal.layers[layer](z, torch.zeros_like(mask), dropout_p, self.use_fast_path)",
        ),
        named="mask is not passed",
    ),
    m("pals-no-dropout", "pals", PALS, (TRAIN_P, "dropout_p = 0.0"), named="dropout is not passed"),
    m(
        "pals-dropout-in-eval",
        "pals",
        PALS,
        (TRAIN_P, "dropout_p = self.dropout_p"),
        named="dropout still acts in eval mode",
    ),
    m(
        "pals-no-encoder",
        "pals",
        PALS,
        ("z = pal.encoder(x)", "z = x"),
        named="without the encoder V_E",
    ),
    # SMART
    m(
        "kl-one-sided",
        "smart",
        SMART,
        (KL, "return (log_p.exp() * (log_p - log_q)).sum(-1).mean()"),
        named="one-sided",
    ),
    m(
        "kl-batch-sum",
        "smart",
        SMART,
        (KL, "return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum()"),
        named="summed over the batch",
    ),
    m(
        "smart-not-normalised",
        "smart",
        SMART,
        ("config.step_size * _normalise(grad, config.norm)", "config.step_size * grad"),
        named="not normalised",
    ),
    m(
        "smart-global-norm",
        "smart",
        SMART,
        (
            "config.step_size * _normalise(grad, config.norm)",
            "config.step_size * grad / grad.norm()",
        ),
        named="whole tensor",
    ),
    m(
        "smart-no-projection",
        "smart",
        SMART,
        ("return project(delta, config.epsilon, config.norm)", "return delta"),
        named="not projected",
    ),
    m(
        "smart-descent",
        "smart",
        SMART,
        ("delta = delta + config.step_size", "delta = delta - config.step_size"),
        named="descent",
    ),
    m(
        "smart-extra-step",
        "smart",
        SMART,
        ("range(config.ascent_steps)", "range(config.ascent_steps + 1)"),
        named="one ascent step too many",
    ),
]
# Mistakes students make, from a survey of minBERT assignments and their forums (CS224N's default
# project, the plug-in papers' reimplementations): each with the known mistake the grader names.
# Those marked "input" pass the checks' older inputs (no padding in SMART, no caller under
# torch.no_grad(), no unused embedding, no backward through the attention) and fail the new ones.
SMART_STEP = "config.step_size * _normalise(grad, config.norm)"
BC1, BC2 = "bias_correction1 = 1 - beta1**t", "bias_correction2 = 1 - beta2**t"
STEP_SIZE, DENOM = (
    "step_size = lr / bias_correction1",
    "denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)",
)
ADAPTER_Z, ADAPTER_OUT = "z = gelu(self.down(h))", "return h + self.up(z)"
LHUC_SCALE = "h * (2.0 * torch.sigmoid(r))"
LOG_P = "log_p = F.log_softmax(p_logits.float(), dim=-1)"
LOG_Q = "log_q = F.log_softmax(q_logits.float(), dim=-1)"
ASCENT = """\
        with torch.enable_grad():  # the ascent needs gradients even if the caller disabled them
            perturbed = forward_from_embeddings([e + d for e, d in zip(base, deltas, strict=True)])
            ascent_objective = divergence(target, perturbed, kind)
            grads = torch.autograd.grad(ascent_objective, deltas, allow_unused=True)
"""

MUTANTS += [
    # embeddings
    m(
        "emb-norm-word-only",
        "embeddings",
        BERT,
        (
            "            self.word_embeddings(input_ids)\n",
            "            self.LayerNorm(self.word_embeddings(input_ids))\n",
        ),
        ("return self.dropout(self.LayerNorm(x))", "return self.dropout(x)"),
        named="word embeddings alone",
    ),
    m(  # a shape error (T tokens, all max_position_embeddings positions), named by its sizes
        "emb-positions-uncut",
        "embeddings",
        BERT,
        ("self.position_ids[:, :T]", "self.position_ids"),
        named="not cut to the sentence length T",
    ),
    m(  # as above, the whole table of position embeddings
        "emb-position-table",
        "embeddings",
        BERT,
        ("self.position_embeddings(positions)", "self.position_embeddings.weight"),
        named="not cut to the sentence length T",
    ),
    m(  # a partial mistake: right for the single sentence of the batch, wrong for the pairs
        "emb-types-ignored",
        "embeddings",
        BERT,
        (
            "self.token_type_embeddings(token_type_ids)",
            "self.token_type_embeddings(torch.zeros_like(token_type_ids))",
        ),
        named="type-0 embedding",
    ),
    # attention: the equation
    m(  # gives NaN for a sentence without padding: named by the NaN in the same places
        "att-mask-as-keep",
        "attention",
        BERT,
        (
            SCORES,
            "scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)))"
            '.masked_fill(mask == 0, float("-inf"))',
        ),
        named="read as 1 = keep",
    ),
    m(
        "att-mask-on-queries",
        "attention",
        BERT,
        (
            SCORES,
            "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + mask.transpose(-2, -1)",
        ),
        named="along the queries",
    ),
    m(
        "att-scale-after-softmax",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) + mask"),
        (PROBS, "probs = F.dropout(scores.softmax(dim=-1) / math.sqrt(q.size(-1)), p=dropout_p)"),
        named="after the softmax instead of before",
    ),
    m(
        "att-softmax-dim-2",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores.softmax(dim=2), p=dropout_p)"),
        named="over the queries",
    ),
    m(
        "att-mask-on-probabilities",
        "attention",
        BERT,
        (SCORES, "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))"),
        (PROBS, "probs = F.dropout(scores.softmax(dim=-1) + mask, p=dropout_p)"),
        named="after the softmax",
    ),
    m(
        "att-dropout-training-false",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores.softmax(dim=-1), p=dropout_p, training=False)"),
        named="dropout on the attention probabilities is missing",
    ),
    m(  # input: right numbers, but the in-place division breaks the backward pass of training
        "att-inplace-softmax",
        "attention",
        BERT,
        (
            PROBS,
            "probs = scores.exp()\n    probs /= probs.sum(-1, keepdim=True)\n"
            "    probs = F.dropout(probs, p=dropout_p)",
        ),
    ),
    # attention: the heads
    m(
        "heads-value-uses-key",
        "attention",
        BERT,
        ("v = split_heads(self.value(x))", "v = split_heads(self.key(x))"),
        named="projected with the key",
    ),
    m(  # eval mode: the fused op's own dropout, which no recorder sees, is traced by its call
        "heads-fused-dropout-in-eval",
        "attention",
        BERT,
        ("attn_mask=mask, dropout_p=dropout_p", "attn_mask=mask, dropout_p=self.dropout_p"),
        named="dropout still acts in eval mode",
    ),
    m(  # a partial mistake: the fused path only
        "heads-fused-scale-one",
        "attention",
        BERT,
        ("attn_mask=mask, dropout_p=dropout_p", "attn_mask=mask, dropout_p=dropout_p, scale=1.0"),
        named="scale=1.0 is passed to F.scaled_dot_product_attention",
    ),
    m(
        "heads-merge-view",
        "attention",
        BERT,
        (MERGE, "y.contiguous().view(B, T, D)"),
        named="merged without transposing",
    ),
    # layer
    m(
        "layer-residual-adds-heads",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(heads + self.dropout(self.dense(heads)))"),
        named="adds the heads",
    ),
    m(  # a partial mistake: the feed-forward sub-layer only
        "layer-norm-before-residual-ffn-only",
        "layer",
        BERT,
        (OUT2, "return x + self.LayerNorm(self.dropout(self.dense(h)))"),
        named="feed-forward sub-layer only",
    ),
    m(  # a partial mistake: the attention sub-layer only
        "layer-norm-before-residual-attention-only",
        "layer",
        BERT,
        (OUT1, "return x + self.LayerNorm(self.dropout(self.dense(heads)))"),
        named="attention sub-layer only",
    ),
    m(  # input: right numbers, but the in-place add overwrites a, which the backward pass needs
        "layer-inplace-ffn-residual",
        "layer",
        BERT,
        (OUT2, "x += self.dropout(self.dense(h))\n        return self.LayerNorm(x)"),
    ),
    m(
        "layer-dropout-after-add",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(self.dropout(x + self.dense(heads)))"),
        (OUT2, "return self.LayerNorm(self.dropout(x + self.dense(h)))"),
        named="after the residual add",
    ),
    # adamw
    m(  # a partial mistake: one moment
        "adamw-only-m-corrected",
        "adamw",
        OPT,
        (DENOM, "denom = v.sqrt().add_(eps)"),
        named="only the first moment",
    ),
    m(  # a partial mistake: one moment
        "adamw-only-v-corrected",
        "adamw",
        OPT,
        (STEP_SIZE, "step_size = lr"),
        named="only the second moment",
    ),
    m(
        "adamw-corrections-swapped",
        "adamw",
        OPT,
        (BC1, "bias_correction1 = 1 - beta2**t"),
        (BC2, "bias_correction2 = 1 - beta1**t"),
        named="bias corrections are swapped",
    ),
    m(
        "adamw-tf-epsilon-hat",
        "adamw",
        OPT,
        (STEP_SIZE, "step_size = lr * math.sqrt(bias_correction2) / bias_correction1"),
        (DENOM, "denom = v.sqrt().add_(eps)"),
        named="ε̂ form",
    ),
    m(
        "adamw-decay-sign",
        "adamw",
        OPT,
        (DECAY, "p.mul_(1 + lr * weight_decay)"),
        named="wrong sign",
    ),
    m(
        "adamw-beta2-swapped",
        "adamw",
        OPT,
        (
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
            "v.mul_(1 - beta2).addcmul_(grad, grad, value=beta2)",
        ),
        named="β₂ and 1 − β₂ are swapped",
    ),
    m(
        "adamw-corrected-in-place",
        "adamw",
        OPT,
        (
            STEP_SIZE,
            "m.div_(bias_correction1)\n                v.div_(bias_correction2)\n"
            "                step_size = lr",
        ),
        (DENOM, "denom = v.sqrt().add_(eps)"),
        named="stored moments in place",
    ),
    m(
        "adamw-no-eps",
        "adamw",
        OPT,
        (DENOM, "denom = v.sqrt() / math.sqrt(bias_correction2)"),
        named="ε is missing",
    ),
    m(
        "adamw-l2-on-grad",
        "adamw",
        OPT,
        (DECAY, "grad = grad + weight_decay * p"),
        named="added to the gradient (L2)",
    ),
    m(
        "adamw-no-bias-correction-folded",
        "adamw",
        OPT,
        (STEP_SIZE, "step_size = lr"),
        (DENOM, "denom = v.sqrt().add_(eps)"),
        named="bias corrections 1 − β₁ᵗ and 1 − β₂ᵗ are missing",
    ),
    m(
        "adamw-decay-sub",
        "adamw",
        OPT,
        (DECAY, "p.sub_(weight_decay * p)"),
        named="not scaled by the learning rate",
    ),
    # sampler
    m(
        "alpha-rising",
        "sampler",
        SAMPLING,
        (ALPHA, "return 0.2 + 0.8 * (epoch - 1) / (epochs - 1)"),
        named="rises from 0.2 to 1",
    ),
    m(
        "alpha-rising-linspace",
        "sampler",
        SAMPLING,
        (ALPHA, "return float(np.linspace(0.2, 1.0, epochs)[epoch - 1])"),
        named="rises from 0.2 to 1",
    ),
    # adapter, LHUC, LoRA
    m(
        "adapter-tanh-gelu",
        "adapter",
        ADAPTER,
        (ADAPTER_Z, 'z = torch.nn.functional.gelu(self.down(h), approximate="tanh")'),
        named="tanh approximation",
    ),
    m(
        "adapter-gelu-after-up",
        "adapter",
        ADAPTER,
        (ADAPTER_Z, "z = self.down(h)"),
        (ADAPTER_OUT, "return h + gelu(self.up(z))"),
        named="after the up-projection",
    ),
    m(
        "adapter-no-skip-inline",
        "adapter",
        ADAPTER,
        (ADAPTER_Z, "z = self.down(h)"),
        (ADAPTER_OUT, "return self.up(gelu(z))"),
        named="no skip connection",
    ),
    m("lhuc-sigmoid-2r", "lhuc", LHUC, (LHUC_SCALE, "h * torch.sigmoid(2.0 * r)"), named="σ(2r)"),
    m("lhuc-added", "lhuc", LHUC, (LHUC_SCALE, "h + 2.0 * torch.sigmoid(r)"), named="added to h"),
    m("lhuc-exp-scale", "lhuc", LHUC, (LHUC_SCALE, "h * torch.exp(r)"), named="exp(r)"),
    m("lhuc-2-exp", "lhuc", LHUC, (LHUC_SCALE, "h * (2.0 * torch.exp(r))"), named="2·exp(r)"),
    m(
        "lora-dropout-on-update",
        "lora",
        LORA,
        (LORA_ADD, "return y + self.scale * self.dropout(update(x))"),
        named="output B A x",
    ),
    m(
        "lora-scale-one-over-rank",
        "lora",
        LORA,
        (LORA_ADD, "return y + update(self.dropout(x)) / self.rank"),
        named="1/r instead",
    ),
    # PALs
    m(
        "pals-first-layer",
        "pals",
        PALS,
        ("pal.layers[layer]", "pal.layers[0]"),
        named="layer 0's projected attention",
    ),
    m(
        "pals-adds-x",
        "pals",
        PALS,
        ("return pal.decoder(z)", "return x + pal.decoder(z)"),
        named="returned added to x",
    ),
    # SMART
    m(
        "kl-div-mean",
        "smart",
        SMART,
        (
            KL,
            'return F.kl_div(log_q, log_p, reduction="mean", log_target=True) + F.kl_div(\n'
            '        log_p, log_q, reduction="mean", log_target=True\n    )',
        ),
        named='reduction="mean"',
    ),
    m(
        "kl-div-one-direction",
        "smart",
        SMART,
        (KL, 'return F.kl_div(log_q, log_p, reduction="batchmean", log_target=True)'),
        named="one-sided",
    ),
    m(
        "kl-softmax-over-batch",
        "smart",
        SMART,
        (LOG_P, "log_p = F.log_softmax(p_logits.float(), dim=0)"),
        (LOG_Q, "log_q = F.log_softmax(q_logits.float(), dim=0)"),
        named="over the batch (dim 0)",
    ),
    m(
        "kl-batch-sum-of-sums",
        "smart",
        SMART,
        (KL, "return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).sum()"),
        named="summed over the batch",
    ),
    m(  # input: the old problem had no padding, so no zero gradient; NaN named by its places
        "smart-no-zero-guard",
        "smart",
        SMART,
        (
            SMART_STEP,
            "config.step_size * grad / (\n"
            '            grad.abs().amax(-1, keepdim=True) if config.norm == "linf"\n'
            "            else grad.norm(dim=-1, keepdim=True)\n        )",
        ),
        named="divides by a zero norm",
    ),
    m(
        "smart-sign",
        "smart",
        SMART,
        (SMART_STEP, "config.step_size * grad.sign()"),
        named="sign(g)",
    ),
    m(
        "smart-l2-always",
        "smart",
        SMART,
        (SMART_STEP, "config.step_size * grad / grad.norm(dim=-1, keepdim=True).clamp_min(1e-30)"),
        named="ℓ2 norm whatever",
    ),
    m(  # input: the old check never called it under torch.no_grad()
        "smart-no-enable-grad",
        "smart",
        SMART,
        (ASCENT, "".join(line[4:] + "\n" for line in ASCENT.splitlines()[1:])),
        named="torch.enable_grad()",
    ),
    m(  # input: the old check had no embedding the outputs ignore
        "smart-unused-not-allowed",
        "smart",
        SMART,
        (
            "torch.autograd.grad(ascent_objective, deltas, allow_unused=True)",
            "torch.autograd.grad(ascent_objective, deltas)",
        ),
        named="allow_unused=True",
    ),
    m(  # input: as above, the None gradient of an unused embedding reaches the step
        "smart-step-on-none",
        "smart",
        SMART,
        (
            "    if grad is not None:\n        delta = delta + " + SMART_STEP + "\n",
            "    delta = delta + " + SMART_STEP + "\n",
        ),
        named="take a zero step there",
    ),
]

MLM = "minbert/mlm.py"
CANDIDATES = (
    "candidates = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids))"
)
LABELS = "labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))"
TO_MASK = "chosen & (action < 0.8), torch.full_like(input_ids, mask_id)"
TO_RANDOM = "masked = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, masked)"
LOSS = "F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)"
DRAW_U = "draw = torch.rand(B, T, generator=generator)"
DRAW_A = "action = torch.rand(B, T, generator=generator)  # < 0.8: [MASK]; < 0.9: random; else keep"
RANDOM_IDS = "random_ids = torch.randint(vocab_size, (B, T), generator=generator)"

MLM_MUTANTS = [
    m(  # GUIDE.md warns of this one: the 10% kept are still predicted
        "masking-kept-unlabelled",
        "masking",
        MLM,
        (LABELS, "pass"),
        (
            RANDOM_IDS,
            RANDOM_IDS + "\n    kept = torch.full_like(input_ids, IGNORE)\n"
            "    labels = torch.where(chosen & (action < 0.9), input_ids, kept)",
        ),
        named="the 10% kept) are not labelled",
    ),
    m(
        "masking-draws-swapped",
        "masking",
        MLM,
        (DRAW_U, "action = torch.rand(B, T, generator=generator)\n    " + DRAW_U),
        (DRAW_A, "pass"),
        named="in another order than mask_tokens' docstring says",
    ),
    m(
        "mask-specials",
        "masking",
        MLM,
        (CANDIDATES, "candidates = attention_mask.bool()"),
        named="special tokens",
    ),
    m(
        "mask-all-to-mask",
        "masking",
        MLM,
        (TO_RANDOM, ""),
        (TO_MASK, "chosen, torch.full_like(input_ids, mask_id)"),
        named="no 80/10/10 split",
    ),
    m(
        "mask-random-keep-swapped",
        "masking",
        MLM,
        (TO_RANDOM, "masked = torch.where(chosen & (action >= 0.9), random_ids, masked)"),
        named="random and 10% kept cases are swapped",
    ),
    m(
        "mask-labels-everywhere",
        "masking",
        MLM,
        (LABELS, "labels = input_ids.clone()"),
        named="original ids everywhere",
    ),
    m(
        "mask-labels-at-mask-only",
        "masking",
        MLM,
        (LABELS, ""),
        (
            "    return masked, labels\n",
            "    labels = torch.where(chosen & (action < 0.8), input_ids, "
            "torch.full_like(input_ids, IGNORE))\n    return masked, labels\n",
        ),
        named="only the tokens replaced by [MASK]",
    ),
    m(
        "mask-whole-word-ignored",
        "masking",
        MLM,
        (
            "chosen = candidates & (torch.gather(draw, 1, starts) < probability)",
            "chosen = candidates & (draw < probability)",
        ),
        named="each piece is chosen on its own",
    ),
    m(
        "mask-draws-reordered",
        "masking",
        MLM,
        (
            "    action = torch.rand(B, T, generator=generator)"
            "  # < 0.8: [MASK]; < 0.9: random; else keep\n"
            "    random_ids = torch.randint(vocab_size, (B, T), generator=generator)\n",
            "    random_ids = torch.randint(vocab_size, (B, T), generator=generator)\n"
            "    action = torch.rand(B, T, generator=generator)\n",
        ),
    ),
    m(
        "mask-padding",
        "masking",
        MLM,
        (CANDIDATES, "candidates = ~torch.isin(input_ids, torch.tensor(special_ids[1:]))"),
    ),
    m(
        "loss-all-positions",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), "
            'reduction="sum") / labels.numel()',
        ),
        named="averaged over all positions",
    ),
    m(
        "loss-sum",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), "
            'reduction="sum")',
        ),
        named="summed over the masked positions",
    ),
    m(
        "loss-no-log-softmax",
        "mlm-loss",
        MLM,
        (f"return {LOSS}", "return F.nll_loss(logits.flatten(0, -2).float(), labels.flatten())"),
        named="no log-softmax",
    ),
    m(
        "mask-labels-from-masked",
        "masking",
        MLM,
        (LABELS, ""),
        (
            "    return masked, labels\n",
            "    labels = torch.where(chosen, masked, torch.full_like(input_ids, IGNORE))\n"
            "    return masked, labels\n",
        ),
        named="taken from the masked ids",
    ),
    m(
        "mask-labels-zero",
        "masking",
        MLM,
        (LABELS, "labels = torch.where(chosen, input_ids, torch.zeros_like(input_ids))"),
        named="labelled 0 instead of −100",
    ),
    m(
        "loss-softmax-first",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.cross_entropy(logits.flatten(0, -2).float().softmax(-1), labels.flatten(), "
            "ignore_index=IGNORE)",
        ),
        named="softmax before cross_entropy",
    ),
    m(
        "loss-all-positions-ignored",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), "
            'ignore_index=IGNORE, reduction="sum") / labels.numel()',
        ),
        named="averaged over all positions",
    ),
    m(  # each sentence's mean, averaged: a sentence with few masked positions counts as much
        "loss-mean-of-sentence-means",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "losses = F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), "
            'ignore_index=IGNORE, reduction="none").view(labels.shape)\n'
            "    chosen = (labels != IGNORE).float()\n"
            "    return (losses.sum(-1) / chosen.sum(-1)).mean()",
        ),
        named="mean of per-sentence means",
    ),
]
MUTANTS += MLM_MUTANTS

# The multitask heads and each task kind's loss.
HEADS, BASE = "tasks/heads.py", "tasks/base.py"
POOL = "return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)"
FEATURES = "torch.cat([u, v, (u - v).abs(), u * v], dim=-1)"
COSINE = "cosine = F.cosine_similarity(u, v, dim=-1)"
AFFINE = "return (self.scale * cosine + self.shift).unsqueeze(-1)"
CE = "return F.cross_entropy(outputs.float(), labels)"
BCE = "return F.binary_cross_entropy_with_logits(outputs[:, 0].float(), labels.float())"
MSE = "return F.mse_loss(outputs[:, 0].float(), labels.float())"

HEADS_MUTANTS = [
    m(
        "pooling-padding-averaged",
        "pooling",
        HEADS,
        (POOL, "return hidden.mean(1)"),
        named="the padding is averaged in",
    ),
    m(
        "pooling-divided-by-length",
        "pooling",
        HEADS,
        (POOL, "return (hidden * m).sum(1) / hidden.shape[1]"),
        named="divided by T (the padded length)",
    ),
    m(
        "pooling-not-divided",
        "pooling",
        HEADS,
        (POOL, "return (hidden * m).sum(1)"),
        named="is not divided by the number of real tokens",
    ),
    m(  # the mask as given, (B, T): broadcasts against (B, T, D) only when T == D, else raises
        "pooling-mask-not-unsqueezed",
        "pooling",
        HEADS,
        (
            "m = attention_mask.unsqueeze(-1).to(hidden.dtype)",
            "m = attention_mask.to(hidden.dtype)",
        ),
        named="has no last axis",
    ),
    m(
        "pair-no-abs",
        "pair-features",
        HEADS,
        (FEATURES, "torch.cat([u, v, u - v, u * v], dim=-1)"),
        named="without the absolute value",
    ),
    m(
        "pair-features-reordered",
        "pair-features",
        HEADS,
        (FEATURES, "torch.cat([u, v, u * v, (u - v).abs()], dim=-1)"),
        named="the features are in another order",
    ),
    m(  # the head's own layers bypassed: no dropout in training, no hidden layer at all
        "pair-linear-only",
        "pair-features",
        HEADS,
        (f"return super().forward({FEATURES})", f"return self.linear({FEATURES})"),
        named="not straight to its last layer",
    ),
    m(
        "cosine-wrong-dim",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = F.cosine_similarity(u, v, dim=0)"),
        named="over the wrong dimension",
    ),
    m(
        "cosine-dot-product",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = (u * v).sum(-1)"),
        named="a dot product, not the cosine",
    ),
    m(
        "cosine-no-affine",
        "cosine-head",
        HEADS,
        (AFFINE, "return cosine.unsqueeze(-1)"),
        named="without a·cos + b",
    ),
    m("cosine-flat", "cosine-head", HEADS, (AFFINE, "return self.scale * cosine + self.shift")),
    m(
        "loss-ce-softmax-first",
        "task-losses",
        BASE,
        (CE, "return F.cross_entropy(outputs.float().softmax(-1), labels)"),
        named="MultiClassTask: cross_entropy is given probabilities",
    ),
    m(
        "loss-ce-no-log-softmax",
        "task-losses",
        BASE,
        (CE, "return F.nll_loss(outputs.float(), labels)"),
        named="nll_loss of the logits",
    ),
    m(
        "loss-bce-sigmoid-first",
        "task-losses",
        BASE,
        (
            BCE,
            "return F.binary_cross_entropy_with_logits(torch.sigmoid(outputs[:, 0].float()), "
            "labels.float())",
        ),
        named="a sigmoid before binary_cross_entropy_with_logits",
    ),
    m(
        "loss-mse-labels-long",
        "task-losses",
        BASE,
        (MSE, "return F.mse_loss(outputs[:, 0].float(), labels.long())"),
        named="cast to an integer type (long)",
    ),
    m(
        "loss-mse-broadcast",
        "task-losses",
        BASE,
        (MSE, "return F.mse_loss(outputs.float(), labels.float())"),
        named="broadcasts to (B, B)",
    ),
    m(  # float class ids: cross_entropy raises (it takes long ids, or (B, C) probabilities)
        "loss-ce-float-labels",
        "task-losses",
        BASE,
        (CE, "return F.cross_entropy(outputs.float(), labels.float())"),
        named="labels of the wrong dtype",
    ),
    m(  # long labels: binary_cross_entropy_with_logits raises
        "loss-bce-long-labels",
        "task-losses",
        BASE,
        (
            BCE,
            "return F.binary_cross_entropy_with_logits(outputs[:, 0].float(), labels.long())",
        ),
        named="labels of the wrong dtype",
    ),
]
MUTANTS += HEADS_MUTANTS

# Mistakes that leave every output right and cut the graph: the code cannot train. Each
# exercise whose code takes part in training has at least one; the gradient check
# (course/gradients.py) names what gets no gradient or a wrong one.
CUT = "cuts the graph"
GRADIENT_MUTANTS = [
    m(
        "grad-emb-words-detached",
        "embeddings",
        BERT,
        ("self.word_embeddings(input_ids)", "self.word_embeddings(input_ids).detach()"),
        named=CUT,
    ),
    m(
        "grad-att-v-detached",
        "attention",
        BERT,
        ("return probs @ v", "return probs @ v.detach()"),
        named=CUT,
    ),
    m(
        "grad-att-queries-detached",
        "attention",
        BERT,
        ("q = split_heads(self.query(x))", "q = split_heads(self.query(x)).detach()"),
        named=CUT,
    ),
    m(
        "grad-layer-ffn-detached",
        "layer",
        BERT,
        (OUT2, "return self.LayerNorm(x + self.dropout(self.dense(h)).detach())"),
        named=CUT,
    ),
    m(
        "grad-adapter-bottleneck-detached",
        "adapter",
        ADAPTER,
        ("z = gelu(self.down(h))", "z = gelu(self.down(h)).detach()"),
        named=CUT,
    ),
    m(
        "grad-lhuc-scale-detached",
        "lhuc",
        LHUC,
        ("r = self.by_task[task].r[layer]", "r = self.by_task[task].r[layer].detach()"),
        named=CUT,
    ),
    m(
        "grad-lhuc-no-grad-block",
        "lhuc",
        LHUC,
        (
            "r = self.by_task[task].r[layer]",
            "with torch.no_grad():\n            r = self.by_task[task].r[layer] * 1.0",
        ),
        named=CUT,
    ),
    m(
        "grad-lora-update-detached",
        "lora",
        LORA,
        (LORA_ADD, "return y + self.scale * update(self.dropout(x)).detach()"),
        named=CUT,
    ),
    m(
        "grad-lora-b-data",
        "lora",
        LORA,
        ("F.linear(F.linear(x, self.A), self.B)", "F.linear(F.linear(x, self.A), self.B.data)"),
        named=CUT,
    ),
    m(
        "grad-pals-encoder-detached",
        "pals",
        PALS,
        ("z = pal.encoder(x)", "z = pal.encoder(x).detach()"),
        named=CUT,
    ),
    m("grad-kl-q-detached", "smart", SMART, (LOG_Q, LOG_Q + ".detach()"), named=CUT),
    m(
        "smart-nan-not-zero",
        "smart",
        SMART,
        ("g = torch.nan_to_num(g, nan=0.0, posinf=0.0, neginf=0.0)", "g = g"),
        named="not counted as 0",
    ),
    m(
        "grad-mlm-logits-detached",
        "mlm-loss",
        MLM,
        (LOSS, LOSS.replace("logits.flatten", "logits.detach().flatten")),
        named=CUT,
    ),
    m(
        "grad-pooling-hidden-detached",
        "pooling",
        HEADS,
        ("return (hidden * m).sum(1)", "return (hidden.detach() * m).sum(1)"),
        named=CUT,
    ),
    m(
        "grad-pair-features-detached",
        "pair-features",
        HEADS,
        ("(u - v).abs(), u * v], dim=-1)", "(u - v).abs(), u * v], dim=-1).detach()"),
        named=CUT,
    ),
    m(
        "grad-cosine-item",
        "cosine-head",
        HEADS,
        (
            "self.scale * cosine + self.shift",
            "self.scale.item() * cosine + self.shift.item()",
        ),
        named=CUT,
    ),
    m(
        "grad-mse-rebuilt",
        "task-losses",
        BASE,
        (
            "return F.mse_loss(outputs[:, 0].float(), labels.float())",
            "return F.mse_loss(torch.tensor(outputs[:, 0].tolist()), labels.float())",
        ),
        named=CUT,
    ),
]
MUTANTS += GRADIENT_MUTANTS

# Typical mistakes first planted here unnamed ("differs most at ..."), then put in the catalogue of
# known mistakes: each named by its description.
CATALOGUED_MUTANTS = [
    m(
        "probabilities-over-max",
        "sampler",
        SAMPLING,
        ("total = sum(weights.values())", "total = max(weights.values())"),
        named="divided by the largest weight",
    ),
    m(
        "adamw-v-correction-unrooted",
        "adamw",
        OPT,
        ("math.sqrt(bias_correction2)", "bias_correction2"),
        named="v's bias correction is outside the square root",
    ),
    m(
        "adamw-betas-swapped",
        "adamw",
        OPT,
        ("m.lerp_(grad, 1 - beta1)", "m.lerp_(grad, 1 - beta2)"),
        (
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
            "v.mul_(beta1).addcmul_(grad, grad, value=1 - beta1)",
        ),
        ("bias_correction1 = 1 - beta1**t", "bias_correction1 = 1 - beta2**t"),
        ("bias_correction2 = 1 - beta2**t", "bias_correction2 = 1 - beta1**t"),
        named="β₁ and β₂ are swapped",
    ),
    m(
        "pooling-without-cls",
        "pooling",
        HEADS,
        (
            "m = attention_mask.unsqueeze(-1).to(hidden.dtype)",
            "m = attention_mask.unsqueeze(-1).to(hidden.dtype).clone()\n        m[:, 0] = 0",
        ),
        named="[CLS] (position 0) is left out",
    ),
    m(
        "lhuc-previous-row",
        "lhuc",
        LHUC,
        ("r[layer]", "r[layer - 1]"),
        named="the row of the layer before it",
    ),
]
MUTANTS += CATALOGUED_MUTANTS

# Mistakes the catalogue of known mistakes does not hold: caught, and where the error has a shape
# (course/shapes.py: k times the expected, the square root of it, shifted, transposed) named by it.
SCALED = "the expected everywhere"
SHAPED_MUTANTS = [
    m(
        "shape-ce-summed",
        "task-losses",
        BASE,
        (CE, "return F.cross_entropy(outputs.float(), labels, reduction='sum')"),
        named="6 times " + SCALED,
    ),
    m(
        "shape-rmse",
        "task-losses",
        BASE,
        (MSE, "return F.mse_loss(outputs[:, 0].float(), labels.float()).sqrt()"),
        named="square root of the expected",
    ),
    m(
        "shape-kl-halved",
        "smart",
        SMART,
        (KL, KL.replace("return (", "return 0.5 * (")),
        named="1/2 of " + SCALED,
    ),
    m(
        "shape-cosine-scaled-twice",
        "cosine-head",
        HEADS,
        ("self.scale * cosine + self.shift", "2 * self.scale * cosine + self.shift"),
        named="your output minus the shift b is 2 times what it should be",
    ),
]
MUTANTS += SHAPED_MUTANTS

# A fresh set, written after the catalogue and the shapes above and left as it was found: each
# is caught; which of them the grader names is measured, not asserted
# (benchmarks/diagnosis_coverage.py, benchmarks/results/diagnosis-coverage.md).
FRESH_MUTANTS = [
    m(
        "fresh-scale-by-model-dim",
        "attention",
        BERT,
        ("math.sqrt(q.size(-1))", "math.sqrt(q.size(-1) * q.size(1))"),
    ),
    m(
        "fresh-positions-reversed",
        "embeddings",
        BERT,
        ("positions = self.position_ids[:, :T]", "positions = self.position_ids[:, :T].flip(-1)"),
    ),
    m(
        "fresh-alpha-inverse",
        "sampler",
        SAMPLING,
        ("float(size) ** alpha", "float(size) ** (1 / alpha)"),
    ),
    m("fresh-alpha-no-offset", "sampler", SAMPLING, (ALPHA, "return 1.0 - 0.8 * epoch / epochs")),
    m(
        "fresh-adapter-minus",
        "adapter",
        ADAPTER,
        ("return h + self.up(z)", "return h - self.up(z)"),
    ),
    m("fresh-lhuc-one-plus", "lhuc", LHUC, (LHUC_SCALE, "h * (1.0 + torch.sigmoid(r))")),
    m("fresh-pool-plus-one", "pooling", HEADS, ("m.sum(1).clamp(min=1.0)", "(m.sum(1) + 1)")),
    m(
        "fresh-pair-sum",
        "pair-features",
        HEADS,
        (FEATURES, "torch.cat([u, v, (u - v).abs(), u + v], dim=-1)"),
    ),
    m(
        "fresh-cosine-self",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = F.cosine_similarity(u, u, dim=-1)"),
    ),
    m(
        "fresh-l1-loss",
        "task-losses",
        BASE,
        (MSE, "return F.l1_loss(outputs[:, 0].float(), labels.float())"),
    ),
    m("fresh-pals-residual", "pals", PALS, ("return pal.decoder(z)", "return pal.decoder(z) + x")),
    m(
        "fresh-kl-one-way",
        "smart",
        SMART,
        (KL, "return (log_p.exp() * (log_p - log_q)).sum(-1).mean()"),
    ),
    m(
        "fresh-project-epsilon-squared",
        "smart",
        SMART,
        (
            'delta * (epsilon / _token_norm(delta, "l2")',
            'delta * (epsilon**2 / _token_norm(delta, "l2")',
        ),
    ),
    m(
        "fresh-adamw-v-unrooted-denominator",
        "adamw",
        OPT,
        (
            "denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)",
            "denom = (v / bias_correction2).add_(eps)",
        ),
    ),
]
MUTANTS += FRESH_MUTANTS

# A second fresh set, written after every shape of course/shapes.py (the first fresh set was
# written before two of them) and left as it was found: typical mistakes, one or two an exercise,
# none of them in the corpus above. Measured like the first (benchmarks/diagnosis_coverage.py).
FRESH_MUTANTS_2 = [
    m("fresh2-mask-multiplied", "attention", BERT, (SCORES, SCORES.replace("+ mask", "* mask"))),
    m(
        "fresh2-scale-by-length",
        "attention",
        BERT,
        ("math.sqrt(q.size(-1))", "math.sqrt(q.size(-2))"),
    ),
    m(
        "fresh2-types-after-norm",
        "embeddings",
        BERT,
        ("            + self.token_type_embeddings(token_type_ids)\n", ""),
        (
            "return self.dropout(self.LayerNorm(x))",
            "return self.dropout(self.LayerNorm(x) + self.token_type_embeddings(token_type_ids))",
        ),
    ),
    m(
        "fresh2-norm-of-x-only",
        "layer",
        BERT,
        (
            "return self.LayerNorm(x + self.dropout(self.dense(heads)))",
            "return self.LayerNorm(x) + self.dropout(self.dense(heads))",
        ),
    ),
    m(
        "fresh2-eps-inside-root",
        "adamw",
        OPT,
        (
            "denom = (v.sqrt() / math.sqrt(bias_correction2)).add_(eps)",
            "denom = (v + eps).sqrt() / math.sqrt(bias_correction2)",
        ),
    ),
    m(
        "fresh2-total-is-count",
        "sampler",
        SAMPLING,
        ("total = sum(weights.values())", "total = len(weights)"),
    ),
    m("fresh2-gelu-before-down", "adapter", ADAPTER, (ADAPTER_Z, "z = self.down(gelu(h))")),
    m("fresh2-lhuc-tanh", "lhuc", LHUC, ("2.0 * torch.sigmoid(r)", "2.0 * torch.tanh(r)")),
    m("fresh2-lora-on-output", "lora", LORA, (LORA_ADD, LORA_ADD.replace("(x))", "(y))"))),
    m(
        "fresh2-pals-no-mask",
        "pals",
        PALS,
        ("z = pal.layers[layer](z, mask,", "z = pal.layers[layer](z, None,"),
    ),
    m(
        "fresh2-project-always-scales",
        "smart",
        SMART,
        (
            'return delta * (epsilon / _token_norm(delta, "l2").clamp_min(epsilon))',
            'return delta * (epsilon / _token_norm(delta, "l2"))',
        ),
    ),
    m(
        "fresh2-normalise-whole-tensor",
        "smart",
        SMART,
        (
            "return g / _token_norm(g, norm).clamp_min(torch.finfo(g.dtype).tiny)",
            "return g / g.norm().clamp_min(torch.finfo(g.dtype).tiny)",
        ),
    ),
    m(
        "fresh2-draw-inverted",
        "masking",
        MLM,
        ("candidates & (draw < probability)", "candidates & (draw > probability)"),
    ),
    m(
        "fresh2-mlm-mean-over-all",
        "mlm-loss",
        MLM,
        (
            "labels.flatten(), ignore_index=IGNORE)",
            'labels.flatten(), ignore_index=IGNORE, reduction="none").mean()',
        ),
    ),
    m(
        "fresh2-pool-batch-count",
        "pooling",
        HEADS,
        ("m.sum(1).clamp(min=1.0)", "m.sum().clamp(min=1.0)"),
    ),
    m("fresh2-pair-squared", "pair-features", HEADS, ("(u - v).abs()", "(u - v) ** 2")),
    m(
        "fresh2-scale-shift-swapped",
        "cosine-head",
        HEADS,
        ("self.scale * cosine + self.shift", "self.shift * cosine + self.scale"),
    ),
    m(
        "fresh2-similarity-scaled-to-one",
        "task-losses",
        BASE,
        (MSE, MSE.replace("labels.float())", "labels.float() / 5)")),
    ),
]
MUTANTS += FRESH_MUTANTS_2

# A third fresh set, written blind: by someone who read the solutions and the corpus's format
# but not the grader's diagnoses, its catalogue of known mistakes or its shapes; left as found.
# Measured like the first two (benchmarks/diagnosis_coverage.py).
FRESH_MUTANTS_3 = [
    m(  # the token types looked up in the wrong table, the position embeddings
        "fresh3-types-in-position-table",
        "embeddings",
        BERT,
        (
            "self.token_type_embeddings(token_type_ids)",
            "self.position_embeddings(token_type_ids)",
        ),
    ),
    m(  # the softmax over the heads axis of (B, nh, T, T)
        "fresh3-softmax-over-heads",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores.softmax(dim=1), p=dropout_p)"),
    ),
    m(
        "fresh3-scale-multiplied",
        "attention",
        BERT,
        (SCORES, SCORES.replace("/ math.sqrt", "* math.sqrt")),
    ),
    m(  # dropout_p taken as a keep probability (TensorFlow's keep_prob): p = 1 − dropout_p
        "fresh3-dropout-keep-prob",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(scores.softmax(dim=-1), p=1 - dropout_p)"),
    ),
    m(  # the residual added in the layer as well as in BertSelfOutput
        "fresh3-attention-residual-twice",
        "layer",
        BERT,
        ("a = self.attention(x, mask)", "a = x + self.attention(x, mask)"),
    ),
    m(  # dropout on the input of the dense projection instead of on its output
        "fresh3-dropout-before-dense",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(x + self.dense(self.dropout(heads)))"),
        (OUT2, "return self.LayerNorm(x + self.dense(self.dropout(h)))"),
    ),
    m(  # m ← β₁·m + g: the (1 − β₁) factor left out
        "fresh3-adamw-m-no-one-minus",
        "adamw",
        OPT,
        ("m.lerp_(grad, 1 - beta1)", "m.mul_(beta1).add_(grad)"),
    ),
    m(  # t = step + 1 computed but never stored: every step is bias-corrected as the first
        "fresh3-adamw-step-not-stored",
        "adamw",
        OPT,
        (
            'state["step"] += 1\n                t = float(state["step"])',
            't = float(state["step"]) + 1',
        ),
    ),
    m(  # the update added instead of subtracted: gradient ascent
        "fresh3-adamw-update-sign",
        "adamw",
        OPT,
        ("p.addcdiv_(m, denom, value=-step_size)", "p.addcdiv_(m, denom, value=step_size)"),
    ),
    m(  # Σ N_j^α read as (Σ N_j)^α
        "fresh3-power-of-total",
        "sampler",
        SAMPLING,
        ("total = sum(weights.values())", "total = sum(sizes.values()) ** alpha"),
    ),
    m(
        "fresh3-adapter-gelu-on-sum",
        "adapter",
        ADAPTER,
        (ADAPTER_OUT, "return gelu(h + self.up(z))"),
    ),
    m(  # σ taken as a softmax over the D units: the amplitudes sum to 2
        "fresh3-lhuc-softmax",
        "lhuc",
        LHUC,
        (LHUC_SCALE, "h * (2.0 * torch.softmax(r, dim=-1))"),
    ),
    m(  # α/r scales the base output too
        "fresh3-lora-scales-base",
        "lora",
        LORA,
        (LORA_ADD, "return self.scale * (y + update(self.dropout(x)))"),
    ),
    m(  # a GELU of one's own after the encoder V_E
        "fresh3-pals-gelu-after-encoder",
        "pals",
        PALS,
        ("z = pal.encoder(x)", "z = gelu(pal.encoder(x))"),
    ),
    m(  # the l2 rule for both norms: linf scales a token down by its largest entry, no clamp
        "fresh3-project-linf-rescaled",
        "smart",
        SMART,
        (
            '    if norm == "linf":\n        return delta.clamp(-epsilon, epsilon)\n'
            '    return delta * (epsilon / _token_norm(delta, "l2").clamp_min(epsilon))',
            "    return delta * (epsilon / _token_norm(delta, norm).clamp_min(epsilon))",
        ),
    ),
    m(  # off by one: K − 1 ascent steps (none for the default K = 1)
        "fresh3-smart-one-step-short",
        "smart",
        SMART,
        ("range(config.ascent_steps)", "range(config.ascent_steps - 1)"),
    ),
    m(  # mean over the classes, sum over the batch
        "fresh3-kl-reductions-swapped",
        "smart",
        SMART,
        (KL, KL.replace(".sum(-1).mean()", ".mean(-1).sum()")),
    ),
    m(  # the random replacement forgets `chosen`: 10% of every token replaced
        "fresh3-random-unchosen",
        "masking",
        MLM,
        (TO_RANDOM, "masked = torch.where((action >= 0.8) & (action < 0.9), random_ids, masked)"),
    ),
    m(  # no lower bound: the [MASK]ed 80% are overwritten with random ids too
        "fresh3-random-overwrites-mask",
        "masking",
        MLM,
        (TO_RANDOM, "masked = torch.where(chosen & (action < 0.9), random_ids, masked)"),
    ),
    m(  # the log-softmax over the positions, not the vocabulary
        "fresh3-log-softmax-over-positions",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.nll_loss(logits.flatten(0, -2).float().log_softmax(dim=0), "
            "labels.flatten(), ignore_index=IGNORE)",
        ),
    ),
    m(  # sentence-transformers' mean_sqrt_len_tokens: divided by √(number of tokens)
        "fresh3-pool-sqrt-length",
        "pooling",
        HEADS,
        ("m.sum(1).clamp(min=1.0)", "m.sum(1).clamp(min=1.0).sqrt()"),
    ),
    m(  # |u − v| read as |u| − |v|
        "fresh3-pair-abs-difference",
        "pair-features",
        HEADS,
        ("(u - v).abs()", "(u.abs() - v.abs())"),
    ),
    m(  # cosine written out with the norms of the whole batch, not of each vector
        "fresh3-cosine-batch-norms",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = (u * v).sum(-1) / (u.norm() * v.norm())"),
    ),
    m(  # logits and targets swapped
        "fresh3-bce-arguments-swapped",
        "task-losses",
        BASE,
        (BCE, "return F.binary_cross_entropy_with_logits(labels.float(), outputs[:, 0].float())"),
    ),
]
MUTANTS += FRESH_MUTANTS_3
# A fourth fresh set, written blind after the operator mistakes were built: by someone who read
# the solutions and the corpus's format but nothing of the grader; left as found. Measured like
# the others (benchmarks/diagnosis_coverage.py).
FRESH_MUTANTS_4 = [
    m(  # copy-paste slip: the token types looked up in the word-embedding table
        "fresh4-types-in-word-table",
        "embeddings",
        BERT,
        (
            "self.token_type_embeddings(token_type_ids)",
            "self.word_embeddings(token_type_ids)",
        ),
    ),
    m(  # copy-paste slip in the equation: Q Qᵀ instead of Q Kᵀ
        "fresh4-scores-q-q",
        "attention",
        BERT,
        (SCORES, SCORES.replace("q @ k.transpose", "q @ q.transpose")),
    ),
    m(  # the training test inverted: attention dropout in eval mode, none in training
        "fresh4-dropout-condition-inverted",
        "attention",
        BERT,
        (TRAIN_P, "dropout_p = 0.0 if self.training else self.dropout_p"),
    ),
    m(  # heads merged with the Kᵀ habit: the last two axes transposed, not heads and tokens
        "fresh4-merge-transpose-last-axes",
        "attention",
        BERT,
        (MERGE, "y.transpose(-2, -1).reshape(B, T, D)"),
    ),
    m(  # the attention output projection applied to the residual x instead of the heads
        "fresh4-dense-of-x",
        "layer",
        BERT,
        (OUT1, "return self.LayerNorm(x + self.dropout(self.dense(x)))"),
    ),
    m(  # the second moment of the (just updated) first moment m, not of the gradient g
        "fresh4-adamw-v-of-m",
        "adamw",
        OPT,
        (
            "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
            "v.mul_(beta2).addcmul_(m, m, value=1 - beta2)",
        ),
    ),
    m(  # the update steps along the raw gradient g instead of the first moment m
        "fresh4-adamw-update-uses-grad",
        "adamw",
        OPT,
        ("p.addcdiv_(m, denom, value=-step_size)", "p.addcdiv_(grad, denom, value=-step_size)"),
    ),
    m(  # "from 1 to 0.2" read as a fall of 0.2: α ends at 0.8
        "fresh4-alpha-ends-at-0-8",
        "sampler",
        SAMPLING,
        (ALPHA, "return 1.0 - 0.2 * (epoch - 1) / (epochs - 1)"),
    ),
    m(  # GELU mistaken for SiLU (swish), x·σ(x)
        "fresh4-adapter-silu",
        "adapter",
        ADAPTER,
        (ADAPTER_Z, "z = torch.nn.functional.silu(self.down(h))"),
    ),
    m(  # σ written out with the sign of the exponent lost: 2 / (1 + e^r) = 2·σ(−r)
        "fresh4-lhuc-sigmoid-sign",
        "lhuc",
        LHUC,
        (LHUC_SCALE, "h * (2.0 / (1.0 + torch.exp(r)))"),
    ),
    m(  # "scaled by α": the update multiplied by α, not α/r
        "fresh4-lora-scale-alpha-only",
        "lora",
        LORA,
        (LORA_ADD, "return y + self.alpha * update(self.dropout(x))"),
    ),
    m(  # g_l called but its result not assigned: V_D · V_E · x, the attention lost
        "fresh4-pals-attention-discarded",
        "pals",
        PALS,
        (
            "z = pal.layers[layer](z, mask, dropout_p, self.use_fast_path)",
            "pal.layers[layer](z, mask, dropout_p, self.use_fast_path)",
        ),
    ),
    m(  # copy-paste slip: log Q from p_logits, so the divergence is always 0
        "fresh4-kl-q-from-p",
        "smart",
        SMART,
        (LOG_Q, "log_q = F.log_softmax(p_logits.float(), dim=-1)"),
    ),
    m(  # clamp_max for clamp_min: long vectors kept, short ones stretched to length ε
        "fresh4-project-clamp-max",
        "smart",
        SMART,
        (
            'return delta * (epsilon / _token_norm(delta, "l2").clamp_min(epsilon))',
            'return delta * (epsilon / _token_norm(delta, "l2").clamp_max(epsilon))',
        ),
    ),
    m(  # η and ε confused: the ascent step is ε long instead of η
        "fresh4-ascent-step-epsilon",
        "smart",
        SMART,
        (SMART_STEP, "config.epsilon * _normalise(grad, config.norm)"),
    ),
    m(  # generator= forgotten on the last draw: the random ids do not follow the seed
        "fresh4-random-ids-unseeded",
        "masking",
        MLM,
        (RANDOM_IDS, "random_ids = torch.randint(vocab_size, (B, T))"),
    ),
    m(  # whole-word branch without `candidates &`: specials and padding can be chosen
        "fresh4-whole-word-not-candidates",
        "masking",
        MLM,
        (
            "chosen = candidates & (torch.gather(draw, 1, starts) < probability)",
            "chosen = torch.gather(draw, 1, starts) < probability",
        ),
    ),
    m(  # written out, −(1/|M|) Σ log softmax with its minus sign lost: the negated loss
        "fresh4-mlm-minus-sign-lost",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "flat, y = logits.flatten(0, -2).float(), labels.flatten()\n"
            "    keep = y != IGNORE\n"
            "    return flat[keep].log_softmax(-1).gather(1, y[keep][:, None]).mean()",
        ),
    ),
    m(  # the attention mask read as 1 = padding: the mean over the padding
        "fresh4-pool-mask-inverted",
        "pooling",
        HEADS,
        (
            "m = attention_mask.unsqueeze(-1).to(hidden.dtype)",
            "m = (1 - attention_mask).unsqueeze(-1).to(hidden.dtype)",
        ),
    ),
    m(  # copy-paste slip: [u; u; |u − v|; u ⊙ v]
        "fresh4-pair-u-twice",
        "pair-features",
        HEADS,
        (FEATURES, "torch.cat([u, u, (u - v).abs(), u * v], dim=-1)"),
    ),
    m(  # the cosine written out with ‖u‖² ‖v‖² (no square roots) in the denominator
        "fresh4-cosine-squared-norms",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = (u * v).sum(-1) / ((u * u).sum(-1) * (v * v).sum(-1))"),
    ),
    m(  # brackets misplaced: a · (cos + b)
        "fresh4-cosine-shift-inside",
        "cosine-head",
        HEADS,
        (AFFINE, "return (self.scale * (cosine + self.shift)).unsqueeze(-1)"),
    ),
    m(  # the ½(ŷ − y)² convention: half the mean squared error
        "fresh4-mse-halved",
        "task-losses",
        BASE,
        (MSE, "return 0.5 * F.mse_loss(outputs[:, 0].float(), labels.float())"),
    ),
    m(  # the log-softmax over the batch axis (dim 0), not over the classes
        "fresh4-ce-log-softmax-over-batch",
        "task-losses",
        BASE,
        (CE, "return F.nll_loss(outputs.float().log_softmax(dim=0), labels)"),
    ),
]
MUTANTS += FRESH_MUTANTS_4
# A fifth fresh set, written blind after the value, activation and complement operators were
# built (by someone who read the solutions and the corpus's format but nothing of the grader);
# left as found. Measured like the others (benchmarks/diagnosis_coverage.py).
FRESH_MUTANTS_5 = [
    m(  # the Transformer habit: word embeddings multiplied by √d_model before the sum
        "fresh5-words-scaled-sqrt-d",
        "embeddings",
        BERT,
        (
            "self.word_embeddings(input_ids)\n",
            "self.word_embeddings(input_ids) * math.sqrt(self.word_embeddings.embedding_dim)\n",
        ),
    ),
    m(  # head split with the last two sizes in the wrong order: (hs, nh) for (nh, hs)
        "fresh5-split-sizes-swapped",
        "attention",
        BERT,
        (SPLIT, "t.view(B, T, D // self.num_heads, self.num_heads).transpose(1, 2)"),
    ),
    m(  # the values weighted by Pᵀ: each key's column of probabilities instead of each query's row
        "fresh5-probs-transposed",
        "attention",
        BERT,
        ("return probs @ v", "return probs.transpose(-2, -1) @ v"),
    ),
    m(  # the output projection put after the add & norm instead of before the residual
        "fresh5-dense-after-norm",
        "layer",
        BERT,
        (OUT1, "return self.dense(self.LayerNorm(x + self.dropout(heads)))"),
    ),
    m(  # the two sub-layers in the wrong order: feed-forward first, attention on its output
        "fresh5-ffn-before-attention",
        "layer",
        BERT,
        (
            "a = self.attention(x, mask)\n        return self.output(self.intermediate(a), a)",
            "f = self.output(self.intermediate(x), x)\n        return self.attention(f, mask)",
        ),
    ),
    m(  # the second-moment correction multiplied in instead of divided out
        "fresh5-adamw-v-correction-multiplied",
        "adamw",
        OPT,
        (DENOM, "denom = (v.sqrt() * math.sqrt(bias_correction2)).add_(eps)"),
    ),
    m(  # the square root of the v correction carried over to the m correction too
        "fresh5-adamw-m-correction-rooted",
        "adamw",
        OPT,
        (STEP_SIZE, "step_size = lr / math.sqrt(bias_correction1)"),
    ),
    m(  # α applied to the normalised proportions instead of to the sizes before normalising
        "fresh5-alpha-after-normalising",
        "sampler",
        SAMPLING,
        ("float(size) ** alpha", "float(size)"),
        ("weight / total for", "(weight / total) ** alpha for"),
    ),
    m(  # GELU written by hand as the sigmoid approximation x·σ(1.702x)
        "fresh5-adapter-quick-gelu",
        "adapter",
        ADAPTER,
        (ADAPTER_Z, "z = self.down(h) * torch.sigmoid(1.702 * self.down(h))"),
    ),
    m(  # layers counted from 1 when reading r: layer l scaled by row l + 1
        "fresh5-lhuc-next-row",
        "lhuc",
        LHUC,
        ("r[layer]", "r[layer + 1]"),
    ),
    m(  # B A x written with the factors transposed and multiplied the other way round
        "fresh5-lora-forward-transposed",
        "lora",
        LORA,
        ("F.linear(F.linear(x, self.A), self.B)", "F.linear(x, self.A.T @ self.B.T)"),
    ),
    m(  # a residual added inside the PAL space around the projected attention
        "fresh5-pals-inner-residual",
        "pals",
        PALS,
        (
            "z = pal.layers[layer](z, mask, dropout_p, self.use_fast_path)",
            "z = z + pal.layers[layer](z, mask, dropout_p, self.use_fast_path)",
        ),
    ),
    m(  # the log-ratio written the other way round: the symmetric KL comes out negated
        "fresh5-kl-log-ratio-reversed",
        "smart",
        SMART,
        (KL, KL.replace("(log_p - log_q)", "(log_q - log_p)")),
    ),
    m(  # the ℓ∞ projection clamps only from above: large negative coordinates stay
        "fresh5-project-linf-upper-only",
        "smart",
        SMART,
        ("return delta.clamp(-epsilon, epsilon)", "return delta.clamp(max=epsilon)"),
    ),
    m(  # projected before the ascent step instead of after it: δ leaves the ε-ball
        "fresh5-ascent-project-first",
        "smart",
        SMART,
        (
            "delta = delta.detach()\n    if grad is not None:\n"
            "        delta = delta + " + SMART_STEP + "\n"
            "    return project(delta, config.epsilon, config.norm)",
            "delta = project(delta.detach(), config.epsilon, config.norm)\n"
            "    if grad is not None:\n"
            "        delta = delta + " + SMART_STEP + "\n"
            "    return delta",
        ),
    ),
    m(  # the "~" forgotten: only the special tokens are candidates for masking
        "fresh5-candidates-specials-only",
        "masking",
        MLM,
        ("~torch.isin(", "torch.isin("),
    ),
    m(  # whole-word starts with the where's branches swapped: pieces keep their own position
        "fresh5-word-starts-inverted",
        "masking",
        MLM,
        ("torch.where(pieces, 0, positions)", "torch.where(pieces, positions, 0)"),
    ),
    m(  # IGNORE labels clamped to 0 to avoid an index error: every position scored, as class 0
        "fresh5-mlm-ignore-clamped",
        "mlm-loss",
        MLM,
        (
            LOSS,
            LOSS.replace("labels.flatten(), ignore_index=IGNORE", "labels.flatten().clamp(min=0)"),
        ),
    ),
    m(  # the masked sum taken over the hidden axis instead of the tokens
        "fresh5-pool-sum-over-hidden",
        "pooling",
        HEADS,
        ("(hidden * m).sum(1)", "(hidden * m).sum(-1)"),
    ),
    m(  # a precedence slip: u − |v| instead of |u − v|
        "fresh5-pair-abs-precedence",
        "pair-features",
        HEADS,
        ("(u - v).abs()", "u - v.abs()"),
    ),
    m(  # cosine distance 1 − cos used where the similarity is meant
        "fresh5-cosine-distance",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = 1 - F.cosine_similarity(u, v, dim=-1)"),
    ),
    m(  # unsqueezed on the wrong side: a (1, B) row instead of a (B, 1) column
        "fresh5-cosine-row",
        "cosine-head",
        HEADS,
        (AFFINE, AFFINE.replace("unsqueeze(-1)", "unsqueeze(0)")),
    ),
    m(  # the summed cross-entropy divided by the number of classes, not the batch size
        "fresh5-ce-over-classes",
        "task-losses",
        BASE,
        (CE, 'return F.cross_entropy(outputs.float(), labels, reduction="sum") / outputs.size(1)'),
    ),
    m(  # the scores squashed into 0..5 with 5·σ(ŷ) before the squared error
        "fresh5-mse-sigmoid-squashed",
        "task-losses",
        BASE,
        (MSE, "return F.mse_loss(5 * torch.sigmoid(outputs[:, 0].float()), labels.float())"),
    ),
]
MUTANTS += FRESH_MUTANTS_5

ALGORITHM_2 = """\
                state["step"] += 1
                t = float(state["step"])
                m.mul_(beta1).add_(grad, alpha=1 - beta1)
                v.mul_(beta2).add_(grad * grad, alpha=1 - beta2)
                m_hat = m / (1 - beta1**t)
                v_hat = v / (1 - beta2**t)
                p.sub_(lr * (m_hat / (v_hat.sqrt() + eps) + weight_decay * p))
"""
OUT_OF_PLACE = """\
                state["step"] += 1
                t = float(state["step"])
                m.copy_(beta1 * m + (1 - beta1) * grad)
                v.copy_(beta2 * v + (1 - beta2) * grad**2)
                decayed = p * (1 - lr * weight_decay)
                p.copy_(decayed - lr * (m / (1 - beta1**t)) / ((v / (1 - beta2**t)).sqrt() + eps))
"""

CORRECT = [
    m(
        "einsum-attention",
        "attention",
        BERT,
        (SCORES, 'scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / q.size(-1) ** 0.5 + mask'),
    ),
    m(
        "softmax-function",
        "attention",
        BERT,
        (PROBS, "probs = F.dropout(torch.softmax(scores, -1), dropout_p, True)"),
    ),
    m(
        "heads-permute",
        "attention",
        BERT,
        (SPLIT, "t.reshape(B, T, self.num_heads, -1).permute(0, 2, 1, 3)"),
        (MERGE, "y.permute(0, 2, 1, 3).contiguous().view(B, T, D)"),
    ),
    m(
        "embeddings-functional",
        "embeddings",
        BERT,
        (
            "return self.dropout(self.LayerNorm(x))",
            "n = self.LayerNorm\n"
            "        x = F.layer_norm(x, (x.shape[-1],), n.weight, n.bias, n.eps)\n"
            "        return F.dropout(x, self.dropout.p, self.training)",
        ),
    ),
    m(
        "layer-commuted",
        "layer",
        BERT,
        (OUT2, "return self.LayerNorm(self.dropout(self.dense(h)) + x)"),
        (OUT1, "return self.LayerNorm(self.dropout(self.dense(heads)) + x)"),
    ),
    m("adamw-algorithm-2", "adamw", OPT, ("body", ALGORITHM_2)),
    m("adamw-out-of-place", "adamw", OPT, ("body", OUT_OF_PLACE)),
    m(
        "probs-numpy",
        "sampler",
        SAMPLING,
        (
            "weights = {name: float(size) ** alpha for name, size in sizes.items()}",
            "w = np.array(list(sizes.values()), dtype=np.float64) ** alpha\n"
            "    weights = dict(zip(sizes, w.tolist()))",
        ),
    ),
    m(
        "alpha-linspace",
        "sampler",
        SAMPLING,
        (ALPHA, "return float(np.linspace(1.0, 0.2, epochs)[epoch - 1])"),
    ),
    m(
        "adapter-commuted",
        "adapter",
        ADAPTER,
        ("return h + self.up(z)", "return self.up(z) + h"),
        ("z = gelu(self.down(h))", "z = torch.nn.functional.gelu(self.down(h))"),
    ),
    m("lhuc-exp", "lhuc", LHUC, ("h * (2.0 * torch.sigmoid(r))", "2 * h / (1 + torch.exp(-r))")),
    m(
        "lora-matmul",
        "lora",
        LORA,
        ("return F.linear(F.linear(x, self.A), self.B)", "return x @ self.A.T @ self.B.T"),
        ("return self.B @ self.A", 'return torch.einsum("or,ri->oi", self.B, self.A)'),
        (LORA_ADD, "return y + update(self.dropout(x)) * (self.alpha / self.rank)"),
    ),
    m(
        "kl-two-terms",
        "smart",
        SMART,
        (
            KL,
            "p, q = log_p.exp(), log_q.exp()\n"
            "    return ((p * (log_p - log_q)).sum(-1) + (q * (log_q - log_p)).sum(-1)).mean()",
        ),
    ),
    m(
        "mask-loop-free-variant",
        "masking",
        MLM,
        (
            CANDIDATES,
            "special = torch.zeros_like("
            "input_ids, dtype=torch.bool)\n    for i in special_ids:\n"
            "        special |= input_ids == i\n"
            "    candidates = (attention_mask == 1) & ~special",
        ),
    ),
    m(
        "loss-written-out",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "flat, y = logits.reshape(-1, "
            "logits.shape[-1]).float(), labels.reshape(-1)\n    keep = y != IGNORE\n"
            "    logp = torch.log_softmax(flat[keep], dim=-1)\n"
            "    return -logp.gather(1, y[keep][:, None]).mean()",
        ),
    ),
    m(
        "pals-dropout-product",
        "pals",
        PALS,
        (TRAIN_P, "dropout_p = float(self.training) * self.dropout_p"),
    ),
    # each head on its own: dropout called once per head on (B, 1, T, T), not once on (B, nh, T, T)
    m(
        "heads-loop-written-out",
        "attention",
        BERT,
        (
            "y = scaled_dot_product_attention(q, k, v, mask, dropout_p)",
            "y = torch.cat([scaled_dot_product_attention(q[:, h : h + 1], k[:, h : h + 1], "
            "v[:, h : h + 1], mask, dropout_p) for h in range(self.num_heads)], dim=1)",
        ),
    ),
    m(
        "heads-loop-fused",
        "attention",
        BERT,
        (
            "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)",
            "y = torch.cat([F.scaled_dot_product_attention(q[:, [h]], k[:, [h]], v[:, [h]], "
            "attn_mask=mask, dropout_p=dropout_p) for h in range(self.num_heads)], dim=1)",
        ),
    ),
    # the equation itself per head, on (B, T, T) slices
    m(
        "attention-loop-over-heads",
        "attention",
        BERT,
        (
            SCORES,
            "outs = []\n"
            "    for h in range(q.size(1)):\n"
            "        m_h = mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))[:, h]\n"
            "        s = q[:, h] @ k[:, h].transpose(-2, -1) / math.sqrt(q.size(-1)) + m_h\n"
            "        outs.append(F.dropout(s.softmax(dim=-1), p=dropout_p) @ v[:, h])\n"
            "    return torch.stack(outs, 1)",
        ),
    ),
    m(
        "lora-merged-matrix",
        "lora",
        LORA,
        (
            LORA_ADD,
            "if not self.training:  # through the merged matrix W + (α/r)·B A\n"
            "            merged = module.weight + self.scale * update.delta_weight()\n"
            "            return F.linear(x, merged, module.bias)\n"
            "        return y + F.linear(self.dropout(x), self.scale * update.delta_weight())",
        ),
    ),
    m(
        "attention-masked-fill",
        "attention",
        BERT,
        (
            SCORES,
            "scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill("
            'mask != 0, float("-inf"))',
        ),
    ),
    m(
        "attention-einsum-both",
        "attention",
        BERT,
        (SCORES, 'scores = torch.einsum("bhqd,bhkd->bhqk", q / math.sqrt(q.size(-1)), k) + mask'),
        ("return probs @ v", 'return torch.einsum("bhqk,bhkd->bhqd", probs, v)'),
    ),
    m(
        "attention-baddbmm",
        "attention",
        BERT,
        (
            SCORES,
            "b, h, t, d = q.shape\n"
            "    s = k.size(-2)\n"
            "    m_ = mask.expand(b, h, t, s).reshape(b * h, t, s)\n"
            "    q3, k3 = q.reshape(b * h, t, d), k.reshape(b * h, s, d)\n"
            "    scores = torch.baddbmm(m_, q3, k3.transpose(1, 2), alpha=d**-0.5)\n"
            "    scores = scores.view(b, h, t, s)",
        ),
    ),
    # more correct forms (each passes in eval and training mode)
    m(
        "adamw-hat-addcdiv",
        "adamw",
        OPT,
        (STEP_SIZE, "m_hat = m / bias_correction1"),
        (DENOM, "v_hat = v / bias_correction2"),
        (
            "p.addcdiv_(m, denom, value=-step_size)",
            "p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)",
        ),
    ),
    m("adamw-decay-sub-lr", "adamw", OPT, (DECAY, "p.sub_(lr * weight_decay * p)")),
    m(
        "adapter-gelu-erf-written-out",
        "adapter",
        ADAPTER,
        (
            ADAPTER_Z,
            "z = self.down(h)\n        z = 0.5 * z * (1.0 + torch.erf(z / math.sqrt(2.0)))",
        ),
    ),
    m(
        "embeddings-layernorm-written-out",
        "embeddings",
        BERT,
        (
            "return self.dropout(self.LayerNorm(x))",
            "n = self.LayerNorm\n"
            "        mu = x.mean(-1, keepdim=True)\n"
            "        var = x.var(-1, keepdim=True, unbiased=False)\n"
            "        x = (x - mu) / torch.sqrt(var + n.eps) * n.weight + n.bias\n"
            "        return self.dropout(x)",
        ),
    ),
    m(
        "lora-scale-on-input",
        "lora",
        LORA,
        (LORA_ADD, "return y + update(self.dropout(x) * self.scale)"),
    ),
    m(
        "lora-dropout-functional",
        "lora",
        LORA,
        (LORA_ADD, "return y + self.scale * update(F.dropout(x, self.dropout.p, self.training))"),
    ),
    m("lhuc-sigmoid-method", "lhuc", LHUC, (LHUC_SCALE, "h * r.sigmoid() * 2")),
    m(
        "kl-div-batchmean",
        "smart",
        SMART,
        (
            KL,
            'return F.kl_div(log_q, log_p, reduction="batchmean", log_target=True) + F.kl_div(\n'
            '        log_p, log_q, reduction="batchmean", log_target=True\n    )',
        ),
    ),
    m(  # δ made a fresh leaf at the top of each ascent step instead of detached after it
        "smart-leaf-each-step",
        "smart",
        SMART,
        ("    delta = delta.detach()\n", ""),
        (
            "        for d in deltas:\n            d.requires_grad_(True)\n",
            "        deltas = [d.detach().requires_grad_(True) for d in deltas]\n",
        ),
    ),
    m(
        "smart-normalise-by-hand",
        "smart",
        SMART,
        (
            SMART_STEP,
            "config.step_size * grad / (\n"
            '            grad.abs().amax(-1, keepdim=True) if config.norm == "linf"\n'
            "            else grad.norm(dim=-1, keepdim=True)\n        ).clamp_min(1e-12)",
        ),
    ),
    m(
        "mask-labels-masked-fill",
        "masking",
        MLM,
        (LABELS, "labels = input_ids.masked_fill(~chosen, IGNORE)"),
    ),
    m(
        "loss-nll-of-log-softmax",
        "mlm-loss",
        MLM,
        (
            f"return {LOSS}",
            "return F.nll_loss(F.log_softmax(logits.flatten(0, -2).float(), -1), labels.flatten(), "
            "ignore_index=IGNORE)",
        ),
    ),
    m(
        "alpha-max-guard",
        "sampler",
        SAMPLING,
        ("    if epochs == 1:\n        return 1.0\n", ""),
        (ALPHA, "return 1.0 - 0.8 * (epoch - 1) / max(epochs - 1, 1)"),
    ),
    m(  # out of place: the backward pass of the training-mode case goes through
        "att-softmax-written-out",
        "attention",
        BERT,
        (
            PROBS,
            "w = (scores - scores.amax(-1, keepdim=True)).exp()\n"
            "    probs = F.dropout(w / w.sum(-1, keepdim=True), p=dropout_p)",
        ),
    ),
    m(
        "heads-unflatten",
        "attention",
        BERT,
        (SPLIT, "t.unflatten(-1, (self.num_heads, -1)).transpose(1, 2)"),
        (MERGE, "y.transpose(1, 2).flatten(2)"),
    ),
]


HEADS_CORRECT = [
    m(
        "pooling-einsum",
        "pooling",
        HEADS,
        (POOL, 'return torch.einsum("btd,bt->bd", hidden, m[..., 0]) / m.sum(1)'),
    ),
    m(
        "pooling-long-count",
        "pooling",
        HEADS,
        (POOL, "return (hidden * m).sum(dim=1) / attention_mask.sum(dim=1, keepdim=True)"),
    ),
    m(
        "pair-torch-functions",
        "pair-features",
        HEADS,
        (FEATURES, "torch.cat((u, v, torch.abs(u - v), torch.mul(u, v)), 1)"),
    ),
    m(
        "cosine-written-out",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = (u * v).sum(-1) / (u.norm(dim=-1) * v.norm(dim=-1))"),
    ),
    m(
        "cosine-normalised",
        "cosine-head",
        HEADS,
        (COSINE, "cosine = (F.normalize(u, dim=-1) * F.normalize(v, dim=-1)).sum(-1)"),
    ),
    m(
        "loss-ce-nll-of-log-softmax",
        "task-losses",
        BASE,
        (CE, "return F.nll_loss(F.log_softmax(outputs.float(), -1), labels)"),
    ),
    m(
        "loss-bce-of-sigmoid",
        "task-losses",
        BASE,
        (BCE, "return F.binary_cross_entropy(torch.sigmoid(outputs[:, 0].float()), labels)"),
    ),
    m(
        "loss-mse-written-out",
        "task-losses",
        BASE,
        (MSE, "return ((outputs[:, 0].float() - labels) ** 2).mean()"),
    ),
    m(
        "loss-mse-squeezed",
        "task-losses",
        BASE,
        (MSE, "return F.mse_loss(outputs.float().squeeze(-1), labels.float())"),
    ),
]
CORRECT += HEADS_CORRECT


def mutated_source(mutant: Mutant) -> str:
    """The file with the mutant's edits, each checked to hit one place inside its regions
    ("body" replaces the whole of the exercise's only region in the file)."""
    text = (ROOT / mutant.path).read_text(encoding="utf-8")
    for old, new in mutant.edits:
        spans = region_spans_of(text, mutant)
        if old == "body":
            assert len(spans) == 1, mutant.id
            (a, b) = spans[0]
            text = text[:a] + new + text[b:]
            continue
        assert text.count(old) == 1, (mutant.id, old)
        at = text.index(old)
        assert any(a <= at and at + len(old) <= b for a, b in spans), (mutant.id, old)
        text = text.replace(old, new)
    return text


def region_spans_of(text: str, mutant: Mutant) -> list[tuple[int, int]]:
    lines = text.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return [
        (starts[r.begin + 1], starts[r.end])
        for r in scaffold.find_regions(text, mutant.path)
        if r.exercise == mutant.exercise
    ]


@contextlib.contextmanager
def mutated(mutant: Mutant, monkeypatch) -> Iterator[types.ModuleType]:
    """The mutated module in place of the real one (``sys.modules``, its package, the plug-in
    registry) while the block runs; the real one back after."""
    name = mutant.path.removesuffix(".py").replace("/", ".")
    original = importlib.import_module(name)
    module = types.ModuleType(name)
    module.__file__ = str(ROOT / mutant.path)
    module.__package__ = name.rpartition(".")[0]
    module.__spec__ = original.__spec__  # add_plugin looks the kind's file up by its spec
    kind = name.rpartition(".")[2]  # a kind is its file's name
    if name.startswith("minbert.plugins.") and kind in available():
        plugin_class(kind)  # in KINDS now, so patched below
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, name, module)
        parent, _, leaf = name.rpartition(".")
        patch.setattr(sys.modules[parent], leaf, module)
        exec(compile(mutated_source(mutant), module.__file__, "exec"), module.__dict__)
        for kind, cls in list(minbert.plugins.KINDS.items()):  # add_plugin builds from KINDS
            if cls.__module__ == name:
                patch.setitem(minbert.plugins.KINDS, kind, getattr(module, cls.__name__))
        yield module
    assert sys.modules[name] is original


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_every_mistake_fails_the_student_trees_tests(
    mutant: Mutant, ctx: Context, monkeypatch
) -> None:
    """The student tree's tests/course/test_checks.py (the grader's checks as tests) fails on every
    mistake of the corpus: the student's tests and the grader cannot disagree. One failing test
    is enough, so the checks after it (the whole-model ones, seconds each) are not run."""
    import test_checks  # the student tree's

    failed = None
    try:
        with mutated(mutant, monkeypatch):
            for check in test_checks.GRADED:
                if mutant.exercise not in check.exercises:
                    continue
                try:
                    test_checks.test_check(check, ctx)
                except AssertionError:
                    failed = check.name
                    break
    finally:  # the whole-model checks built the model from the mutated module: forget it
        forget_the_model(ctx)
    assert failed, f"{mutant.id} passes the student tree's tests of {mutant.exercise}"


def forget_the_model(ctx: Context) -> None:
    """Drop the context's model and its outputs (cached on first use), so that a model built
    while a mutant was in place does not grade the tests that come after."""
    ctx.__dict__.pop("model", None)
    ctx._outputs.clear()


def run_own_checks(mutant: Mutant, ctx: Context, monkeypatch) -> dict:
    """Run the exercise's own checks with the mutated module in place of the real one."""
    with mutated(mutant, monkeypatch):
        checks = [c for c in CHECKS if c.exercises == (mutant.exercise,)]
        assert checks, mutant.exercise
        return {c.name: run_check(c, ctx) for c in checks}


@pytest.fixture(scope="module")
def ctx() -> Iterator[Context]:
    """The grading context, on one thread (as the references were made); the thread count is
    restored afterwards, since later tests compare a subprocess's numbers with this process's."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield Context(None, ROOT / "sanity_check_reference.pt")
    torch.set_num_threads(threads)


@dataclass
class Fresh:
    """An output as course/authoring/make_course_references.py makes it now, before sealing."""

    name: str
    tensor: torch.Tensor
    tolerance: float | None = None
    answer: bool = True


def agrees(fresh: Fresh, stored: dict, where: str) -> None:
    """The regenerated output against its stored seal, up to float32 rounding on another CPU.
    Integer outputs (masking) have no rounding: same digest. A float output's projections agree
    within 1e-6 + 1e-5·|p| (float32 rounding of values of order 1 is ~1e-7 a value; 7e-8 seen
    between two CPUs), and the seal's own acceptance holds: every value passes the stored
    digests as a student's would (within the check's tolerance), rounding across a bucket edge
    included."""
    resealed = seal.seal(fresh.name, fresh.tensor, fresh.tolerance, fresh.answer)
    assert resealed.keys() == stored.keys(), where
    assert (resealed["kind"], resealed["shape"]) == (stored["kind"], stored["shape"]), where
    assert resealed.get("q") == stored.get("q"), where
    if stored["kind"] == "exact":
        assert resealed["digest"] == stored["digest"], where
    if "values" in stored:
        torch.testing.assert_close(
            resealed["values"], stored["values"], rtol=1e-5, atol=1e-6, equal_nan=True, msg=where
        )
    if "digests" in stored:
        offsets = Observed(fresh.name, fresh.tensor, stored).offsets(stored)
        assert None not in offsets, (where, offsets)


@pytest.mark.numerics
def test_stored_reference_data_are_up_to_date(monkeypatch) -> None:
    """course/reference_data.pt is what course/authoring/make_course_references.py makes now, on
    this machine, whose CPU may round float32 otherwise than the one that made it (``agrees``;
    a stored input within the same tolerance, integers exactly)."""
    from course.authoring import make_course_references

    monkeypatch.setattr(make_course_references, "seal", Fresh)  # keep the outputs unsealed
    fresh = make_course_references.make()
    stored = torch.load(COURSE_DATA, weights_only=True)

    def same(a, b, where: str) -> None:
        if isinstance(a, Fresh):
            agrees(a, b, where)
        elif isinstance(a, torch.Tensor):  # an input of a check: random, or computed in float32
            assert a.dtype == b.dtype, where
            tolerance = {"rtol": 1e-5, "atol": 1e-6} if a.is_floating_point() else {}
            torch.testing.assert_close(a, b, **tolerance, equal_nan=True, msg=where)
        elif isinstance(a, dict):
            assert isinstance(b, dict) and list(a) == list(b), where
            for key in a:
                same(a[key], b[key], f"{where}/{key}")
        else:
            assert a == b, where

    same(fresh, stored, "reference_data")


def test_the_corpus_is_large_enough() -> None:
    assert len(MUTANTS) >= 130
    assert sum(m.named is not None for m in MUTANTS) >= 90
    assert len(CORRECT) >= 30
    assert len({m.id for m in MUTANTS + CORRECT}) == len(MUTANTS + CORRECT)


# Known mistakes no mutant can make the grader name, and why (none now: a transposed ΔW, which
# would raise in the given merge code, is named before merging).
UNPLANTABLE: dict[tuple[str, str], str] = {}


def test_every_known_mistake_is_named_by_a_mutant() -> None:
    """Each known mistake of course/authoring/make_course_references.py has a mutant in the
    corpus whose diagnosis phrase is part of its description (so it is stored, reachable and
    printed)."""
    from course.authoring import make_course_references

    phrases = [m.named for m in MUTANTS if m.named is not None]
    missing = []
    for component, mistakes in make_course_references.MISTAKES.items():
        for key, value in mistakes.items():
            text = value if isinstance(value, str) else value[0]  # (text, cases) when partial
            if not any(p in text for p in phrases) and (component, key) not in UNPLANTABLE:
                missing.append((component, key))
    assert not missing


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_mutant_is_caught_by_its_exercise_and_named(
    mutant: Mutant, ctx: Context, monkeypatch
) -> None:
    results = run_own_checks(mutant, ctx, monkeypatch)
    failed = [r for r in results.values() if r.status == FAIL]
    assert failed, f"{mutant.id} passed every check of {mutant.exercise}"
    for result in failed:  # says where the student's function is: its def, in the mutated file
        assert_names_the_def(result.where, mutant.path)
    if mutant.named is not None:
        diagnoses = [r.diagnosis for r in failed]
        assert any(mutant.named in d for d in diagnoses), (mutant.id, diagnoses)


def assert_names_the_def(where: str, path: str) -> None:
    """``where`` ("path:line (name); ...") names a function of ``path`` at its ``def`` line."""
    places = re.findall(r"([\w/.]+):(\d+) \(([\w.]+)\)", where)
    assert any(p == path for p, _, _ in places), where
    lines = (ROOT / path).read_text(encoding="utf-8").splitlines()
    for p, line, name in places:
        source = (ROOT / p).read_text(encoding="utf-8").splitlines() if p != path else lines
        assert source[int(line) - 1].lstrip().startswith(f"def {name.rsplit('.', 1)[-1]}("), where


def functions_edited(mutant: Mutant) -> set[str]:
    """The names of the functions of the original file whose bodies the mutant's edits change."""
    text = (ROOT / mutant.path).read_text(encoding="utf-8")
    lines = [text[: text.index(old)].count("\n") + 1 for old, _ in mutant.edits]
    tree = ast.parse(text)
    defs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = set()
    for line in lines:
        around = [d for d in defs if d.lineno <= line <= d.end_lineno]
        found.add(max(around, key=lambda d: d.lineno).name)  # the innermost
    return found


PINPOINTED = [m for m in MUTANTS if m.path in (SMART, LORA) and "body" not in dict(m.edits)]


@pytest.mark.parametrize("mutant", PINPOINTED, ids=lambda m: m.id)
def test_a_failing_check_names_only_the_function_that_is_wrong(
    mutant: Mutant, ctx: Context, monkeypatch
) -> None:
    """SMART's checks call each function of the ascent alone (course/checks/smart.py), LoRA's
    the update B A x before the linear site (course/checks/lora.py): a FAIL's ``your code:``
    line names the function the mistake is in, not every function of the exercise."""
    results = run_own_checks(mutant, ctx, monkeypatch)
    edited = functions_edited(mutant)
    for result in (r for r in results.values() if r.status == FAIL):
        found = re.findall(r"\(([\w.]+)\)", result.where)
        named = {name.rsplit(".", 1)[-1] for name in found}  # LowRankUpdate.forward: forward
        assert named and named <= edited, (result.check.name, result.where, edited)


@pytest.mark.numerics
@pytest.mark.parametrize("variant", CORRECT, ids=lambda m: m.id)
def test_correct_variant_passes(variant: Mutant, ctx: Context, monkeypatch) -> None:
    results = run_own_checks(variant, ctx, monkeypatch)
    assert all(r.status == PASS for r in results.values()), {
        n: (r.status, r.max_abs_diff, r.detail) for n, r in results.items()
    }


# The tests of the student tree that hold an exercise's code to numbers, by exercise, and the
# names they import from the exercise's file: one truth per exercise, so every form the grader
# accepts passes them too.
STUDENT_TESTS = {"adamw": ("tests.model.test_optimizer", ("AdamW",))}


@pytest.mark.numerics
@pytest.mark.parametrize(
    "variant", [v for v in CORRECT if v.exercise in STUDENT_TESTS], ids=lambda m: m.id
)
def test_correct_variant_passes_the_student_trees_tests(variant: Mutant, monkeypatch) -> None:
    """Each test function of the exercise's student-tree tests, with the variant's code in place
    of the solution's (parametrized tests aside: they test the schedule, not the exercise)."""
    tests_name, names = STUDENT_TESTS[variant.exercise]
    tests = importlib.import_module(tests_name)
    with mutated(variant, monkeypatch) as module:
        for name in names:
            monkeypatch.setattr(tests, name, getattr(module, name))
        ran = []
        for name, test in vars(tests).items():
            if name.startswith("test_") and not getattr(test, "pytestmark", None):
                test()
                ran.append(name)
    assert len(ran) >= 5, ran


# The student tree's tests of each exercise's source file.
STUDENT_TEST_FILES = {
    **dict.fromkeys(("embeddings", "attention", "layer"), "tests/model/test_bert.py"),
    "adamw": "tests/model/test_optimizer.py",
    "sampler": "tests/model/test_sampling.py",
    **dict.fromkeys(("adapter", "lhuc", "lora", "pals"), "tests/model/test_plugins.py"),
    "smart": "tests/model/test_smart.py",
    **dict.fromkeys(("masking", "mlm-loss"), "tests/model/test_mlm.py"),
    # the heads have no test file of their own in the student tree: the grader's check is theirs
    **{
        e: f"tests/course/test_checks.py::test_check[{e}]"
        for e in ("pooling", "pair-features", "cosine-head", "task-losses")
    },
}


@pytest.fixture(scope="module")
def solved_tree(tmp_path_factory) -> Path:
    """The student tree with every solution in place."""
    out = tmp_path_factory.mktemp("solved") / "tree"
    scaffold.write_student_tree(out, remove=[])
    return out


@pytest.fixture(scope="module")
def student_tree_pytest(solved_tree: Path) -> Iterator[ForkedPytest]:
    """pytest runs in the solved tree, each forked from one process that imported torch."""
    with ForkedPytest(solved_tree) as runs:
        yield runs


@pytest.mark.parametrize("variant", CORRECT, ids=lambda m: m.id)
def test_every_correct_form_passes_the_student_trees_own_tests(
    variant: Mutant, solved_tree: Path, student_tree_pytest: ForkedPytest
) -> None:
    """One truth per exercise: each form the grader accepts, written into the student tree,
    passes the student tree's own tests of that file (run there, as the student runs them)."""
    path = solved_tree / variant.path
    original = path.read_text(encoding="utf-8")
    path.write_text(mutated_source(variant), encoding="utf-8")
    try:
        returncode, output = student_tree_pytest.run(
            ["-q", "-x", "-p", "no:cacheprovider", STUDENT_TEST_FILES[variant.exercise]]
        )
    finally:
        path.write_text(original, encoding="utf-8")
    assert returncode == 0, output[-4000:]


def test_an_error_in_student_code_is_located_at_the_students_line(ctx, monkeypatch) -> None:
    """A shape error raised inside torch is reported at the student's file and line."""
    mutant = m("heads-bad-view", "attention", BERT, (SPLIT, "t.view(B, self.num_heads, D, T)"))
    results = run_own_checks(mutant, ctx, monkeypatch)
    text = mutated_source(mutant)
    line = next(
        i for i, s in enumerate(text.splitlines(), 1) if "t.view(B, self.num_heads, D, T)" in s
    )
    detail = results["attention: BertSelfAttention vs multi-head reference"].detail
    assert f"(minbert/bert.py:{line})" in detail, detail


def test_recorded_dropout_draws_masks_in_call_order_and_restores_torch() -> None:
    """The same calls draw the same masks; an inactive call draws nothing; torch is restored."""
    import torch.nn.functional as F

    from course.dropout import recorded_dropout

    x = torch.ones(4, 50)
    original = F.dropout
    with recorded_dropout(5) as first:
        a = torch.nn.Dropout(0.3)(x)
        F.dropout(x, 0.3, training=False)  # inactive: no draw
        b = F.dropout(x, 0.5)
    with recorded_dropout(5) as second:
        a2, b2 = F.dropout(x, 0.3), torch.nn.functional.dropout(x, 0.5)
    assert torch.equal(a, a2) and torch.equal(b, b2) and not torch.equal(a, b)
    assert first.calls == second.calls == [((4, 50), 0.3), ((4, 50), 0.5)]
    assert torch.allclose(a.unique(), torch.tensor([0.0, 1 / 0.7]))
    assert F.dropout is original


# The grader across machines: a student's correct code runs on another CPU than the one that
# made the references, and its float32 outputs differ from them in the last bits.
ULPS = 4


def rounded_elsewhere(t: object, generator: torch.Generator) -> object:
    """``t`` as another CPU might have computed it: each floating-point value times
    (1 + u·ULPS·ε), u ~ U(−1, 1) per value, ε the machine epsilon of its dtype (float32's for
    the float32 exercises; the float64 ones, LoRA and AdamW, are float64 on every CPU)."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    u = torch.rand(t.shape, generator=generator, dtype=torch.float64) * 2 - 1
    return (t.detach().double() * (1 + u * ULPS * torch.finfo(t.dtype).eps)).to(t.dtype)


def round_measured_outputs_elsewhere(monkeypatch, seed: int) -> list[int]:
    """Every floating-point output a check measures (``Observed``, sealed outputs but the exact
    ones; ``compare``, outputs the grader has in full) is ``rounded_elsewhere`` before it is
    measured. Returns a list that counts the outputs so changed."""
    import course.measure as measure

    generator, changed = torch.Generator().manual_seed(seed), []
    observe, compare = Observed.__init__, measure.compare

    def observed(self, name, got, sealed) -> None:
        if sealed["kind"] != "exact" and isinstance(got, torch.Tensor) and got.is_floating_point():
            got = rounded_elsewhere(got, generator)
            changed.append(1)
        observe(self, name, got, sealed)

    def compared(name, got, expected, *args, **kwargs):
        changed.append(1)
        return compare(name, rounded_elsewhere(got, generator), expected, *args, **kwargs)

    monkeypatch.setattr(Observed, "__init__", observed)
    for name, module in list(sys.modules.items()):
        if name.startswith("course.checks") and getattr(module, "compare", 0) is compare:
            monkeypatch.setattr(module, "compare", compared)
    return changed


@pytest.mark.numerics
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_solution_passes_every_check_when_another_cpu_rounds_its_outputs(
    seed: int, ctx: Context, monkeypatch
) -> None:
    changed = round_measured_outputs_elsewhere(monkeypatch, seed)
    results = {c.name: run_check(c, ctx) for c in CHECKS}
    assert len(changed) > 100  # the outputs of every check, not a few
    assert all(r.status == PASS for r in results.values()), {
        n: (r.status, r.max_abs_diff, r.detail) for n, r in results.items() if r.status != PASS
    }


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.id)
def test_a_mistake_is_caught_and_named_when_another_cpu_rounds_its_outputs(
    mutant: Mutant, ctx: Context, monkeypatch
) -> None:
    round_measured_outputs_elsewhere(monkeypatch, seed=MUTANTS.index(mutant))
    results = run_own_checks(mutant, ctx, monkeypatch)
    failed = [r for r in results.values() if r.status == FAIL]
    assert failed, f"{mutant.id} passed every check of {mutant.exercise}"
    for result in failed:  # its def, in the mutated file, as above
        assert_names_the_def(result.where, mutant.path)
    if mutant.named is not None:
        assert any(mutant.named in r.diagnosis for r in failed), mutant.id


MASK_80 = (
    "masked = torch.where(chosen & (action < 0.8), torch.full_like(input_ids, mask_id), input_ids)"
)
CROSS_ENTROPY = (
    "return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)"
)
# Mistakes in what a function does besides its return value: right outputs, wrong side effects.
SIDE_EFFECTS = [
    (  # the layer's output scaled in place: right numbers, the caller's tensor changed
        m("lhuc-in-place", "lhuc", LHUC, ("return h * (2.0", "return h.mul_(2.0")),
        "changed its argument h in place",
    ),
    (  # the adapter's residual added in place
        m(
            "adapter-in-place",
            "adapter",
            ADAPTER,
            ("return h + self.up(z)", "return h.add_(self.up(z))"),
        ),
        "changed its argument h in place",
    ),
    (  # right in eval mode, but the in-place doubling breaks the backward pass in training
        m(
            "lhuc-backward-broken",
            "lhuc",
            LHUC,
            ("return h * (2.0 * torch.sigmoid(r))", "return h * torch.sigmoid(r).mul_(2.0)"),
        ),
        "the backward pass fails, as it would in training",
    ),
    (  # the caller's input_ids masked in place
        m(
            "masking-in-place",
            "masking",
            MLM,
            (MASK_80, "masked = input_ids\n    masked[chosen & (action < 0.8)] = mask_id"),
        ),
        "mask_tokens (tokens, p 0.15) changed its argument input_ids in place",
    ),
    (  # a loss in bfloat16 under autocast: log_softmax keeps the logits' dtype
        m(
            "mlm-loss-in-bf16",
            "mlm-loss",
            MLM,
            (
                CROSS_ENTROPY,
                "logp, flat = logits.flatten(0, -2).log_softmax(-1), labels.flatten()\n"
                "    kept = flat != IGNORE\n"
                "    return -logp[kept].gather(-1, flat[kept, None]).mean()",
            ),
        ),
        "returned a torch.bfloat16 loss; compute it in float32",
    ),
    (  # δ kept attached from one ascent step to the next: the graph grows with the steps
        m("smart-graph-kept", "smart", SMART, ("    delta = delta.detach()\n", "")),
        "adversarial_perturbation kept δ's graph from one ascent step to the next",
    ),
    (  # the divergence of bfloat16 logits in bfloat16
        m(
            "kl-in-bf16",
            "smart",
            SMART,
            (LOG_P, "log_p = F.log_softmax(p_logits, dim=-1)"),
            (LOG_Q, "log_q = F.log_softmax(q_logits, dim=-1)"),
        ),
        "returned a torch.bfloat16 divergence; compute it in float32",
    ),
    (  # the encoder's output weighted in place: the caller's hidden states change
        m(
            "pooling-in-place",
            "pooling",
            HEADS,
            (POOL, "hidden *= m\n        return hidden.sum(1) / m.sum(1).clamp(min=1.0)"),
        ),
        "sentence_representation changed its argument last_hidden_state in place",
    ),
    (  # the position ids cut by replacing the buffer: a later, longer batch finds it too short
        m(
            "emb-buffer-replaced",
            "embeddings",
            BERT,
            (
                "positions = self.position_ids[:, :T]  # (1, T)",
                "self.position_ids = self.position_ids[:, :T]\n"
                "        positions = self.position_ids",
            ),
        ),
        "BertEmbeddings (eval mode) replaced its buffer position_ids",
    ),
    (  # the attention's residual added into the layer's input
        m(
            "layer-input-in-place",
            "layer",
            BERT,
            (OUT1, "x += self.dropout(self.dense(heads))\n        return self.LayerNorm(x)"),
        ),
        "BertLayer (eval mode) changed its argument x in place",
    ),
    (  # g² squared in place: the moments are right, the caller's gradient is not
        m(
            "adamw-grad-in-place",
            "adamw",
            OPT,
            (
                "v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)",
                "v.mul_(beta2).add_(grad.pow_(2).mul_(1 - beta2))",
            ),
        ),
        "AdamW.step (step 1) changed its argument p.grad (parameter 0) in place",
    ),
    (  # LoRA's dropout in place: in training the caller's input is dropped out
        m(
            "lora-dropout-in-place",
            "lora",
            LORA,
            (
                LORA_ADD,
                "return y + self.scale * update(\n"
                "            F.dropout(x, self.dropout.p, self.training, inplace=True)\n"
                "        )",
            ),
        ),
        "train mode) changed its argument x in place",
    ),
    (  # the update added into the base output the caller holds
        m(
            "lora-y-in-place",
            "lora",
            LORA,
            (LORA_ADD, "return y.add_(self.scale * update(self.dropout(x)))"),
        ),
        "eval mode) changed its argument y in place",
    ),
    (  # the padding zeroed in the caller's x: the PAL term is right, x is not
        m(
            "pals-padding-zeroed-in-place",
            "pals",
            PALS,
            (
                "z = pal.encoder(x)  # (B, T, D) -> (B, T, s)",
                "z = pal.encoder(x.masked_fill_(mask[:, 0, 0, :, None] < 0, 0.0))",
            ),
        ),
        "(sst layer 0 PAL term, eval mode) changed its argument x in place",
    ),
    (  # a number made into a new tensor: right value, but no gradient reaches the head
        m(
            "loss-detached",
            "task-losses",
            BASE,
            (MSE, "return torch.tensor(F.mse_loss(outputs[:, 0].float(), labels.float()).item())"),
        ),
        "RegressionTask.loss returned a loss detached from the outputs",
    ),
    (  # one log difference the wrong way round: the divergence comes out negative
        m(
            "kl-negative",
            "smart",
            SMART,
            (KL, "return ((log_p.exp() - log_q.exp()) * (log_q - log_p)).sum(-1).mean()"),
        ),
        "a KL divergence is never negative, and symmetric_kl returned -",
    ),
]


# A mistake in the written-out equation, which the fused path runs in training mode: the
# self-attention check reports the written-out path; a dropout mistake of BertSelfAttention
# (both paths differ in training mode, neither in eval mode) is not blamed on the equation.
THROUGH_FUSED = [
    (
        m(
            "unscaled-through-fused",
            "attention",
            BERT,
            (SCORES, "scores = q @ k.transpose(-2, -1) + mask"),
        ),
        True,
    ),
    (m("no-train-dropout-through-fused", "attention", BERT, (TRAIN_P, "dropout_p = 0.0")), False),
]


@pytest.mark.parametrize(("mutant", "blamed"), THROUGH_FUSED, ids=lambda x: getattr(x, "id", ""))
def test_a_written_out_mistake_seen_through_the_fused_path_is_the_written_out_one(
    mutant: Mutant, blamed: bool, ctx: Context, monkeypatch
) -> None:
    results = run_own_checks(mutant, ctx, monkeypatch)
    result = results["attention: BertSelfAttention vs multi-head reference"]
    assert result.status == FAIL
    said = "the mistake is in the written-out equation" in result.detail
    assert said == blamed, result.detail
    if blamed:
        assert "(written-out path," in result.detail and "(fused path," not in result.detail


@pytest.mark.parametrize(("mutant", "said"), SIDE_EFFECTS, ids=lambda x: getattr(x, "id", ""))
def test_a_side_effect_is_named(mutant: Mutant, said: str, ctx: Context, monkeypatch) -> None:
    """Outputs right, what the function did besides returning them wrong: the check fails and
    says what (the argument changed in place, with where; the loss's dtype)."""
    failed = [r for r in run_own_checks(mutant, ctx, monkeypatch).values() if r.status == FAIL]
    assert any(said in r.detail for r in failed), [r.detail for r in failed]


# What a failed masking check says beyond the mistake's name, though the stored masks are sealed:
# the first position that breaks a rule any correct masking keeps, else the counts of chosen,
# [MASK], another token and kept, beside the reference's (which name no position).
MASKING_SAID = {
    "mask-specials": "position(s) like sentence 4, token 0, which is a special token or padding",
    "mask-labels-from-masked": "but the token there was",
    "mask-labels-at-mask-only": "and is labelled −100: a token that changes is a chosen one",
    "masking-kept-unlabelled": "tokens, p 0.15: in all, chosen 48 (the reference 51), [MASK] 44 "
    "(the reference 44), another token 4 (the reference 4), kept 0 (the reference 3); 3 of 32 "
    "sentences differ, the first: sentence 1, chosen 3 (the reference 4), kept 0 (the reference 1)",
    "masking-draws-swapped": "26 of 32 sentences differ, the first: sentence 1, chosen 1 (the "
    "reference 4), [MASK] 1 (the reference 3), kept 0 (the reference 1)",
    "mask-all-to-mask": "[MASK] 51 (the reference 44), another token 0 (the reference 4)",
}


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.id in MASKING_SAID], ids=str)
def test_a_masking_that_differs_says_where(mutant: Mutant, ctx: Context, monkeypatch) -> None:
    failed = [r for r in run_own_checks(mutant, ctx, monkeypatch).values() if r.status == FAIL]
    said = " ".join(r.detail for r in failed)
    assert MASKING_SAID[mutant.id] in said, said


EVAL_DROPOUT = {
    "heads-dropout-in-eval": "in eval mode your code called dropout twice on (3, 4, 6, 6) "
    "with p 0.1",
    "pals-dropout-in-eval": "in eval mode your code called dropout 4 times on (3, 6, 8) with p 0.1",
    "heads-fused-dropout-in-eval": "in eval mode your code called F.scaled_dot_product_attention "
    "twice on (3, 4, 6, 6) with dropout_p 0.1",
}


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.id in EVAL_DROPOUT], ids=lambda m: m.id)
def test_dropout_left_on_in_eval_mode_is_named(mutant: Mutant, ctx: Context, monkeypatch) -> None:
    """Dropout that still acts after model.eval() is said in those words, with the calls: the
    fused op's too, whose masks no recorder sees (its call is recorded in eval mode)."""
    failed = [r for r in run_own_checks(mutant, ctx, monkeypatch).values() if r.status == FAIL]
    said = " ".join(r.detail for r in failed)
    assert EVAL_DROPOUT[mutant.id] in said, said
    assert "the reference never drops out in eval mode" in said


# What a failed check says, in the student's words: the outputs by what they are (never the
# grader's plug-in sites or its projections), numbers with the digits that matter (0.6, not
# 0.59999999999999998), an exception a known mistake raises with where it was raised.
SAID = {
    "heads-fused-dropout-in-eval": "the attention output (fused path, eval mode, with plug-ins "
    "acting) differs most at",
    "heads-merge-view": "the attention output (written-out path, eval mode, with plug-ins "
    "acting) differs most at",
    "layer-no-attention-residual": "the layer output (eval mode) differs most at",
    "alpha-over-epochs": "α at epoch 2 of 2: got 0.6, not within the tolerance",
    "alpha-off-by-one": "α at epoch 1 of 2: got 0.2, not within the tolerance",
    "alpha-single-epoch": "ZeroDivisionError: float division by zero at epoch 1 of 1 "
    "(minbert/sampling.py:",
    "emb-positions-uncut": "must match the size of tensor b (128) at non-singleton dimension 1 "
    "(minbert/bert.py:",
    "lora-delta-transposed": "delta_weight (sst layer 0 intermediate) returned a (32, 64) matrix, "
    "the base weight is (64, 32) (d_out, d_in)",
}


@pytest.mark.parametrize("mutant", [m for m in MUTANTS if m.id in SAID], ids=lambda m: m.id)
def test_a_failure_is_said_in_the_students_words(mutant: Mutant, ctx: Context, monkeypatch):
    failed = [r for r in run_own_checks(mutant, ctx, monkeypatch).values() if r.status == FAIL]
    said = " ".join(r.detail for r in failed)
    assert SAID[mutant.id] in said, said
    for internal in ("sites", "projection", "0.59999", "0.19999"):
        assert internal not in said, said
