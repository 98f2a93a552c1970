"""What a check's computation hands its judgement: plain data, so that the two can run apart.

A check has two halves (``course/registry.py``): ``compute`` runs the student's code and returns
what it computed, and ``judge`` compares that with the stored references. ``sanity_check.py``
runs both in one process. Class grading runs ``compute`` in a contained runner per submission
(``course/runner.py``) and ``judge`` in the class grader's judge, the outputs crossing a
pipe as data only (``course/wire.py``): tensors, numbers, strings, lists and dicts. A runner's
outputs can be wrong; they cannot be a grade, since the judge decides which stored case they
are compared with and the stored outputs are sealed (``course/seal.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from course.measure import Measurement, grade, worst_of
from course.shapes import Given

Outputs = dict  # what ``compute`` returns: plain data (see the module docstring)


def graded(
    got: dict,
    label: str = "",
    axes: Sequence[str] = (),
    calls: list | None = None,
    names: dict[str, str] | None = None,
) -> dict:
    """One case's outputs: ``got`` (name -> what the student's code returned), the ``label`` and
    ``axes`` its messages use, the dropout ``calls`` it made (``DropoutRecorder.calls``), and
    ``names``: what the messages call an output whose stored name is not the student's word."""
    return {"got": got, "label": label, "axes": list(axes), "calls": calls, "names": names}


def outputs(*cases: dict) -> Outputs:
    """The outputs of a check's cases, in its declared order."""
    return {"cases": list(cases)}


def problem(message: str, mistake: str = "", functions: Sequence[str] = ()) -> Outputs:
    """Outputs that fail whatever they hold, for ``message``; ``mistake``: the key of the known
    mistake the problem shows (``observed``), or ""; ``functions``: those of the check's
    functions the problem is in, where the check knows (else all of them)."""
    return {"problem": message, "mistake": mistake, "functions": list(functions)}


def with_gradient(out: Outputs, failure: Outputs | None) -> Outputs:
    """``out`` carrying the problem its gradient check found (``course/gradients.py``), or
    ``out`` itself when there is none. The values are judged first: a FAIL says what differs;
    only where the values pass does the gradient's problem fail the check (``judge_check``)."""
    return out if failure is None else {**out, "gradient": failure}


def observed(out: Outputs, known: dict[str, str] | None = None) -> Measurement:
    """The failing measurement of a ``problem``: its message, and the mistake it shows named in
    the check's words (``known``: key -> what the diagnosis says) at distance 0, so that
    ``diagnose`` names it; a key the check does not know names nothing."""
    said = (known or {}).get(str(out.get("mistake") or ""))
    functions = out.get("functions")
    blamed = tuple(str(f) for f in functions) if isinstance(functions, list) else ()
    return Measurement(math.inf, str(out["problem"]), {said: 0.0} if said else {}, {}, blamed)


def stored(data: dict, path: Sequence[str]) -> dict:
    """The stored case at ``path`` (keys into the stored cases, ``Context.course_data``)."""
    for key in path:
        data = data[key]
    return data


def stored_cases(*paths: tuple[str, ...], given: Callable[[dict], Given] | None = None) -> Callable:
    """The judgement of a check that grades the stored cases at ``paths``: the worst of its cases
    (``grade``). The paths are the check's own, never the runner's: outputs cannot choose the
    case they are compared with. ``given``: what the outputs are built on, read from the stored
    data (``Context.course_data``), for the shapes of an error (``course/shapes.py``)."""

    def judge(ctx, out: Outputs) -> Measurement:
        cases = out["cases"]
        if len(cases) != len(paths):
            raise ValueError(f"{len(cases)} cases computed, {len(paths)} expected")
        built_on = given(ctx.course_data) if given is not None else None
        found = []
        for path, case in zip(paths, cases):
            expected = stored(ctx.course_data, path)
            label, axes, calls = case["label"], tuple(case["axes"]), case["calls"]
            names = case.get("names")
            found.append(grade(expected, case["got"], label, axes, calls, names, built_on))
        return worst_of(found)

    return judge
