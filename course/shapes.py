"""The shape of an error: what a wrong output is, seen from the expected one, when no known mistake
of the check's catalogue matches it.

A sum where a mean belongs, a missing or inverted scale or the wrong normaliser make the output k
times the expected (a normaliser that depends on the sentence: its own k for each); an off-by-one
position, row or layer shifts it by one along an axis; a transposition swaps two axes; a mistake
at the edges leaves all right but the first or last position of an axis. Where the check says
what an output is built on (``Given``: the residual stream h it adds to, a shift b, each sentence's
count of real tokens), also: what is added to h is k times the expected (its sign flipped, its
scale off), and a mean over one token more or less, or a sum for it. Each candidate transform
is applied to the student's output and measured against the sealed expected output
(``course/seal.py``) as a known mistake's output is: nothing of the reference is revealed beyond
what the check's message says. ``diagnose`` (``course/measure.py``) names the nearest within the
tolerance when no known mistake is near.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from course import seal
from course.observed import Observed, _axis_names

SCALAR_FACTORS = 64  # a number k times the expected: k (or 1/k) from 2 to this
SCALE_EXPLAINED = "a sum where a mean belongs, a missing or inverted scale, or the wrong normaliser"


@dataclass
class Given:
    """What a check says an output is built on, read by the judge from the stored case (never
    from the runner): ``bases``, output name -> (its words, the tensor the output adds to: the
    residual stream h, the shift b); ``counts``, output name -> each leading index's count (a
    sentence's real tokens) that a mean divides by."""

    bases: dict[str, tuple[str, torch.Tensor]] = field(default_factory=dict)
    counts: dict[str, torch.Tensor] = field(default_factory=dict)


def error_shapes(
    seen: Observed, sealed: dict, axes: tuple[str, ...], given: Given | None = None
) -> dict[str, float]:
    """Diagnosis -> how far the transformed output is from the expected (in the sealed form), for
    each candidate transform of the student's output (``seen``: ``got``, named ``name``, whose
    axes are named by ``axes``: the last ones, as the messages name them; ``given``: what it is
    built on). Empty for an exact output."""
    name, got = seen.name, seen.got
    if (
        sealed["kind"] == "exact"
        or not isinstance(got, torch.Tensor)
        or not got.is_floating_point()
    ):
        return {}
    if list(got.shape) != list(sealed["shape"]) or not bool(got.isfinite().all()):
        return {}
    names = _axis_names(axes, got.ndim) if got.ndim else ()
    found: dict[str, float] = {}
    given = given or Given()
    built_on = [*update_scales(name, got, sealed, given), *count_scales(name, got, names, given)]
    for said, transformed, wrapped in [*candidates(name, got, sealed, names), *built_on]:
        distance = distance_but(name, transformed, sealed, wrapped)
        if distance < found.get(said, math.inf):
            found[said] = distance
    found |= edge_shapes(seen, sealed, names)
    return found


def candidates(name: str, got: torch.Tensor, sealed: dict, names: tuple[str, ...]):
    """(diagnosis, the output with the mistake undone, the (axis, index) a shift wrapped round or
    None) for each candidate transform."""
    for factor in scale_factors(name, got, sealed):
        said = f"your output is {times(factor)} the expected everywhere ({SCALE_EXPLAINED})"
        yield said, got / factor, None
    if bool((got >= 0).all()):
        yield (
            "your output is the square root of the expected (an RMS where a mean square "
            "belongs, a norm where its square belongs)",
            got * got,
            None,
        )
        yield (
            "your output is the square of the expected (a mean square where its root belongs)",
            got.sqrt(),
            None,
        )
    yield from slice_scales(name, got, sealed, names)
    off_by_one = "(an off-by-one position, row or layer)"
    for axis, size in enumerate(got.shape):
        if size < 3:
            continue
        word = names[axis]
        # rolled by +1, index 0 holds the last value (wrapped): the student's value at i is the
        # expected one at i + 1
        said = f"at each {word} your output is the expected one of the next {word} {off_by_one}"
        yield said, torch.roll(got, 1, axis), (axis, 0)
        said = (
            f"at each {word} your output is the expected one of the {word} before it {off_by_one}"
        )
        yield said, torch.roll(got, -1, axis), (axis, size - 1)
    for a in range(got.ndim):
        for b in range(a + 1, got.ndim):
            if got.shape[a] == got.shape[b] and got.shape[a] > 1:
                said = f"your output has its {names[a]} and {names[b]} axes swapped (transposed)"
                yield said, got.transpose(a, b), None


