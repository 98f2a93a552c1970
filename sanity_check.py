"""Check minBERT against references, one independent check per component.

    python sanity_check.py                      # every check, on the packaged all-MiniLM-L6-v2
    python sanity_check.py --checkpoint DIR     # a local copy of the same checkpoint
    python sanity_check.py --only attention     # the checks of one component (see --list)
    python sanity_check.py --list               # the checks and the exercises each one grades

Each check measures the largest absolute difference between what minBERT computes and a
reference, and passes when it is at most the check's stated tolerance. Two kinds of reference:

* component checks (embeddings, attention, layer, adamw, sampler, adapter, lhuc, lora, pals,
  smart) run one component on its own, on fixed random weights and inputs, and compare it with the
  equation written out here with plain torch operations. The reference never calls the code it
  grades, and a component check calls no other exercise: the layer check swaps in a reference
  self-attention, the plug-in checks call the plug-in's own sites directly, PAL uses the fused
  attention, and SMART runs on a small model defined here. So a missing attention does not fail
  the AdamW check, nor the layer check.
* whole-model checks (bert) compare the model with Hugging Face transformers' BertModel (eager
  attention, float32, eval mode), whose outputs ``scripts/make_reference.py`` saved in
  ``sanity_check_reference.pt`` (so transformers is not needed here): last_hidden_state on the
  real (non-padding) tokens and pooler_output, for a padded batch of single sentences and a batch
  of sentence pairs. They need the embeddings, attention and layer exercises all done. The
  tokenizer and the warmup/decay schedule are checked too (neither is an exercise).

Each check names the course exercises it depends on (``Check.exercises``; the exercise ids of
``python -m minbert.scaffold --list``). In a student tree made by ``minbert.scaffold`` a check
whose exercise is still missing shows NOT IMPLEMENTED with that exercise's hint; every other check
runs normally. An exception in one check (a bug, or a ``NotImplementedError``) never stops the
others.

Output: one line per check, ``name  max_abs_diff X  tol Y  PASS|FAIL|NOT IMPLEMENTED``; under a
FAIL, the tensor that differs most (and where) and a hint; under a NOT IMPLEMENTED, the exercise's
hint and where it was raised. The last line reads ``N passed, M failed`` (NOT IMPLEMENTED counts
as failed); the exit code is 1 if any check failed. To add a check, write a function
``Context -> Measurement`` and list it in ``CHECKS`` with its name, tolerance, hint and exercises.
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from minbert.bert import BertConfig, LayerSites
    from minbert.smart import SmartConfig

ROOT = Path(__file__).resolve().parent
DEFAULT_REFERENCE = ROOT / "sanity_check_reference.pt"

PASS, FAIL, NOT_IMPLEMENTED = "PASS", "FAIL", "NOT IMPLEMENTED"


@dataclass
class Measurement:
    """The outcome of one check: the largest absolute difference from the reference, and where
    it is (printed when the check fails, to say which tensor or step to look at)."""

    max_abs_diff: float
    hint: str = ""

    def is_worse_than(self, other: Measurement) -> bool:
        """Larger difference, with NaN (a broken computation) worst of all."""
        if math.isnan(other.max_abs_diff):
            return False
        return math.isnan(self.max_abs_diff) or self.max_abs_diff > other.max_abs_diff


def worst_of(measurements: list[Measurement]) -> Measurement:
    worst = Measurement(0.0)
    for m in measurements:
        if m.is_worse_than(worst):
            worst = m
    return worst


@dataclass(frozen=True)
class Check:
    """One line of the report.

    name: "<component>: what is compared" (``--only <component>`` selects it).
    tolerance: the largest absolute difference that passes.
    run: computes the measurement.
    hint: what to look at when the check fails.
    exercises: the course exercises (``minbert.scaffold`` ids) whose code this check runs; with
        any of them missing the check is NOT IMPLEMENTED, with all of them done it can pass.
    """

    name: str
    tolerance: float
    run: Callable[[Context], Measurement]
    hint: str = ""
    exercises: tuple[str, ...] = ()

    @property
    def component(self) -> str:
        return self.name.split(":", 1)[0]


@dataclass
class Result:
    check: Check
    status: str  # PASS, FAIL or NOT IMPLEMENTED
    max_abs_diff: float | None  # None when the check raised
    detail: str = ""  # the tensor that differs, or the exception and where it was raised


class Context:
    """What the checks share, built on first use: a check that does not need the model does not
    fail because the model cannot be built."""

    def __init__(self, checkpoint: str | None, reference_file: Path) -> None:
        self.checkpoint = checkpoint
        self.reference_file = reference_file
        self._outputs: dict[tuple[str, bool], dict[str, torch.Tensor]] = {}

    @functools.cached_property
    def reference(self) -> dict:
        if not self.reference_file.is_file():
            raise FileNotFoundError(
                f"{self.reference_file} is missing; regenerate it with scripts/make_reference.py"
            )
        return torch.load(self.reference_file, weights_only=True)  # plain tensors only

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        from minbert.pretrained import load_pretrained

        model = load_pretrained(self.checkpoint).eval()  # eval: dropout off
        # A reference made from another checkpoint would fail every check, for no useful reason.
        meta = self.reference.get("meta", {})
        shape = (model.config.num_hidden_layers, model.config.hidden_size)
        if meta and shape != (meta.get("num_hidden_layers"), meta.get("hidden_size")):
            raise ValueError(
                f"the checkpoint has {shape[0]} layers of size {shape[1]} but the reference was "
                f"made from {meta.get('checkpoint')} ({meta.get('num_hidden_layers')} layers of "
                f"size {meta.get('hidden_size')}); make one for this checkpoint with "
                "scripts/make_reference.py --checkpoint DIR --out FILE"
            )
        return model

    def outputs(self, batch: str, fast_attention: bool = True) -> dict[str, torch.Tensor]:
        """minBERT's outputs on the reference batch ``batch`` ("single" or "pair")."""
        key = (batch, fast_attention)
        if key not in self._outputs:
            ref = self.reference[batch]
            self.model.set_fast_attention(fast_attention)
            try:
                with torch.no_grad():
                    self._outputs[key] = self.model(
                        input_ids=ref["input_ids"],
                        attention_mask=ref["attention_mask"],
                        token_type_ids=ref["token_type_ids"],
                    )
            finally:
                self.model.set_fast_attention(True)
        return self._outputs[key]


