"""The course checks, one file per graded source file, each check declared with ``@check`` next
to its code (see ``course/registry.py``).

The report lists the checks in the order they are registered, so the imports below are in the
order of GUIDE.md: tokenizer, bert (embeddings, attention, layer, the whole model), optimizer
(adamw), sampling, then the plug-ins, SMART, the MLM objective (masking, mlm-loss) and the
multitask heads and losses (pooling, pair-features, cosine-head, task-losses).
``CHECKS`` is that list.
"""

from __future__ import annotations

# The order of GUIDE.md, which is the order of the report: not sorted.
# isort: off
from course.checks import tokenizer
from course.checks import bert
from course.checks import optimizer
from course.checks import sampling
from course.checks import adapter
from course.checks import lhuc
from course.checks import lora
from course.checks import pals
from course.checks import smart
from course.checks import mlm
from course.checks import heads

# isort: on
from course.registry import CHECKS

__all__ = [
    "CHECKS",
    "adapter",
    "bert",
    "heads",
    "lhuc",
    "lora",
    "mlm",
    "optimizer",
    "pals",
    "sampling",
    "smart",
    "tokenizer",
]