def update_scales(name: str, got: torch.Tensor, sealed: dict, given: Given):
    """An output that is a base plus an update (h + W_up·GELU(W_down·h), b + a·cos) whose update
    is k times the expected one: a sign flipped (k = −1), a scale applied twice or left out. From
    a projection, the least-squares k of the student's update against the stored one (both
    projected); for a small output, k among ±2 to ±8, their inverses, and −1."""
    if name not in given.bases:
        return
    word, base = given.bases[name]
    base = base.detach().to(got.dtype).expand(got.shape)
    if sealed["kind"] == "projection":
        projected = seal.project(name, base)
        mine, stored = seal.project(name, got) - projected, sealed["values"] - projected
        denominator = float((stored * stored).sum())
        factor = float((mine * stored).sum()) / denominator if denominator else math.nan
        if not math.isfinite(factor) or factor == 0 or math.isclose(factor, 1.0, rel_tol=1e-3):
            return
        factors = [factor]
    else:
        sizes = [float(n) for n in range(2, 9)] + [1 / n for n in range(2, 9)]
        factors = [-1.0, *sizes, *(-k for k in sizes)]
    for factor in factors:
        if math.isclose(factor, -1.0, rel_tol=1e-4):
            size = "the negative of"
        else:
            size = ("minus " if factor < 0 else "") + times(abs(factor))
        said = (
            f"your output minus {word} is {size} what it should be (what is added to {word} has "
            "its sign or its scale off)"
        )
        yield said, base + (got - base) / factor, None


# A mean of a sentence's n values divided by another count: (what the output is, k(n)), where the
# student's output is k(n) times the expected at each sentence.
COUNT_MISTAKES = (
    ("a mean over one more than it has (n + 1)", lambda n: n / (n + 1)),
    ("a mean over one fewer than it has (n − 1)", lambda n: n / (n - 1)),
    ("a sum where the mean belongs (not divided by n)", lambda n: n),
)


def count_scales(name: str, got: torch.Tensor, names: tuple[str, ...], given: Given):
    """An output averaged, at each index of its first axis, over that index's n values
    (``given.counts``: a sentence's real tokens), but divided by another count: n + 1, n − 1,
    or not at all."""
    counts = given.counts.get(name)
    if counts is None or got.ndim == 0 or tuple(counts.shape) != tuple(got.shape[:1]):
        return
    n = counts.detach().double().reshape(-1, *[1] * (got.ndim - 1))
    for what, factor in COUNT_MISTAKES:
        k = factor(n)
        if not bool(torch.isfinite(k).all()) or bool((k == 0).any()):
            continue
        said = f"at each {names[0]} your output is {what}, n the {names[0]}'s count"
        yield said, (got.double() / k).to(got.dtype), None


