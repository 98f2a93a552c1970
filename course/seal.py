"""Sealed outputs: what ``course/reference_data.pt`` holds instead of an expected output.

The stored file is copied into the student tree, where the student's code can read it; holding
the outputs themselves, it would be an answer key (look the output up by the input, return it).
So the file holds only what the comparison needs (``seal`` chooses the form): a digest of an
exact output; for a floating-point output, digests of its values rounded to half-tolerance
buckets, and for a large one projections of its slices, so a check can say where it differs.
"""

from __future__ import annotations

import functools
import hashlib
import math

import torch

# A known mistake's output may be far larger than the answer (a loss summed instead of averaged):
# its buckets are at least this many units in the last place of its largest value wide, so that
# another CPU's float32 rounding of it (a few ulps) still lands within its window.
MISTAKE_ULPS = 16
SMALL = 64  # at most this many floating-point values: ``rounded``, else ``projection``
MIN_SLICE = 4  # a slice of fewer values is merged with the next axis
ROUNDING_ITERATIONS = 2000  # of PBKDF2 for ``rounded``: about half a millisecond a digest
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


# Remembered: a judge asks again for the buckets of the same values when it measures a shape of the
# error (course/shapes.py) or grades the same output twice; 2**16 digests are a few megabytes.
@functools.lru_cache(maxsize=2**16)
def bucket_digest(name: str, index: int, label: str) -> str:
    """The slow digest of one value's bucket (``rounded``)."""
    return _digest(f"{index}:{label}".encode(), name, ROUNDING_ITERATIONS)


def nearby_buckets(x: float, q: float) -> list[str]:
    """The buckets within ``WINDOW`` of x's, nearest first (0, −1, +1, −2, +2)."""
    if not math.isfinite(x):
        return [bucket(x, q)]
    b = math.floor(x / q)
    return [str(b + j) for j in sorted(range(-WINDOW, WINDOW + 1), key=abs)]


def value_digest(name: str, index: int, label: str) -> int:
    """The fast digest of one value's bucket (``projection``): 64 bits of SHA-256, salted with
    the name and the index."""
    h = hashlib.sha256(f"{name}\0{index}:{label}".encode())
    return int.from_bytes(h.digest()[:8], "little", signed=True)


def bucket_offsets(
    name: str, values: list[float], q: float, stored: list, digest=value_digest
) -> list[int | None]:
    """Per value, how many buckets of width q it lies from the one whose digest is stored (0 to
    ``WINDOW``; None: farther), by ``digest`` (``value_digest``, or ``bucket_digest`` for a
    ``rounded`` output), trying its buckets nearest first and stopping at the stored one: a value
    in its own bucket costs one digest, not one for each bucket near it."""
    found = []
    for i, (x, wanted) in enumerate(zip(values, stored, strict=True)):
        labels = nearby_buckets(x, q)
        j = next((j for j, b in enumerate(labels) if digest(name, i, b) == wanted), None)
        found.append(None if j is None else (j + 1) // 2)  # nearest first: 0, ±1, ±2
    return found


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


def seal(name: str, t: torch.Tensor, tolerance: float | None = None, answer: bool = True) -> dict:
    """The stored form of the output ``name`` (see the module docstring). ``tolerance``: the
    check's, which sets the buckets; ``answer`` False for a known mistake's output (a large one
    keeps its projections only)."""
    shape = list(t.shape)
    if not t.is_floating_point():
        return {"kind": "exact", "shape": shape, "digest": exact_digest(name, t)}
    if tolerance is None or tolerance <= 0:
        raise ValueError(f"{name}: a floating-point output needs the check's tolerance (> 0)")
    q = tolerance / WINDOW
    values = t.detach().double().reshape(-1).tolist()
    if not answer:  # a mistake's output, named on any CPU: buckets no finer than its rounding
        largest = max((abs(x) for x in values if math.isfinite(x)), default=0.0)
        q = max(q, MISTAKE_ULPS * torch.finfo(t.dtype).eps * largest / WINDOW)
    if t.numel() <= SMALL:
        digests = [bucket_digest(name, i, bucket(x, q)) for i, x in enumerate(values)]
        return {"kind": "rounded", "shape": shape, "q": q, "digests": digests}
    sealed = {"kind": "projection", "shape": shape, "values": project(name, t)}
    if answer:
        digests = [value_digest(name, i, bucket(x, q)) for i, x in enumerate(values)]
        sealed |= {"q": q, "digests": torch.tensor(digests, dtype=torch.int64)}
    return sealed
