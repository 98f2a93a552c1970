"""torch.compile (inductor, CPU) against eager minBERT, forward + backward.

    python benchmarks/compile.py [--threads 1] [--repeats 5]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import _common
import torch
import torch.nn.functional as F
from _common import Report, interleaved, median, paired_ratio, random_batch, table

from minbert.pretrained import load_pretrained

SHAPES = [(32, 64), (16, 128), (8, 96)]


def step(model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    (out["last_hidden_state"].square().mean() + out["pooler_output"].mean()).backward()
    return out["last_hidden_state"].detach(), out["pooler_output"].detach()


def repay(compile_s: float, saved_s: float) -> str:
    if compile_s < 0.5:
        return "- (nothing compiled)"
    return f"{compile_s / saved_s:.0f}" if saved_s > 0 else "never"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; sets torch's thread count."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds per shape")
    p.add_argument(
        "--warm_cache",
        action="store_true",
        help="use inductor's usual on-disk cache (default: a fresh empty one, so the compile "
        "time is that of a first run)",
    )
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    return args


def start_report(repeats: int, warm_cache: bool) -> Report:
    """compile.md, with its introduction: what is measured, and how."""
    cache_text = (
        "inductor's usual on-disk cache"
        if warm_cache
        else "an empty inductor cache (as in a first run)"
    )
    return Report(
        "compile",
        "torch.compile (inductor, CPU) vs eager minBERT",
        "Packaged checkpoint, train mode, dropout off, float32, forward + backward of "
        "mean(h²) + mean(pooler) on random padded sentence pairs; `torch.compile(model)` with "
        "the default backend (inductor) and options. Compile time = first compiled step minus "
        f"one eager step, with {cache_text}; steady state = medians of {repeats} "
        "interleaved rounds.\n\n" + _common.SHARED_MACHINE_NOTE,
    )


def empty_inductor_cache() -> tempfile.TemporaryDirectory:
    """A fresh, empty on-disk cache for inductor (TORCHINDUCTOR_CACHE_DIR), so the compile time
    is the one a user's first run sees."""
    cache = tempfile.TemporaryDirectory(prefix="minbert-inductor-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache.name
    return cache


@dataclass
class Contenders:
    """The packaged checkpoint three ways, all in train mode with dropout off."""

    eager: torch.nn.Module
    fused: torch.nn.Module  # eager with the fused GELU that throughput.py recommends
    compiled_model: torch.nn.Module  # the module that ``compiled`` wraps (holds its gradients)
    compiled: Callable


def build_contenders() -> Contenders:
    """Eager minBERT, a copy with the fused GELU and a compiled copy, all the same weights."""
    eager = load_pretrained()
    for module in eager.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    for layer in eager.encoder.layer:
        layer.attention.self.dropout_p = 0.0
    eager.train()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model)
    fused = copy.deepcopy(eager)
    for layer in fused.encoder.layer:
        layer.intermediate.act = F.gelu
    return Contenders(eager, fused, compiled_model, compiled)


class CompileFailed(Exception):
    """torch.compile could not compile here; ``text`` is the error, as Python prints it."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def failure_section(B: int, T: int, text: str) -> str:
    """The report's account of a shape that did not compile."""
    return (
        f"## Compilation failed on {B} × {T}\n\n```\n{text[-3000:]}\n```\n\n"
        "torch.compile does not work on this machine; eager is what runs."
    )


@dataclass
class ShapeResult:
    """One shape's row of the results table, and its two speed-ups of the compiled model."""

    row: list[str]
    ratio: float  # eager / compiled
    fused_ratio: float  # eager + F.gelu / compiled


def first_compiled_step(c: Contenders, batch: dict) -> tuple[float, float, tuple]:
    """(seconds of one eager step, seconds of the first compiled step, the compiled outputs):
    the first compiled step traces and compiles. Raises ``CompileFailed`` when inductor
    cannot compile here."""
    step(c.eager, batch)
    start = time.perf_counter()
    step(c.eager, batch)
    eager_once = time.perf_counter() - start
    start = time.perf_counter()
    try:
        out_c = step(c.compiled, batch)
    except Exception as err:  # inductor needs a working C++ toolchain, among others
        text = "".join(traceback.format_exception_only(type(err), err)).strip()
        raise CompileFailed(text) from err
    return eager_once, time.perf_counter() - start, out_c


