"""Check of ``minbert/tokenizer.py`` (not an exercise): our tokenizer's ids against those of
transformers' tokenizer, saved in the reference file with the sentences they come from."""

from __future__ import annotations

from course.measure import Measurement, compare, worst_of
from course.registry import Context, check


@check(
    "tokenizer: ids vs transformers' tokenizer",
    tolerance=0.0,
    hint="not an exercise: check minbert/tokenizer.py and the checkpoint's vocab.txt",
)
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
