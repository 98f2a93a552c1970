"""The check registry: what a check is, how it is declared, run, selected and reported.

A check is a function ``Context -> Measurement`` declared with ``@check`` right where it is
written, in the checks file of the source file it grades (``minbert/course/checks/<file>.py``)::

    @check(
        "attention: scaled_dot_product_attention vs equation",
        tolerance=1e-5,
        hint="divide QKᵀ by √d_k (the head size), add M before the softmax, ...",
        exercises=("attention",),
    )
    def check_attention_function(ctx: Context) -> Measurement:
        ...

A check made by a factory (``hidden_state_check("single")``) is registered right below the
factory: ``check("bert: ...", tolerance=1e-5, hint=..., exercises=...)(hidden_state_check(...))``.
The report lists the checks in the order they were registered: the import order of
``minbert/course/checks/__init__.py`` (the order of GUIDE.md), then each file top to bottom.

The rules a check keeps:

* it measures the largest absolute difference between what minBERT computes and a reference,
  and passes when that is at most its ``tolerance``; ``compare`` measures two tensors and says
  where they differ most (printing numbers with digits enough to differ), ``worst_of`` keeps the
  worst of several measurements. The tolerance fits the data's scale: a check whose outputs are
  large, or that must tell equivalent computations from mistakes by little (LoRA, AdamW), runs in
  float64;
* a component check feeds stored inputs and weights (``Context.course_data``, the file
  ``minbert/course/reference_data.pt``) to the student's code and compares with the stored
  outputs (``grade``). The file is copied into the student tree, so the outputs are sealed
  (``minbert/course/seal.py``: digests and projections, no output in full) and no lookup of the
  stored data passes (``measure_sealed``; ``tests/test_grader_store.py``); the equations that made
  them are instructor-only (``scripts/course_references.py``, run by
  ``scripts/make_course_references.py``), so the student tree holds no solution. The sealed
  outputs of each exercise's known mistakes let a failing check name the mistake (``diagnose``):
  one declared for some cases only (one path) when those cases match it and the others are right
  (``worst_of``), one that gives NaN or inf when the student's output is NaN or inf in the same
  places (``_distance``, on the projections: a slice holding NaN projects to NaN). Components
  with dropout run in eval and in training mode under seeded dropout
  (``minbert/course/dropout.py``: masks per head, so a loop over the heads is graded like one
  call; ``grade`` says how the dropout calls differ when they draw other masks);
* it calls no exercise but its own (the layer and PAL checks swap in stand-ins for attention,
  the plug-in checks call the plug-in's own sites, SMART runs on a small model defined in its
  check), so a missing attention does not fail the AdamW check;
* an exception raised in the student's code is reported at the student's file and line
  (``minbert/course/locate.py``: the innermost frame in a function that holds an exercise,
  stored by the generator since the student tree has no markers), not inside torch; one raised
  in given code on what a student's function returned names that function;
* it imports the graded code inside the function, so a module that cannot be imported fails
  only the checks that need it;
* it names the course exercises it depends on (``exercises``: the ids of ``python -m
  minbert.scaffold --list``). In a student tree a check whose exercise is missing raises that
  exercise's ``NotImplementedError`` and is reported NOT IMPLEMENTED with its hint. An exception
  in one check (a bug, or a ``NotImplementedError``) never stops the others (``run_check``).

To add a check: write it in the checks file of the source file it grades, decorate it, and add
the exercise to GUIDE.md. A new checks file is imported in ``minbert/course/checks/__init__.py``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from minbert.checkpoint import load_trusted
from minbert.course import seal
from minbert.course.dropout import DropoutRecorder, explain_calls
from minbert.course.locate import locate

PASS, FAIL, NOT_IMPLEMENTED = "PASS", "FAIL", "NOT IMPLEMENTED"

# The stored cases of the component checks, written by scripts/make_course_references.py.
COURSE_DATA = Path(__file__).resolve().parent / "reference_data.pt"

# The tasks every plug-in check builds its plug-in for.
PLUGIN_TASKS = ["sst", "sts"]


@dataclass
class Measurement:
    """The outcome of one check: the largest absolute difference from the reference, and where
    it is (printed when the check fails, to say which tensor or step to look at)."""

    max_abs_diff: float
    hint: str = ""
    # known mistake -> max |got − the output that mistake gives| (see ``grade``)
    mistakes: dict[str, float] = field(default_factory=dict)

    def is_worse_than(self, other: Measurement) -> bool:
        """Larger difference, with NaN (a broken computation) worst of all."""
        if math.isnan(other.max_abs_diff):
            return False
        return math.isnan(self.max_abs_diff) or self.max_abs_diff > other.max_abs_diff


def worst_of(measurements: list[Measurement]) -> Measurement:
    """The measurement with the largest difference (NaN first); 0 when there is none. A known
    mistake keeps its largest distance over all of them: in a measurement that declares it, the
    distance to its output; in one that does not (a mistake declared for some cases only: one
    path, one mode), the distance to the expected output, since there the mistake changes
    nothing. So a partial mistake is named when the cases it affects match it and the others
    are right."""
    worst = Measurement(0.0)
    for m in measurements:
        if m.is_worse_than(worst):
            worst = Measurement(m.max_abs_diff, m.hint, worst.mistakes)
    names = dict.fromkeys(name for m in measurements for name in m.mistakes)
    worst.mistakes = {
        name: max(_as_distance(m.mistakes.get(name, m.max_abs_diff)) for m in measurements)
        for name in names
    }
    return worst


def _as_distance(d: float) -> float:
    """A difference as a distance: NaN (a broken comparison) is infinitely far."""
    return math.inf if math.isnan(d) else d


@dataclass(frozen=True)
class Check:
    """One line of the report.

    name: "<component>: what is compared" (``--only <component>`` selects it).
    tolerance: the largest absolute difference that passes.
    run: computes the measurement.
    hint: what to look at when the check fails.
    exercises: the course exercises (``minbert.scaffold`` ids) whose code this check runs; with
        any of them missing the check is NOT IMPLEMENTED, with all of them done it can pass.
    """

    name: str
    tolerance: float
    run: Callable[[Context], Measurement]
    hint: str = ""
    exercises: tuple[str, ...] = ()

    @property
    def component(self) -> str:
        return self.name.split(":", 1)[0]


@dataclass
class Result:
    check: Check
    status: str  # PASS, FAIL or NOT IMPLEMENTED
    max_abs_diff: float | None  # None when the check raised
    detail: str = ""  # the tensor that differs, or the exception and where it was raised
    diagnosis: str = ""  # the known mistake the output matches, if one does


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
        return load_trusted(self.reference_file)  # plain tensors only

    @functools.cached_property
    def course_data(self) -> dict:
        """The stored cases of the component checks (``COURSE_DATA``): inputs, weights, and the
        expected outputs and the outputs of known mistakes, sealed (``seal.py``)."""
        if not COURSE_DATA.is_file():
            raise FileNotFoundError(
                f"{COURSE_DATA} is missing; the instructor regenerates it with "
                "scripts/make_course_references.py"
            )
        return load_trusted(COURSE_DATA)  # plain tensors and containers only

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


def distinct(got: float, expected: float) -> tuple[str, str]:
    """Two numbers printed with as few significant digits as show them apart (6 to 17)."""
    for digits in (6, 9, 12, 17):
        a, b = f"{got:.{digits}g}", f"{expected:.{digits}g}"
        if a != b:
            break
    return a, b


def compare(
    name: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    mask: torch.Tensor | None = None,
    axes: tuple[str, ...] = ("sentence", "token", "dim"),
) -> Measurement:
    """max |got − expected| over the positions where ``mask`` (B, T) is true (all if None), and
    where it occurs, naming the position along ``axes``. For tensors the grader has in full (the
    whole-model reference, a weight before merging); a stored expected output is sealed
    (``grade``)."""
    if not isinstance(got, torch.Tensor):
        return Measurement(math.inf, f"{name} is a {type(got).__name__}, expected a tensor")
    if got.shape != expected.shape:
        return Measurement(
            math.inf, f"{name} has shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
        )
    diff = (got.detach().double() - expected.detach().double()).abs()
    if mask is not None:  # padding positions are not compared (a where, so NaN there is ignored)
        diff = torch.where(mask.reshape(mask.shape + (1,) * (diff.ndim - 2)), diff, 0.0)
    if diff.numel() == 0:
        return Measurement(0.0)
    where = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
    a, b = distinct(got[where].item(), expected[where].item())
    hint = f"{name} differs most at {_position(where, axes)}: got {a}, expected {b}"
    return Measurement(diff.max().item(), hint)


def _axis_names(axes: tuple[str, ...], ndim: int) -> tuple[str, ...]:
    """The names of ``ndim`` axes: the last ``ndim`` of ``axes``, "index" for any beyond them."""
    return axes[-ndim:] if len(axes) >= ndim else tuple(axes) + ("index",) * (ndim - len(axes))


def _position(where: tuple[int, ...], axes: tuple[str, ...]) -> str:
    """ "sentence 1, token 3" for the index ``where``, naming its axes from the end of ``axes``."""
    names = _axis_names(axes, len(where)) if len(axes) != len(where) else axes
    return ", ".join(f"{axis} {i}" for axis, i in zip(names, where))


def _distance(got: torch.Tensor, other: torch.Tensor) -> float:
    """max |got − other|, where NaN matches NaN and an infinity the same infinity (so a known
    mistake whose output is NaN or inf in some places matches a student's output broken in the
    same places); inf when the shapes differ or one side alone is NaN or infinite."""
    if not isinstance(got, torch.Tensor) or got.shape != other.shape:
        return math.inf
    if got.numel() == 0:
        return 0.0
    a, b = got.detach().double(), other.detach().double()
    same = (a.isnan() & b.isnan()) | (a == b)  # a == b holds for equal infinities too
    d = torch.where(same, 0.0, (a - b).abs()).nan_to_num(nan=math.inf).max().item()
    return d


def grade(
    case: dict,
    got: dict[str, torch.Tensor],
    label: str = "",
    axes: tuple[str, ...] = (),
    dropout: DropoutRecorder | None = None,
) -> Measurement:
    """What the student's code computed (``got``: name -> tensor) against a stored case:
    ``case["expected"]`` (name -> the sealed output, ``minbert/course/seal.py``) and
    ``case["mistakes"]`` (description of a known mistake -> the sealed outputs it gives; a name
    it leaves out is as expected; a mistake declared for other cases only is not in the case at
    all, and ``worst_of`` takes it as expected here). The measurement is the worst of the
    expected outputs (``measure_sealed``), and it carries the distance to every known mistake,
    in the same sealed form, which ``run_check`` uses to name the mistake when the check fails
    (``diagnose``). ``dropout``: the
    recorder the student's code ran under in training mode; where its calls drew other masks
    than the reference's, the message says how they differ (``explain_calls``)."""
    expected: dict[str, dict] = case["expected"]
    seen = {name: Observed(name, got.get(name), sealed) for name, sealed in expected.items()}
    found = [
        measure_sealed(f"{label}{name}", seen[name], sealed, axes or ("sentence", "token", "dim"))
        for name, sealed in expected.items()
    ]
    worst = worst_of(found)
    worst.mistakes = {
        mistake: max(seen[name].distance(outputs.get(name, expected[name])) for name in expected)
        for mistake, outputs in case.get("mistakes", {}).items()
    }
    worst.hint = explain_calls(worst.hint, dropout, case)
    return worst


