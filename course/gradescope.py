"""The checks' results as Gradescope's ``results.json`` (``python sanity_check.py --results-json
FILE``), with points per exercise from a course file the instructor edits (``points.json``
beside this file, or ``--points FILE``): the half of the Gradescope support that ships to
students. The zip is built by the instructor's grading package, which the student tree lacks.

Gradescope's autograder reads one JSON object: ``score`` (the total), and ``tests``, one entry
per check with its ``name``, ``score``, ``max_score``, ``status`` and ``output`` (the lines
``sanity_check.py`` prints for it), each ``visibility: visible``.

Points. An exercise's points are shared equally by the checks that grade that exercise alone
(``check.exercises == (exercise,)``); a check of several exercises (the whole-model ``bert``
checks) or of none (the tokenizer) is listed with ``max_score`` 0: it says where
to look but does not grade a second time what the exercises' own checks grade. A check scores
its ``max_score`` when it passes, else 0.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path

from course.registry import PASS, Check, Result

# The points of each exercise: a Path in the project, a path inside the archive where the grader
# is packed (the student tree's grader.pyz)
POINTS = resources.files(__package__) / "points.json"


def read_points(path: Path, exercises: Iterable[str]) -> dict[str, float]:
    """``{exercise: points}`` from a JSON object naming every exercise once with a number of
    points >= 0; a ValueError that names the file and what is wrong."""
    try:
        points = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable JSON file ({err})") from None
    known = sorted(set(exercises))
    if not isinstance(points, dict):
        raise ValueError(f"{path}: give a JSON object {{exercise: points}} for {', '.join(known)}")
    if unknown := sorted(set(points) - set(known)):
        raise ValueError(
            f"{path}: unknown exercise {unknown[0]!r}; the exercises: {', '.join(known)}"
        )
    if missing := [e for e in known if e not in points]:
        raise ValueError(f"{path}: no points for exercise {missing[0]!r} (0 is allowed)")
    bad = [e for e, p in points.items() if isinstance(p, bool) or not isinstance(p, int | float)]
    if bad or any(p < 0 for p in points.values()):
        exercise = (bad or [e for e, p in points.items() if p < 0])[0]
        raise ValueError(f"{path}: exercise {exercise!r}: points must be a number >= 0")
    return {e: float(p) for e, p in points.items()}


def max_scores(checks: Sequence[Check], points: dict[str, float]) -> dict[str, float]:
    """Each check's share of the points (see the module docstring), by check name."""
    own = {e: [c for c in checks if c.exercises == (e,)] for e in points}
    return {
        c.name: points[c.exercises[0]] / len(own[c.exercises[0]]) if len(c.exercises) == 1 else 0.0
        for c in checks
    }


def results_json(results: Sequence[tuple[Result, str]], points: dict[str, float]) -> dict:
    """Gradescope's results object for ``(result, printed lines)`` pairs."""
    shares = max_scores([r.check for r, _ in results], points)
    tests = []
    for result, output in results:
        top = shares[result.check.name]
        passed = result.status == PASS
        tests.append(
            {
                "name": result.check.name,
                "score": top if passed else 0.0,
                "max_score": top,
                "status": "passed" if passed else "failed",
                "output": output,
                "visibility": "visible",
                # for the instructor's class report: what the judge found, by name
                "extra_data": {
                    "result": result.status,
                    "diagnosis": result.diagnosis,
                    "uncompiled": bool(result.uncompiled),
                    "timed_out": result.detail.startswith("timed out"),
                },
            }
        )
    return {
        "score": sum(t["score"] for t in tests),
        "tests": tests,
        "visibility": "visible",
        "stdout_visibility": "visible",
    }


def main(argv: list[str] | None = None) -> int:
    """``python -m course.gradescope``: builds nothing. The zip (the grader, its sandbox, the
    student tree) is built from the instructor's tree by its grading package, which the student
    tree leaves out and this module never imports; say so in one line, exit 2."""
    print(
        "error: python -m course.gradescope builds no autograder zip: the Gradescope autograder "
        "is built in the instructor's tree (the full project) by its grading package; see the "
        "instructor's part of its GUIDE.md",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(main())
