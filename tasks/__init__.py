"""Tasks: one file per task, a small base class (``tasks.base``), and the registry.

    from tasks import TASKS, get_task
    task = get_task("sst")
    examples, skipped = task.read(task.path("train", "data"), require_label=True)

Registered names: "sst", "para", "sts", "cfimdb". A task file registers its one instance with
``tasks.base.register``; importing it here is all it takes to add a task.
"""

from tasks.base import TASKS, Task, get_task, register
from tasks.reader import DataError, Example, SkippedRow, format_skip_report, read_examples

# Importing a task module registers its task; the import order is the order of TASKS.
# isort: off
from tasks import sst, quora, sts, cfimdb  # noqa: F401
# isort: on

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
