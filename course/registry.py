"""The check registry: what a check is, how it is declared, run, selected and reported. A check
is declared with ``@check`` in the checks file of the source file it grades, naming its judge::

    @check(
        "attention: scaled_dot_product_attention vs equation",
        tolerance=1e-5,
        judge=stored_cases(("attention_function", "eval"), ("attention_function", "train")),
        hint="divide QKᵀ by √d_k (the head size), add M before the softmax, ...",
        exercises=("attention",),
    )
    def check_attention_function(ctx: Context) -> Outputs:
        ...
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch

from course.gradients import GRADIENT_SEEN
from course.locate import PROJECT_ROOT, definition_line, locate, raised_in, relative_to_project
from course.measure import Measurement, diagnose
from course.outcome import Outputs, observed
from course.untouched import Untouched
from minbert.checkpoint import load_trusted

PASS, FAIL, NOT_IMPLEMENTED = "PASS", "FAIL", "NOT IMPLEMENTED"
WITHHELD = "WITHHELD"  # class grading only: the grader lost the runner, the check is not scored

# The stored cases of the component checks, written by the instructor's reference script: a Path
# in the project, a path inside the archive where the grader is packed (grader.pyz).
COURSE_DATA = resources.files(__package__) / "reference_data.pt"

# The tasks every plug-in check builds its plug-in for.
PLUGIN_TASKS = ["sst", "sts"]


@dataclass(frozen=True)
class Check:
    """One line of the report.

    name: "<component>: what is compared" (``--only <component>`` selects it).
    tolerance: the largest absolute difference that passes.
    compute: runs the student's code; returns its outputs as plain data (``course/outcome.py``).
    hint: what to look at when the check fails.
    exercises: the course exercises (GUIDE.md's ids) whose code this check runs; with
        any of them missing the check is NOT IMPLEMENTED, with all of them done it can pass.
    judge: measures those outputs against the references; runs no student code.
    raises: the mistakes known by what they raise: a phrase of the error (torch's words) ->
        the diagnosis, the mistake in the student's terms.
    seen: the mistakes a ``problem`` of ``compute`` shows by itself: its key -> the diagnosis
        (``course/outcome.py``: ``observed``). The judge gets no problem: it is judged here.
    functions: the qualified names, among the exercises' functions, of those whose output the
        check judges (a FAIL's ``your code:`` names only them); empty: every one of them.
    """

    name: str
    tolerance: float
    compute: Callable[[Context], Outputs]
    hint: str = ""
    exercises: tuple[str, ...] = ()
    judge: Callable[[Context, Outputs], Measurement] | None = None
    raises: dict[str, str] = field(default_factory=dict)
    seen: dict[str, str] = field(default_factory=dict)
    functions: tuple[str, ...] = ()

    @property
    def component(self) -> str:
        return self.name.split(":", 1)[0]


@dataclass
class Result:
    check: Check
    status: str  # PASS, FAIL, NOT IMPLEMENTED or WITHHELD
    max_abs_diff: float | None  # None when the check raised
    detail: str = ""  # the tensor that differs, or the exception and where it was raised
    diagnosis: str = ""  # the known mistake the output matches, if one does
    uncompiled: str = ""  # "SyntaxError in path:line": a file that does not compile, not the check
    where: str = ""  # a FAIL's: "path:line (name)" of the student's functions the check ran
    blamed: tuple[str, ...] = ()  # the check's functions the judgement found wrong; (): all
    off: dict | None = None  # a FAIL's map of where its output is off (``measure.off_map``)


class Context:
    """What the checks share, built on first use: a check that does not need the model does not
    fail because the model cannot be built."""

    def __init__(
        self, checkpoint: str | None, reference_file: Path, more_mistakes: Path | None = None
    ) -> None:
        self.checkpoint = checkpoint
        self.reference_file = reference_file
        self.more_mistakes = more_mistakes
        self._outputs: dict[tuple[str, bool], dict[str, torch.Tensor]] = {}
        self._changed: dict[tuple[str, bool], str | None] = {}

    @functools.cached_property
    def reference(self) -> dict:
        if not self.reference_file.is_file():
            raise FileNotFoundError(
                f"{self.reference_file} is missing; the instructor's reference script writes it"
            )
        return load_trusted(self.reference_file)  # plain tensors only

    @functools.cached_property
    def course_data(self) -> dict:
        """The stored cases of the component checks (``COURSE_DATA``): inputs, weights, and the
        expected outputs and the outputs of known mistakes, sealed (``seal.py``)."""
        if not COURSE_DATA.is_file():
            raise FileNotFoundError(
                f"{COURSE_DATA} is missing; the instructor's reference script writes it"
            )
        if isinstance(COURSE_DATA, Path):
            data = load_trusted(COURSE_DATA)  # plain tensors and containers only
        else:
            packed = io.BytesIO(COURSE_DATA.read_bytes())  # torch cannot open a path in a zip
            data = load_trusted(packed, name=str(COURSE_DATA))
        if self.more_mistakes is not None:
            add_mistakes(data, load_trusted(self.more_mistakes)["operator mistakes"])
        return data

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
                f"size {meta.get('hidden_size')}); the instructor's reference script makes one for "
                "this checkpoint"
            )
        return model

    def outputs(self, batch: str, fast_attention: bool = True) -> dict[str, torch.Tensor]:
        """minBERT's outputs on the reference batch ``batch`` ("single" or "pair")."""
        key = (batch, fast_attention)
        if key not in self._outputs:
            ref = self.reference[batch]
            names = ("input_ids", "attention_mask", "token_type_ids")
            kept = Untouched({name: ref[name].clone() for name in names}, self.model)
            self.model.set_fast_attention(fast_attention)
            try:
                with torch.no_grad():
                    self._outputs[key] = self.model(**kept.arguments)
            finally:
                self.model.set_fast_attention(True)
            self._changed[key] = kept.problem()
        return self._outputs[key]

    def changed(self, batch: str, fast_attention: bool = True) -> str | None:
        """What computing ``outputs(batch, fast_attention)`` changed besides its return value (an
        argument, a weight or a buffer of the model), or None."""
        self.outputs(batch, fast_attention)
        return self._changed[(batch, fast_attention)]


def add_mistakes(data: dict, more: dict[tuple, dict]) -> None:
    """Known mistakes added to the stored cases of ``data``: ``more`` maps a case's path of keys
    to its added {description: sealed outputs}, which come after the case's own (a tie between
    two is named by the case's own). Where a case is not there, its additions are not used."""
    for path, mistakes in more.items():
        case = data
        for key in path:
            case = case.get(key, {}) if isinstance(case, dict) else {}
        if "mistakes" in case:
            case["mistakes"] = case["mistakes"] | {
                text: sealed for text, sealed in mistakes.items() if text not in case["mistakes"]
            }


# ----------------------------------------------------------------------------------------------
# Declaring checks

ComputeFunction = Callable[[Context], Outputs]

# Every declared check, in the order of declaration (course/checks/__init__.py imports
# the checks files in the order of GUIDE.md).
CHECKS: list[Check] = []


def check(
    name: str,
    *,
    tolerance: float,
    judge: Callable[[Context, Outputs], Measurement],
    hint: str = "",
    exercises: tuple[str, ...] = (),
    raises: dict[str, str] | None = None,
    seen: dict[str, str] | None = None,
    functions: tuple[str, ...] = (),
) -> Callable[[ComputeFunction], ComputeFunction]:
    """Register the decorated function as the ``compute`` of the check ``name``, judged by
    ``judge`` (see ``Check``); the function is returned unchanged. Two checks of one name are a
    ValueError."""

    def register(compute: ComputeFunction) -> ComputeFunction:
        if any(c.name == name for c in CHECKS):
            raise ValueError(f"a check named {name!r} is already registered")
        # every check knows a cut graph (course/gradients.py), besides its own mistakes
        known = {"raises": raises or {}, "seen": GRADIENT_SEEN | (seen or {})}
        known["functions"] = tuple(functions)
        CHECKS.append(Check(name, tolerance, compute, hint, tuple(exercises), judge, **known))
        return compute

    return register


# ----------------------------------------------------------------------------------------------
# Running, selecting and reporting


def not_implemented_message(err: BaseException) -> str | None:
    """The message of a NotImplementedError in ``err`` or its causes, else None."""
    while err is not None:
        if isinstance(err, NotImplementedError):
            return str(err) or "NotImplementedError"
        err = err.__cause__ or err.__context__
    return None


def exercise_places(ctx: Context) -> dict[str, list[tuple[str, str]]]:
    """exercise -> (path, qualified name) of each function that holds a part of it, stored by the
    generator (the student tree has no markers to find them by); empty when there are none."""
    try:
        stored = ctx.course_data.get("exercise functions", {})
    except Exception:  # no stored data: locate by path alone
        return {}
    return {
        exercise: [(path, name) for path, name in places] for exercise, places in stored.items()
    }


def student_functions(ctx: Context) -> dict[str, list[str]]:
    """path -> the qualified names of the functions that hold an exercise."""
    found: dict[str, list[str]] = {}
    for places in exercise_places(ctx).values():
        for path, name in places:
            found.setdefault(path, []).append(name)
    return found


def check_functions(
    check: Check, ctx: Context, blamed: tuple[str, ...] = ()
) -> list[tuple[str, str]]:
    """(path, qualified name) of the student's functions whose output ``check`` judges: its
    ``functions``, or every function of its exercises; of those, only the ``blamed`` ones when
    the judgement found which were wrong (and names one of them)."""
    places = exercise_places(ctx)
    found = [place for exercise in check.exercises for place in places.get(exercise, [])]
    judged = [place for place in found if not check.functions or place[1] in check.functions]
    narrowed = [place for place in judged if place[1] in blamed]
    return narrowed or judged


def definition_lines(check: Check, ctx: Context) -> dict[str, int]:
    """ "path:name" -> the line of the ``def`` of each of the check's functions in this tree (the
    student's lines, which differ from the solution's): the runner sends them with its answer,
    so that a FAIL says where the function is."""
    lines = {}
    for path, name in check_functions(check, ctx):
        line = definition_line(PROJECT_ROOT / path, name)
        if isinstance(line, int):
            lines[f"{path}:{name}"] = line
    return lines


def your_code(check: Check, ctx: Context, lines: object, blamed: tuple[str, ...] = ()) -> str:
    """ "minbert/bert.py:45 (scaled_dot_product_attention)", one for each of the check's
    functions (the ``blamed`` ones where the judgement found which), from the judge's own names
    and the runner's ``lines`` (untrusted: a line is used only when it is a positive int)."""
    lines = lines if isinstance(lines, dict) else {}
    said = []
    for path, name in check_functions(check, ctx, blamed):
        line = lines.get(f"{path}:{name}")
        ok = isinstance(line, int) and not isinstance(line, bool) and 0 < line < 10**7
        said.append(f"{path}:{line if ok else '?'} ({name})")
    return "; ".join(said)


@contextlib.contextmanager
def calling(function: str) -> Iterator[None]:
    """Mark an exception raised in the block as ``function``'s: the block calls that one of the
    check's functions, and the FAIL names it alone (not the student's function the error was
    raised in, which may be one that ``function`` handed a wrong value)."""
    try:
        yield
    except Exception as err:
        err.check_function = function
        raise


def compute_check(check: Check, ctx: Context) -> dict:
    """Run the check's ``compute`` (the student's code): ``{"outputs": ...}``, or ``{"error":
    what was raised and where, "not_implemented": bool, "uncompiled": ...}``. Never raises."""
    try:
        return {"outputs": check.compute(ctx), **lines_of(check, ctx)}
    except Exception as err:  # one broken check must not stop the others
        if uncompiled := uncompiled_file(err):
            return {"error": uncompiled, "not_implemented": False, "uncompiled": uncompiled}
        todo = not_implemented_message(err)
        detail = todo if todo is not None else f"{type(err).__name__}: {err}"
        functions = student_functions(ctx)
        detail += f" ({locate(err, functions)})"
        name = getattr(err, "check_function", "") or raised_in(err, functions)
        blamed = [name] if name else []
        return {
            "error": detail,
            "not_implemented": todo is not None,
            "blamed": blamed,
            **lines_of(check, ctx),
        }


def lines_of(check: Check, ctx: Context) -> dict:
    """``{"lines": definition_lines(...)}``, or nothing when a file cannot be read."""
    try:
        return {"lines": definition_lines(check, ctx)}
    except Exception:
        return {}


def uncompiled_file(err: BaseException) -> str:
    """ "SyntaxError in minbert/sampling.py:75: '(' was never closed" when ``err`` (or what
    caused it) is a file that does not compile, named first: the check did not run, and its
    own hint would point elsewhere; else ""."""
    while err is not None:
        if isinstance(err, SyntaxError) and err.filename:
            where = relative_to_project(err.filename)
            return f"{type(err).__name__} in {where}:{err.lineno}: {err.msg}"
        err = err.__cause__ or err.__context__
    return ""


def judge_check(check: Check, ctx: Context, computed: dict) -> Result:
    """The result of ``compute_check``'s answer (in class grading, a runner's: untrusted data).
    Never raises: outputs the judge cannot read are a FAIL that says so. A FAIL names where the
    student's functions are (``your_code``), unless a file did not compile."""
    result = _judged(check, ctx, computed)
    if result.status == FAIL and not result.uncompiled:
        result.where = your_code(check, ctx, computed.get("lines"), result.blamed)
    return result


MESSAGE_CHARS = 4000  # the most of a raised message (or a compile error) a result keeps


def cut(message: str, limit: int = MESSAGE_CHARS) -> str:
    """``message`` in at most ``limit`` characters and a note saying how many more there were:
    a submission's exception text never makes a results file or a report large."""
    if len(message) <= limit:
        return message
    return f"{message[:limit]}... (cut: {len(message) - limit} more characters)"


def _judged(check: Check, ctx: Context, computed: dict) -> Result:
    if "error" in computed:
        status = NOT_IMPLEMENTED if computed.get("not_implemented") is True else FAIL
        uncompiled = cut(str(computed.get("uncompiled") or ""))
        error = cut(str(computed["error"]))
        named = [said for phrase, said in check.raises.items() if phrase in error]
        diagnosis = "" if uncompiled or not named else named[0]
        blamed = computed.get("blamed")
        blamed = tuple(str(n) for n in blamed) if isinstance(blamed, list) else ()
        return Result(check, status, None, error, diagnosis, uncompiled, blamed=blamed)
    outputs = computed.get("outputs")
    gradient = None
    if isinstance(outputs, dict) and "gradient" in outputs:  # judged once the values pass
        gradient = outputs["gradient"]
        outputs = {key: value for key, value in outputs.items() if key != "gradient"}
    try:
        if isinstance(outputs, dict) and outputs.get("problem") is not None:
            measurement = observed(outputs, check.seen)  # what compute saw, e.g. a side effect
        else:
            measurement = check.judge(ctx, outputs)
    except Exception as err:
        if (odd := not_a_tensor(outputs)) is not None:
            name, value = odd
            said = f"{name} is of type {type(value).__name__}, expected a tensor"
            return Result(check, FAIL, None, f"{said}: see what your function returns")
        said = f"{type(err).__name__}: {str(err)[:200]}"
        return Result(check, FAIL, None, f"outputs the grader cannot read ({said})")
    diff = measurement.max_abs_diff
    passed = diff <= check.tolerance  # NaN compares false: fails
    if passed and isinstance(gradient, dict) and gradient.get("problem") is not None:
        measurement = observed(gradient, check.seen)
    elif passed:
        return Result(check, PASS, diff)
    said = diagnose(measurement, check.tolerance)
    blamed = tuple(measurement.functions)
    return Result(check, FAIL, diff, measurement.hint, said, blamed=blamed, off=measurement.off)


# The keys of a check's outputs that hold the check's own numbers and texts, not the student's.
CHECKS_OWN_KEYS = (
    "label",
    "axes",
    "calls",
    "names",
    "problem",
    "mistake",
    "errors",
    "gradient",
    "functions",
)


def not_a_tensor(outputs: object, name: str = "") -> tuple[str, object] | None:
    """The first thing your code returned, in ``outputs``, that is neither a tensor nor a
    container of them (None, a number, a string where a tensor belongs): (its name, it), or
    None. The check's own numbers and texts (labels, axes, dropout calls) are not looked at."""
    if isinstance(outputs, torch.Tensor):
        return None
    if isinstance(outputs, dict):
        for key, value in outputs.items():
            if key in CHECKS_OWN_KEYS:
                continue
            inner = name if key in ("got", "cases", "outputs") else key
            if (found := not_a_tensor(value, inner)) is not None:
                return found
        return None
    if isinstance(outputs, list | tuple):
        return next((f for v in outputs if (f := not_a_tensor(v, name)) is not None), None)
    return (name or "the output", outputs)


def run_check(check: Check, ctx: Context) -> Result:
    """Compute and judge one check in this process (``sanity_check.py``); never raises (a
    broken check is a FAIL, a missing exercise NOT IMPLEMENTED)."""
    return judge_check(check, ctx, compute_check(check, ctx))


def format_result(result: Result, width: int, shown_hints: set[str] | None = None) -> str:
    """The check's line, and under a FAIL or NOT IMPLEMENTED what differs and what to try. A
    FAIL's hint already printed (``shown_hints``, updated here) reads "hint: as above"."""
    check = result.check
    diff = "-" if result.max_abs_diff is None else f"{result.max_abs_diff:.2e}"
    if result.status == FAIL and diff == f"{check.tolerance:.2e}":  # just above: say so
        diff = f">{diff}"
    if result.status == FAIL and diff == "inf":  # sealed: outside the tolerance, by how much
        diff = f">{check.tolerance:.0e}"  # the digests do not say (the detail gives the value)
    line = f"{check.name:<{width}}  max_abs_diff {diff:<9}  tol {check.tolerance:<7.0e}  "
    line += result.status
    if result.status == FAIL and result.uncompiled:  # the check's hint would point elsewhere
        return f"{line}\n    {result.uncompiled}; fix it first: no check that needs it can run"
    if result.status == FAIL:
        if result.detail:
            line += f"\n    {result.detail}"
        if result.where:
            line += f"\n    your code: {result.where}"
        if result.diagnosis:
            line += f"\n    diagnosis: {result.diagnosis}"
        if check.hint:
            repeated = shown_hints is not None and check.hint in shown_hints
            line += "\n    hint: as above" if repeated else f"\n    hint: {check.hint}"
            if shown_hints is not None:
                shown_hints.add(check.hint)
    elif result.status == NOT_IMPLEMENTED:
        line += f"\n    hint: {result.detail}"
    elif result.status == WITHHELD:
        line += f"\n    {result.detail}"
    return line


def select(checks: list[Check], names: list[str]) -> list[Check]:
    """The checks of each component in ``names`` (the part of a check's name before ':'), or
    whose name contains it; an unknown name is a ValueError."""
    chosen: list[Check] = []
    for name in names:
        found = [c for c in checks if c.component == name.lower()]
        found = found or [c for c in checks if name.lower() in c.name.lower()]
        if not found:
            components = ", ".join(dict.fromkeys(c.component for c in checks))
            raise ValueError(f"no check matches {name!r}; components: {components}")
        chosen += [c for c in found if c not in chosen]
    return [c for c in checks if c in chosen]  # in the usual order
