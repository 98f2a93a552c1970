"""The student's output in the sealed form of a stored output (``course/seal.py``), and how
positions in it are named: what ``course/measure.py`` measures a stored case with and
``course/shapes.py`` transforms a wrong output by."""

from __future__ import annotations

import math

import torch

from course import seal


def _axis_names(axes: tuple[str, ...], ndim: int) -> tuple[str, ...]:
    """The names of ``ndim`` axes: the last ``ndim`` of ``axes``, "index" for any beyond them."""
    return axes[-ndim:] if len(axes) >= ndim else tuple(axes) + ("index",) * (ndim - len(axes))


def _position(where: tuple[int, ...], axes: tuple[str, ...]) -> str:
    """ "sentence 1, token 3" for the index ``where``, naming its axes from the end of ``axes``."""
    names = _axis_names(axes, len(where)) if len(axes) != len(where) else axes
    return ", ".join(f"{axis} {i}" for axis, i in zip(names, where))


def position_name(where: tuple[int, ...], axes: tuple[str, ...], ndim: int) -> str:
    """ "sentence 1, token 3" for the index ``where`` into a tensor of ``ndim`` axes."""
    return _position(where, _axis_names(axes, ndim))


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


class Observed:
    """The student's output ``got`` in the sealed form of the stored output ``name``
    (``seal.py``): its projection, its digest, or the digests of the buckets around its values;
    ``form`` is None when it is not a tensor of the stored shape."""

    def __init__(self, name: str, got: object, sealed: dict) -> None:
        self.name, self.got, self.kind, self.form = name, got, sealed["kind"], None
        self._near: list | None = None
        self._buckets: dict[float, list[list[str]]] = {}
        if not isinstance(got, torch.Tensor) or list(got.shape) != list(sealed["shape"]):
            return
        got = got.detach()
        if self.kind == "projection":
            self.form = seal.project(name, got)
        elif self.kind == "rounded":
            self.form = self._rounded(sealed["q"])
        else:
            integral = got.is_floating_point() and bool((got == got.round()).all())
            self.form = seal.exact_digest(name, got.to(torch.int64) if integral else got)

    def _rounded(self, q: float) -> list[list[str]]:
        """Per value, the digests of the buckets of width q around it (``rounded``), nearest
        first; kept per q."""
        if q not in self._buckets:
            values = self.got.detach().double().reshape(-1).tolist()
            self._buckets[q] = [
                seal.nearby_digests(self.name, i, x, q) for i, x in enumerate(values)
            ]
        return self._buckets[q]

    def offsets(self, sealed: dict) -> list[int | None]:
        """Per value, how many buckets it is from the stored one (0 to 2; None: farther), by the
        digests (``rounded``, or a ``projection`` that holds them: an expected output)."""
        if self.kind == "rounded":  # a mistake's buckets may be wider (``seal.MISTAKE_ULPS``)
            near, stored = self._rounded(sealed["q"]), sealed["digests"]
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
