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
    (``seal.py``): its projection, its digest, or its values, whose buckets are digested when
    they are measured (``rounded``); ``form`` is None when it is not a tensor of the stored
    shape."""

    def __init__(self, name: str, got: object, sealed: dict) -> None:
        self.name, self.got, self.kind, self.form = name, got, sealed["kind"], None
        self._offsets: dict[tuple[float, int], list[int | None]] = {}
        if not isinstance(got, torch.Tensor) or list(got.shape) != list(sealed["shape"]):
            return
        got = got.detach()
        if self.kind == "projection":
            self.form = seal.project(name, got)
        elif self.kind == "rounded":
            self.form = got.double().reshape(-1).tolist()
        else:
            integral = got.is_floating_point() and bool((got == got.round()).all())
            self.form = seal.exact_digest(name, got.to(torch.int64) if integral else got)

    def offsets(self, sealed: dict) -> list[int | None]:
        """Per value, how many buckets it is from the stored one (0 to 2; None: farther), by the
        digests (``rounded``, or a ``projection`` that holds them: an expected output); kept per
        stored output (a mistake's buckets may be wider: ``seal.MISTAKE_ULPS``)."""
        key = (sealed["q"], id(sealed["digests"]))
        if key not in self._offsets:
            values = self.got.detach().double().reshape(-1).tolist()
            if self.kind == "rounded":
                stored, digest = list(sealed["digests"]), seal.bucket_digest
            else:
                stored, digest = sealed["digests"].tolist(), seal.value_digest
            found = seal.bucket_offsets(self.name, values, sealed["q"], stored, digest)
            self._offsets[key] = found
        return self._offsets[key]

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