class Observed:
    """The student's output ``got`` in the sealed form of the stored output ``name``
    (``seal.py``): its projection, its digest, or the digests of the buckets around its values;
    ``form`` is None when it is not a tensor of the stored shape."""

    def __init__(self, name: str, got: object, sealed: dict) -> None:
        self.name, self.got, self.kind, self.form = name, got, sealed["kind"], None
        self._near: list | None = None
        if not isinstance(got, torch.Tensor) or list(got.shape) != list(sealed["shape"]):
            return
        got = got.detach()
        if self.kind == "projection":
            self.form = seal.project(name, got)
        elif self.kind == "rounded":
            values = got.double().reshape(-1).tolist()
            self.form = [seal.nearby_digests(name, i, x, sealed["q"]) for i, x in enumerate(values)]
        else:
            integral = got.is_floating_point() and bool((got == got.round()).all())
            self.form = seal.exact_digest(name, got.to(torch.int64) if integral else got)

    def offsets(self, sealed: dict) -> list[int | None]:
        """Per value, how many buckets it is from the stored one (0 to 2; None: farther), by the
        digests (``rounded``, or a ``projection`` that holds them: an expected output)."""
        if self.kind == "rounded":
            near, stored = self.form, sealed["digests"]
        else:
            if self._near is None:
                values = self.got.detach().double().reshape(-1).tolist()
                self._near = seal.value_digests(self.name, values, sealed["q"], near=True)
            near, stored = self._near, sealed["digests"].tolist()
        found = [
            next((j for j, d in enumerate(row) if d == s), None) for row, s in zip(near, stored)
        ]
        return [None if j is None else (j + 1) // 2 for j in found]  # nearest first: 0, ±1, ±2

    def distance(self, sealed: dict) -> float:
        """How far the output is from a stored one, in the stored form: the largest projected
        difference (``_distance``: a slice NaN or infinite in both matches), or 0 (the same
        digests: a NaN's bucket is "nan") or inf; inf when the shape differs."""
        if self.form is None:
            return math.inf
        if self.kind == "projection":
            return _distance(self.form, sealed["values"])
        if self.kind == "rounded":
            return 0.0 if None not in self.offsets(sealed) else math.inf
        return 0.0 if self.form == sealed["digest"] else math.inf


def measure_sealed(
    name: str, seen: Observed, sealed: dict, axes: tuple[str, ...] = ("sentence", "token", "dim")
) -> Measurement:
    """The student's output against a sealed expected output, and where it differs. A value
    outside the tolerance by the digests fails the check; the difference reported is the
    largest projected one (a lower bound of max |got − expected|), or just above the tolerance
    when the projections see less than the digests do. ``rounded``: 0 when every value is
    within the tolerance, inf otherwise; ``exact``: 0 or inf."""
    shape = tuple(sealed["shape"])
    if not isinstance(seen.got, torch.Tensor):
        return Measurement(math.inf, f"{name} is a {type(seen.got).__name__}, expected a tensor")
    if seen.form is None:
        return Measurement(math.inf, f"{name} has shape {tuple(seen.got.shape)}, expected {shape}")
    if seen.kind == "exact":
        if seen.form == sealed["digest"]:
            return Measurement(0.0)
        return Measurement(math.inf, f"{name} differs from the expected (compared exactly)")
    offsets = seen.offsets(sealed)
    outside = offsets.index(None) if None in offsets else None
    values = seen.got.detach().double().reshape(-1)
    names = _axis_names(axes, len(shape))
    if outside is not None:
        at = tuple(int(j) for j in torch.unravel_index(torch.tensor(outside), shape))
        first = (
            f"{name}{' at ' + _position(at, names) if shape else ''} is "
            f"{values[outside].item():.9g}, more than the tolerance from the expected value"
        )
    if seen.kind == "rounded":
        if outside is None:
            return Measurement(max((max(j - 1, 0) * sealed["q"] for j in offsets), default=0.0))
        return Measurement(math.inf, first)
    diff = (seen.form - sealed["values"]).abs().amax(-1)  # (*leading)
    if diff.isnan().any():
        worst, where = math.nan, diff.isnan().nonzero()[0]
    else:
        worst, where = diff.max().item(), torch.unravel_index(diff.argmax(), diff.shape)
    where = tuple(int(i) for i in where)
    at = f" at {_position(where, names[: len(where)])}" if where else ""
    most = f"{name} differs most{at}: by at least {worst:.3g} (fixed random projections there)"
    if outside is None:
        return Measurement(worst, most)
    tolerance = seal.WINDOW * sealed["q"]
    if math.isnan(worst):
        return Measurement(worst, first)
    if not worst > tolerance:  # the digests see it, the projections do not
        return Measurement(math.nextafter(tolerance, math.inf), first)
    m = seal.slice_shape(shape)[1]  # a value outside the tolerance in the slice that differs most
    start = sum(i * math.prod(diff.shape[k + 1 :]) for k, i in enumerate(where)) * m
    inside = [i for i in range(start, start + m) if offsets[i] is None]
    if inside:
        i = inside[0]
        at = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), shape))
        return Measurement(
            worst, f"{most}; at {_position(at, names)} you have {values[i].item():.9g}"
        )
    return Measurement(worst, f"{most}; {first}")


