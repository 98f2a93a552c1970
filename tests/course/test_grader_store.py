"""The grader's stored answer key, its dropout recording, and where it reports errors.

* ``course/reference_data.pt`` is copied into the student tree: student code that loads
  it and looks the expected output up (by the generator's seed, or by the input it was given)
  must fail every check it is tried on, and the file holds no expected output in full
  (``course/seal.py``);
* recorded dropout gives a loop over the heads the masks of one call on all of them, and says how
  the calls differ when they draw other masks;
* an error is located at the student's code: at the function whose value given code could not
  use, at a fused-attention call with a wrong argument, and a written-out equation that calls the
  fused op gets a sentence instead of a RecursionError.

Design notes: docs/design/tests.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from course import seal
from course.measure import compare, distinct
from course.registry import COURSE_DATA, FAIL

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grader_mutants import (  # noqa: E402
    ALPHA,
    BERT,
    LORA,
    LORA_ADD,
    OPT,
    SAMPLING,
    SCORES,
    ctx,
    m,
    mutated_source,
    run_own_checks,
)

__all__ = ["ctx"]  # the fixture, shared with the mutant corpus

# The best a cheat can do with each stored form: the output itself where the store held it (as
# it once did), the least-norm preimage of a projection, and nothing from a digest.
ANSWER = """\
def _answer(entry, name):
    import torch
    from course import seal
    if isinstance(entry, torch.Tensor):
        return entry.double()
    if entry["kind"] == "projection":
        shape = tuple(entry["shape"])
        u = seal.directions(name, seal.slice_shape(shape)[1])
        return (entry["values"] @ torch.linalg.pinv(u)).reshape(shape)
    return torch.zeros(entry["shape"], dtype=torch.float64)
data = _torch.load(COURSE_DATA, weights_only=True)
"""


def cheat(indent: str, code: str) -> str:
    """Replacement text for one line of a solution region: ``ANSWER`` then ``code``, at the
    line's indentation (the first line is already indented)."""
    head = "import torch as _torch\nfrom course.registry import COURSE_DATA\n"
    lines = (head + ANSWER + code).splitlines()
    return f"\n{indent}".join(lines)


MASKING_CHEAT = """\
from course.checks.mlm import MASKING_CASES
label = {seed: label for label, seed, _, _ in MASKING_CASES}[generator.initial_seed()]
case = data["mlm"]["masking"]["expected"]
masked = _answer(case[f"masked inputs ({label})"], f"masked inputs ({label})")
labels = _answer(case[f"labels ({label})"], f"labels ({label})")
return masked.round().long(), labels.round().long()"""

ALPHA_CHEAT = """\
from course.checks.sampling import EPOCHS
pairs = [(e, E) for E in EPOCHS for e in range(1, E + 1)]
stored = _answer(data["sampler"]["alpha"]["expected"]["α"], "α")
return float(stored[pairs.index((epoch, epochs))])"""

ATTENTION_CHEAT = """\
case = data["attention_function"]["train" if dropout_p else "eval"]
return _answer(case["expected"]["attention output"], "attention output").to(q.dtype)"""

LORA_CHEAT = """\
case = data["lora"]["linear"]
key = next(k for k, t in case["x"].items() if t.shape == x.shape and torch.equal(t, x.to(t.dtype)))
expected = case["train" if self.training else "eval"]["expected"][key]
return _answer(expected, key).to(y.dtype)"""

ADAMW_CHEAT = """\
state["step"] += 1
flat = [q for g in self.param_groups for q in g["params"]]
i = next(j for j, q in enumerate(flat) if q is p)
offset = sum(q.numel() for q in flat[:i])
row = _answer(data["adamw"]["expected"]["θ"], "θ")[int(state["step"]) - 1]
p.copy_(row[offset : offset + p.numel()].view_as(p))
"""

MASKING_REGION_FIRST = (
    "candidates = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids))"
)