def slice_scales(name: str, got: torch.Tensor, sealed: dict, names: tuple[str, ...]):
    """A large output (``projection``) that is the expected times a factor of its own at each
    index of the leading axes (a per-sentence normaliser off: a count, a length or a sum): the
    least-squares factor of each slice's projections against the stored ones, undone; the
    digests then judge every value (``distance_but``)."""
    if sealed["kind"] != "projection" or "digests" not in sealed:
        return
    leading, m = seal.slice_shape(tuple(got.shape))
    if not leading:
        return
    mine, stored = seal.project(name, got), sealed["values"]
    denominators = (stored * stored).sum(-1)
    if bool((denominators == 0).any()):
        return
    factors = (mine * stored).sum(-1) / denominators  # (*leading)
    if not bool(factors.isfinite().all()) or bool((factors == 0).any()):
        return
    close = 1e-3 * float(factors.abs().max())
    varying = [  # the leading axes along which the factor changes
        axis
        for axis in range(len(leading))
        if float((factors - factors.mean(axis, keepdim=True)).abs().max()) > close
    ]
    if not varying:
        return  # one factor everywhere: a scale of the whole output, tried above
    undone = got.detach().double().reshape(*leading, m) / factors.unsqueeze(-1)
    word = " and ".join(names[axis] for axis in varying)
    said = (
        f"at each {word} your output is the expected one times a factor of its own (a "
        f"normaliser that depends on the {word}: a count, a length or a sum off)"
    )
    yield said, undone.reshape(got.shape).to(got.dtype), None


def distance_but(
    name: str, t: torch.Tensor, sealed: dict, wrapped: tuple[int, int] | None
) -> float:
    """How far ``t`` is from the expected output (the sealed form's distance), leaving out the
    values at ``wrapped`` (axis, index): what a shift brought round from the other end. inf when
    those values cannot be told apart (an axis inside the projected slices)."""
    if sealed["kind"] == "rounded":
        return 0.0 if rounded_within(name, t, sealed, wrapped) else math.inf
    seen = Observed(name, t, sealed)
    if wrapped is None:
        distance = seen.distance(sealed)
        if distance <= seal.WINDOW * sealed["q"] and "digests" in sealed:  # every value, too
            return distance if None not in seen.offsets(sealed) else math.inf
        return distance
    axis, index = wrapped
    if sealed["kind"] == "projection":
        leading, _ = seal.slice_shape(tuple(sealed["shape"]))
        if axis >= len(leading):
            return math.inf
        diff = (seen.form - sealed["values"]).abs().amax(-1)  # (*leading)
        kept = torch.ones(leading, dtype=torch.bool)
        kept.select(axis, index).fill_(False)
        return float(diff[kept].max()) if bool(kept.any()) else math.inf
    outside = torch.tensor([o is None for o in seen.offsets(sealed)]).reshape(t.shape)
    outside.select(axis, index).fill_(False)
    return math.inf if bool(outside.any()) else 0.0


def rounded_within(
    name: str, t: torch.Tensor, sealed: dict, wrapped: tuple[int, int] | None
) -> bool:
    """Whether every value of ``t`` (a ``rounded`` output) but those at ``wrapped`` lies in a
    bucket near the stored one's, by the slow digests. It stops at the first value that does not
    and tries a value's buckets nearest first, so a transform that does not undo the mistake
    costs a few digests, not five for every value as ``Observed`` computes them."""
    skipped = torch.zeros(t.shape, dtype=torch.bool)
    if wrapped is not None:
        skipped.select(*wrapped).fill_(True)
    values = t.detach().double().reshape(-1).tolist()
    rows = zip(values, skipped.reshape(-1).tolist(), sealed["digests"], strict=True)
    for i, (x, skip, stored) in enumerate(rows):
        labels = seal.nearby_buckets(x, sealed["q"])
        if not skip and not any(seal.bucket_digest(name, i, b) == stored for b in labels):
            return False
    return True


