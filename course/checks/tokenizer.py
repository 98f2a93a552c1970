"""Check of ``minbert/tokenizer.py`` (not an exercise): our tokenizer's ids against those of
transformers' tokenizer, saved in the reference file with the sentences they come from."""

from __future__ import annotations

from course.measure import Measurement, compare, worst_of
from course.outcome import Outputs
from course.registry import Context, check

KEYS = ("input_ids", "token_type_ids", "attention_mask")
AXES = ("sentence", "token")


def judge_tokenizer(ctx: Context, out: Outputs) -> Measurement:
    """Each batch's ids against transformers' (exact)."""
    found = [
        compare(f"{batch} {key}", out[batch][key], ctx.reference[batch][key], axes=AXES)
        for batch in ("single", "pair")
        for key in KEYS
    ]
    return worst_of(found)


@check(
    "tokenizer: ids vs transformers' tokenizer",
    tolerance=0.0,
    judge=judge_tokenizer,
    hint="not an exercise: check minbert/tokenizer.py and the checkpoint's vocab.txt",
)
def check_tokenizer(ctx: Context) -> Outputs:
    """Our tokenizer on the reference sentences, single and in pairs."""
    from minbert.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_checkpoint(ctx.checkpoint)
    single = tokenizer(ctx.reference["single"]["sentences"])
    first, second = zip(*ctx.reference["pair"]["sentences"], strict=True)
    pair = tokenizer(list(first), list(second))
    return {
        batch: {key: ids[key] for key in KEYS}
        for batch, ids in (("single", single), ("pair", pair))
    }