CHEATS = [
    # (mutant, the checks the cheat targets)
    (
        m("cheat-masking", "masking", "minbert/mlm.py", (MASKING_REGION_FIRST, "")),
        ["masking: mask_tokens vs stored masks"],
    ),
    (
        m("cheat-alpha", "sampler", SAMPLING, (ALPHA, cheat("    ", ALPHA_CHEAT))),
        ["sampler: annealed_alpha vs 1 − 0.8·(e − 1)/(E − 1)"],
    ),
    (
        m("cheat-attention", "attention", BERT, (SCORES, cheat("    ", ATTENTION_CHEAT))),
        ["attention: scaled_dot_product_attention vs equation"],
    ),
    (
        m("cheat-lora", "lora", LORA, (LORA_ADD, cheat("        ", LORA_CHEAT))),
        ["lora: LoRA linear vs W x + b + (α/r)·B A x"],
    ),
    (
        m(
            "cheat-adamw",
            "adamw",
            OPT,
            ("body", "                " + cheat("                ", ADAMW_CHEAT) + "\n"),
        ),
        ["adamw: AdamW vs torch.optim.AdamW, float64, 30 steps"],
    ),
]
# the masking cheat replaces the region's first line and returns before the rest
CHEATS[0] = (
    m(
        "cheat-masking",
        "masking",
        "minbert/mlm.py",
        (MASKING_REGION_FIRST, cheat("    ", MASKING_CHEAT)),
    ),
    CHEATS[0][1],
)


@pytest.mark.parametrize("planted,targets", CHEATS, ids=lambda c: getattr(c, "id", ""))
def test_a_lookup_of_the_stored_outputs_fails(planted, targets, ctx, monkeypatch) -> None:
    """Student code that loads the stored file and looks its output up by the generator's seed
    or by its input finds the entry (the check measures what it returns: no exception) but not
    the output, so the check fails."""
    results = run_own_checks(planted, ctx, monkeypatch)
    for name in targets:
        result = results[name]
        assert result.status == FAIL, (planted.id, name, result.max_abs_diff)
        assert result.max_abs_diff is not None, (planted.id, result.detail)  # looked up, ran


