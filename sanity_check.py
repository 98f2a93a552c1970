"""Check minBERT against reference outputs, one independent check per line.

    python sanity_check.py                      # the packaged all-MiniLM-L6-v2 checkpoint
    python sanity_check.py --checkpoint DIR     # a local copy of the same checkpoint

Each check measures the largest absolute difference between what minBERT computes and a
reference, and passes when it is at most the check's stated tolerance:

* the model against Hugging Face transformers' BertModel (eager attention, float32, eval mode),
  whose outputs ``scripts/make_reference.py`` saved in ``sanity_check_reference.pt`` (so
  transformers is not needed here): last_hidden_state on the real (non-padding) tokens and
  pooler_output, for a padded batch of single sentences and a batch of sentence pairs;
* the tokenizer's ids against the reference's (made by transformers' tokenizer);
* the hand-written AdamW against torch.optim.AdamW over 100 steps of a small regression problem;
* the warmup/decay schedule against values worked out by hand.

Checks are independent: an exception in one (a bug, or a ``NotImplementedError`` left for a
student to fill in) marks that check FAIL or NOT IMPLEMENTED and the others still run. The last
line reads ``N passed, M failed`` (NOT IMPLEMENTED counts as failed); the exit code is 1 if any
check failed. To add a check, write a function ``Context -> Measurement`` and list it in
``CHECKS`` with its name and tolerance.
"""

from __future__ import annotations

import argparse
import copy
import functools
import math
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent
DEFAULT_REFERENCE = ROOT / "sanity_check_reference.pt"


@dataclass
class Measurement:
    """The outcome of one check: the largest absolute difference from the reference, and where
    it is (printed when the check fails, to say which tensor or step to look at)."""

    max_abs_diff: float
    hint: str = ""

    def is_worse_than(self, other: Measurement) -> bool:
        """Larger difference, with NaN (a broken computation) worst of all."""
        if math.isnan(other.max_abs_diff):
            return False
        return math.isnan(self.max_abs_diff) or self.max_abs_diff > other.max_abs_diff


@dataclass(frozen=True)
class Check:
    name: str
    tolerance: float
    run: Callable[[Context], Measurement]


class Context:
    """What the checks share, built on first use: a check that does not need the model does not
    fail because the model cannot be built."""

    def __init__(self, checkpoint: str | None, reference_file: Path) -> None:
        self.checkpoint = checkpoint
        self.reference_file = reference_file
        self._outputs: dict[tuple[str, bool], dict[str, torch.Tensor]] = {}

    @functools.cached_property
    def reference(self) -> dict:
        if not self.reference_file.is_file():
            raise FileNotFoundError(
                f"{self.reference_file} is missing; regenerate it with scripts/make_reference.py"
            )
        return torch.load(self.reference_file, weights_only=True)  # plain tensors only

    @functools.cached_property
    def model(self) -> torch.nn.Module:
        from minbert.pretrained import load_pretrained

        model = load_pretrained(self.checkpoint).eval()  # eval: dropout off
        # A reference made from another checkpoint would fail every check, for no useful reason.
        meta = self.reference.get("meta", {})
        shape = (model.config.num_hidden_layers, model.config.hidden_size)
        if meta and shape != (meta.get("num_hidden_layers"), meta.get("hidden_size")):
            raise ValueError(
                f"the checkpoint has {shape[0]} layers of size {shape[1]} but the reference was "
                f"made from {meta.get('checkpoint')} ({meta.get('num_hidden_layers')} layers of "
                f"size {meta.get('hidden_size')}); make one for this checkpoint with "
                "scripts/make_reference.py --checkpoint DIR --out FILE"
            )
        return model

    def outputs(self, batch: str, fast_attention: bool = True) -> dict[str, torch.Tensor]:
        """minBERT's outputs on the reference batch ``batch`` ("single" or "pair")."""
        key = (batch, fast_attention)
        if key not in self._outputs:
            ref = self.reference[batch]
            self.model.set_fast_attention(fast_attention)
            try:
                with torch.no_grad():
                    self._outputs[key] = self.model(
                        input_ids=ref["input_ids"],
                        attention_mask=ref["attention_mask"],
                        token_type_ids=ref["token_type_ids"],
                    )
            finally:
                self.model.set_fast_attention(True)
        return self._outputs[key]


