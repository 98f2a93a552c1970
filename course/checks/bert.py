"""Checks of ``minbert/bert.py``: the embeddings, attention and layer exercises, each on its own
on the project's tiny config, then the whole model against Hugging Face.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F

from course.dropout import FUSED, MODES, DropoutRecorder, mode, recorded_dropout
from course.gradients import gradient_failure
from course.locate import locate
from course.measure import (
    Measurement,
    Observed,
    backward_problem,
    compare,
    measure_sealed,
    worst_of,
)
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import Context, check, student_functions
from course.untouched import Untouched
from minbert.sites import SiteHandler

# BertConfig.tiny overrides of each component check (a small vocabulary keeps the stored
# embedding table small).
EMBEDDINGS_CONFIG = {"vocab_size": 50}
ATTENTION_CONFIG: dict = {}
LAYER_CONFIG = {"hidden_act": "gelu"}
# The two paths of BertSelfAttention (``use_fast_path`` True, False), each a case of its check.
PATHS = ("fused", "written-out")
# The axes of a layer's or an attention's arguments, as messages name positions in them.
LAYER_AXES = {"x": ("sentence", "token", "dim"), "mask": ("sentence", "head", "query", "token")}


# ----------------------------------------------------------------------------------------------
# Embeddings, attention and the layer, each on its own


# The mistakes the embeddings check sees by themselves (``course/outcome.py``: ``observed``).
EMBEDDINGS_SEEN = {
    "positions not cut": "the position ids are not cut to the sentence length T: the whole "
    "position_ids buffer (all max_position_embeddings positions) is added to T tokens; take "
    "its first T, position_ids[:, :T]",
}


@check(
    "embeddings: BertEmbeddings vs written-out equation",
    tolerance=1e-5,
    judge=stored_cases(*[("embeddings", name) for name in MODES]),
    hint="the sum of the word, position (0..T−1) and token type embeddings, then LayerNorm, then "
    "dropout (checked in eval and training mode)",
    exercises=("embeddings",),
    seen=EMBEDDINGS_SEEN,
)
def check_embeddings(ctx: Context) -> Outputs:
    """BertEmbeddings on stored weights and ids, eval and training mode, against the stored
    dropout(LayerNorm(word[ids] + position[0..T−1] + type[ids])); the ids and the buffers must
    stay as they were, in training mode the backward pass must go through, and the gradients
    must reach every table and the LayerNorm (``course/gradients.py``)."""
    from minbert.bert import BertConfig, BertEmbeddings

    data = ctx.course_data["embeddings"]
    config = BertConfig.tiny(**EMBEDDINGS_CONFIG)
    embeddings = BertEmbeddings(config)
    embeddings.load_state_dict(data["state"])
    found = []
    for name in MODES:
        ids = {n: data[n].clone() for n in ("input_ids", "token_type_ids")}
        kept = Untouched(ids, embeddings, {n: ("sentence", "token") for n in ids})
        try:
            with (
                mode(embeddings, name, ctx.course_data["seed"]) as recorder,
                torch.set_grad_enabled(name == "train"),
            ):
                got = embeddings(ids["input_ids"], ids["token_type_ids"])
        except RuntimeError as err:
            if not positions_not_cut(err, config.max_position_embeddings):
                raise
            said = f"{type(err).__name__}: {err} ({locate(err, student_functions(ctx))})"
            return problem(said, "positions not cut")
        if said := kept.problem():
            return problem(f"BertEmbeddings ({name} mode) {said}")
        if name == "train" and (said := backward_problem(got, list(embeddings.parameters()))):
            return problem(said)
        shown = {"embeddings": f"the embeddings ({name} mode)"}
        found.append(graded({"embeddings": got}, calls=recorder.calls, names=shown))
    ids = {n: data[n] for n in ("input_ids", "token_type_ids")}
    failed = gradient_failure(lambda m, *a: m(*a), ids, embeddings, "BertEmbeddings")
    return with_gradient(outputs(*found), failed)


def positions_not_cut(err: RuntimeError, positions: int) -> bool:
    """Whether ``err`` is the shape error of adding all ``positions`` position embeddings (the
    uncut position_ids buffer, or the whole table) to a sentence of fewer tokens: torch names
    both sizes, and the table's is ``positions``."""
    said = str(err)
    return "must match the size of tensor" in said and f"({positions})" in said