def times(factor: float) -> str:
    """ "2 times", "1/8 of", "2.83 times" (√8) for a factor: the smallest n (2 to 9,999; a root
    up to √999) with the factor within a relative 1e-4 of n, 1/n, √n or 1/√n, in that order. Only
    the n next to what the factor, its inverse or their squares round to can be that near."""
    guesses = set()
    if math.isfinite(factor) and factor > 0:
        near = (factor, 1 / factor, factor * factor, 1 / (factor * factor))
        guesses = {round(g) + d for g in near if g < 20_000 for d in (-1, 0, 1)}
    for n in sorted(n for n in guesses if 2 <= n < 10_000):
        if math.isclose(factor, n, rel_tol=1e-4):
            return f"{n} times"
        if math.isclose(factor, 1 / n, rel_tol=1e-4):
            return f"1/{n} of"
        if n < 1_000 and math.isclose(factor, math.sqrt(n), rel_tol=1e-4):
            return f"√{n} times"
        if n < 1_000 and math.isclose(factor, 1 / math.sqrt(n), rel_tol=1e-4):
            return f"1/√{n} of"
    return f"{factor:.4g} times"


def scale_factors(name: str, got: torch.Tensor, sealed: dict) -> list[float]:
    """The factors f to try as "the output is f times the expected": from a projection, the
    least-squares f of the student's projections against the stored ones; for a small output
    (digests only), 2, the sizes of its axes, their products and the square root of the last,
    and the inverse of each; for a single number, every integer 2 to ``SCALAR_FACTORS`` and its
    inverse."""
    if sealed["kind"] == "projection":
        mine = seal.project(name, got)
        stored = sealed["values"]
        denominator = float((stored * stored).sum())
        if denominator == 0.0:
            return []
        factor = float((mine * stored).sum()) / denominator
        if not math.isfinite(factor) or factor == 0.0 or math.isclose(factor, 1.0, rel_tol=1e-3):
            return []
        return [factor]
    if got.numel() == 1:  # a number: its factor cannot be read off its shape
        sizes = {float(n) for n in range(2, SCALAR_FACTORS + 1)}
        return sorted(sizes | {1.0 / s for s in sizes})
    sizes = {float(s) for s in got.shape if s > 1} | {2.0}
    sizes |= {float(math.prod(got.shape))} if got.ndim > 1 else set()
    if got.ndim and got.shape[-1] > 1:
        sizes.add(math.sqrt(got.shape[-1]))
    return sorted(sizes | {1.0 / s for s in sizes})


def edge_shapes(seen: Observed, sealed: dict, names: tuple[str, ...]) -> dict[str, float]:
    """ "right everywhere but the first (last) <axis>": when every value outside the tolerance
    (by the digests) lies at index 0 (the last index) of one axis, at distance 0."""
    got = seen.got
    if "digests" not in sealed or got.ndim == 0:
        return {}
    offsets = seen.offsets(sealed)
    outside = torch.tensor([o is None for o in offsets]).reshape(got.shape)
    if not bool(outside.any()):
        return {}
    found = {}
    where = outside.nonzero()
    for axis, size in enumerate(got.shape):
        if size < 2:
            continue
        for index, word in ((0, "first"), (size - 1, "last")):
            if bool((where[:, axis] == index).all()):
                found[f"your output is right everywhere but the {word} {names[axis]}"] = 0.0
    return found


def case_shapes(
    expected: dict[str, dict],
    seen: dict[str, Observed],
    axes: tuple[str, ...],
    given: Given | None = None,
) -> dict[str, float]:
    """The shapes of a stored case's error: for every output outside the tolerance (``seen``: each
    output as ``measure.grade`` observed it), its ``error_shapes``; a shape counts at its largest
    distance over those outputs, and at inf where one of them lacks it (a diagnosis must explain
    every wrong output)."""
    found: list[dict[str, float]] = []
    for name, sealed in expected.items():
        output = seen[name]
        if output.form is None or sealed["kind"] == "exact":
            continue
        near = output.distance(sealed) <= seal.WINDOW * sealed["q"]
        if near and None not in output.offsets(sealed):
            continue  # this output is right
        found.append(error_shapes(output, sealed, axes, given))
    names = {said for shapes in found for said in shapes}
    return {said: max(shapes.get(said, math.inf) for shapes in found) for said in names}
