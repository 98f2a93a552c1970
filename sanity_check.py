"""Check minBERT against references, one independent check per component.

    python sanity_check.py                      # every check, on the packaged all-MiniLM-L6-v2
    python sanity_check.py --checkpoint DIR     # a local copy of the same checkpoint
    python sanity_check.py --only attention     # the checks of one component (see --list)
    python sanity_check.py --list               # the checks and the exercises each one grades
    python sanity_check.py --results-json results.json   # also Gradescope's results file

The checks are in ``course/checks/``, one file per graded source file (``bert.py``,
``optimizer.py``, ``lora.py``, ...), each declared with ``@check`` next to its code; how a
check is written and registered is in ``course/registry.py``. GUIDE.md names each
exercise's check functions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
DEFAULT_REFERENCE = ROOT / "sanity_check_reference.pt"
# The student tree's grader, packed into one file: first on the import path, so that ``course`` is
# the grader even where the tree holds a course/ of its own.
PACKED_GRADER = ROOT / "grader.pyz"
if PACKED_GRADER.is_file() and str(PACKED_GRADER) not in sys.path:
    sys.path.insert(0, str(PACKED_GRADER))

from course.checks import CHECKS  # noqa: E402 (after the packed grader is on the path)
from course.fail_page import page, written_here  # noqa: E402
from course.gradescope import POINTS, read_points, results_json  # noqa: E402
from course.registry import PASS, Context, format_result, run_check, select  # noqa: E402
from minbert.checkpoint import atomic_write_text  # noqa: E402
from minbert.flags import ArgumentParser, nonempty_path  # noqa: E402

__all__ = ["CHECKS", "DEFAULT_REFERENCE", "PACKED_GRADER", "main"]


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
        "--html",
        metavar="PAGE",
        type=nonempty_path,
        help="also write an offline page with every check, and for each failed tensor check a "
        "map of where your output is outside the tolerance (never the expected values)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing --html or --results-json file that this command did not write",
    )
    parser.add_argument(
        "--points",
        metavar="FILE",
        type=nonempty_path,
        help=f"with --results-json: a JSON object of points per exercise (default: {POINTS.name} "
        "in course/, which an instructor edits)",
    )
    return parser


def check_output(parser: ArgumentParser, flag: str, path: Path, overwrite: bool, ours) -> None:
    """``flag PATH`` refused before any check runs: a folder, a missing folder, or a file that
    ``ours(path)`` does not recognise as this command's (without --overwrite)."""
    if path.is_dir():
        parser.error(f"{flag} {path}: a folder; give the file's name")
    if not path.parent.is_dir():
        parser.error(f"{flag} {path}: its folder {path.parent} does not exist")
    if path.exists() and not overwrite and not ours(path):
        parser.error(
            f"{flag} {path} exists and is not a file this command wrote; pass --overwrite to "
            "replace it, or give another name"
        )


def results_written_here(path: Path) -> bool:
    """``path`` is a results file in Gradescope's form (a JSON object with its tests)."""
    try:
        said = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(said, dict) and isinstance(said.get("tests"), list)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.points is not None and args.results_json is None:
        parser.error("--points goes with --results-json")
    if args.html is not None:
        check_output(parser, "--html", args.html, args.overwrite, written_here)
    if args.results_json is not None:
        check_output(
            parser, "--results-json", args.results_json, args.overwrite, results_written_here
        )
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
    if args.html is not None:
        atomic_write_text(args.html, page([result for result, _ in printed]))
        print(f"wrote {args.html}")
    return 0 if passed == len(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
