"""Checks of ``minbert/mlm.py``: BERT's masking (the ``masking`` exercise) and the MLM loss (the
``mlm-loss`` exercise), on a stored made-up batch, against stored outputs.

The masking is graded exactly: ``mask_tokens``' docstring fixes the order of its three random
draws, so with the same seed a correct implementation gives the same masks, token for token; a
failure is compared with the masks that common mistakes give (specials chosen, no 80/10/10
split, labels everywhere, ...). ``tests/model/test_mlm.py`` checks the statistics over many draws.
"""

from __future__ import annotations

import torch

from course.gradients import gradient_failure
from course.measure import Measurement, grade, not_float32, under_autocast
from course.outcome import Outputs, problem, with_gradient
from course.registry import Context, check
from course.untouched import Untouched

# A made-up vocabulary: ids 0-3 special, 4-29 whole words, 30-39 "##" pieces.
MLM_VOCAB = {"size": 40, "pad": 0, "cls": 1, "sep": 2, "mask": 3, "special": [0, 1, 2, 3]}
# (label, seed, probability, whole-word) of each masking graded.
MASKING_CASES = (
    ("tokens, p 0.15", 21, 0.15, False),
    ("tokens, p 0.5", 22, 0.5, False),
    ("whole words, p 0.3", 23, 0.3, True),
)
MLM_LOSS_TOLERANCE = 1e-5
IGNORE = -100


COUNTS = ("chosen", "[MASK]", "another token", "kept")


def masking_counts(
    original: torch.Tensor, masked: torch.Tensor, labels: torch.Tensor
) -> torch.Tensor:
    """(sentences, 4): in each sentence, how many positions a masking chose (labelled), and what
    each became: [MASK], another token, or itself (kept); the order of ``COUNTS``. Stored for the
    reference, these counts say in which sentence a masking that differs goes wrong without
    saying which positions the reference chose."""
    chosen = labels != IGNORE
    became_mask = chosen & (masked == MLM_VOCAB["mask"])
    kept = chosen & (masked == original)
    another = chosen & ~became_mask & ~kept
    return torch.stack([chosen, became_mask, another, kept], dim=-1).sum(dim=1)


def side_by_side(got: torch.Tensor, reference: torch.Tensor, all_of_them: bool = True) -> str:
    """Counts in the order of ``COUNTS`` beside the reference's, e.g. "chosen 2 (the reference
    3)"; without ``all_of_them`` only those that differ."""
    pairs = zip(COUNTS, got.tolist(), reference.tolist(), strict=True)
    return ", ".join(f"{n} {g} (the reference {r})" for n, g, r in pairs if all_of_them or g != r)


def masking_rule_broken(
    original: torch.Tensor, attention_mask: torch.Tensor, masked: torch.Tensor, labels: torch.Tensor
) -> str | None:
    """The first rule of BERT's masking that the output breaks, whatever the draws were: how
    many positions break it and the first (sentence, token, what it is and what it should be);
    None when it keeps every rule."""
    chosen, special = labels != IGNORE, torch.isin(original, torch.tensor(MLM_VOCAB["special"]))
    rules = (
        (
            chosen & (labels != original),
            lambda at: (
                f"is labelled {int(labels[at])}, but the token there was "
                f"{int(original[at])}: a chosen position's label is its original token"
            ),
        ),
        (
            ~chosen & (masked != original),
            lambda at: (
                f"became {int(masked[at])} (it was {int(original[at])}) and is labelled "
                "−100: a token that changes is a chosen one, and chosen ones are labelled"
            ),
        ),
        (
            chosen & (special | ~attention_mask.bool()),
            lambda at: f"is a special token or padding ({int(original[at])}) and was chosen",
        ),
    )
    for broken, say in rules:
        if broken.any():
            at = tuple(int(i) for i in broken.nonzero()[0])
            where = f"sentence {at[0]}, token {at[1]}"
            return f"{int(broken.sum())} position(s) like {where}, which {say(at)}"
    return None


def where_masking_differs(ctx: Context, got: dict) -> str:
    """For a masking that differs from the stored one (``got``: its outputs by name): the first
    case that breaks a rule, and where; else the first whose counts differ from the
    reference's, side by side: in all, and in the first sentence that differs."""
    original, attention_mask, _ = mlm_batch()
    cases = {
        label: (original, attention_mask, got[f"masked inputs ({label})"], got[f"labels ({label})"])
        for label, *_ in MASKING_CASES
    }
    for label, (original, attention_mask, masked, labels) in cases.items():
        if broken := masking_rule_broken(original, attention_mask, masked, labels):
            return f"{label}: {broken}"
    stored = ctx.course_data["mlm"]["masking_counts"]
    for label, (original, _, masked, labels) in cases.items():
        counts, reference = masking_counts(original, masked, labels), stored[label]
        if not torch.equal(counts, reference):
            rows = (counts != reference).any(dim=1).nonzero().flatten().tolist()
            first = side_by_side(counts[rows[0]], reference[rows[0]], all_of_them=False)
            return (
                f"{label}: in all, {side_by_side(counts.sum(0), reference.sum(0))}; "
                f"{len(rows)} of {len(counts)} sentences differ, the first: sentence {rows[0]}, "
                f"{first}"
            )
    return (
        "every case keeps the rules and has the reference's counts, but other positions are "
        "chosen: the draws are made in another order, or compared otherwise"
    )


