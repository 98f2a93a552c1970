"""Tasks: one file per task, a small base class (``tasks.base``), and the registry.

    from tasks import TASKS, get_task
    task = get_task("sst")
    examples, skipped = task.read(task.path("train", "data"), require_label=True)

Registered names: "sst", "para", "sts", "cfimdb". A task file registers its one instance with
``tasks.base.register``; every module of this package that is not part of the machinery below is
a task file and is imported here, so adding a task is adding one file.
"""

import importlib
import pkgutil

from tasks.base import TASKS, Task, get_task, register
from tasks.reader import DataError, Example, SkippedRow, format_skip_report, read_examples

# The machinery of the package; every other module is a task file.
MACHINERY = {
    "base", "reader", "collate", "metrics", "batching", "heads", "model", "run", "data", "devices",
    "trained",
}  # fmt: skip

# The registry's order is the order of the files' names (cfimdb, quora, sst, sts).
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in MACHINERY:
        importlib.import_module(f"tasks.{_module}")

__all__ = [
    "TASKS",
    "DataError",
    "Example",
    "SkippedRow",
    "Task",
    "format_skip_report",
    "get_task",
    "read_examples",
    "register",
]
