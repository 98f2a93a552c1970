"""Where a run is: one typed record that the loop advances, the loss log fills, an extra's
objective or update reads, and last.pt saves (``RunFolder.save_last`` / ``resume``), as Hugging
Face's ``TrainerState`` is for its Trainer."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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
        this record (the loss log, the step an extra's objective or update reads) reads the
        resumed one."""
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(other, name))