def mlm_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """input_ids (32, 20): [CLS] words and pieces [SEP], then padding; attention_mask; and the
    (V,) continuation flags."""
    g = torch.Generator().manual_seed(20)
    B, T, v = 32, 20, MLM_VOCAB
    ids = torch.randint(4, v["size"], (B, T), generator=g)
    lengths = torch.randint(6, T + 1, (B,), generator=g)
    attention_mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    ids[:, 0] = v["cls"]
    ids[torch.arange(B), lengths - 1] = v["sep"]
    ids[attention_mask == 0] = v["pad"]
    ids[:, 1] = torch.randint(4, 30, (B,), generator=g)  # the first word is not a piece
    continuation = torch.arange(v["size"]) >= 30
    return ids, attention_mask, continuation


def judge_masking(ctx: Context, out: Outputs) -> Measurement:
    """The masks against the stored ones (exact); where they differ, said."""
    result = grade(ctx.course_data["mlm"]["masking"], out, axes=("sentence", "token"))
    shape = mlm_batch()[0].shape
    shaped = all(not isinstance(t, torch.Tensor) or t.shape == shape for t in out.values())
    if result.max_abs_diff > 0 and shaped:  # the judge's work bounded by the stored shape
        result.hint = f"{result.hint}; {where_masking_differs(ctx, out)}"
    return result


@check(
    "masking: mask_tokens vs stored masks",
    tolerance=0.0,
    judge=judge_masking,
    hint="steps 1-3 of minbert/mlm.py's docstring, with the three draws of mask_tokens' "
    "docstring in their order: only real, non-special tokens are chosen; of the chosen, 80% "
    "[MASK], 10% random, 10% kept; labels −100 wherever nothing is chosen",
    exercises=("masking",),
)
def check_masking(ctx: Context) -> Outputs:
    """mask_tokens on a stored batch (token and whole-word masking, two rates): the masked inputs
    and labels, for the stored ones (exact)."""
    from minbert.mlm import mask_tokens

    original, attention_mask, continuation = mlm_batch()
    v = MLM_VOCAB
    got = {}
    for label, seed, p, whole_word in MASKING_CASES:
        input_ids = original.clone()
        kept = Untouched({"input_ids": input_ids}, axes={"input_ids": ("sentence", "token")})
        masked, labels = mask_tokens(
            input_ids,
            attention_mask,
            v["special"],
            v["mask"],
            v["size"],
            torch.Generator().manual_seed(seed),
            p,
            continuation if whole_word else None,
        )
        if changed := kept.problem():
            return problem(f"mask_tokens ({label}) {changed}")
        got[f"masked inputs ({label})"] = masked
        got[f"labels ({label})"] = labels
    return got


def judge_mlm_loss(ctx: Context, out: Outputs) -> Measurement:
    """The loss under autocast in float32, and both losses against the stored values."""
    low = not_float32("mlm_loss", out["loss under autocast"], "loss")
    return low or grade(ctx.course_data["mlm"]["loss"], out)


@check(
    "mlm-loss: mlm_loss vs mean cross-entropy over the masked positions",
    tolerance=MLM_LOSS_TOLERANCE,
    judge=judge_mlm_loss,
    hint="the mean, over the positions whose label is not −100 only, of −log softmax(logits)"
    "[label]",
    exercises=("mlm-loss",),
)
def check_mlm_loss(ctx: Context) -> Outputs:
    """mlm_loss on stored logits and labels, (B, T, V) and the chosen positions alone (N, V),
    and on bfloat16 logits under autocast; the gradient must reach the logits
    (``course/gradients.py``)."""
    from minbert.mlm import mlm_loss

    data = ctx.course_data["mlm"]["loss"]
    logits, labels = data["logits"], data["labels"]
    chosen = labels != -100
    kept = Untouched({"logits": logits.clone(), "labels": labels.clone()})
    with torch.no_grad():
        got = {
            "loss (B, T, V)": mlm_loss(*kept.arguments.values()),
            "loss (N, V)": mlm_loss(logits[chosen], labels[chosen]),
        }
    if said := kept.problem():
        return problem(f"mlm_loss {said}")
    loss_of = lambda _, x: mlm_loss(x, labels)
    failed = gradient_failure(loss_of, {"logits": logits}, where="mlm_loss")
    low = under_autocast(lambda: mlm_loss(logits.bfloat16(), labels))
    return with_gradient(got | {"loss under autocast": low}, failed)