@check(
    "attention: scaled_dot_product_attention vs equation",
    tolerance=1e-5,
    judge=stored_cases(*[("attention_function", name) for name in MODES]),
    hint="softmax(QKᵀ/√d_k + M)·V, with dropout on the attention probabilities",
    exercises=("attention",),
    functions=("scaled_dot_product_attention",),
)
def check_attention_function(ctx: Context) -> Outputs:
    """scaled_dot_product_attention on stored padded random heads, without and with dropout (under
    recorded dropout), against the stored softmax(QKᵀ/√d_k + M)·V; torch's fused op raises
    there (``no_fused_attention``). With dropout it runs as in training, with gradients enabled
    (recorded dropout multiplies out of place, so autograd goes through its masks), and the
    backward pass must go through: an in-place operation on a tensor autograd saved gives the
    right numbers but fails there; without dropout the gradients must reach q, k and v
    (``course/gradients.py``). The recorder's calls go to ``grade`` for the message."""
    from minbert.bert import scaled_dot_product_attention

    data = ctx.course_data["attention_function"]
    axes = ("sentence", "head", "token", "dim")
    found = []
    for name in MODES:
        p = data["dropout_p"] if name == "train" else 0.0
        context = recorded_dropout(ctx.course_data["seed"]) if p else contextlib.nullcontext()
        qkv = [data[t].clone().requires_grad_(name == "train") for t in ("q", "k", "v")]
        arguments = dict(zip(("q", "k", "v", "mask"), [*qkv, data["mask"].clone()]))
        kept = Untouched(arguments, axes=dict.fromkeys(arguments, axes))
        with context as recorder, no_fused_attention(), torch.set_grad_enabled(name == "train"):
            got = scaled_dot_product_attention(*arguments.values(), p)
        if said := kept.problem():
            return problem(f"scaled_dot_product_attention (dropout_p {p}) {said}")
        if name == "train" and (said := backward_problem(got, qkv)):
            return problem(said)
        calls = recorder.calls if recorder is not None else None
        shown = {"attention output": f"the attention output (dropout_p {p})"}
        found.append(graded({"attention output": got}, "", axes, calls, shown))
    mask = data["mask"].double()
    with no_fused_attention():
        failed = gradient_failure(
            lambda _, q, k, v: scaled_dot_product_attention(q, k, v, mask, 0.0),
            {name: data[name] for name in ("q", "k", "v")},
        )
    return with_gradient(outputs(*found), failed)


class ScalingSites(SiteHandler):
    """Plug-in sites that change every value they see, each in its own way, so that a site not
    called, called twice or called in the wrong place changes the output. Written here: nothing
    in it comes from the plug-ins the course exercises."""

    task = None  # the task of the forward, as the attached plug-ins hold it: none here
    LINEAR_SCALE = {
        "query": 1.1,
        "key": 0.9,
        "value": 1.2,
        "attention_output": 0.8,
        "intermediate": 1.3,
        "output": 0.7,
    }

    def linear(self, layer, task, name, module, x, y):
        return (x @ module.weight.T + module.bias) * self.LINEAR_SCALE[name] + 0.05

    def after_attention(self, layer, task, h):
        return h + 0.5 * torch.tanh(h)

    def after_feed_forward(self, layer, task, h):
        return 0.6 * h - 0.1

    def norm(self, layer, task, name, module, h, y):
        normed = F.layer_norm(h, module.normalized_shape, module.weight, module.bias, module.eps)
        return normed * (1.15 if name == "attention" else 0.85) + 0.03

    def parallel(self, layer, task, x, mask):
        keep = (mask[:, 0, 0, :, None] == 0).to(x.dtype)  # (B, 1, 1, T) -> (B, T, 1)
        return 0.3 * torch.sin(x) * keep

    def after_layer(self, layer, task, h):
        return h * (1.0 + 0.25 * torch.cos(torch.arange(h.shape[-1], dtype=h.dtype)))


