"""Check minBERT against references, one independent check per component.

    python sanity_check.py                      # every check, on the packaged all-MiniLM-L6-v2
    python sanity_check.py --checkpoint DIR     # a local copy of the same checkpoint
    python sanity_check.py --only attention     # the checks of one component (see --list)
    python sanity_check.py --list               # the checks and the exercises each one grades
    python sanity_check.py --results-json results.json   # also Gradescope's results file

Each check measures the largest absolute difference between what minBERT computes and a
reference, and passes when it is at most the check's stated tolerance. Two kinds of reference:

* component checks (embeddings, attention, layer, adamw, sampler, adapter, lhuc, lora, pals,
  smart) run one component on its own, on fixed random weights and inputs (the project's tiny
  config, ``BertConfig.tiny()``) stored in ``course/reference_data.pt``, and compare it
  with the outputs stored there, in eval mode and (where there is dropout) in training mode under
  seeded dropout. Those outputs come from equations written out independently in an
  instructor-only script (not in the student tree), so a student tree holds no solution, and
  are stored sealed (``course/seal.py``: digests and projections), so the file is no answer key
  either; it also holds the outputs of common mistakes, and a failing check
  names the one the student's output matches. A component check calls no other exercise, so a
  missing attention does not fail the AdamW check, nor the layer check. AdamW and LoRA run in
  float64; AdamW reports the first step that differs.
* whole-model checks (bert) compare the model with Hugging Face transformers' BertModel (eager
  attention, float32, eval mode), whose outputs the instructor's reference script saved in
  ``sanity_check_reference.pt`` (so transformers is not needed here), sealed the same way:
  last_hidden_state on the real (non-padding) tokens and pooler_output, for a padded batch of
  single sentences and a batch of sentence pairs. They need the embeddings, attention and layer
  exercises all done. The tokenizer is checked too (it is not an exercise).

The checks are in ``course/checks/``, one file per graded source file (``bert.py``,
``optimizer.py``, ``lora.py``, ...), each declared with ``@check`` next to its code; how a
check is written and registered is in ``course/registry.py``. GUIDE.md names each
exercise's check functions.

Each check names the course exercises it depends on (the exercise ids of GUIDE.md; ``--list``
shows them). In a student tree (every exercise a ``raise NotImplementedError``) a check whose
exercise is still missing shows NOT IMPLEMENTED with that exercise's hint; every other check runs
normally. An exception in one check (a bug, or a ``NotImplementedError``) never stops the others.

Output: one line per check, ``name  max_abs_diff X  tol Y  PASS|FAIL|NOT IMPLEMENTED``; under a
FAIL, the tensor that differs most (and where), ``diagnosis: <mistake>`` when the output is
that of a known common mistake, and a hint (an exception is located at the student's line, or
at the student's function whose value given code could not use);
under a NOT IMPLEMENTED, the exercise's hint and where it was raised. The last line reads
``N passed, M failed`` (NOT IMPLEMENTED counts as failed); the exit code is 1 if any check
failed. With ``--results-json FILE`` the same results are also written in Gradescope's
``results.json`` form, with the points of ``course/points.json`` (or ``--points``)
shared by each exercise's own checks (``course/gradescope.py``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from course.checks import CHECKS
from course.gradescope import POINTS, read_points, results_json
from course.registry import PASS, Context, format_result, run_check, select
from minbert.checkpoint import atomic_write_text
from minbert.flags import ArgumentParser, nonempty_path

ROOT = Path(__file__).resolve().parent
DEFAULT_REFERENCE = ROOT / "sanity_check_reference.pt"

__all__ = ["CHECKS", "DEFAULT_REFERENCE", "main"]


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="sanity_check.py",
        description="Check minBERT against references, one independent check per component "
        "(see GUIDE.md for the exercises they grade).",
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
        type=nonempty_path,
        default=DEFAULT_REFERENCE,
        help="reference outputs made by the instructor's reference script for that checkpoint "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--only",
        metavar="NAME",
        action="append",
        default=[],
        help="run only the checks of this component (e.g. attention, lora), or whose name "
        "contains NAME; repeatable",
    )
    parser.add_argument(
        "--list", action="store_true", help="list the checks and the exercises each depends on"
    )
    parser.add_argument(
        "--results-json",
        metavar="FILE",
        type=nonempty_path,
        help="also write the results in Gradescope's results.json form (points per exercise "
        "from --points)",
    )
    parser.add_argument(
        "--points",
        metavar="FILE",
        type=nonempty_path,
        help=f"with --results-json: a JSON object of points per exercise (default: {POINTS.name} "
        "in course/, which an instructor edits)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.points is not None and args.results_json is None:
        parser.error("--points goes with --results-json")
    try:
        points = read_points(args.points or POINTS, {e for c in CHECKS for e in c.exercises})
    except ValueError as err:
        parser.error(f"--points: {err}")
    try:
        checks = select(CHECKS, args.only) if args.only else CHECKS
    except ValueError as err:
        parser.error(f"--only: {err}")
    width = max(len(c.name) for c in checks)
    if args.list:
        for check in checks:
            exercises = ", ".join(check.exercises) or "-"
            print(f"{check.name:<{width}}  tol {check.tolerance:<7.0e}  exercises: {exercises}")
        return 0
    if args.checkpoint is not None and not (args.checkpoint and Path(args.checkpoint).is_dir()):
        parser.error(f"--checkpoint {args.checkpoint!r}: no such directory")
    if not args.reference.is_file():
        parser.error(
            f"--reference {args.reference}: no such file; the instructor's reference script "
            "writes it"
        )

    ctx = Context(args.checkpoint, args.reference)
    passed = 0
    shown_hints: set[str] = set()  # a hint shared by several failing checks is printed once
    printed = []
    for check in checks:
        result = run_check(check, ctx)
        printed.append((result, format_result(result, width)))
        print(format_result(result, width, shown_hints), flush=True)
        passed += result.status == PASS
    print(f"{passed} passed, {len(checks) - passed} failed")
    if args.results_json is not None:
        text = json.dumps(results_json(printed, points), indent=2, ensure_ascii=False) + "\n"
        atomic_write_text(args.results_json, text)
        print(f"wrote {args.results_json}")
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
