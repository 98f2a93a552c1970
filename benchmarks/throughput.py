"""Throughput of minBERT against Hugging Face transformers' BertModel on the packaged checkpoint.

    python benchmarks/throughput.py [--threads 1] [--repeats 7] [--dropout 0.0]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import sys

import _common
import torch
import torch.nn.functional as F
from _common import (
    Report,
    bert_outputs,
    interleaved,
    median,
    paired_ratio,
    random_batch,
    set_dropout,
    spread,
    table,
)

from minbert.bert import gelu
from minbert.pretrained import default_checkpoint_dir, load_pretrained

SHAPES = [(8, 32), (32, 32), (32, 64), (16, 128)]
PROFILE_SHAPE = (32, 64)


def load_models(dropout: float) -> dict[str, tuple[torch.nn.Module, bool]]:
    """name -> (model, is_transformers)."""
    import transformers
    from transformers import BertModel

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    directory = default_checkpoint_dir()
    ours = set_dropout(load_pretrained(directory), dropout)
    fixed = copy.deepcopy(ours)
    if ours.config.hidden_act == "gelu":
        for layer in fixed.encoder.layer:
            layer.intermediate.act = F.gelu  # the proposed change, in this copy only
    hf_options = dict(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    hf_default = BertModel.from_pretrained(directory, **hf_options)
    hf_eager = BertModel.from_pretrained(directory, attn_implementation="eager", **hf_options)
    default_name = f"transformers ({hf_default.config._attn_implementation})"
    return {
        "minBERT": (ours, False),
        "minBERT + F.gelu": (fixed, False),
        default_name: (hf_default, True),
        "transformers (eager)": (hf_eager, True),
    }


def train_step(model: torch.nn.Module, is_hf: bool, batch: dict) -> None:
    model.zero_grad(set_to_none=True)
    hidden, pooled = bert_outputs(model, is_hf, batch)
    (hidden.square().mean() + pooled.mean()).backward()


@torch.no_grad()
def inference_step(model: torch.nn.Module, is_hf: bool, batch: dict) -> None:
    bert_outputs(model, is_hf, batch)


def measure(models: dict, mode: str, repeats: int) -> list[dict]:
    rows = []
    for B, T in SHAPES:
        batch = random_batch(B, T, 30522, seed=B * 1000 + T)
        fn = train_step if mode == "train" else inference_step
        for model, _ in models.values():
            model.train(mode == "train")
        contenders = {
            name: (lambda m=model, h=is_hf, f=fn, b=batch: f(m, h, b))
            for name, (model, is_hf) in models.items()
        }
        times = interleaved(contenders, repeats=repeats, warmup=2, min_seconds=0.1)
        rows.append({"shape": (B, T), "times": times})
        print(
            f"{mode} {B}x{T}: "
            + ", ".join(f"{n} {median(t) * 1e3:.1f} ms" for n, t in times.items()),
            flush=True,
        )
    return rows


def results_table(rows: list[dict], names: list[str], reference: str) -> tuple[str, list[float]]:
    header = ["B × T"] + [f"{n} tok/s" for n in names]
    header += [f"minBERT / {reference}", "minBERT / transformers (eager)"]
    header += [f"minBERT + F.gelu / {reference}", "spread of minBERT rounds"]
    body, ratios = [], []
    for row in rows:
        B, T = row["shape"]
        t = row["times"]
        ratio = paired_ratio(t[reference], t["minBERT"])
        ratios.append(ratio)
        body.append(
            [f"{B} × {T}"]
            + [f"{B * T / median(t[n]):,.0f}" for n in names]
            + [
                f"**{ratio:.2f}**",
                f"{paired_ratio(t['transformers (eager)'], t['minBERT']):.2f}",
                f"{paired_ratio(t[reference], t['minBERT + F.gelu']):.2f}",
                spread(t["minBERT"]),
            ]
        )
    return table(header, body), ratios


def activation_table(intermediate_size: int, layers: int, repeats: int) -> str:
    """Forward + backward of the activation alone, on the (B·T, F) input of one layer."""
    rows = []
    for B, T in SHAPES:
        x = torch.randn(B * T, intermediate_size, generator=torch.Generator().manual_seed(0))
        x.requires_grad_(True)
        g = torch.randn_like(x)

        def run(act, x=x, g=g) -> None:
            x.grad = None
            act(x).backward(g)

        times = interleaved(
            {"written-out": lambda: run(gelu), "F.gelu": lambda: run(F.gelu)},
            repeats=repeats,
            warmup=2,
            min_seconds=0.05,
        )
        ours, fused = median(times["written-out"]), median(times["F.gelu"])
        rows.append(
            [
                f"{B} × {T}",
                f"{ours * 1e3:.1f}",
                f"{fused * 1e3:.1f}",
                f"{paired_ratio(times['written-out'], times['F.gelu']):.1f}×",
                f"{(ours - fused) * layers * 1e3:.0f}",
            ]
        )
    return table(
        [
            "B × T",
            "minbert.bert.gelu fwd+bwd ms",
            "F.gelu fwd+bwd ms",
            "F.gelu faster by",
            f"saved per training step ({layers} layers), ms",
        ],
        rows,
    )


def profile_table(models: dict, names: list[str]) -> str:
    from torch.profiler import ProfilerActivity, profile

    B, T = PROFILE_SHAPE
    batch = random_batch(B, T, 30522, seed=7)
    parts = []
    for name in names:
        model, is_hf = models[name]
        model.train()
        train_step(model, is_hf, batch)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(2):
                train_step(model, is_hf, batch)
        events = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
        total = sum(e.self_cpu_time_total for e in events)
        rows = [
            [f"`{e.key}`", e.count // 2, f"{e.self_cpu_time_total / 2e3:.1f}"] for e in events[:8]
        ]
        parts.append(
            f"**{name}**, {B} × {T}, one training step: self CPU time "
            f"{total / 2e3:.0f} ms in all; the 8 largest operators:\n\n"
            + table(["operator", "calls / step", "self ms / step"], rows)
        )
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=7, help="interleaved rounds per shape")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout p of both models")
    p.add_argument("--no_profile", action="store_true", help="skip the torch.profiler table")
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    if not 0 <= args.dropout < 1:
        raise SystemExit("--dropout must be in [0, 1)")

    report = Report(
        "throughput",
        "Throughput: minBERT vs transformers' BertModel",
        f"Packaged checkpoint (all-MiniLM-L6-v2: 6 layers, hidden 384, 12 heads), float32, CPU. "
        f"Same random inputs for all (sentence pairs, each row T/2..T real tokens, the rest "
        f"padding). Training = train mode, forward + backward, dropout p = {args.dropout} in "
        f"both models; inference = eval mode, `torch.no_grad()`. tokens/s counts all B·T "
        f"positions. Ratios are minBERT / transformers throughput (> 1: minBERT is faster); "
        f"throughputs are medians of {args.repeats} interleaved rounds, ratios the medians of "
        f'the per-round ratios. "minBERT + F.gelu" is minBERT with its '
        f"written-out GELU replaced by `torch.nn.functional.gelu` (a proposed change, applied "
        f"to the benchmark's copy only).\n\n" + _common.SHARED_MACHINE_NOTE,
    )
    models = load_models(args.dropout)
    names = list(models)
    reference = names[2]
    summary = []
    for mode, title in (("train", "Training (forward + backward)"), ("eval", "Inference")):
        rows = measure(models, mode, args.repeats)
        text, ratios = results_table(rows, names, reference)
        fixed = [paired_ratio(r["times"][reference], r["times"]["minBERT + F.gelu"]) for r in rows]
        report.add(f"## {title}\n\n{text}")
        summary.append(
            f"- {title}: minBERT / {reference} from {min(ratios):.2f} to {max(ratios):.2f} "
            f"(target ≥ 1.0 everywhere: {'met' if min(ratios) >= 1.0 else 'NOT met'}); "
            f"with F.gelu from {min(fixed):.2f} to {max(fixed):.2f}."
        )
    report.add("## Summary\n\n" + "\n".join(summary))
    config = models["minBERT"][0].config
    report.add(
        "## The activation alone\n\n"
        "minBERT's `gelu` (0.5·x·(1 + erf(x/√2)), five elementwise operators forward, each "
        "saving a tensor for backward, and autograd's erf/mul/div chain backward) against the "
        "fused `F.gelu` (one operator each way, the same function), on the (B·T, F) input of "
        "one feed-forward layer:\n\n"
        + activation_table(config.intermediate_size, config.num_hidden_layers, args.repeats)
    )
    if not args.no_profile:
        report.add(
            "## Where the time goes (torch.profiler)\n\n"
            + profile_table(models, ["minBERT", "minBERT + F.gelu", reference])
        )
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
