"""The course checks, one file per graded source file, each check declared with ``@check`` next
to its code (see ``course/registry.py``).

``MODULES`` is the one table of the checks' files, in the order of GUIDE.md, which is the order
of the report: tokenizer, bert (embeddings, attention, layer, the whole model), optimizer
(adamw), sampling, then the plug-ins, SMART, the MLM objective (masking, mlm-loss) and the
multitask heads and losses (pooling, pair-features, cosine-head, task-losses). A check is
registered when its module is imported, so the modules are imported here, in the table's order,
when the checks are listed; ``CHECKS`` is that list.
"""

from __future__ import annotations

import importlib

from course.registry import CHECKS

MODULES = (
    "tokenizer",
    "bert",
    "optimizer",
    "sampling",
    "adapter",
    "lhuc",
    "lora",
    "pals",
    "smart",
    "mlm",
    "heads",
)

for _name in MODULES:
    importlib.import_module(f"{__name__}.{_name}")

__all__ = ["CHECKS", "MODULES"]
