"""The one atomic writer and the one safe loader of every file a run saves.

* ``atomic_write(path, write)``: ``write`` fills a temporary file in the same folder, which is
  flushed and fsync'ed to disk, then renamed over ``path``. A rename within one file system is
  atomic, so a run killed at any moment (``kill -9`` during the write included) leaves either
  the old file or the new one, never half of one, and no temporary file stays behind.
* A write that fails (a full disk, a read-only or vanished folder) is a ``WriteError`` naming the
  file, an ``OSError`` like any other; the temporary file is removed and the old file stays.
* ``write_output``: a user's output file, written atomically unless it is a symlink (the file it
  points to is written, the link stays) or not a regular file (a FIFO, ``/dev/stdout``), which is
  written through.
* ``load_trusted``: ``torch.load(weights_only=True)``, which only rebuilds tensors and plain
  containers; a pickle that would construct arbitrary objects (and so run code) is refused.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import torch


class UnsafeCheckpointError(RuntimeError):
    """A checkpoint file holds more than tensors and plain containers ("refused"), or is cut off
    or not a checkpoint at all ("corrupted")."""


WRITE_FAILED = "write failed"  # in torch's RuntimeError when the file system refuses the bytes


def write_failure(err: BaseException) -> bool:
    """Whether ``err`` is the file system refusing a write: an OSError, or torch's RuntimeError
    about its zip writer (raised while, or because, an OSError such as ENOSPC was handled)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError) or WRITE_FAILED in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return "inline_container" in str(err)


def interrupt_in(err: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (Ctrl-C, or SIGTERM as the commands raise it) that ``err`` was
    raised while handling, if any: torch's zip writer, interrupted mid-write, fails on its next
    write with a RuntimeError, which is then no write fault of the file system."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class WriteError(OSError):
    """A file could not be written (full disk, read-only or vanished folder): its path and the
    reason, in one line."""

    def __init__(self, path: str | Path, err: BaseException) -> None:
        cause: BaseException | None = err
        while cause is not None and not isinstance(cause, OSError):  # torch wraps the OSError
            cause = cause.__cause__ or cause.__context__
        reason = getattr(cause, "strerror", None) or (str(err).splitlines() or [""])[0]
        if isinstance(err, RuntimeError) and WRITE_FAILED in str(err):
            reason = f"the write failed, is the disk full? ({reason})"
        super().__init__(f"{path}: cannot write: {reason or type(err).__name__}")
        self.path = Path(path)


def atomic_write(path: str | Path, write: Callable[[IO[bytes]], None]) -> None:
    """Write ``path`` all at once: ``write(f)`` fills a temporary file, then fsync and rename."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise WriteError(path, err) from err
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except (OSError, RuntimeError) as err:
        Path(tmp).unlink(missing_ok=True)
        if stop := interrupt_in(err):  # Ctrl-C inside torch's writer, which then gave up
            raise stop from None
        if write_failure(err):
            raise WriteError(path, err) from err
        raise  # a RuntimeError of what was being written (an object that cannot be saved)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_output(path: str | Path, text: str) -> None:
    """A user's output file (see the module docstring): through a symlink to its target, straight
    into a FIFO or device, atomically otherwise."""
    path = Path(path)
    device = str(path.absolute()).startswith(("/dev/", "/proc/"))  # /dev/stdout, even to a file
    if device or (path.exists() and not path.is_file() and not path.is_dir()):  # links followed
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as err:
            raise WriteError(path, err) from err
        return
    atomic_write_text(path.resolve() if path.is_symlink() else path, text)


def atomic_save(obj: Any, path: str | Path) -> None:
    """``torch.save(obj)`` to ``path`` through ``atomic_write``."""
    atomic_write(path, lambda f: torch.save(obj, f))


def atomic_write_text(path: str | Path, text: str) -> None:
    """UTF-8 text to ``path`` through ``atomic_write``."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save_tensors(tensors: dict[str, torch.Tensor], path: str | Path) -> None:
    """A safetensors file of CPU copies of ``tensors``, through ``atomic_write``."""
    from safetensors.torch import save

    data = save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})
    atomic_write(path, lambda f: f.write(data))


def load_trusted(
    path: str | Path | IO[bytes], map_location: str | torch.device = "cpu", name: str = ""
) -> Any:
    """``torch.load`` of plain tensors and containers only (see the module docstring). ``path``
    may be a file already open (``name``: what the messages call it)."""
    name = name or str(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        first = str(err).splitlines()[0] if str(err) else ""
        if "weights only" in first.lower():
            raise UnsafeCheckpointError(
                f"{name}: refused to load (only tensors and plain containers are accepted): {err}"
            ) from err
        raise UnsafeCheckpointError(
            f"{name}: corrupted (not a readable torch file: {first})"
        ) from err
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UnsafeCheckpointError(
            f"{name}: corrupted (not a readable torch file: {first})"
        ) from err


def load_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file; a file that is not one is an UnsafeCheckpointError."""
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except Exception as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UnsafeCheckpointError(
            f"{path}: corrupted (not a readable safetensors file: {first})"
        ) from err
