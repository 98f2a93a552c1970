"""Write the reference outputs that ``sanity_check.py`` compares minBERT against.

Regenerate (from the repository root; transformers is a reference-only dependency):

    pip install -r requirements-reference.txt
    python scripts/make_reference.py --out sanity_check_reference.pt

Design notes: docs/design/scripts.md.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # so the script runs from anywhere without installing minbert

from course.authoring.make_course_references import check_out  # noqa: E402
from minbert.checkpoint import atomic_write  # noqa: E402
from minbert.flags import ArgumentParser, nonempty_path  # noqa: E402
from multitask.errors import run_command  # noqa: E402

SINGLE = [
    "Hello world!",
    "The quick brown fox jumps over the lazy dog.",
    "A from-scratch BERT reads every sentence in both directions at once, and that helps it.",
]
PAIRS = [
    ("A man is playing a guitar.", "Someone is playing an instrument."),
    ("How do I learn Python quickly?", "What is the fastest way to learn the Python language?"),
    ("It rained.", "The streets were wet the whole morning after the storm passed."),
]


def is_reference(path: Path) -> bool:
    """Whether ``path`` is a reference file this script wrote (its "single", "pair" and "meta")."""
    from minbert.checkpoint import load_trusted

    try:
        data = load_trusted(path)
    except Exception:  # noqa: BLE001 - anything that is not such a file is not ours
        return False
    return isinstance(data, dict) and {"single", "pair", "meta"} <= set(data)


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--checkpoint", default=None, help="checkpoint directory (default: packaged)"
    )
    parser.add_argument(
        "--out",
        type=nonempty_path,
        default=ROOT / "sanity_check_reference.pt",
        help="the file to write (default: sanity_check_reference.pt)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --out this script did not write",
    )

    def body() -> None:
        args = parser.parse_args(argv)
        check_out(args.out, args.overwrite, is_reference, "a reference file")
        reference = reference_outputs(args.checkpoint)
        atomic_write(args.out, lambda stream: torch.save(reference, stream))
        size = args.out.stat().st_size
        print(f"wrote {args.out} ({size / 1024:.0f} KiB) from {reference['meta']['checkpoint']}")

    return run_command(body, "--out is as it was")


def reference_outputs(checkpoint: str | None) -> dict:
    """The reference outputs of transformers' BERT on ``checkpoint`` (None: the packaged one)."""
    import transformers
    from transformers import AutoTokenizer, BertModel

    from course.checks.bert import BERT_TOLERANCE
    from course.seal import seal
    from minbert.pretrained import resolve_checkpoint_dir

    directory = resolve_checkpoint_dir(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    model = BertModel.from_pretrained(
        str(directory), attn_implementation="eager", dtype=torch.float32
    ).eval()

    def run(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        with torch.no_grad():
            out = model(
                input_ids=batch["input_ids"],
                token_type_ids=batch["token_type_ids"],
                attention_mask=batch["attention_mask"],
            )
        real = batch["attention_mask"].bool()[..., None]  # padding is not compared: zeroed
        hidden = torch.where(real, out.last_hidden_state, 0.0)
        return {
            "input_ids": batch["input_ids"],
            "token_type_ids": batch["token_type_ids"],
            "attention_mask": batch["attention_mask"],
            "last_hidden_state": seal("last_hidden_state", hidden, BERT_TOLERANCE),
            "pooler_output": seal("pooler_output", out.pooler_output, BERT_TOLERANCE),
        }

    single = dict(tokenizer(SINGLE, padding=True, return_tensors="pt"))
    first, second = zip(*PAIRS, strict=True)
    pair = dict(tokenizer(list(first), list(second), padding=True, return_tensors="pt"))
    config = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    return {
        "single": run(single) | {"sentences": SINGLE},
        "pair": run(pair) | {"sentences": [list(p) for p in PAIRS]},
        "meta": {
            "checkpoint": str(config.get("_name_or_path", directory.name)),
            "hidden_size": int(config["hidden_size"]),
            "num_hidden_layers": int(config["num_hidden_layers"]),
            "transformers_version": str(transformers.__version__),
            "torch_version": str(torch.__version__),
            "attn_implementation": "eager",
        },
    }


if __name__ == "__main__":
    sys.exit(main())