def compare(
    name: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    mask: torch.Tensor | None = None,
    axes: tuple[str, ...] = ("sentence", "token", "dim"),
) -> Measurement:
    """max |got − expected| over the positions where ``mask`` (B, T) is true (all if None), and
    where it occurs, naming the position along ``axes``."""
    if not isinstance(got, torch.Tensor):
        return Measurement(math.inf, f"{name} is a {type(got).__name__}, expected a tensor")
    if got.shape != expected.shape:
        return Measurement(
            math.inf, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    diff = (got.detach().double() - expected.detach().double()).abs()
    if mask is not None:  # padding positions are not compared (a where, so NaN there is ignored)
        diff = torch.where(mask.reshape(mask.shape + (1,) * (diff.ndim - 2)), diff, 0.0)
    if diff.numel() == 0:
        return Measurement(0.0)
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    axes = axes[-diff.ndim :] if len(axes) >= diff.ndim else axes + ("index",) * diff.ndim
    at = ", ".join(f"{axis} {i}" for axis, i in zip(axes, where))
    hint = f"{name} differs most at {at}: got {got[where].item():.6g}, expected "
    hint += f"{expected[where].item():.6g}"
    return Measurement(diff.max().item(), hint)


# ----------------------------------------------------------------------------------------------
# Reference equations, written out with torch operations (never calling the code they grade)


def ref_linear(x: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
    """x Wᵀ + b."""
    return x @ linear.weight.T + linear.bias


def ref_layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """γ ⊙ (x − mean) / √(var + eps) + β over the last dimension (biased variance)."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def ref_gelu(x: torch.Tensor) -> torch.Tensor:
    """x · Φ(x), the exact (erf) form."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def ref_additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) of 1/0 -> (B, 1, 1, T) of 0 / the most negative float32."""
    return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def ref_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """softmax(Q Kᵀ / √d_k + M) V, with the softmax written out."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    return (weights / weights.sum(-1, keepdim=True)) @ v


def ref_multi_head(
    x: torch.Tensor,
    mask: torch.Tensor,
    query: Callable[[torch.Tensor], torch.Tensor],
    key: Callable[[torch.Tensor], torch.Tensor],
    value: Callable[[torch.Tensor], torch.Tensor],
    heads: int,
) -> torch.Tensor:
    """Concatenated heads of attention over x (B, T, D) with the given projections."""
    B, T, D = x.shape

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(B, T, heads, D // heads).permute(0, 2, 1, 3)

    y = ref_attention(split(query(x)), split(key(x)), split(value(x)), mask)
    return y.permute(0, 2, 1, 3).reshape(B, T, D)


def randomize(module: torch.nn.Module, generator: torch.Generator, std: float = 0.5) -> None:
    """Fill every parameter with N(0, std²) noise (LayerNorm gains with 1 + noise), so that no
    zero-initialised weight hides a missing term."""
    with torch.no_grad():
        for sub in module.modules():
            for name, p in sub.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=generator) * std
                if isinstance(sub, torch.nn.LayerNorm) and name == "weight":
                    noise = noise + 1.0
                p.copy_(noise)


def tiny_config(**overrides: int | str) -> BertConfig:
    """A 2-layer BERT of hidden size 16 (4 heads of 4), small enough to check in milliseconds."""
    from minbert.bert import BertConfig

    values = dict(
        vocab_size=50,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=24,
        max_position_embeddings=12,
        type_vocab_size=2,
    )
    values.update(overrides)
    return BertConfig(**values)


def padded_batch(generator: torch.Generator, D: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    """x (3, 6, D) and its (3, 6) attention mask: one full sequence and two padded ones."""
    x = torch.randn(3, 6, D, generator=generator)
    attention_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    return x, attention_mask


# ----------------------------------------------------------------------------------------------
# Model against the Hugging Face reference


def hidden_state_check(batch: str, fast_attention: bool = True) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        ref = ctx.reference[batch]
        out = ctx.outputs(batch, fast_attention)
        return compare(
            "last_hidden_state",
            out["last_hidden_state"],
            ref["last_hidden_state"],
            ref["attention_mask"].bool(),
        )

    return run


def pooler_check(batch: str) -> Callable[[Context], Measurement]:
    def run(ctx: Context) -> Measurement:
        out = ctx.outputs(batch)
        expected = ctx.reference[batch]["pooler_output"]
        return compare("pooler_output", out["pooler_output"], expected, axes=("sentence", "dim"))

    return run


def check_tokenizer(ctx: Context) -> Measurement:
    """Our tokenizer on the reference sentences against transformers' ids (exact)."""
    from minbert.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_checkpoint(ctx.checkpoint)
    found = []
    for batch in ("single", "pair"):
        ref = ctx.reference[batch]
        if batch == "single":
            ours = tokenizer(ref["sentences"])
        else:
            first, second = zip(*ref["sentences"], strict=True)
            ours = tokenizer(list(first), list(second))
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            found.append(compare(f"{batch} {key}", ours[key], ref[key], axes=("sentence", "token")))
    return worst_of(found)


# ----------------------------------------------------------------------------------------------
# Embeddings, attention and the layer, each on its own


def check_embeddings(ctx: Context) -> Measurement:
    """BertEmbeddings (eval mode) against LayerNorm(word[ids] + position[0..T−1] + type[ids])."""
    from minbert.bert import BertEmbeddings

    g = torch.Generator().manual_seed(1)
    config = tiny_config()
    embeddings = BertEmbeddings(config).eval()
    randomize(embeddings, g)
    input_ids = torch.randint(1, config.vocab_size, (3, 7), generator=g)
    input_ids[1, 5:] = config.pad_token_id
    token_type_ids = torch.tensor([[0] * 3 + [1] * 4, [0] * 2 + [1] * 5, [0] * 7])
    with torch.no_grad():
        got = embeddings(input_ids, token_type_ids)
        T = input_ids.shape[1]
        x = (
            embeddings.word_embeddings.weight[input_ids]
            + embeddings.position_embeddings.weight[:T][None]
            + embeddings.token_type_embeddings.weight[token_type_ids]
        )
        expected = ref_layer_norm(x, embeddings.LayerNorm)
    return compare("embeddings", got, expected)


def check_attention_function(ctx: Context) -> Measurement:
    """scaled_dot_product_attention against softmax(QKᵀ/√d_k + M)·V on padded random heads."""
    from minbert.bert import scaled_dot_product_attention

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 2, 6, 5, generator=g) for _ in range(3))
    _, attention_mask = padded_batch(g)
    mask = ref_additive_mask(attention_mask)
    with torch.no_grad():
        got = scaled_dot_product_attention(q, k, v, mask)
        expected = ref_attention(q, k, v, mask)
    return compare("attention output", got, expected, axes=("sentence", "head", "token", "dim"))


