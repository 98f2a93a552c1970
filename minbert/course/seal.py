"""Sealed outputs: what ``minbert/course/reference_data.pt`` holds instead of an expected output.

The stored file is copied into the student tree, where the student's code can read it; holding
the outputs themselves, it would be an answer key (look the output up by the input, return it).
So the file holds only what the comparison needs, in one of three forms, chosen by ``seal``:

* ``exact`` (integer and boolean outputs, graded exactly: the masking): a SHA-256 digest of the
  shape and the values. Equal digests mean equal outputs; the digest says nothing else.
* ``rounded`` (at most ``SMALL`` floating-point values: a loss, the sampler's α and
  probabilities): per value, a slow digest (PBKDF2) of the bucket ⌊x / q⌋, with q = tolerance / 2.
  A value within the tolerance of the expected one falls at most two buckets away, so the grader
  hashes the five buckets around the student's value and passes when one of them is stored: every
  value within the tolerance passes, and none 1.25 tolerances or more away does. A few values are
  few enough to guess, bucket by bucket; the slow digest makes that search take hours, not a
  lookup.
* ``projection`` (larger floating-point outputs): the output cut into slices along its leading
  axes (each slice is the last axis, or the last axes together when that one is shorter than
  ``MIN_SLICE``), and each slice projected on ``directions(m)`` fixed random directions, each
  scaled to unit ℓ1 norm. Since |u·d| ≤ ‖u‖₁·max|dᵢ| = max|dᵢ|, a projected difference is never
  larger than the largest difference of the slice: every output within the max-abs tolerance
  passes, and the projected difference, a lower bound of the true one, is what the check reports.
  A slice of m values keeps one or two of its m degrees of freedom, which is not enough to
  rebuild it. The grader knows where (which slice) an output differs, not by how much each value
  does.

The directions are seeded by the output's name and shape, so the generator and the grader draw
the same ones; knowing them does not help, since a few projections of a slice do not determine it.
"""

from __future__ import annotations

import hashlib
import math

import torch

SMALL = 64  # at most this many floating-point values: ``rounded``, else ``projection``
MIN_SLICE = 4  # a slice of fewer values is merged with the next axis
ROUNDING_ITERATIONS = 2000  # of PBKDF2: about half a millisecond a digest
WINDOW = 2  # buckets either side of the student's value (q = tolerance / WINDOW)


def _digest(data: bytes, salt: str, iterations: int = 1) -> str:
    if iterations == 1:
        return hashlib.sha256(salt.encode() + b"\0" + data).hexdigest()
    return hashlib.pbkdf2_hmac("sha256", data, salt.encode(), iterations).hex()[:32]


def exact_digest(name: str, t: torch.Tensor) -> str:
    """SHA-256 of the shape and the values (as int64, or float64 bits), salted with the name."""
    t = t.detach().cpu()
    values = t.to(torch.float64) if t.is_floating_point() else t.to(torch.int64)
    return _digest(repr(tuple(t.shape)).encode() + values.contiguous().numpy().tobytes(), name)


def bucket(x: float, q: float) -> str:
    """The bucket of x: ⌊x / q⌋, or "nan", "inf", "-inf"."""
    return repr(x) if not math.isfinite(x) else str(math.floor(x / q))


def bucket_digest(name: str, index: int, label: str) -> str:
    return _digest(f"{index}:{label}".encode(), name, ROUNDING_ITERATIONS)


def nearby_digests(name: str, index: int, x: float, q: float) -> list[str]:
    """The digests of the buckets within ``WINDOW`` of x's, nearest first."""
    if not math.isfinite(x):
        return [bucket_digest(name, index, bucket(x, q))]
    b = math.floor(x / q)
    order = sorted(range(-WINDOW, WINDOW + 1), key=abs)
    return [bucket_digest(name, index, str(b + j)) for j in order]


def slice_shape(shape: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
    """(the leading axes that index the slices, the number of values in a slice)."""
    rows, m = len(shape), 1
    while rows > 0 and m < MIN_SLICE:
        rows -= 1
        m *= shape[rows]
    return tuple(shape[:rows]), m


def directions(name: str, m: int) -> torch.Tensor:
    """(m, k) fixed N(0, 1) directions, each scaled to unit ℓ1 norm; k = 2 for slices of 16
    values or more, else 1. Seeded by the name and m."""
    k = 2 if m >= 16 else 1
    seed = int(_digest(f"{m}".encode(), name)[:15], 16)
    u = torch.randn(m, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return u / u.abs().sum(0, keepdim=True)


def project(name: str, t: torch.Tensor) -> torch.Tensor:
    """(*leading, k): every slice of t (``slice_shape``) on the name's directions, in float64."""
    leading, m = slice_shape(tuple(t.shape))
    rows = t.detach().cpu().to(torch.float64).reshape(*leading, m)
    return rows @ directions(name, m)


def seal(name: str, t: torch.Tensor, tolerance: float | None = None) -> dict:
    """The stored form of the output ``name`` (see the module docstring); ``tolerance`` is needed
    for a small floating-point output (``rounded``)."""
    shape = list(t.shape)
    if not t.is_floating_point():
        return {"kind": "exact", "shape": shape, "digest": exact_digest(name, t)}
    if t.numel() <= SMALL:
        if tolerance is None or tolerance <= 0:
            raise ValueError(f"{name}: a small floating-point output needs a tolerance > 0")
        q = tolerance / WINDOW
        values = t.detach().double().reshape(-1).tolist()
        digests = [bucket_digest(name, i, bucket(x, q)) for i, x in enumerate(values)]
        return {"kind": "rounded", "shape": shape, "q": q, "digests": digests}
    return {"kind": "projection", "shape": shape, "values": project(name, t)}
