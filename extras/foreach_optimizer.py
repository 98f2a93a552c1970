"""The multi-tensor AdamW's part of a run (``--optimizer foreach``, the default where this tree
has it): the optimizer, minbert/optimizer_foreach.py's ``ForeachAdamW``, in place of the
hand-written loop. The same update in far fewer kernel launches; a tree without it trains with
the loop (``Extra.instead``: a run that used it is read as one that used the loop)."""

from __future__ import annotations

from typing import Any

from minbert.optimizer_foreach import ForeachAdamW
from multitask.extras import Part


class MultiTensor(Part):
    def choose_optimizer(self, groups: list[dict], lr: float) -> ForeachAdamW:
        return ForeachAdamW(groups, lr=lr)


def for_run(cfg: Any) -> MultiTensor | None:
    """Its part in a run with --optimizer foreach; else None."""
    return MultiTensor() if cfg.optimizer == "foreach" else None