def site_variants() -> list[tuple[str, ScalingSites | None]]:
    """(name, sites): no plug-ins, and every site changing what it sees, as plug-ins acting in
    every place they can; the name is the stored output's, and the student's words (``shown``)."""
    return [("no plug-ins", None), ("plug-ins acting", ScalingSites())]


def shown(output: str, where: str, sites: ScalingSites | None) -> str:
    """What a message calls an output graded with or without plug-ins acting: "the attention
    output (fused path, eval mode, with plug-ins acting)"."""
    return f"{output} ({where}{', with plug-ins acting' if sites is not None else ''})"


@contextlib.contextmanager
def sites_hooked(module: torch.nn.Module, sites: ScalingSites | None) -> Iterator[None]:
    """``sites`` acting on ``module`` for the duration as a plug-in's do, through hooks on its
    own modules (``minbert/sites.py``): a BertSelfAttention's query, key and value, or a layer's
    (its self-attention the stand-in) other linear maps, dropouts, LayerNorms and output. The
    student's code calls its modules and the sites follow; None: nothing hooked."""
    from minbert.sites import Site, hook_layer

    handles = []
    if sites is not None and hasattr(module, "attention"):
        handles = hook_layer(module, 0, sites, ("attention_output", "intermediate", "output"))
    elif sites is not None:
        handles = [
            getattr(module, name).register_forward_hook(Site(sites, 0, name).linear)
            for name in ("query", "key", "value")
        ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


WRITTEN_OUT_CALLS_FUSED = (
    "the written-out scaled_dot_product_attention calls torch's fused "
    "F.scaled_dot_product_attention: write the equation out there, softmax(QKᵀ/√d_k + M)·V "
    "(the fused op draws its own dropout masks, which the grader cannot see)"
)


@contextlib.contextmanager
def no_fused_attention() -> Iterator[None]:
    """While the written-out equation is graded, torch's fused attention raises
    ``WRITTEN_OUT_CALLS_FUSED`` (reported at the student's call)."""
    saved = F.scaled_dot_product_attention

    def fused(*args, **kwargs):
        raise RuntimeError(WRITTEN_OUT_CALLS_FUSED)

    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = saved


@contextlib.contextmanager
def fused_recorded(recorder: DropoutRecorder, seed: int) -> Iterator[None]:
    """In eval mode, torch's fused attention called with dropout_p > 0 drops out, with masks
    no recorder sees: each such call is recorded in ``recorder.calls`` as (the probabilities'
    shape, dropout_p, ``FUSED``), so the message names it (``explain_calls``,
    ``eval_mode_mistakes``), and runs under a seeded generator, so the message's numbers are
    the same from run to run."""
    saved = F.scaled_dot_product_attention

    def fused(query, key, value, attn_mask=None, dropout_p=0.0, *args, **kwargs):
        if not float(dropout_p) > 0.0:
            return saved(query, key, value, attn_mask, dropout_p, *args, **kwargs)
        shape = (*query.shape[:-1], key.shape[-2])
        recorder.calls.append((tuple(shape), float(dropout_p), FUSED))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return saved(query, key, value, attn_mask, dropout_p, *args, **kwargs)

    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = saved


@contextlib.contextmanager
def fused_through_written_out() -> Iterator[None]:
    """In training mode, torch's fused attention draws its own dropout masks, which recorded
    dropout cannot see: route it through the student's written-out scaled_dot_product_attention
    (the same exercise) for the duration. The arguments are first checked by torch's own fused
    op (without dropout), so a wrong argument is reported at the student's fused call, not in
    the written-out equation; the written-out equation calling the fused op is a sentence, not a
    RecursionError."""
    from minbert import bert

    saved = F.scaled_dot_product_attention
    inside: list[bool] = []

    def fused(
        query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, **kwargs
    ):
        if inside:
            raise RuntimeError(WRITTEN_OUT_CALLS_FUSED)
        options = {"is_causal": is_causal, "scale": scale, **kwargs}
        saved(query, key, value, attn_mask=attn_mask, dropout_p=0.0, **options)  # torch's checks
        T, S = query.shape[-2], key.shape[-2]
        mask = torch.zeros(T, S, dtype=query.dtype)
        if is_causal:
            mask = mask.masked_fill(~torch.ones(T, S, dtype=torch.bool).tril(), float("-inf"))
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            mask = mask.masked_fill(~attn_mask, float("-inf"))
        elif attn_mask is not None:
            mask = mask + attn_mask
        if scale is not None:  # the written-out equation divides by √d_k
            query = query * (scale * query.shape[-1] ** 0.5)
        inside.append(True)
        try:
            return bert.scaled_dot_product_attention(query, key, value, mask, dropout_p)
        finally:
            inside.pop()

    F.scaled_dot_product_attention = fused
    try:
        yield
    finally:
        F.scaled_dot_product_attention = saved


SELF_ATTENTION_TOLERANCE = 1e-5
SELF_ATTENTION_CASES = [("self_attention", path, name) for path in PATHS for name in MODES]


def judge_self_attention(ctx: Context, out: Outputs) -> Measurement:
    """The worst of the stored cases (``stored_cases``). In training mode the fused path runs the
    student's written-out equation (``fused_through_written_out``), so a mistake there shows on
    both paths: when the fused path agrees in eval mode and the written-out path does not, and
    both differ in training mode, the report is the written-out path's, in the words of the
    written-out equation. (A mistake of the equation in training mode only, such as its dropout,
    looks like one of BertSelfAttention's dropout and is reported as before.)"""
    cases = out["cases"]
    if len(cases) != len(SELF_ATTENTION_CASES):
        raise ValueError(f"{len(cases)} cases computed, {len(SELF_ATTENTION_CASES)} expected")
    measured = {
        path[1:]: stored_cases(path)(ctx, {"cases": [case]})
        for path, case in zip(SELF_ATTENTION_CASES, cases)
    }
    worst = worst_of(list(measured.values()))

    def agrees(path: str, name: str) -> bool:
        return measured[path, name].max_abs_diff <= SELF_ATTENTION_TOLERANCE

    in_training = not agrees("fused", "train") and not agrees("written-out", "train")
    if not (agrees("fused", "eval") and not agrees("written-out", "eval") and in_training):
        return worst
    written = worst_of([measured["written-out", name] for name in MODES])
    said = (
        f"{written.hint}; the fused path runs your written-out scaled_dot_product_attention in "
        "training mode here (so that dropout draws the reference's masks) and differs there "
        "too: the mistake is in the written-out equation (see its own check, "
        "'attention: scaled_dot_product_attention vs equation')"
    )
    return Measurement(worst.max_abs_diff, said, worst.mistakes)


@check(
    "attention: BertSelfAttention vs multi-head reference",
    tolerance=SELF_ATTENTION_TOLERANCE,
    judge=judge_self_attention,
    hint="project x with self.query, self.key, self.value, split D into nh heads of hs (heads "
    "before tokens), attend, and merge the heads back in the same order; attention dropout in "
    "training",
    exercises=("attention",),
)
def check_self_attention(ctx: Context) -> Outputs:
    """BertSelfAttention on stored weights, fused and written-out paths, without and with plug-in
    sites, in eval and training mode, against stored multi-head attention. In training mode the
    fused op runs through the written-out equation under recorded dropout; in eval mode a fused
    call with dropout_p > 0 is recorded (``fused_recorded``). On both paths the gradients must
    reach x and the query, key and value maps (``course/gradients.py``)."""
    from minbert.bert import BertConfig, BertSelfAttention

    data, seed = ctx.course_data["self_attention"], ctx.course_data["seed"]
    attention = BertSelfAttention(BertConfig.tiny(**ATTENTION_CONFIG))
    attention.load_state_dict(data["state"])
    found = []
    for path in PATHS:
        attention.use_fast_path = path == "fused"
        for name in MODES:
            got, names = {}, {}
            with (
                mode(attention, name, seed) as recorder,
                fused_through_written_out() if name == "train" else fused_recorded(recorder, seed),
            ):
                for label, sites in site_variants():  # one mask sequence, in this order
                    where = f"{path} path, {name} mode"
                    names[label] = shown("the attention output", where, sites)
                    arguments = {"x": data["x"].clone(), "mask": data["mask"].clone()}
                    kept = Untouched(arguments, attention, LAYER_AXES)
                    with sites_hooked(attention, sites):
                        got[label] = attention(*arguments.values())
                    if said := kept.problem():
                        return problem(f"BertSelfAttention ({where}) {said}")
            found.append(graded(got, calls=recorder.calls, names=names))
    mask = data["mask"].double()
    failed = None
    for path in PATHS:
        attention.use_fast_path = path == "fused"
        with fused_through_written_out():
            failed = failed or gradient_failure(
                lambda m, x: m(x, mask),
                {"x": data["x"]},
                attention,
                "BertSelfAttention",
                f"BertSelfAttention ({path} path)",
            )
    attention.use_fast_path = True
    return with_gradient(outputs(*found), failed)


class StandInSelfAttention(torch.nn.Module):
    """Stands in for the layer's BertSelfAttention in the layer check, so that check needs no
    attention exercise: not attention, a fixed map of the input and the padding mask,
    tanh(x W + b) on the real tokens plus 0.1·x."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.mix = torch.nn.Linear(hidden_size, hidden_size)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        keep = (mask[:, 0, 0, :, None] == 0).to(x.dtype)  # (B, 1, 1, T) -> (B, T, 1)
        return torch.tanh(self.mix(x)) * keep + 0.1 * x


def layer_check(with_sites: bool) -> Callable[[Context], Outputs]:
    """BertLayer (its attention swapped for a stand-in) on stored weights, eval and training
    mode, against the stored post-norm layer. Training mode runs as training does, under
    recorded dropout with gradients enabled inside ``mode`` (which turns them off), and the
    backward pass must go through: an in-place residual add on a tensor autograd saved gives the
    right numbers but fails there."""

    def run(ctx: Context) -> Outputs:
        from minbert.bert import BertConfig, BertLayer

        data = ctx.course_data["layer"]
        config = BertConfig.tiny(**LAYER_CONFIG)
        layer = BertLayer(config)
        layer.attention.self = StandInSelfAttention(config.hidden_size)
        layer.load_state_dict(data["state"])
        sites = site_variants()[1 if with_sites else 0][1]
        found = []
        for name in MODES:
            x = data["x"].clone().requires_grad_(name == "train")
            kept = Untouched({"x": x, "mask": data["mask"].clone()}, layer, LAYER_AXES)
            with (
                mode(layer, name, ctx.course_data["seed"]) as recorder,
                torch.set_grad_enabled(name == "train"),
                sites_hooked(layer, sites),
            ):
                got = layer(*kept.arguments.values())
            if said := kept.problem():
                return problem(f"BertLayer ({name} mode) {said}")
            if name == "train" and (said := backward_problem(got, [x])):
                return problem(said)
            names = {"layer output": shown("the layer output", f"{name} mode", sites)}
            found.append(graded({"layer output": got}, calls=recorder.calls, names=names))
        mask = data["mask"].double()
        with sites_hooked(layer, sites):
            failed = gradient_failure(lambda m, x: m(x, mask), {"x": data["x"]}, layer, "BertLayer")
        return with_gradient(outputs(*found), failed)

    return run


check(
    "layer: BertLayer vs post-norm reference",
    tolerance=1e-5,
    judge=stored_cases(*[("layer", "plain", name) for name in MODES]),
    hint="two post-norm sub-layers: a = LayerNorm(x + dropout(attention projected)), then "
    "LayerNorm(a + dropout(FFN(a))); each adds its own input",
    exercises=("layer",),
)(layer_check(with_sites=False))
check(
    "layer: plug-ins act through its modules",
    tolerance=1e-5,
    judge=stored_cases(*[("layer", "sites", name) for name in MODES]),
    hint="call the layer's own modules (self.dense, self.dropout, self.LayerNorm, the "
    "sub-modules) rather than F.linear, F.dropout or F.layer_norm on their weights: plug-ins act "
    "on what each module returns",
    exercises=("layer",),
)(layer_check(with_sites=True))


# ----------------------------------------------------------------------------------------------
# Model against the Hugging Face reference


BERT_TOLERANCE = 1e-5


def whole_model(name: str, got: torch.Tensor, expected, axes: tuple[str, ...]) -> Measurement:
    """A whole-model output against the reference file's: sealed (the reference script stores
    digests and projections, so the file is no answer key), or a tensor in a reference made by
    an older script."""
    if isinstance(expected, torch.Tensor):
        return compare(name, got, expected, axes=axes)
    return measure_sealed(name, Observed(name, got, expected), expected, axes)


def hidden_state_check(batch: str, fast_attention: bool = True) -> Callable[[Context], Outputs]:
    """last_hidden_state on the real tokens of the reference batch ``batch`` (padding zeroed:
    it is not compared)."""

    def run(ctx: Context) -> Outputs:
        real = ctx.reference[batch]["attention_mask"].bool()[..., None]
        out = ctx.outputs(batch, fast_attention)
        if said := ctx.changed(batch, fast_attention):
            return problem(f"BertModel {said}")
        return {"last_hidden_state": torch.where(real, out["last_hidden_state"], 0.0)}

    return run


def judge_hidden_state(batch: str) -> Callable[[Context, Outputs], Measurement]:
    """last_hidden_state against the reference's (its padding zeroed too, if it is in full)."""

    def judge(ctx: Context, out: Outputs) -> Measurement:
        expected = ctx.reference[batch]["last_hidden_state"]
        if isinstance(expected, torch.Tensor):
            real = ctx.reference[batch]["attention_mask"].bool()[..., None]
            expected = torch.where(real, expected, 0.0)
        got = out["last_hidden_state"]
        return whole_model("last_hidden_state", got, expected, ("sentence", "token", "dim"))

    return judge