# ----------------------------------------------------------------------------------------------
# Model against the Hugging Face reference


def compare(
    name: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    mask: torch.Tensor | None = None,
    axes: tuple[str, ...] = ("sentence", "token", "dim"),
) -> Measurement:
    """max |got − expected| over the positions where ``mask`` (B, T) is true (all if None), and
    where it occurs, naming the position along ``axes``."""
    if got.shape != expected.shape:
        return Measurement(
            math.inf, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    diff = (got.double() - expected.double()).abs()
    if mask is not None:  # padding positions are not compared (a where, so NaN there is ignored)
        diff = torch.where(mask.reshape(mask.shape + (1,) * (diff.ndim - 2)), diff, 0.0)
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    at = ", ".join(f"{axis} {i}" for axis, i in zip(axes, where, strict=True))
    hint = f"{name} differs most at {at}: got {got[where].item():.6g}, expected "
    hint += f"{expected[where].item():.6g}"
    return Measurement(diff.max().item(), hint)


def hidden_state_check(batch: str, fast_attention: bool = True) -> Callable[[Context], Measurement]:
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
    def run(ctx: Context) -> Measurement:
        out = ctx.outputs(batch)
        expected = ctx.reference[batch]["pooler_output"]
        return compare("pooler_output", out["pooler_output"], expected, axes=("sentence", "dim"))

    return run


def check_tokenizer(ctx: Context) -> Measurement:
    """Our tokenizer on the reference sentences against transformers' ids (exact)."""
    from minbert.tokenizer import Tokenizer

    tokenizer = Tokenizer.from_checkpoint(ctx.checkpoint)
    worst = Measurement(0.0)
    for batch in ("single", "pair"):
        ref = ctx.reference[batch]
        if batch == "single":
            ours = tokenizer(ref["sentences"])
        else:
            first, second = zip(*ref["sentences"], strict=True)
            ours = tokenizer(list(first), list(second))
        for key in ("input_ids", "token_type_ids", "attention_mask"):
            m = compare(f"{batch} {key}", ours[key], ref[key], axes=("sentence", "token"))
            if m.is_worse_than(worst):
                worst = m
    return worst


# ----------------------------------------------------------------------------------------------
# Optimizer and schedule


def check_adamw(ctx: Context, steps: int = 100) -> Measurement:
    """Hand AdamW against torch.optim.AdamW on a regression problem with two parameter groups
    (different lr and weight decay): max |θ_ours − θ_torch| over all parameters and steps."""
    from minbert.optimizer import AdamW

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    y = torch.sin(x @ torch.randn(8, 1, generator=g))
    torch.manual_seed(0)
    ours = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    theirs = copy.deepcopy(ours)

    def groups(model: torch.nn.Module) -> list[dict]:
        return [
            {"params": list(model[0].parameters()), "lr": 3e-3, "weight_decay": 0.1},
            {"params": list(model[2].parameters()), "lr": 1e-2, "weight_decay": 0.01},
        ]

    opt_ours = AdamW(groups(ours), betas=(0.9, 0.99), eps=1e-8)
    opt_theirs = torch.optim.AdamW(groups(theirs), betas=(0.9, 0.99), eps=1e-8, foreach=False)
    worst = Measurement(0.0)
    for step in range(1, steps + 1):
        for model, opt in ((ours, opt_ours), (theirs, opt_theirs)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        for group, (a, b) in enumerate(
            zip(opt_ours.param_groups, opt_theirs.param_groups, strict=True)
        ):
            for i, (p, q) in enumerate(zip(a["params"], b["params"], strict=True)):
                diff = (p - q).abs().max().item()
                m = Measurement(
                    diff,
                    f"parameter {i} of group {group} (lr {a['lr']}, weight decay "
                    f"{a['weight_decay']}) differs by {diff:.2e} after step {step}",
                )
                if m.is_worse_than(worst):
                    worst = m
    return worst


# (warmup_steps, total_steps) -> {step: learning-rate factor}, worked out by hand from
# factor(s) = s / w for s < w, else max(0, (N − s) / (N − w)).
SCHEDULE_VALUES = {
    (4, 10): {0: 0.0, 1: 0.25, 3: 0.75, 4: 1.0, 7: 0.5, 9: 1 / 6, 10: 0.0, 11: 0.0},
    (0, 8): {0: 1.0, 2: 0.75, 4: 0.5, 8: 0.0},
}


def check_schedule(ctx: Context) -> Measurement:
    """linear_warmup_decay stepped along with an optimizer (base lr 1) against hand values."""
    from minbert.optimizer import linear_warmup_decay

    worst = Measurement(0.0)
    for (warmup, total), expected in SCHEDULE_VALUES.items():
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
        scheduler = linear_warmup_decay(opt, warmup, total)
        for step in range(max(expected) + 1):
            lr = opt.param_groups[0]["lr"]
            if step in expected:
                m = Measurement(
                    abs(lr - expected[step]),
                    f"warmup {warmup}, total {total}: lr factor {lr:.6f} at step {step}, "
                    f"expected {expected[step]:.6f}",
                )
                if m.is_worse_than(worst):
                    worst = m
            opt.step()
            scheduler.step()
    return worst


# ----------------------------------------------------------------------------------------------
# The list of checks. Add per-component checks (attention, embeddings, adapters, LoRA, SMART,
# samplers, ...) here: each is independent and states its own tolerance.

CHECKS: list[Check] = [
    Check("tokenizer: ids vs transformers' tokenizer", 0.0, check_tokenizer),
    Check("bert: last_hidden_state, padded single sentences", 1e-5, hidden_state_check("single")),
    Check("bert: pooler_output, padded single sentences", 1e-5, pooler_check("single")),
    Check("bert: last_hidden_state, sentence pairs", 1e-5, hidden_state_check("pair")),
    Check("bert: pooler_output, sentence pairs", 1e-5, pooler_check("pair")),
    Check(
        "bert: last_hidden_state, pairs, written-out attention",
        1e-5,
        hidden_state_check("pair", fast_attention=False),
    ),
    Check("optimizer: AdamW vs torch.optim.AdamW, 100 steps", 1e-6, check_adamw),
    Check("optimizer: warmup/decay schedule vs hand values", 1e-12, check_schedule),
]


def not_implemented_message(err: BaseException) -> str | None:
    """The message of a NotImplementedError in ``err`` or its causes, else None."""
    while err is not None:
        if isinstance(err, NotImplementedError):
            return str(err) or "NotImplementedError"
        err = err.__cause__ or err.__context__
    return None


def run_check(check: Check, ctx: Context) -> bool:
    """Run one check, print its line, and return whether it passed."""
    try:
        measurement = check.run(ctx)
    except Exception as err:  # one broken check must not stop the others
        todo = not_implemented_message(err)
        status = "NOT IMPLEMENTED" if todo is not None else "FAIL"
        hint = todo if todo is not None else f"{type(err).__name__}: {err}"
        frame = traceback.extract_tb(err.__traceback__)[-1]
        hint += f" ({Path(frame.filename).name}:{frame.lineno})"
        print(
            f"{check.name:<55} max_abs_diff {'-':<9} tol {check.tolerance:<7.0e} {status}  {hint}"
        )
        return False
    diff = measurement.max_abs_diff
    passed = diff <= check.tolerance  # NaN compares false: fails
    status = "PASS" if passed else "FAIL"
    hint = "" if passed else f"  {measurement.hint}"
    print(f"{check.name:<55} max_abs_diff {diff:<9.2e} tol {check.tolerance:<7.0e} {status}{hint}")
    return passed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Check minBERT (model, tokenizer, optimizer, schedule) against references.",
    )
    parser.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None,
        help="BERT checkpoint directory (default: the packaged all-MiniLM-L6-v2)",
    )
    parser.add_argument(
        "--reference",
        metavar="FILE",
        type=Path,
        default=DEFAULT_REFERENCE,
        help="reference outputs made by scripts/make_reference.py for that checkpoint "
        "(default: %(default)s)",
    )
    args = parser.parse_args(argv)
    if args.checkpoint is not None and not Path(args.checkpoint).is_dir():
        parser.error(f"--checkpoint {args.checkpoint}: no such directory")

    ctx = Context(args.checkpoint, args.reference)
    results = [run_check(check, ctx) for check in CHECKS]
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
