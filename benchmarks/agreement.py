"""Numerical agreement of minBERT with Hugging Face transformers' BertModel on the same inputs.

    python benchmarks/agreement.py

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import sys

import _common
import torch
import torch.nn.functional as F
from _common import Report, random_batch, table

from minbert.pretrained import default_checkpoint_dir, load_pretrained

SHAPES = [
    (1, 8, True),
    (8, 32, True),
    (8, 32, False),
    (16, 64, True),
    (4, 128, True),
    (2, 512, True),
]
TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10}


def run_minbert(model, batch: dict, fast: bool) -> tuple[torch.Tensor, torch.Tensor]:
    model.set_fast_attention(fast)
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return out["last_hidden_state"], out["pooler_output"]


def run_hf(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    out = model(**batch)
    return out.last_hidden_state, out.pooler_output


def max_diffs(a, b, mask: torch.Tensor) -> tuple[float, float]:
    real = mask.bool()  # (B, T): compare real tokens only
    hidden = (a[0] - b[0])[real].abs().max().item()
    pooled = (a[1] - b[1]).abs().max().item()
    return hidden, pooled


@torch.no_grad()
def compare(dtype: torch.dtype) -> tuple[str, float]:
    import transformers
    from transformers import BertModel

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    directory = default_checkpoint_dir()
    ours = load_pretrained(directory).to(dtype).eval()
    fixed = copy.deepcopy(ours)
    for layer in fixed.encoder.layer:
        layer.intermediate.act = F.gelu
    eager = BertModel.from_pretrained(directory, attn_implementation="eager").to(dtype).eval()
    sdpa = BertModel.from_pretrained(directory, attn_implementation="sdpa").to(dtype).eval()

    rows, worst = [], 0.0
    for B, T, pairs in SHAPES:
        batch = random_batch(B, T, ours.config.vocab_size, seed=31 * B + T, pairs=pairs)
        mask = batch["attention_mask"]
        ref = {"eager": run_hf(eager, batch), "sdpa": run_hf(sdpa, batch)}
        contenders = {
            "minBERT fast path": run_minbert(ours, batch, fast=True),
            "minBERT written-out": run_minbert(ours, batch, fast=False),
            "minBERT + F.gelu, fast path": run_minbert(fixed, batch, fast=True),
        }
        kind = "pairs" if pairs else "single"
        real = int(mask.sum())
        for name, out in contenders.items():
            he, pe = max_diffs(out, ref["eager"], mask)
            hs, ps = max_diffs(out, ref["sdpa"], mask)
            if name != "minBERT + F.gelu, fast path":
                worst = max(worst, he, pe, hs, ps)
            rows.append(
                [
                    f"{B} × {T} {kind}",
                    real,
                    name,
                    f"{he:.1e}",
                    f"{pe:.1e}",
                    f"{hs:.1e}",
                    f"{ps:.1e}",
                ]
            )
        hr, pr = max_diffs(ref["sdpa"], ref["eager"], mask)
        rows.append(
            [
                f"{B} × {T} {kind}",
                real,
                "transformers sdpa vs eager",
                f"{hr:.1e}",
                f"{pr:.1e}",
                "-",
                "-",
            ]
        )
    header = [
        "B × T",
        "real tokens",
        "model",
        "hidden vs eager",
        "pooler vs eager",
        "hidden vs sdpa",
        "pooler vs sdpa",
    ]
    return table(header, rows), worst


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    report = Report(
        "agreement",
        "Agreement: minBERT vs transformers' BertModel",
        "Packaged checkpoint (all-MiniLM-L6-v2), eval mode, same random inputs (each row between "
        "T/2 and T real tokens, then padding; 'pairs' have token types 0/1). Figures are the "
        "largest absolute difference: `last_hidden_state` over the real tokens only, "
        "`pooler_output` over the batch. 'eager' is transformers' written-out attention, 'sdpa' "
        "its default fused one. Tolerances: 1e-5 in float32 (as `sanity_check.py`), 1e-10 in "
        "float64. 'minBERT + F.gelu' is minBERT with its written-out GELU replaced by "
        "`torch.nn.functional.gelu` (the change benchmarks/throughput.py recommends), to show "
        "that it keeps the numbers; the summary covers minBERT as it is.",
    )
    verdicts = []
    for dtype in (torch.float32, torch.float64):
        text, worst = compare(dtype)
        ok = worst <= TOLERANCE[dtype]
        report.add(f"## {str(dtype).removeprefix('torch.')}\n\n{text}")
        verdicts.append(
            f"- {str(dtype).removeprefix('torch.')}: largest difference of minBERT (both attention "
            f"paths) to transformers (both implementations) {worst:.1e}, tolerance "
            f"{TOLERANCE[dtype]:.0e}: {'within' if ok else 'OUTSIDE'}"
        )
    report.add("## Summary\n\n" + "\n".join(verdicts))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
