"""Where a run is: one typed record that the loop advances, the loss log fills, distillation's λ
and PCGrad's seed read, and last.pt saves (``RunFolder.save_last`` / ``resume``), as Hugging
Face's ``TrainerState`` is for its Trainer; and beside it ``MLMState``, pretrain_mlm.py's."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

# The fields last.pt keeps under "extra" (its layout before this record existed, kept so that
# runs saved then still resume).
EXTRA = ("running", "examples", "seconds", "eval_seconds", "train_files")


@dataclass
class TrainingState:
    """step: updates taken; best: the best dev ``overall`` so far; examples: training examples
    of the steps read (this process); seconds: the training wall-clock so far, evaluations
    included; eval_seconds: the part of it in dev evaluations; running: each task's losses read
    since the last log line; train_files: the sha256 of each training file, which a resume
    requires unchanged."""

    step: int = 0
    best: float = -math.inf
    examples: int = 0
    seconds: float = 0.0
    eval_seconds: float = 0.0
    running: dict[str, list[float]] = field(default_factory=dict)
    train_files: dict[str, str] = field(default_factory=dict)

    def saved(self) -> dict[str, Any]:
        """The form last.pt holds: ``step``, ``best`` and ``extra``."""
        extra = {name: getattr(self, name) for name in EXTRA}
        return {"step": self.step, "best": self.best, "extra": extra}

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> TrainingState:
        """A record from last.pt's ``step``, ``best`` and ``extra`` (``saved``'s form)."""
        extra = saved.get("extra", {})
        known = {name: extra[name] for name in EXTRA if name in extra}
        return cls(step=int(saved["step"]), best=float(saved["best"]), **known)

    def continue_from(self, other: TrainingState) -> None:
        """Take every field of ``other`` (a resumed run's record) in place, so that what reads
        this record (the loss log, distillation's λ, PCGrad's seed) reads the resumed one."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(other, name))


@dataclass
class MLMState:
    """Where a pretrain_mlm.py run is: step, the optimizer steps taken; seconds, its wall-clock
    at the last evaluation (evaluations included); recent, the last ``WINDOW`` training losses,
    whose mean is the run's logged ``train_loss`` and its progress bar's.

    A record of its own beside ``TrainingState`` rather than in it, because the fields do not
    mean the same: ``running`` is each task's losses since the last log line, emptied by every
    line, where ``recent`` is a window that slides across log lines; ``best``, ``examples``,
    ``eval_seconds`` and ``train_files`` have nothing to hold in a run without dev tasks or
    fingerprinted files. Folding the window into ``running`` would change what mlm_log.jsonl's
    train_loss is, and folding a new field into ``TrainingState`` would change the driver's
    last.pt; so last.pt keeps the top-level keys it has always had (``saved``), and a run saved
    before ``seconds`` and ``recent`` were kept resumes with them empty (``from_saved``)."""

    WINDOW: ClassVar[int] = 50

    step: int = 0
    seconds: float = 0.0
    recent: list[float] = field(default_factory=list)

    def add_loss(self, value: float) -> None:
        """One step's training loss into the window (the oldest falls out)."""
        self.recent = [*self.recent[-(self.WINDOW - 1) :], value]

    def train_loss(self) -> float | None:
        """The window's mean, or None before any step trained."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    def saved(self) -> dict[str, Any]:
        """The form last.pt holds: ``step``, ``seconds`` and ``recent``, at its top level."""
        return {"step": self.step, "seconds": self.seconds, "recent": list(self.recent)}

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> MLMState:
        """A record from last.pt's ``step``, ``seconds`` and ``recent`` (``saved``'s form)."""
        recent = [float(x) for x in saved.get("recent", [])]
        return cls(step=int(saved["step"]), seconds=float(saved.get("seconds", 0.0)), recent=recent)
