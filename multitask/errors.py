"""The errors a command reports in one line, and the wrapper that turns them into exit codes.

    def main(argv=None) -> int:
        return run_command(lambda: do_the_work(argv))

A mistake of the user's (a flag out of range, a missing file, a run that does not fit) is a
``UsageError``; a run that stopped early (Ctrl-C, a full disk, non-finite weights) is a
``RunStopped`` that says what is on disk. Both print one line ``error: ...``, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from minbert.checkpoint import UnsafeCheckpointError
from minbert.pretrained import CheckpointError
from tasks.reader import DataError


class UsageError(Exception):
    """A mistake in the command line or the files it names: reported in one line, no traceback."""


class RunStopped(Exception):
    """The run stopped early (Ctrl-C, a full disk, non-finite weights): the message says what
    state is on disk and how to resume; ``exit_code`` is the process's."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


INTERRUPTED = (
    "every file this command had written is whole (each is written to a temporary file and "
    "renamed), and no file of yours was changed"
)


def run_command(body: Callable[[], object], interrupted: str = INTERRUPTED) -> int:
    """A command's exit code: ``body()`` gives 0; a user error, a bad data file or checkpoint is
    one line ``error: ...`` on stderr and 2; a stopped run its own line and code; Ctrl-C that
    the command did not handle itself is 130 with ``interrupted``, what is on disk; a write that
    failed (a full disk, a read-only folder) is 1, naming the file. No traceback."""
    try:
        body()
    except KeyboardInterrupt:
        print(f"error: interrupted (Ctrl-C); {interrupted}", file=sys.stderr)
        return 130
    except OSError as err:
        where = f"{err.filename}: " if getattr(err, "filename", None) else ""
        print(f"error: {where}{err.strerror or err}", file=sys.stderr)
        return 1
    except (UsageError, DataError, UnsafeCheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"error: --checkpoint: {err}", file=sys.stderr)
        return 2
    except RunStopped as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    return 0
