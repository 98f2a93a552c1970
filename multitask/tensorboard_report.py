"""``--report_to tensorboard``: the run's training losses, dev metrics and learning rate as
TensorBoard event files in ``<run>/tensorboard/`` (view them with ``tensorboard --logdir runs``).

A lab extra in one file, the example of one (multitask/extras.py lists it): its settings, their
check and its reporter. The ``tensorboard`` package is optional (requirements-lab.txt): where it
is absent, ``--report_to tensorboard`` is refused before anything runs, and it is imported only
when the flag is on. A fresh run removes the folder's earlier event files; a resumed run adds to
them. The files hold what ``train_log.jsonl`` and ``metrics.jsonl`` hold, nothing the run uses.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from minbert.flags import setting

FOLDER = "tensorboard"  # inside the run folder


@dataclass
class Settings:
    """Where else the run reports what it logs."""

    report_to: Literal["none", "tensorboard"] = setting(
        "none",
        "also write losses, dev metrics and learning rate as TensorBoard events",
        group="reporting",
    )


def problems(cfg: Any, elsewhere: bool) -> Iterator[str]:
    """--report_to tensorboard needs the tensorboard package (checked before anything runs)."""
    wanted = cfg.extras["tensorboard"].report_to == "tensorboard"
    if wanted and importlib.util.find_spec("tensorboard") is None:
        yield "--report_to tensorboard needs the tensorboard package: pip install tensorboard"


def reporter(cfg: Any, folder: Any) -> TensorBoardReport | None:
    """The run's reporter with --report_to tensorboard, else None (``folder``: its RunFolder)."""
    if cfg.extras["tensorboard"].report_to != "tensorboard":
        return None
    return TensorBoardReport(folder.file(FOLDER), fresh=not cfg.resume)


class TensorBoardReport:
    """Scalars tagged ``train/loss/<task>``, ``train/learning_rate`` and ``dev/<metric>``."""

    def __init__(self, path: Any, fresh: bool) -> None:
        from tensorboard.summary import Writer  # only with the flag on: a heavy import

        if fresh:  # the run replaces an earlier one in its folder (--overwrite)
            for old in path.glob("events.out.tfevents.*"):
                old.unlink()
        path.mkdir(parents=True, exist_ok=True)
        self.writer = Writer(str(path))

    def losses(self, step: int, losses: dict[str, float]) -> None:
        for task, loss in losses.items():
            self.writer.add_scalar(f"train/loss/{task}", loss, step)

    def learning_rate(self, step: int, rate: float) -> None:
        self.writer.add_scalar("train/learning_rate", rate, step)

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(f"dev/{name}", value, step)
        self.writer.flush()  # a look during the run sees every evaluation so far

    def close(self) -> None:
        self.writer.close()
