"""Checks of ``minbert/bert.py``: the embeddings, attention and layer exercises, each on its own
on the project's tiny config with random weights, then the whole model against Hugging Face.

* component checks run one module on fixed random weights and inputs and compare it with the
  equation written out here; the layer check swaps in a reference self-attention, so it does not
  need the attention exercise;
* whole-model checks (bert) compare the model with Hugging Face transformers' BertModel (eager
  attention, float32, eval mode), whose outputs ``scripts/make_reference.py`` saved in
  ``sanity_check_reference.pt`` (so transformers is not needed here): last_hidden_state on the
  real (non-padding) tokens and pooler_output, for a padded batch of single sentences and a batch
  of sentence pairs. They need the embeddings, attention and layer exercises all done.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from minbert.course.references import (
    padded_batch,
    randomize,
    ref_additive_mask,
    ref_attention,
    ref_gelu,
    ref_layer_norm,
    ref_linear,
    ref_multi_head,
)
from minbert.course.registry import Context, Measurement, check, compare, worst_of

if TYPE_CHECKING:
    from minbert.sites import LayerSites


# ----------------------------------------------------------------------------------------------
# Embeddings, attention and the layer, each on its own


@check(
    "embeddings: BertEmbeddings vs written-out equation",
    tolerance=1e-5,
    hint="E = LayerNorm(word[ids] + position[0..T−1] + token_type[type ids]), dropout last",
    exercises=("embeddings",),
)
def check_embeddings(ctx: Context) -> Measurement:
    """BertEmbeddings (eval mode) against LayerNorm(word[ids] + position[0..T−1] + type[ids])."""
    from minbert.bert import BertConfig, BertEmbeddings

    g = torch.Generator().manual_seed(1)
    config = BertConfig.tiny()
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


@check(
    "attention: scaled_dot_product_attention vs equation",
    tolerance=1e-5,
    hint="divide QKᵀ by √d_k (the head size), add M before the softmax, softmax over the keys",
    exercises=("attention",),
)
def check_attention_function(ctx: Context) -> Measurement:
    """scaled_dot_product_attention against softmax(QKᵀ/√d_k + M)·V on padded random heads."""
    from minbert.bert import scaled_dot_product_attention

    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(3, 2, 6, 5, generator=g) for _ in range(3))
    _, attention_mask = padded_batch(g, q.shape[-1])
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

    def norm(self, name: str, module: torch.nn.LayerNorm, h: torch.Tensor) -> torch.Tensor:
        return ref_layer_norm(h, module) * (1.15 if name == "attention" else 0.85) + 0.03

    def parallel(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (mask[:, 0, 0, :, None] == 0).to(x.dtype)  # (B, 1, 1, T) -> (B, T, 1)
        return 0.3 * torch.sin(x) * keep

    def after_layer(self, h: torch.Tensor) -> torch.Tensor:
        return h * (1.0 + 0.25 * torch.cos(torch.arange(h.shape[-1], dtype=h.dtype)))


def site_variants() -> list[tuple[str, LayerSites]]:
    """(name, sites): no plug-ins, and every site changing what it sees."""
    from minbert.sites import NO_SITES, LayerSites

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


@check(
    "attention: BertSelfAttention vs multi-head reference",
    tolerance=1e-5,
    hint="split D as (B, T, nh, hs) then transpose to (B, nh, T, hs); merge back in that order; "
    "q, k, v through sites.linear",
    exercises=("attention",),
)
def check_self_attention(ctx: Context) -> Measurement:
    """BertSelfAttention (eval mode), fused and written-out paths, without and with plug-in sites,
    against multi-head attention written out here."""
    from minbert.bert import BertConfig, BertSelfAttention

    g = torch.Generator().manual_seed(3)
    config = BertConfig.tiny()
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

    a = norm(LayerNorm, x + after_attention(W_O · heads))
    y = after_layer(norm(LayerNorm, a + after_feed_forward(W_2 · GELU(W_1 · a)) + parallel(x)))

    where norm(LayerNorm, h) is LayerNorm(h) without plug-ins.
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

    def norm(name: str, module: torch.nn.LayerNorm, t: torch.Tensor) -> torch.Tensor:
        return reference_sites.norm(name, module, t) if scaling else ref_layer_norm(t, module)

    heads = ref_self_attention(layer.attention.self.original, x, mask, sites)
    h = linear("attention_output", layer.attention.output.dense, heads)
    a = norm("attention", layer.attention.output.LayerNorm, x + after_attention(h))
    f = ref_gelu(linear("intermediate", layer.intermediate.dense, a))
    h = a + after_feed_forward(linear("output", layer.output.dense, f))
    if scaling:
        h = h + reference_sites.parallel(x, mask)
    return after_layer(norm("feed_forward", layer.output.LayerNorm, h))


def layer_check(with_sites: bool) -> Callable[[Context], Measurement]:
    """BertLayer (eval mode, its attention swapped for a reference one) against ``ref_layer``."""

    def run(ctx: Context) -> Measurement:
        from minbert.bert import BertConfig, BertLayer

        g = torch.Generator().manual_seed(4)
        config = BertConfig.tiny(hidden_act="gelu")
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


check(
    "layer: BertLayer vs post-norm reference",
    tolerance=1e-5,
    hint="a = LayerNorm(x + W_O·heads), y = LayerNorm(a + FFN(a)): add the sub-layer's input",
    exercises=("layer",),
)(layer_check(with_sites=False))
check(
    "layer: plug-in sites called in their places",
    tolerance=1e-5,
    hint="sites.linear for attention_output/output; after_attention before the first add & norm; "
    "after_feed_forward and parallel(x, mask) before the second; each LayerNorm through "
    "sites.norm; after_layer on the output",
    exercises=("layer",),
)(layer_check(with_sites=True))


# ----------------------------------------------------------------------------------------------
# Model against the Hugging Face reference


def hidden_state_check(batch: str, fast_attention: bool = True) -> Callable[[Context], Measurement]:
    """last_hidden_state on the real tokens of the reference batch ``batch``."""

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
    """pooler_output of the reference batch ``batch``."""

    def run(ctx: Context) -> Measurement:
        out = ctx.outputs(batch)
        expected = ctx.reference[batch]["pooler_output"]
        return compare("pooler_output", out["pooler_output"], expected, axes=("sentence", "dim"))

    return run


MODEL = ("embeddings", "attention", "layer")
BERT_HINT = (
    "the whole model: the embeddings, attention and layer checks above say which part differs"
)

check(
    "bert: last_hidden_state, padded single sentences",
    tolerance=1e-5,
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("single"))
check(
    "bert: pooler_output, padded single sentences",
    tolerance=1e-5,
    hint=BERT_HINT,
    exercises=MODEL,
)(pooler_check("single"))
check(
    "bert: last_hidden_state, sentence pairs",
    tolerance=1e-5,
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("pair"))
check(
    "bert: pooler_output, sentence pairs",
    tolerance=1e-5,
    hint=BERT_HINT,
    exercises=MODEL,
)(pooler_check("pair"))
check(
    "bert: last_hidden_state, pairs, written-out attention",
    tolerance=1e-5,
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("pair", fast_attention=False))
