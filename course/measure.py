"""How a check measures: the largest absolute difference from a reference and where it is.

``compare`` measures against a tensor the grader has in full (the whole-model reference, a
weight before merging); ``grade`` measures against a stored case whose outputs are sealed
(``course/seal.py``: digests and projections, so the student tree holds no output in
full), through ``Observed`` (the student's output in the sealed form) and ``measure_sealed``.
``worst_of`` keeps the worst of several measurements, and ``diagnose`` names the known mistake
whose stored output the student's matches. What a check is, and how checks are declared, run
and reported: ``course/registry.py``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from course import seal
from course.dropout import eval_mode_mistakes, explain_calls
from course.observed import Observed, _axis_names, _position
from course.shapes import Given, case_shapes

# The axes of a tensor output where a check names none: a batch of token vectors.
DEFAULT_AXES = ("sentence", "token", "dim")


@dataclass
class Measurement:
    """The outcome of one check: the largest absolute difference from the reference, and where
    it is (printed when the check fails, to say which tensor or step to look at)."""

    max_abs_diff: float
    hint: str = ""
    # known mistake -> max |got − the output that mistake gives| (see ``grade``)
    mistakes: dict[str, float] = field(default_factory=dict)
    # the shape of the error -> how far the output is from the expected once it is undone
    # (``course/shapes.py``): named when no known mistake is near
    shapes: dict[str, float] = field(default_factory=dict)
    # which of the check's functions gave the wrong output, where the check can tell (it calls
    # them one at a time); empty: the check's functions, all of them
    functions: tuple[str, ...] = ()
    # where the output that differs most is outside the tolerance, by the digests: which output,
    # its shape and axis names, one flag a value, and the value the message names (``off_map``);
    # None where nothing is outside or the output has no digests. It shows where, not what.
    off: dict | None = None

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
            worst = Measurement(m.max_abs_diff, m.hint, worst.mistakes, off=m.off)
    worst.mistakes = _merged([m.mistakes for m in measurements], measurements)
    worst.shapes = _merged([m.shapes for m in measurements], measurements)
    return worst


def _merged(tables: list[dict[str, float]], measurements: list[Measurement]) -> dict[str, float]:
    """Each name of ``tables`` (one a measurement) at its largest distance; where a
    measurement's table lacks it, that measurement's difference from the expected."""
    names = dict.fromkeys(name for table in tables for name in table)
    return {
        name: max(
            _as_distance(table.get(name, m.max_abs_diff))
            for table, m in zip(tables, measurements, strict=True)
        )
        for name in names
    }


def _as_distance(d: float) -> float:
    """A difference as a distance: NaN (a broken comparison) is infinitely far."""
    return math.inf if math.isnan(d) else d


def shortest(x: float, dtype: torch.dtype = torch.float64, resolution: float = 0.0) -> str:
    """x with the fewest significant digits that read back as the same ``dtype`` value (0.6, not
    0.59999999999999998 in float64 or 0.600000024 in float32), or that are within
    ``resolution`` of it: digits below what the check resolves say nothing."""
    if not math.isfinite(x):
        return repr(x)
    same = torch.tensor(x, dtype=dtype).item()
    for digits in range(1, 18):
        text = f"{x:.{digits}g}"
        read = float(text)
        if torch.tensor(read, dtype=dtype).item() == same or abs(read - x) < resolution:
            return text
    return repr(x)


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


def grade(
    case: dict,
    got: dict[str, torch.Tensor],
    label: str = "",
    axes: tuple[str, ...] = (),
    calls: list | None = None,
    names: dict[str, str] | None = None,
    given: Given | None = None,
) -> Measurement:
    """What the student's code computed (``got``: name -> tensor) against a stored case:
    ``case["expected"]`` (name -> the sealed output, ``course/seal.py``) and
    ``case["mistakes"]`` (description of a known mistake -> the sealed outputs it gives; a name
    it leaves out is as expected; a mistake declared for other cases only is not in the case at
    all, and ``worst_of`` takes it as expected here). The measurement is the worst of the
    expected outputs (``measure_sealed``), and it carries the distance to every known mistake,
    in the same sealed form, which ``run_check`` uses to name the mistake when the check fails
    (``diagnose``). ``calls``: the dropout calls of the recorder the student's code ran under
    (``DropoutRecorder.calls``); where they drew other masks than the reference's, the message
    says how they differ (``explain_calls``), and active calls in eval mode name that mistake
    (``eval_mode_mistakes``). An output is called ``label`` + its name in the messages, or
    ``names[name]`` (the student's words for it, where its stored name would not be);
    ``given``: what the outputs are built on, for the shapes of an error (``shapes.Given``)."""
    expected: dict[str, dict] = case["expected"]
    names = names or {}
    seen = {name: Observed(name, got.get(name), sealed) for name, sealed in expected.items()}
    found = [
        measure_sealed(
            names.get(name, f"{label}{name}"),
            seen[name],
            sealed,
            axes or DEFAULT_AXES,
        )
        for name, sealed in expected.items()
    ]
    worst = worst_of(found)
    if worst.max_abs_diff > 0.0:
        worst.shapes = case_shapes(expected, seen, axes or DEFAULT_AXES, given)
    worst.mistakes = {
        mistake: max(seen[name].distance(outputs.get(name, expected[name])) for name in expected)
        for mistake, outputs in case.get("mistakes", {}).items()
    } | eval_mode_mistakes(calls, case)
    worst.hint = explain_calls(worst.hint, calls, case)
    return worst


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
    dt, resolution = seen.got.dtype, sealed["q"] / 100  # far below the tolerance
    names = _axis_names(axes, len(shape))
    off = None
    if outside is not None:
        at = tuple(int(j) for j in torch.unravel_index(torch.tensor(outside), shape))
        first = (
            f"{name}{' at ' + _position(at, names) if shape else ''} is "
            f"{shortest(values[outside].item(), dt, resolution)}, more than the tolerance "
            "from the expected value"
        )
        off = off_map(name, shape, names, offsets, outside)
    if seen.kind == "rounded":
        if outside is None:
            return Measurement(max((max(j - 1, 0) * sealed["q"] for j in offsets), default=0.0))
        return Measurement(math.inf, first, off=off)
    diff = (seen.form - sealed["values"]).abs().amax(-1)  # (*leading)
    if diff.isnan().any():
        worst, where = math.nan, diff.isnan().nonzero()[0]
    else:
        worst, where = diff.max().item(), torch.unravel_index(diff.argmax(), diff.shape)
    where = tuple(int(i) for i in where)
    at = f" at {_position(where, names[: len(where)])}" if where else ""
    most = f"{name} differs most{at}: by at least {worst:.3g}"
    if outside is None:
        return Measurement(worst, most)
    tolerance = seal.WINDOW * sealed["q"]
    if math.isnan(worst):
        return Measurement(worst, first, off=off)
    if not worst > tolerance:  # the digests see it, the projections do not
        return Measurement(math.nextafter(tolerance, math.inf), first, off=off)
    m = seal.slice_shape(shape)[1]  # a value outside the tolerance in the slice that differs most
    start = sum(i * math.prod(diff.shape[k + 1 :]) for k, i in enumerate(where)) * m
    inside = [i for i in range(start, start + m) if offsets[i] is None]
    if inside:
        i = inside[0]
        at = tuple(int(j) for j in torch.unravel_index(torch.tensor(i), shape))
        have = shortest(values[i].item(), dt, resolution)
        off["marked"] = i
        return Measurement(worst, f"{most}; at {_position(at, names)} you have {have}", off=off)
    return Measurement(worst, f"{most}; {first}", off=off)


def off_map(
    name: str, shape: tuple[int, ...], axes: tuple[str, ...], offsets: list, marked: int
) -> dict:
    """Where the output ``name`` is outside the tolerance (a value whose digest is more than
    ``seal.WINDOW`` buckets from the stored one): one flag a value, in the output's order, and
    ``marked``, the flat index of the value the message names. Flags only: nothing of the
    expected values (drawn by ``course/fail_page.py``)."""
    return {
        "output": name,
        "shape": list(shape),
        "axes": list(axes),
        "outside": [offset is None for offset in offsets],
        "marked": marked,
    }


def diagnose(measurement: Measurement, tolerance: float) -> str:
    """The known mistake whose output the student's matches (within 10× the tolerance and closer
    than the correct output); where none does, the shape of the error (``course/shapes.py``)
    that, undone, leaves the output within the tolerance; else ""."""
    near = [
        (distance, name)
        for name, distance in measurement.mistakes.items()
        if distance <= 10 * tolerance and not distance >= measurement.max_abs_diff
    ]
    if near:  # of two as near, the first: a check's own before the operator mistakes
        return min(near, key=lambda pair: pair[0])[1]
    shaped = [
        (distance, name)
        for name, distance in measurement.shapes.items()
        if distance <= tolerance and not distance >= measurement.max_abs_diff
    ]
    return min(shaped)[1] if shaped else ""


def autograd_nodes(tensors: list[torch.Tensor]) -> int:
    """How many autograd nodes the graph behind ``tensors`` holds (0 for tensors that need no
    gradient): what a computation kept attached from earlier steps shows up here."""
    seen, todo = set(), [t.grad_fn for t in tensors if t.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo += [n for n, _ in node.next_functions if n is not None]
    return len(seen)


def under_autocast(compute: Callable[[], torch.Tensor]) -> torch.Tensor:
    """What ``compute()`` (the student's function on bfloat16 logits) returns under CPU bf16
    autocast, as training runs it with --bf16 (``not_float32`` judges it)."""
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return compute()


def not_float32(name: str, got: object, what: str) -> Measurement | None:
    """None when ``got`` (from ``under_autocast``) is a float32 tensor, else a failing
    measurement."""
    dtype = got.dtype if isinstance(got, torch.Tensor) else type(got).__name__
    if dtype == torch.float32:
        return None
    return Measurement(
        math.inf,
        f"{name} on bfloat16 logits under autocast returned a {dtype} {what}; compute it in "
        "float32 (logits.float()), as its docstring says",
    )


def backward_problem(out: torch.Tensor, inputs: list[torch.Tensor]) -> str:
    """Why the backward pass from ``out`` to ``inputs`` fails, as it would in training ("" when
    it goes through)."""
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        return "the output does not depend on the inputs through autograd (detached?): no gradient"
    try:
        torch.autograd.grad(out.sum(), inputs, allow_unused=True)
    except RuntimeError as err:
        first = str(err).split(". ")[0]
        return (
            f"the backward pass fails, as it would in training: {first} (an in-place operation "
            "on a tensor autograd saved; use the out-of-place form)"
        )
    return ""


def site_backward_problem(plugin: torch.nn.Module, site: Callable, stored: dict) -> str:
    """Why the backward pass through ``site`` to its input and the plug-in's parameters fails in
    training mode, on the first stored input ("" when it goes through): an in-place operation on
    what autograd saved breaks it only there."""
    plugin.train()
    x = next(iter(stored.values())).clone().requires_grad_(True)
    with torch.enable_grad():
        said = backward_problem(site(x), [x, *plugin.parameters()])
    plugin.eval()
    return said