def diagnose(measurement: Measurement, tolerance: float) -> str:
    """The known mistake whose output the student's matches (within 10× the tolerance and closer
    than the correct output), or "" when none does."""
    near = [
        (distance, name)
        for name, distance in measurement.mistakes.items()
        if distance <= 10 * tolerance and not distance >= measurement.max_abs_diff
    ]
    return min(near)[1] if near else ""


# ----------------------------------------------------------------------------------------------
# Declaring checks

CheckFunction = Callable[[Context], Measurement]

# Every declared check, in the order of declaration (minbert/course/checks/__init__.py imports
# the checks files in the order of GUIDE.md).
CHECKS: list[Check] = []


def check(
    name: str, *, tolerance: float, hint: str = "", exercises: tuple[str, ...] = ()
) -> Callable[[CheckFunction], CheckFunction]:
    """Register the decorated function as the check ``name`` (see ``Check``); the function is
    returned unchanged. Two checks of one name are a ValueError."""

    def register(run: CheckFunction) -> CheckFunction:
        if any(c.name == name for c in CHECKS):
            raise ValueError(f"a check named {name!r} is already registered")
        CHECKS.append(Check(name, tolerance, run, hint, tuple(exercises)))
        return run

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


def student_functions(ctx: Context) -> dict[str, list[str]]:
    """path -> the qualified names of the functions that hold an exercise, stored by the
    generator (the student tree has no markers to find them by); empty when there are none."""
    try:
        return ctx.course_data.get("exercise functions", {})
    except Exception:  # no stored data: locate by path alone
        return {}


