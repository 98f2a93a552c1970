"""Tasks: what a task is (``tasks.base``: its files, reader, batching kind, head, loss, metric and
prediction format), one small file per task, and the registry.

    from tasks import TASKS, get_task
    task = get_task("sst")
    examples, skipped = task.read(task.path("train", "data"), require_label=True)

Registered names: "sst", "para", "sts", "cfimdb". A task file registers its one instance with
``tasks.base.register``; adding a task is adding one file and naming it in ``TASK_FILES`` below.
How a run is built, trained and served is the package above this one, ``multitask/``.
"""

from tasks import cfimdb, quora, sst, sts
from tasks.base import TASKS, Task, get_task, register
from tasks.reader import DataError, Example, SkippedRow, format_skip_report, read_examples

# The task files, imported by name; the registry's order is this order (cfimdb, para, sst, sts).
TASK_FILES = (cfimdb, quora, sst, sts)

__all__ = [
    "TASKS",
    "TASK_FILES",
    "DataError",
    "Example",
    "SkippedRow",
    "Task",
    "format_skip_report",
    "get_task",
    "read_examples",
    "register",
]