class ScalingSites:
    """Plug-in sites that change every value they see, each in its own way, so that a site not
    called, called twice or called in the wrong place changes the output. Written here: nothing
    in it comes from the plug-ins the course exercises."""

    LINEAR_SCALE = {
        "query": 1.1,
        "key": 0.9,
        "value": 1.2,
        "attention_output": 0.8,
        "intermediate": 1.3,
        "output": 0.7,
    }

    def linear(self, name: str, module: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return ref_linear(x, module) * self.LINEAR_SCALE[name] + 0.05

    def after_attention(self, h: torch.Tensor) -> torch.Tensor:
        return h + 0.5 * torch.tanh(h)

    def after_feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        return 0.6 * h - 0.1

    def parallel(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (mask[:, 0, 0, :, None] == 0).to(x.dtype)  # (B, 1, 1, T) -> (B, T, 1)
        return 0.3 * torch.sin(x) * keep

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        return h * (1.0 + 0.25 * torch.cos(torch.arange(h.shape[-1], dtype=h.dtype)))


def site_variants() -> list[tuple[str, LayerSites]]:
    """(name, sites): no plug-ins, and every site changing what it sees."""
    from minbert.bert import NO_SITES, LayerSites

    class TestSites(ScalingSites, LayerSites):  # a LayerSites, as the layer expects
        pass

    return [("no plug-in sites", NO_SITES), ("sites that change their input", TestSites())]


def ref_self_attention(
    module: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, sites: LayerSites
) -> torch.Tensor:
    """Multi-head attention with ``module``'s query/key/value weights, through ``sites``."""
    reference_sites = ScalingSites() if isinstance(sites, ScalingSites) else None

    def projection(name: str):
        linear = getattr(module, name)
        if reference_sites is None:
            return lambda t: ref_linear(t, linear)
        return lambda t: reference_sites.linear(name, linear, t)

    heads = module.num_heads
    return ref_multi_head(
        x, mask, projection("query"), projection("key"), projection("value"), heads
    )


def check_self_attention(ctx: Context) -> Measurement:
    """BertSelfAttention (eval mode), fused and written-out paths, without and with plug-in sites,
    against multi-head attention written out here."""
    from minbert.bert import BertSelfAttention

    g = torch.Generator().manual_seed(3)
    config = tiny_config()
    attention = BertSelfAttention(config).eval()
    randomize(attention, g)
    x, attention_mask = padded_batch(g, config.hidden_size)
    mask = ref_additive_mask(attention_mask)
    found = []
    for fast in (True, False):
        attention.use_fast_path = fast
        for label, sites in site_variants():
            with torch.no_grad():
                got = attention(x, mask, sites)
                expected = ref_self_attention(attention, x, mask, sites)
            path = "fused" if fast else "written-out"
            found.append(compare(f"heads ({path} path, {label})", got, expected))
    return worst_of(found)


class ReferenceSelfAttention(torch.nn.Module):
    """Stands in for the layer's BertSelfAttention, so the layer check needs no attention
    exercise: the same weights, the attention of ``ref_self_attention``."""

    def __init__(self, original: torch.nn.Module) -> None:
        super().__init__()
        self.original = original

    def forward(self, x: torch.Tensor, mask: torch.Tensor, sites: LayerSites) -> torch.Tensor:
        return ref_self_attention(self.original, x, mask, sites)


def ref_layer(
    layer: torch.nn.Module, x: torch.Tensor, mask: torch.Tensor, sites: LayerSites
) -> torch.Tensor:
    """The post-norm encoder layer with every plug-in site in its place:

    a = LayerNorm(x + after_attention(W_O · heads))
    y = after_layer(LayerNorm(a + after_feed_forward(W_2 · GELU(W_1 · a)) + parallel(x)))
    """
    scaling = isinstance(sites, ScalingSites)
    reference_sites = ScalingSites() if scaling else None

    def linear(name: str, module: torch.nn.Linear, t: torch.Tensor) -> torch.Tensor:
        if reference_sites is None:
            return ref_linear(t, module)
        return reference_sites.linear(name, module, t)

    identity = lambda t: t  # noqa: E731
    after_attention = reference_sites.after_attention if scaling else identity
    after_feed_forward = reference_sites.after_feed_forward if scaling else identity
    after_layer = reference_sites.after_layer if scaling else identity

    heads = ref_self_attention(layer.attention.self.original, x, mask, sites)
    h = linear("attention_output", layer.attention.output.dense, heads)
    a = ref_layer_norm(x + after_attention(h), layer.attention.output.LayerNorm)
    f = ref_gelu(linear("intermediate", layer.intermediate.dense, a))
    h = a + after_feed_forward(linear("output", layer.output.dense, f))
    if scaling:
        h = h + reference_sites.parallel(x, mask)
    return after_layer(ref_layer_norm(h, layer.output.LayerNorm))


def layer_check(with_sites: bool) -> Callable[[Context], Measurement]:
    """BertLayer (eval mode, its attention swapped for a reference one) against ``ref_layer``."""

    def run(ctx: Context) -> Measurement:
        from minbert.bert import BertLayer

        g = torch.Generator().manual_seed(4)
        config = tiny_config(hidden_act="gelu")
        layer = BertLayer(config).eval()
        randomize(layer, g)
        layer.attention.self = ReferenceSelfAttention(layer.attention.self)
        x, attention_mask = padded_batch(g, config.hidden_size)
        mask = ref_additive_mask(attention_mask)
        label, sites = site_variants()[1 if with_sites else 0]
        with torch.no_grad():
            got = layer(x, mask, sites)
            expected = ref_layer(layer, x, mask, sites)
        return compare(f"layer output ({label})", got, expected)

    return run


# ----------------------------------------------------------------------------------------------
# Optimizer and schedule


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


# ----------------------------------------------------------------------------------------------
# Task sampling


def check_annealed_alpha(ctx: Context) -> Measurement:
    """annealed_alpha(e, E) against 1 − 0.8·(e − 1)/(E − 1) (1 when E = 1), every epoch."""
    from minbert.sampling import annealed_alpha

    found = []
    for epochs in (1, 2, 3, 5, 10):
        for epoch in range(1, epochs + 1):
            expected = 1.0 if epochs == 1 else 1.0 - 0.8 * (epoch - 1) / (epochs - 1)
            got = float(annealed_alpha(epoch, epochs))
            found.append(
                Measurement(
                    abs(got - expected),
                    f"α at epoch {epoch} of {epochs}: got {got:.6g}, expected {expected:.6g}",
                )
            )
    return worst_of(found)


# Example training-set sizes (the grading needs numbers; the sampler itself never has any).
SAMPLER_SIZES = ({"sst": 8544, "para": 141506, "sts": 6040}, {"only": 17}, {"a": 1, "b": 3})


def check_task_probabilities(ctx: Context) -> Measurement:
    """task_probabilities(sizes, α) against N_i^α / Σ_j N_j^α, for several sizes and α."""
    from minbert.sampling import task_probabilities

    found = []
    for sizes in SAMPLER_SIZES:
        for alpha in (1.0, 0.6, 0.2, 0.0):
            got = task_probabilities(sizes, alpha)
            if list(got) != list(sizes):
                found.append(
                    Measurement(math.inf, f"tasks {list(got)}, expected {list(sizes)} (in order)")
                )
                continue
            total = sum(n**alpha for n in sizes.values())
            for task, n in sizes.items():
                expected = n**alpha / total
                found.append(
                    Measurement(
                        abs(float(got[task]) - expected),
                        f"p[{task!r}] with α = {alpha} and sizes {sizes}: got "
                        f"{float(got[task]):.6g}, expected {expected:.6g}",
                    )
                )
    return worst_of(found)


# ----------------------------------------------------------------------------------------------
# Plug-ins, each through its own sites, with random (non-identity) weights


PLUGIN_TASKS = ["sst", "sts"]


def check_adapter(ctx: Context) -> Measurement:
    """Houlsby adapters at both positions of every layer against
    h + W_up · GELU(W_down · h + b_down) + b_up."""
    from minbert.plugins.adapter import HoulsbyAdapter

    g = torch.Generator().manual_seed(5)
    config = tiny_config()
    plugin = HoulsbyAdapter(config, PLUGIN_TASKS, size=4).eval()
    randomize(plugin, g)
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            for position, site in (
                ("attention", plugin.after_attention),
                ("feed_forward", plugin.after_feed_forward),
            ):
                h = torch.randn(2, 5, config.hidden_size, generator=g)
                adapter = plugin.by_task[task][position][layer]
                with torch.no_grad():
                    got = site(layer, task, h)
                    expected = h + ref_linear(ref_gelu(ref_linear(h, adapter.down)), adapter.up)
                found.append(compare(f"{task} layer {layer} {position} adapter", got, expected))
    return worst_of(found)


def check_lhuc(ctx: Context) -> Measurement:
    """LHUC on every layer's output against h ⊙ 2·σ(r_layer)."""
    from minbert.plugins.lhuc import LHUC

    g = torch.Generator().manual_seed(6)
    config = tiny_config()
    plugin = LHUC(config, PLUGIN_TASKS).eval()
    randomize(plugin, g, std=1.0)
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            h = torch.randn(2, 5, config.hidden_size, generator=g)
            r = plugin.by_task[task].r[layer]
            with torch.no_grad():
                got = plugin.after_layer(layer, task, h)
                expected = h * (2.0 / (1.0 + torch.exp(-r)))
            found.append(compare(f"{task} layer {layer} LHUC output", got, expected))
    return worst_of(found)


LORA_OPTIONS = {"rank": 2, "alpha": 6.0, "targets": ["query", "value", "intermediate"]}


def check_lora_linear(ctx: Context) -> Measurement:
    """LoRA's linear site against W x + b + (α/r)·B A x on the targets, W x + b elsewhere."""
    from minbert.plugins.lora import LoRA, target_shape

    g = torch.Generator().manual_seed(7)
    config = tiny_config()
    plugin = LoRA(config, PLUGIN_TASKS, **LORA_OPTIONS).eval()
    randomize(plugin, g)
    scale = LORA_OPTIONS["alpha"] / LORA_OPTIONS["rank"]
    found = []
    for task in PLUGIN_TASKS:
        for layer in range(config.num_hidden_layers):
            for name in ("query", "key", "value", "intermediate", "output"):
                d_in, d_out = target_shape(config, name)
                module = torch.nn.Linear(d_in, d_out)
                randomize(module, g)
                x = torch.randn(2, 5, d_in, generator=g)
                with torch.no_grad():
                    y = ref_linear(x, module)
                    got = plugin.linear(layer, task, name, module, x, y)
                    expected = y
                    if name in LORA_OPTIONS["targets"]:
                        update = plugin.by_task[task][layer][name]
                        expected = y + scale * ((x @ update.A.T) @ update.B.T)
                found.append(compare(f"{task} layer {layer} {name} output", got, expected))
    return worst_of(found)


def check_lora_merge(ctx: Context) -> Measurement:
    """LoRA.merge(task) against W + (α/r)·B A for every adapted weight; unmerge restores W."""
    from minbert.bert import BertModel
    from minbert.plugins import add_plugin
    from minbert.plugins.lora import target_module

    g = torch.Generator().manual_seed(8)
    config = tiny_config()
    model = BertModel(config).eval()
    plugin = add_plugin(model, "lora", PLUGIN_TASKS, **LORA_OPTIONS)
    randomize(plugin, g)
    scale = LORA_OPTIONS["alpha"] / LORA_OPTIONS["rank"]
    layers = list(model.encoder.layer)
    names = LORA_OPTIONS["targets"]
    before = {
        (i, n): target_module(layer, n).weight.detach().clone()
        for i, layer in enumerate(layers)
        for n in names
    }
    found = []
    for task in PLUGIN_TASKS:
        plugin.merge(task)
        for (i, name), weight in before.items():
            update = plugin.by_task[task][i][name]
            expected = weight + scale * (update.B @ update.A).detach()
            got = target_module(layers[i], name).weight
            found.append(
                compare(f"merged {task} layer {i} {name} weight", got, expected, axes=("out", "in"))
            )
        plugin.unmerge()
        for (i, name), weight in before.items():
            got = target_module(layers[i], name).weight
            found.append(
                compare(f"unmerged layer {i} {name} weight", got, weight, axes=("out", "in"))
            )
    return worst_of(found)


def check_pals(ctx: Context) -> Measurement:
    """The PAL term of every layer against V_D · g_l(V_E · x), g_l multi-head attention in the
    projected space (fused attention inside, so this check needs no attention exercise)."""
    from minbert.plugins.pals import PAL

    g = torch.Generator().manual_seed(9)
    config = tiny_config()
    plugin = PAL(config, PLUGIN_TASKS, size=8, heads=2).eval()
    plugin.use_fast_path = True
    randomize(plugin, g)
    x, attention_mask = padded_batch(g, config.hidden_size)
    mask = ref_additive_mask(attention_mask)
    found = []
    for task in PLUGIN_TASKS:
        pal = plugin.by_task[task]
        for layer in range(config.num_hidden_layers):
            attention = pal.layers[layer]
            with torch.no_grad():
                got = plugin.parallel(layer, task, x, mask)
                z = ref_linear(x, pal.encoder)
                z = ref_multi_head(
                    z,
                    mask,
                    lambda t, a=attention: ref_linear(t, a.query),
                    lambda t, a=attention: ref_linear(t, a.key),
                    lambda t, a=attention: ref_linear(t, a.value),
                    plugin.heads,
                )
                expected = ref_linear(z, pal.decoder)
            found.append(compare(f"{task} layer {layer} PAL term", got, expected))
    return worst_of(found)


# ----------------------------------------------------------------------------------------------
# SMART's adversarial step


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


# ----------------------------------------------------------------------------------------------
# The list of checks, in the order of GUIDE.md. Each is independent, states its tolerance, and
# names the exercises (minbert.scaffold ids) it depends on.

MODEL = ("embeddings", "attention", "layer")
BERT_HINT = (
    "the whole model: the embeddings, attention and layer checks above say which part differs"
)

CHECKS: list[Check] = [
    Check(
        "tokenizer: ids vs transformers' tokenizer",
        0.0,
        check_tokenizer,
        "not an exercise: check minbert/tokenizer.py and the checkpoint's vocab.txt",
    ),
    Check(
        "embeddings: BertEmbeddings vs written-out equation",
        1e-5,
        check_embeddings,
        "E = LayerNorm(word[ids] + position[0..T−1] + token_type[type ids]), dropout last",
        ("embeddings",),
    ),
    Check(
        "attention: scaled_dot_product_attention vs equation",
        1e-5,
        check_attention_function,
        "divide QKᵀ by √d_k (the head size), add M before the softmax, softmax over the keys",
        ("attention",),
    ),
    Check(
        "attention: BertSelfAttention vs multi-head reference",
        1e-5,
        check_self_attention,
        "split D as (B, T, nh, hs) then transpose to (B, nh, T, hs); merge back in that order; "
        "q, k, v through sites.linear",
        ("attention",),
    ),
    Check(
        "layer: BertLayer vs post-norm reference",
        1e-5,
        layer_check(with_sites=False),
        "a = LayerNorm(x + W_O·heads), y = LayerNorm(a + FFN(a)): add the sub-layer's input",
        ("layer",),
    ),
    Check(
        "layer: plug-in sites called in their places",
        1e-5,
        layer_check(with_sites=True),
        "sites.linear for attention_output/output; after_attention before the first add & norm; "
        "after_feed_forward and parallel(x, mask) before the second; after_layer on the output",
        ("layer",),
    ),
    Check(
        "bert: last_hidden_state, padded single sentences",
        1e-5,
        hidden_state_check("single"),
        BERT_HINT,
        MODEL,
    ),
    Check(
        "bert: pooler_output, padded single sentences",
        1e-5,
        pooler_check("single"),
        BERT_HINT,
        MODEL,
    ),
    Check(
        "bert: last_hidden_state, sentence pairs",
        1e-5,
        hidden_state_check("pair"),
        BERT_HINT,
        MODEL,
    ),
    Check("bert: pooler_output, sentence pairs", 1e-5, pooler_check("pair"), BERT_HINT, MODEL),
    Check(
        "bert: last_hidden_state, pairs, written-out attention",
        1e-5,
        hidden_state_check("pair", fast_attention=False),
        BERT_HINT,
        MODEL,
    ),
    Check(
        "adamw: AdamW vs torch.optim.AdamW, 100 steps",
        1e-6,
        check_adamw,
        "steps 1-6 of the AdamW docstring in that order: decay by (1 − lr·λ) first; bias "
        "corrections with the step count t",
        ("adamw",),
    ),
    Check(
        "schedule: warmup/decay vs hand values",
        1e-12,
        check_schedule,
        "not an exercise: check LinearWarmupDecay in minbert/optimizer.py",
    ),
    Check(
        "sampler: annealed_alpha vs 1 − 0.8·(e − 1)/(E − 1)",
        1e-12,
        check_annealed_alpha,
        "epochs count from 1; α = 1 at the first epoch and 0.2 at the last (1 when E = 1)",
        ("sampler",),
    ),
    Check(
        "sampler: task_probabilities vs N_i^α / Σ_j N_j^α",
        1e-12,
        check_task_probabilities,
        "raise every size to the power α, then divide by the sum",
        ("sampler",),
    ),
    Check(
        "adapter: Houlsby adapter vs h + W_up·GELU(W_down·h)",
        1e-5,
        check_adapter,
        "keep the residual: h + up(gelu(down(h))), with both biases",
        ("adapter",),
    ),
    Check(
        "lhuc: LHUC vs h ⊙ 2·σ(r)",
        1e-6,
        check_lhuc,
        "use this layer's row r[layer] and the factor 2 (2·σ(0) = 1 keeps the identity)",
        ("lhuc",),
    ),
    Check(
        "lora: LoRA linear vs W x + b + (α/r)·B A x",
        1e-5,
        check_lora_linear,
        "A first (d_in -> r), then B (r -> d_out); scale by α/r; add to y, not to x",
        ("lora",),
    ),
    Check(
        "lora: merge vs W + (α/r)·B A",
        1e-6,
        check_lora_merge,
        "delta_weight is B @ A, shaped (d_out, d_in) like the base weight",
        ("lora",),
    ),
    Check(
        "pals: PAL term vs V_D·g(V_E·x)",
        1e-5,
        check_pals,
        "encoder (V_E), then this layer's projected attention with the mask, then decoder (V_D)",
        ("pals",),
    ),
    Check(
        "smart: adversarial perturbation vs reference ascent",
        1e-6,
        check_smart,
        "δ ← Π_ε(δ + η·g/‖g‖), g the gradient of divergence(clean, f(e + δ)) w.r.t. δ",
        ("smart",),
    ),
]


def not_implemented_message(err: BaseException) -> str | None:
    """The message of a NotImplementedError in ``err`` or its causes, else None."""
    while err is not None:
        if isinstance(err, NotImplementedError):
            return str(err) or "NotImplementedError"
        err = err.__cause__ or err.__context__
    return None


def run_check(check: Check, ctx: Context) -> Result:
    """Run one check; never raises (a broken check is a FAIL, a missing exercise NOT
    IMPLEMENTED)."""
    try:
        measurement = check.run(ctx)
    except Exception as err:  # one broken check must not stop the others
        todo = not_implemented_message(err)
        detail = todo if todo is not None else f"{type(err).__name__}: {err}"
        frame = traceback.extract_tb(err.__traceback__)[-1]
        detail += f" ({Path(frame.filename).name}:{frame.lineno})"
        return Result(check, NOT_IMPLEMENTED if todo is not None else FAIL, None, detail)
    diff = measurement.max_abs_diff
    passed = diff <= check.tolerance  # NaN compares false: fails
    return Result(check, PASS if passed else FAIL, diff, "" if passed else measurement.hint)


def format_result(result: Result, width: int) -> str:
    """The check's line, and under a FAIL or NOT IMPLEMENTED what differs and what to try."""
    check = result.check
    diff = "-" if result.max_abs_diff is None else f"{result.max_abs_diff:.2e}"
    line = f"{check.name:<{width}}  max_abs_diff {diff:<9}  tol {check.tolerance:<7.0e}  "
    line += result.status
    if result.status == FAIL:
        if result.detail:
            line += f"\n    {result.detail}"
        if check.hint:
            line += f"\n    hint: {check.hint}"
    elif result.status == NOT_IMPLEMENTED:
        line += f"\n    hint: {result.detail}"
    return line


def select(checks: list[Check], names: list[str]) -> list[Check]:
    """The checks of each component in ``names`` (the part of a check's name before ':'), or
    whose name contains it; an unknown name is a ValueError."""
    chosen: list[Check] = []
    for name in names:
        found = [c for c in checks if c.component == name.lower()]
        found = found or [c for c in checks if name.lower() in c.name.lower()]
        if not found:
            components = ", ".join(dict.fromkeys(c.component for c in checks))
            raise ValueError(f"no check matches {name!r}; components: {components}")
        chosen += [c for c in found if c not in chosen]
    return [c for c in checks if c in chosen]  # in the usual order


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check minBERT against references, one independent check per component "
        "(see GUIDE.md for the exercises they grade).",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="BERT checkpoint directory (default: the packaged all-MiniLM-L6-v2)",
    )
    parser.add_argument(
        "--reference",
        metavar="FILE",
        type=Path,
        default=DEFAULT_REFERENCE,
        help="reference outputs made by scripts/make_reference.py for that checkpoint "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        default=[],
        help="run only the checks of this component (e.g. attention, lora), or whose name "
        "contains NAME; repeatable",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the checks and the exercises each depends on"
    )
    args = parser.parse_args(argv)
    try:
        checks = select(CHECKS, args.only) if args.only else CHECKS
    except ValueError as err:
        parser.error(str(err))
    width = max(len(c.name) for c in checks)
    if args.list:
        for check in checks:
            exercises = ", ".join(check.exercises) or "-"
            print(f"{check.name:<{width}}  tol {check.tolerance:<7.0e}  exercises: {exercises}")
        return 0
    if args.checkpoint is not None and not Path(args.checkpoint).is_dir():
        parser.error(f"--checkpoint {args.checkpoint}: no such directory")

    ctx = Context(args.checkpoint, args.reference)
    passed = 0
    for check in checks:
        result = run_check(check, ctx)
        print(format_result(result, width), flush=True)
        passed += result.status == PASS
    print(f"{passed} passed, {len(checks) - passed} failed")
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