def run_check(check: Check, ctx: Context) -> Result:
    """Run one check; never raises (a broken check is a FAIL, a missing exercise NOT
    IMPLEMENTED)."""
    try:
        measurement = check.run(ctx)
    except Exception as err:  # one broken check must not stop the others
        todo = not_implemented_message(err)
        detail = todo if todo is not None else f"{type(err).__name__}: {err}"
        detail += f" ({locate(err, student_functions(ctx))})"
        return Result(check, NOT_IMPLEMENTED if todo is not None else FAIL, None, detail)
    diff = measurement.max_abs_diff
    passed = diff <= check.tolerance  # NaN compares false: fails
    if passed:
        return Result(check, PASS, diff)
    return Result(check, FAIL, diff, measurement.hint, diagnose(measurement, check.tolerance))


def format_result(result: Result, width: int, shown_hints: set[str] | None = None) -> str:
    """The check's line, and under a FAIL or NOT IMPLEMENTED what differs and what to try. A
    FAIL's hint already printed (``shown_hints``, updated here) reads "hint: as above"."""
    check = result.check
    diff = "-" if result.max_abs_diff is None else f"{result.max_abs_diff:.2e}"
    if result.status == FAIL and diff == f"{check.tolerance:.2e}":  # just above: say so
        diff = f">{diff}"
    line = f"{check.name:<{width}}  max_abs_diff {diff:<9}  tol {check.tolerance:<7.0e}  "
    line += result.status
    if result.status == FAIL:
        if result.detail:
            line += f"\n    {result.detail}"
        if result.diagnosis:
            line += f"\n    diagnosis: {result.diagnosis}"
        if check.hint:
            repeated = shown_hints is not None and check.hint in shown_hints
            line += "\n    hint: as above" if repeated else f"\n    hint: {check.hint}"
            if shown_hints is not None:
                shown_hints.add(check.hint)
    elif result.status == NOT_IMPLEMENTED:
        line += f"\n    hint: {result.detail}"
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
