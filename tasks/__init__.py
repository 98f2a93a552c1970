"""Tasks: what a task is (``tasks.base``: its files, reader, batching kind, head, loss, metric and
prediction format), one small file per task, and the registry.

    from tasks import TASKS, get_task
    task = get_task("sst")
    examples, skipped = task.read(task.path("train", "data"), require_label=True)

The registered names are ``TASKS``'s keys. A task file registers its one instance with
``tasks.base.register``; adding a task is adding one file and naming it in ``TASK_MODULES`` below.
How a run is built, trained and served is the package above this one, ``multitask/``.
"""

import importlib

from tasks.base import TASKS, Task, get_task, register
from tasks.reader import DataError, Example, SkippedRow, format_skip_report, read_examples

# Every task's file, by module: each registers its task when imported, and the registry's order
# is this order. Adding a task is adding its file and its name here.
TASK_MODULES = ("tasks.cfimdb", "tasks.quora", "tasks.sst", "tasks.sts")
for _module in TASK_MODULES:
    importlib.import_module(_module)

__all__ = [
    "TASKS",
    "TASK_MODULES",
    "DataError",
    "Example",
    "SkippedRow",
    "Task",
    "format_skip_report",
    "get_task",
    "read_examples",
    "register",
]