def pooler_check(batch: str) -> Callable[[Context], Outputs]:
    """pooler_output of the reference batch ``batch``."""

    def run(ctx: Context) -> Outputs:
        out = ctx.outputs(batch)
        if said := ctx.changed(batch):
            return problem(f"BertModel {said}")
        return {"pooler_output": out["pooler_output"]}

    return run


def judge_pooler(batch: str) -> Callable[[Context, Outputs], Measurement]:
    """pooler_output against the reference's."""

    def judge(ctx: Context, out: Outputs) -> Measurement:
        expected = ctx.reference[batch]["pooler_output"]
        return whole_model("pooler_output", out["pooler_output"], expected, ("sentence", "dim"))

    return judge


MODEL = ("embeddings", "attention", "layer")
BERT_HINT = (
    "the whole model: the embeddings, attention and layer checks above say which part differs"
)

check(
    "bert: last_hidden_state, padded single sentences",
    tolerance=BERT_TOLERANCE,
    judge=judge_hidden_state("single"),
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("single"))
check(
    "bert: pooler_output, padded single sentences",
    tolerance=BERT_TOLERANCE,
    judge=judge_pooler("single"),
    hint=BERT_HINT,
    exercises=MODEL,
)(pooler_check("single"))
check(
    "bert: last_hidden_state, sentence pairs",
    tolerance=BERT_TOLERANCE,
    judge=judge_hidden_state("pair"),
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("pair"))
check(
    "bert: pooler_output, sentence pairs",
    tolerance=BERT_TOLERANCE,
    judge=judge_pooler("pair"),
    hint=BERT_HINT,
    exercises=MODEL,
)(pooler_check("pair"))
check(
    "bert: last_hidden_state, pairs, written-out attention",
    tolerance=BERT_TOLERANCE,
    judge=judge_hidden_state("pair"),
    hint=BERT_HINT,
    exercises=MODEL,
)(hidden_state_check("pair", fast_attention=False))
