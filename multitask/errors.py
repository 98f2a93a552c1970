"""The errors a command reports in one line, and the wrapper that turns them into exit codes.

    def main(argv=None) -> int:
        return run_command(lambda: do_the_work(argv))

A mistake of the user's (a flag out of range, a missing file, a run that does not fit) is a
``UsageError``; a run that stopped early (Ctrl-C, a full disk, non-finite weights) is a
``RunStopped`` that says what is on disk. Both print one line ``error: ...``, never a traceback.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a job scheduler's stop), raised wherever the program is, as Ctrl-C's
    KeyboardInterrupt is: every place that ends an interrupted command in one line ends this
    one the same way, with ``stop_reason``'s words and exit code."""


def stop_reason(err: KeyboardInterrupt) -> tuple[str, int]:
    """How an interrupted command names what stopped it, and its exit code (128 + the signal)."""
    return ("terminated (SIGTERM)", 143) if isinstance(err, Terminated) else ("interrupted", 130)


@contextmanager
def sigterm_as_exception() -> Iterator[None]:
    """Within the block SIGTERM raises ``Terminated`` instead of ending the process at once, so
    that a command stopped by ``kill`` says what is on disk, as after Ctrl-C. Outside the main
    thread (where Python cannot set a handler) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


# What a command holds until it ends (a run folder's lock), closed when run_command returns, so
# that the folder is free for the next command of the same process at once, not when the garbage
# collector gets to the folder object.
HELD: list = []


INTERRUPTED = (
    "every file this command had written is whole (each is written to a temporary file and "
    "renamed), and no file of yours was changed"
)


def run_command(body: Callable[[], object], interrupted: str = INTERRUPTED) -> int:
    """A command's exit code: ``body()`` gives 0; a user error, a bad data file or checkpoint is
    one line ``error: ...`` on stderr and 2; a stopped run its own line and code; Ctrl-C or
    SIGTERM that the command did not handle itself is 130 or 143 with ``interrupted``, what is
    on disk; a write that failed (a full disk, a read-only folder) is 1, naming the file. No
    traceback."""
    try:
        with sigterm_as_exception():
            body()
        return 0
    except KeyboardInterrupt as err:
        what, code = stop_reason(err)
        what = "interrupted (Ctrl-C)" if code == 130 else what
        print(f"error: {what}; {interrupted}", file=sys.stderr)
        return code
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
    finally:
        while HELD:
            HELD.pop().close()
