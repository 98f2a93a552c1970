"""Checks of ``minbert/mlm.py``: BERT's masking (the ``masking`` exercise) and the MLM loss (the
``mlm-loss`` exercise), on a stored made-up batch, against stored outputs.

The masking is graded exactly: ``mask_tokens``' docstring fixes the order of its three random
draws, so with the same seed a correct implementation gives the same masks, token for token; a
failure is compared with the masks that common mistakes give (specials chosen, no 80/10/10
split, labels everywhere, ...). ``tests/test_mlm.py`` checks the statistics over many draws.
"""

from __future__ import annotations

import math

import torch

from course.measure import Measurement, float32_under_autocast, grade, unchanged_problem
from course.registry import Context, check

# A made-up vocabulary: ids 0-3 special, 4-29 whole words, 30-39 "##" pieces.
MLM_VOCAB = {"size": 40, "pad": 0, "cls": 1, "sep": 2, "mask": 3, "special": [0, 1, 2, 3]}
# (label, seed, probability, whole-word) of each masking graded.
MASKING_CASES = (
    ("tokens, p 0.15", 21, 0.15, False),
    ("tokens, p 0.5", 22, 0.5, False),
    ("whole words, p 0.3", 23, 0.3, True),
)
MLM_LOSS_TOLERANCE = 1e-5


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


@check(
    "masking: mask_tokens vs stored masks",
    tolerance=0.0,
    hint="steps 1-3 of minbert/mlm.py's docstring, with the three draws of mask_tokens' "
    "docstring in their order: only real, non-special tokens are chosen; of the chosen, 80% "
    "[MASK], 10% random, 10% kept; labels −100 wherever nothing is chosen",
    exercises=("masking",),
)
def check_masking(ctx: Context) -> Measurement:
    """mask_tokens on a stored batch (token and whole-word masking, two rates) against the
    stored masked inputs and labels (exact)."""
    from minbert.mlm import mask_tokens

    original, attention_mask, continuation = mlm_batch()
    v = MLM_VOCAB
    got = {}
    for label, seed, p, whole_word in MASKING_CASES:
        input_ids = original.clone()
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
        if changed := unchanged_problem("input_ids", original, input_ids, ("sentence", "token")):
            return Measurement(math.inf, f"mask_tokens ({label}) {changed}")
        got[f"masked inputs ({label})"] = masked
        got[f"labels ({label})"] = labels
    return grade(ctx.course_data["mlm"]["masking"], got, axes=("sentence", "token"))


@check(
    "mlm-loss: mlm_loss vs mean cross-entropy over the masked positions",
    tolerance=MLM_LOSS_TOLERANCE,
    hint="the mean, over the positions whose label is not −100 only, of −log softmax(logits)"
    "[label]",
    exercises=("mlm-loss",),
)
def check_mlm_loss(ctx: Context) -> Measurement:
    """mlm_loss on stored logits and labels, (B, T, V) and the chosen positions alone (N, V),
    against the stored values."""
    from minbert.mlm import mlm_loss

    data = ctx.course_data["mlm"]["loss"]
    logits, labels = data["logits"], data["labels"]
    chosen = labels != -100
    with torch.no_grad():
        got = {
            "loss (B, T, V)": mlm_loss(logits, labels),
            "loss (N, V)": mlm_loss(logits[chosen], labels[chosen]),
        }
    low = float32_under_autocast("mlm_loss", lambda: mlm_loss(logits.bfloat16(), labels), "loss")
    return low or grade(data, got)