def stored_tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):
        return [t for v in value.values() for t in stored_tensors(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in stored_tensors(v)]
    return []


def sealed_entries(value, path: str = ""):
    """(path, entry) of every stored expected output and known mistake's output: the values of
    a case's "expected" and of each of its "mistakes"."""
    if not isinstance(value, dict):
        return
    if "expected" in value:
        for name, entry in value["expected"].items():
            yield f"{path}/expected/{name}", entry
        for mistake, outputs in value.get("mistakes", {}).items():
            for name, entry in outputs.items():
                yield f"{path}/mistakes/{mistake}/{name}", entry
        return
    for key, v in value.items():
        yield from sealed_entries(v, f"{path}/{key}")


def true_outputs() -> dict[str, torch.Tensor]:
    """What the full tree computes on the stored inputs, for several checks."""
    from course.checks.mlm import MASKING_CASES, MLM_VOCAB, mlm_batch
    from course.checks.sampling import EPOCHS
    from minbert.bert import scaled_dot_product_attention
    from minbert.mlm import mask_tokens
    from minbert.sampling import annealed_alpha

    data = torch.load(COURSE_DATA, weights_only=True)
    a = data["attention_function"]
    out = {"attention": scaled_dot_product_attention(a["q"], a["k"], a["v"], a["mask"], 0.0)}
    ids, attention_mask, continuation = mlm_batch()
    v = MLM_VOCAB
    for label, seed, p, whole_word in MASKING_CASES:
        g = torch.Generator().manual_seed(seed)
        cont = continuation if whole_word else None
        masked, labels = mask_tokens(
            ids.clone(), attention_mask, v["special"], v["mask"], v["size"], g, p, cont
        )
        out[f"masked {label}"], out[f"labels {label}"] = masked, labels
    pairs = [(e, E) for E in EPOCHS for e in range(1, E + 1)]
    out["α"] = torch.tensor([annealed_alpha(e, E) for e, E in pairs], dtype=torch.float64)
    return out


def test_the_store_holds_no_expected_output_in_full() -> None:
    """Every expected output (and known mistake's output) is sealed, a projection keeps fewer
    numbers per slice than the slice has, and no stored tensor is what the full tree computes."""
    data = torch.load(COURSE_DATA, weights_only=True)
    entries = list(sealed_entries(data))
    assert len(entries) > 100
    for where, entry in entries:
        assert isinstance(entry, dict) and entry["kind"] in ("exact", "rounded", "projection"), (
            where
        )
        if entry["kind"] == "projection":
            _, m_ = seal.slice_shape(tuple(entry["shape"]))
            assert entry["values"].shape[-1] * 4 <= m_ or entry["values"].shape[-1] == 1, where
    tensors = stored_tensors(data)
    for name, out in true_outputs().items():
        flat = out.detach().double().reshape(-1)
        for t in tensors:
            if t.numel() == flat.numel():
                same = torch.allclose(t.double().reshape(-1), flat, atol=1e-6)
                assert not same, f"the store holds {name} in full"


def test_the_whole_model_reference_holds_no_output_in_full() -> None:
    """sanity_check_reference.pt is copied into the student tree too: its outputs are sealed."""
    reference = torch.load(COURSE_DATA.parents[1] / "sanity_check_reference.pt", weights_only=True)
    for batch in ("single", "pair"):
        for name in ("last_hidden_state", "pooler_output"):
            entry = reference[batch][name]
            assert isinstance(entry, dict) and entry["kind"] == "projection", (batch, name)
            assert len(entry["digests"]) == torch.Size(entry["shape"]).numel()


def stored_masks(data: object, path: str = "") -> dict[str, torch.Tensor]:
    """Every padding mask of the stored inputs: path -> the mask."""
    if isinstance(data, dict):
        found = {}
        for key, value in data.items():
            found |= stored_masks(value, f"{path}/{key}")
        return found
    is_mask = isinstance(data, torch.Tensor) and path.rsplit("/", 1)[-1].endswith("mask")
    return {path: data} if is_mask else {}


def test_every_stored_mask_has_padding_and_a_full_sentence() -> None:
    """Code that ignores the mask, or reads it the wrong way round, changes what the checks see:
    each mask of the stored inputs pads some sentence and leaves another whole (additive masks:
    padding < 0; 0/1 masks: padding 0)."""
    masks = stored_masks(torch.load(COURSE_DATA, weights_only=True))
    assert len(masks) >= 5, sorted(masks)
    for path, mask in masks.items():
        real = (mask == 0) if mask.is_floating_point() else (mask == 1)
        per_sentence = real.reshape(mask.shape[0], -1)
        assert not per_sentence.all(), f"{path}: no padding"
        assert per_sentence.all(1).any(), f"{path}: no sentence without padding"


def test_a_projection_never_exceeds_the_largest_difference() -> None:
    """The tolerance carries over: a projected difference is at most max |got − expected|, so
    every output within the max-abs tolerance passes; a projected difference is seen where a
    difference is."""
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(3, 6, 32, generator=g)
    for _ in range(20):
        got = expected + (torch.rand(3, 6, 32, generator=g) - 0.5) * 2e-5  # within 1e-5
        p = (seal.project("x", got) - seal.project("x", expected)).abs().max()
        assert p <= (got - expected).abs().max() + 1e-15
    wrong = expected.clone()
    wrong[1, 2] += 0.1
    p = (seal.project("x", wrong) - seal.project("x", expected)).abs().amax(-1)
    assert p[1, 2] > 1e-3 and p.argmax() == 1 * 6 + 2


def test_one_value_beyond_the_tolerance_fails_where_the_projections_miss_it() -> None:
    """The digests decide: one value 3 tolerances off moves a projection by far less than the
    tolerance, and the check still fails there, naming the value; within the tolerance every
    value passes."""
    from course.measure import measure_sealed
    from course.observed import Observed

    expected = torch.randn(3, 70, generator=torch.Generator().manual_seed(1))
    sealed = seal.seal("w", expected, 1e-5)
    got = expected.clone()
    got[2, 5] += 3e-5
    found = measure_sealed("w", Observed("w", got, sealed), sealed)
    assert found.max_abs_diff > 1e-5 and "token 2, dim 5" in found.hint, found
    near = expected + (torch.rand(3, 70, generator=torch.Generator().manual_seed(2)) - 0.5) * 2e-5
    assert measure_sealed("w", Observed("w", near, sealed), sealed).max_abs_diff <= 1e-5


def test_rounded_values_pass_within_the_tolerance_and_fail_beyond() -> None:
    from course.measure import measure_sealed
    from course.observed import Observed

    expected = torch.tensor([0.6, 0.2, 1.0], dtype=torch.float64)
    sealed = seal.seal("α", expected, 1e-12)
    for shift, passes in ((0.0, True), (9e-13, True), (-9e-13, True), (2e-12, False)):
        got = expected + shift
        m_ = measure_sealed("α", Observed("α", got, sealed), sealed)
        assert (m_.max_abs_diff <= 1e-12) == passes, (shift, m_)


# ----------------------------------------------------------------------------------------------
# Dropout recording


def test_a_loop_over_the_heads_draws_the_masks_of_one_call() -> None:
    import torch.nn.functional as F

    from course.dropout import recorded_dropout

    x = torch.ones(3, 4, 6, 6)
    with recorded_dropout(7):
        whole = F.dropout(x, 0.3)
        after = F.dropout(torch.ones(3, 6, 8), 0.3)
    with recorded_dropout(7):
        heads = torch.cat([F.dropout(x[:, [h]], 0.3) for h in range(4)], 1)
        after_loop = F.dropout(torch.ones(3, 6, 8), 0.3)
    with recorded_dropout(7):
        slices = torch.stack([F.dropout(x[:, h], 0.3) for h in range(4)], 1)
    assert torch.equal(whole, heads) and torch.equal(whole, slices)
    assert torch.equal(after, after_loop)
    assert not torch.equal(whole[:, 0], whole[:, 1])


def test_the_message_says_how_the_dropout_calls_differ(ctx, monkeypatch) -> None:
    planted = m(
        "heads-dropout-twice",
        "attention",
        BERT,
        (
            "y = scaled_dot_product_attention(q, k, v, mask, dropout_p)",
            "y = F.dropout(scaled_dot_product_attention(q, k, v, mask, dropout_p), dropout_p)",
        ),
    )
    result = run_own_checks(planted, ctx, monkeypatch)[
        "attention: BertSelfAttention vs multi-head reference"
    ]
    assert result.status == FAIL
    assert "in training mode your code called dropout" in result.detail, result.detail
    assert "the reference called dropout twice on (3, 4, 6, 6) with p 0.1" in result.detail


def test_numbers_near_the_tolerance_print_with_digits_that_differ() -> None:
    assert distinct(20.99751, 20.99752) == ("20.99751", "20.99752")
    got, expected = torch.tensor([20.997512]), torch.tensor([20.997501])
    hint = compare("y", got, expected, axes=("dim",)).hint
    a, b = hint.split("got ")[1].split(", expected ")
    assert a != b, hint


# ----------------------------------------------------------------------------------------------
# Where errors are reported


def line_of(planted, text: str) -> int:
    source = mutated_source(planted)
    return next(i for i, s in enumerate(source.splitlines(), 1) if text in s)


def test_an_error_in_given_code_is_located_at_the_students_function(ctx, monkeypatch) -> None:
    """delta_weight returning (d_out, d_in − 1): LoRA.merge (given code) fails adding it to the
    (d_out, d_in) weight, and the report names the student's delta_weight and its line. (A
    transposed ΔW is named before merging: ``test_grader_mutants``, lora-delta-transposed.)"""
    planted = m(
        "lora-delta-wrong-shape",
        "lora",
        LORA,
        ("return self.B @ self.A", "return self.B @ self.A[:, 1:]"),
    )
    result = run_own_checks(planted, ctx, monkeypatch)["lora: merge vs W + (α/r)·B A"]
    assert result.status == FAIL and result.max_abs_diff is None
    merge_line = line_of(planted, "weight += (self.scale * update.delta_weight())")
    definition = line_of(planted, "def delta_weight(self)")
    assert f"raised in given code at minbert/plugins/lora.py:{merge_line}" in result.detail
    assert f"your LowRankUpdate.delta_weight returned: minbert/plugins/lora.py:{definition}" in (
        result.detail
    )


def test_a_wrong_argument_of_the_fused_call_is_located_at_that_call(ctx, monkeypatch) -> None:
    """A mask that cannot broadcast, passed to the fused op in training only: torch's own checks
    report it at the student's fused call, not in the (correct) written-out equation the grader
    routes training through."""
    call = "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)"
    wrong = (
        "y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask.squeeze(1) if self.training "
        "else mask, dropout_p=dropout_p)"
    )
    planted = m("fused-wrong-mask", "attention", BERT, (call, wrong))
    result = run_own_checks(planted, ctx, monkeypatch)[
        "attention: BertSelfAttention vs multi-head reference"
    ]
    assert result.status == FAIL and result.max_abs_diff is None
    assert f"(minbert/bert.py:{line_of(planted, 'mask.squeeze(1)')})" in result.detail


def test_a_written_out_equation_calling_the_fused_op_gets_a_sentence(ctx, monkeypatch) -> None:
    fused = "return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)"
    planted = m("written-out-calls-fused", "attention", BERT, (SCORES, fused))
    results = run_own_checks(planted, ctx, monkeypatch)
    line = line_of(planted, fused)
    for result in results.values():
        assert result.status == FAIL and "RecursionError" not in result.detail
        assert "write the equation out there" in result.detail, result.detail
        assert f"(minbert/bert.py:{line})" in result.detail, result.detail