def largest_differences(c: Contenders, batch: dict, out_c: tuple) -> tuple[float, float]:
    """The largest absolute difference, eager vs compiled, of the outputs and of the gradients
    (an eager step on ``batch`` after the compiled one)."""
    out_e = step(c.eager, batch)
    diff_out = max((a - b).abs().max().item() for a, b in zip(out_e, out_c))
    diff_grad = max(
        (a.grad - b.grad).abs().max().item()
        for a, b in zip(c.eager.parameters(), c.compiled_model.parameters())
        if a.grad is not None
    )
    return diff_out, diff_grad


def measure_shape(c: Contenders, index: int, B: int, T: int, repeats: int) -> ShapeResult:
    """Compile time, steady-state step times and agreement on random batches of B × T."""
    batch = random_batch(B, T, c.eager.config.vocab_size, seed=B * 1000 + T)
    eager_once, first, out_c = first_compiled_step(c, batch)
    diff_out, diff_grad = largest_differences(c, batch, out_c)
    times = interleaved(
        {
            "eager": lambda b=batch: step(c.eager, b),
            "eager + F.gelu": lambda b=batch: step(c.fused, b),
            "compiled": lambda b=batch: step(c.compiled, b),
        },
        repeats=repeats,
        warmup=1,
    )
    ratio = paired_ratio(times["eager"], times["compiled"])
    fused_ratio = paired_ratio(times["eager + F.gelu"], times["compiled"])
    saved = median(times["eager"]) - median(times["compiled"])
    row = [
        f"{B} × {T}",
        "first" if index == 0 else "new shape",
        f"{first - eager_once:.1f}",
        f"{median(times['eager']) * 1e3:.0f}",
        f"{median(times['eager + F.gelu']) * 1e3:.0f}",
        f"{median(times['compiled']) * 1e3:.0f}",
        f"**{ratio:.2f}**",
        f"{fused_ratio:.2f}",
        repay(first - eager_once, saved),
        f"{diff_out:.1e} / {diff_grad:.1e}",
    ]
    return ShapeResult(row, ratio, fused_ratio)


def verdict(ratios: list[float]) -> str:
    """Whether compiling helps, over the shapes' speed-ups (5% counts as helping)."""
    if min(ratios) >= 1.05:
        return "helps"
    return "does not help" if max(ratios) < 1.05 else "helps on some shapes only"


def results_section(results: list[ShapeResult]) -> str:
    """The report's table of every shape, and the verdict against both eager models."""
    ratios = [r.ratio for r in results]
    fused_ratios = [r.fused_ratio for r in results]
    return (
        "## Results\n\n"
        + table(
            [
                "B × T",
                "shape",
                "compile s",
                "eager ms / step",
                "eager + F.gelu ms / step",
                "compiled ms / step",
                "speed-up eager / compiled",
                "speed-up eager + F.gelu / compiled",
                "steps to repay the compile time",
                "max abs Δ output / grad",
            ],
            [r.row for r in results],
        )
        + f"\n\nOn this machine torch.compile **{verdict(ratios)}** against today's eager minBERT "
        f"(speed-up {min(ratios):.2f}–{max(ratios):.2f}×) and **{verdict(fused_ratios)}** against "
        f"eager minBERT with the fused GELU that benchmarks/throughput.py recommends (speed-up "
        f"{min(fused_ratios):.2f}–{max(fused_ratios):.2f}×): most of what inductor gains here is "
        "the fusion of the written-out GELU's elementwise operators. A new batch shape costs a "
        "recompilation unless torch has already marked the dimension dynamic ('compile s' of "
        "the later shapes shows which); the driver's dynamic padding makes T vary from batch "
        "to batch."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = start_report(args.repeats, args.warm_cache)
    cache = None if args.warm_cache else empty_inductor_cache()
    contenders = build_contenders()
    results = []
    for i, (B, T) in enumerate(SHAPES):
        try:
            results.append(measure_shape(contenders, i, B, T, args.repeats))
        except CompileFailed as failed:
            report.add(failure_section(B, T, failed.text))
            report.write()
            return 0
        print(results[-1].row, flush=True)
    report.add(results_section(results))
    if cache is not None:
        cache.cleanup()
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
