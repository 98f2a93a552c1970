"""What a check's computation hands its judgement: plain data, so that the two can run apart.

A check has two halves (``course/registry.py``): ``compute`` runs the student's code and returns
what it computed, and ``judge`` compares that with the stored references. ``sanity_check.py``
runs both in one process. Class grading runs ``compute`` in a contained runner per submission
(``course/runner.py``) and ``judge`` in the class grader's judge, the outputs crossing a
pipe as data only (``course/wire.py``): tensors, numbers, strings, lists and dicts. A runner's
outputs can be wrong; they cannot be a grade, since the judge decides which stored case they
are compared with and the stored outputs are sealed (``course/seal.py``).

Most checks grade stored cases. ``compute`` returns ``outputs(...)``: one ``graded(...)`` entry
per case, in the order the check declares its cases (``stored_cases``), or ``problem(...)`` when
the outputs cannot be graded (the backward pass fails, an argument was changed in place).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from course.measure import Measurement, grade, worst_of

Outputs = dict  # what ``compute`` returns: plain data (see the module docstring)


def graded(got: dict, label: str = "", axes: Sequence[str] = (), calls: list | None = None) -> dict:
    """One case's outputs: ``got`` (name -> what the student's code returned), the ``label`` and
    ``axes`` its messages use, and the dropout ``calls`` it made (``DropoutRecorder.calls``)."""
    return {"got": got, "label": label, "axes": list(axes), "calls": calls}


def outputs(*cases: dict) -> Outputs:
    """The outputs of a check's cases, in its declared order."""
    return {"cases": list(cases)}


def problem(message: str) -> Outputs:
    """Outputs that fail whatever they hold, for ``message``."""
    return {"problem": message}


def stored(data: dict, path: Sequence[str]) -> dict:
    """The stored case at ``path`` (keys into the stored cases, ``Context.course_data``)."""
    for key in path:
        data = data[key]
    return data


def stored_cases(*paths: tuple[str, ...]) -> Callable:
    """The judgement of a check that grades the stored cases at ``paths``: its problem if it has
    one, else the worst of its cases (``grade``). The paths are the check's own, never the
    runner's: outputs cannot choose the case they are compared with."""

    def judge(ctx, out: Outputs) -> Measurement:
        if out.get("problem") is not None:
            return Measurement(math.inf, str(out["problem"]))
        cases = out["cases"]
        if len(cases) != len(paths):
            raise ValueError(f"{len(cases)} cases computed, {len(paths)} expected")
        found = []
        for path, case in zip(paths, cases):
            expected = stored(ctx.course_data, path)
            found.append(
                grade(expected, case["got"], case["label"], tuple(case["axes"]), case["calls"])
            )
        return worst_of(found)

    return judge
