"""Safe, atomic checkpoint files.

* ``atomic_save``: write to a temporary file in the same folder, flush it to disk, then rename it
  over the target. A rename within one file system is atomic, so a run killed at any moment
  (``kill -9`` during the write included) leaves either the old file or the new one, never half.
* ``load_trusted``: ``torch.load(weights_only=True)``, which only rebuilds tensors and plain
  containers; a pickle that would construct arbitrary objects (and so run code) is refused.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch


class UnsafeCheckpointError(RuntimeError):
    """A checkpoint file holds more than tensors and plain containers, or cannot be read."""


def atomic_save(obj: Any, path: str | Path) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_trusted(path: str | Path, map_location: str | torch.device = "cpu") -> Any:
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        raise UnsafeCheckpointError(
            f"{path}: refused to load (only tensors and plain containers are accepted): {err}"
        ) from err
