"""The course checks, one file per graded source file, each check declared with ``@check`` next
to its code (see ``minbert/course/registry.py``).

The report lists the checks in the order they are registered, so the imports below are in the
order of GUIDE.md: tokenizer, bert (embeddings, attention, layer, the whole model), optimizer
(adamw), sampling, then the plug-ins, SMART and the MLM objective (masking, mlm-loss).
``CHECKS`` is that list.
"""

from __future__ import annotations

# The order of GUIDE.md, which is the order of the report: not sorted.
# isort: off
from minbert.course.checks import tokenizer
from minbert.course.checks import bert
from minbert.course.checks import optimizer
from minbert.course.checks import sampling
from minbert.course.checks import adapter
from minbert.course.checks import lhuc
from minbert.course.checks import lora
from minbert.course.checks import pals
from minbert.course.checks import smart
from minbert.course.checks import mlm

# isort: on
from minbert.course.registry import CHECKS

__all__ = [
    "CHECKS",
    "adapter",
    "bert",
    "lhuc",
    "lora",
    "mlm",
    "optimizer",
    "pals",
    "sampling",
    "smart",
    "tokenizer",
]
