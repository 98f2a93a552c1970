"""``--report_to tensorboard``: the run's training losses, dev metrics and learning rate as
TensorBoard event files in ``<run>/tensorboard/`` (view them with ``tensorboard --logdir runs``).

A lab extra in one file, the example of one (multitask/extras.py lists it): its settings, and its
part of a run, which checks them and is told each event of what the run logs. The ``tensorboard``
package is optional (requirements-lab.txt): where it is absent, ``--report_to tensorboard`` is
refused before anything runs, and it is imported only when the flag is on. The files hold what
``train_log.jsonl`` and ``metrics.jsonl`` hold, and are part of the run's exact resume as those logs
are: each event is written (and flushed) as the log line is, so a save finds it on disk, and
``--resume`` drops every event past the saved step before the run goes on, so each (tag, step) is
written once, with the uninterrupted run's value. Events are written here, in the loop's thread: a
file that cannot be written is one line naming it, as every other file of the run.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal

from minbert.checkpoint import WriteError, atomic_write
from minbert.flags import setting
from multitask.extras import Part

FOLDER = "tensorboard"  # inside the run folder
EVENTS = "events.out.tfevents.*"  # TensorBoard reads the files whose names hold "tfevents"


@dataclass
class Settings:
    """Where else the run reports what it logs."""

    report_to: Literal["none", "tensorboard"] = setting(
        "none",
        "also write losses, dev metrics and learning rate as TensorBoard events",
        group="reporting",
    )


def for_run(cfg: Any) -> TensorBoardReport | None:
    """Its part in a run with --report_to tensorboard; else None."""
    if cfg.extras["tensorboard"].report_to != "tensorboard":
        return None
    return TensorBoardReport(cfg.out_dir)


def records(data: bytes) -> Iterator[tuple[bytes, int]]:
    """Each whole record of an event file (TFRecord framing: length, its CRC, the Event proto,
    its CRC), as its bytes and the event's step. A record cut short, as a kill mid-write leaves
    it, ends the file; so does one whose checksums fail."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

    at = 0
    while at + 12 <= len(data):
        header, (header_crc,) = data[at : at + 8], struct.unpack_from("<I", data, at + 8)
        (length,) = struct.unpack("<Q", header)
        end = at + 12 + length + 4
        if end > len(data) or masked_crc32c(header) != header_crc:
            return
        body, (body_crc,) = data[at + 12 : end - 4], struct.unpack_from("<I", data, end - 4)
        if masked_crc32c(body) != body_crc:
            return
        yield data[at:end], event_pb2.Event.FromString(body).step
        at = end


def drop_after(path: Path, step: int) -> int:
    """Rewrite the event file ``path`` (atomically) without its events past ``step`` and any
    record cut short; how many bytes went. A file with nothing to drop is left as it is."""
    data = path.read_bytes()
    kept = b"".join(record for record, at in records(data) if at <= step)
    if len(kept) != len(data):
        atomic_write(path, lambda f: f.write(kept))
    return len(data) - len(kept)


class TensorBoardReport(Part):
    """Scalars tagged ``train/loss/<task>``, ``train/learning_rate`` and ``dev/<metric>``, in an
    event file of this process's own in the run folder's ``tensorboard/``, written in this thread
    (no writer thread: a failed write is the caller's one-line error, and nothing waits in a
    queue when the run is killed)."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = out_dir
        self.file: IO[bytes] | None = None
        self.name: Path | None = None

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        """The tensorboard package, and a folder for its events where the run folder's
        ``tensorboard`` is (both checked before anything runs)."""
        if importlib.util.find_spec("tensorboard") is None:
            yield "--report_to tensorboard needs the tensorboard package: pip install tensorboard"
        folder = Path(self.out_dir) / FOLDER
        if os.path.lexists(folder) and not folder.is_dir():
            yield (
                f"--report_to tensorboard: {folder} is not a folder, and the run's events go "
                "there; move it away"
            )

    def on_start(self, folder: Any, step: int) -> None:
        """Report from ``step`` on (0, or the step a resumed run continues from): drop what the
        folder's event files hold past it (written after the save it resumes), then open this
        process's file (``folder``: the RunFolder)."""
        from tensorboard.compat.proto import event_pb2

        self.path = folder.file(FOLDER)
        self.path.mkdir(parents=True, exist_ok=True)
        for old in sorted(self.path.glob(EVENTS)):
            if old.is_file() and not old.is_symlink():
                drop_after(old, step)
        stamp = f"{int(time.time()):010d}.{socket.gethostname()}.{os.getpid()}"
        self.name = self.path / f"events.out.tfevents.{stamp}.minbert"
        try:
            self.file = open(self.name, "xb", buffering=0)  # noqa: SIM115 -- while the run lives
        except OSError as err:
            raise WriteError(self.name, err) from err
        self._write([event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2")])

    def on_log(self, step: int, losses: dict[str, float], rate: float) -> None:
        self._write([self._scalar(f"train/loss/{task}", v, step) for task, v in losses.items()])
        self._write([self._scalar("train/learning_rate", rate, step)])

    def on_evaluate(self, step: int, metrics: dict[str, float]) -> None:
        self._write([self._scalar(f"dev/{name}", v, step) for name, v in metrics.items()])

    def on_end(self, folder: Any, summary: dict[str, Any]) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    @staticmethod
    def _scalar(tag: str, value: float, step: int) -> Any:
        """One scalar as TensorBoard's own writer makes it (the scalars plug-in, a float32)."""
        import numpy as np
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.scalar import metadata
        from tensorboard.util import tensor_util

        meta = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=metadata.PLUGIN_NAME),
            data_class=summary_pb2.DataClass.DATA_CLASS_SCALAR,
        )
        event = event_pb2.Event(wall_time=time.time(), step=int(step))
        tensor = tensor_util.make_tensor_proto(np.float32(value))
        event.summary.value.add(tag=tag, tensor=tensor, metadata=meta)
        return event

    def _write(self, events: list[Any]) -> None:
        """Append ``events``, unbuffered: in the file before the loop goes on (a save after it
        keeps them); a write the file system refuses is a WriteError naming the file."""
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        assert self.file is not None, "on_start opens the event file"
        framed = []
        for event in events:
            body = event.SerializeToString()
            header = struct.pack("<Q", len(body))
            framed += [header, struct.pack("<I", masked_crc32c(header)), body]
            framed.append(struct.pack("<I", masked_crc32c(body)))
        data = memoryview(b"".join(framed))
        try:
            while data:  # unbuffered: nothing is left to flush when the file is closed
                data = data[self.file.write(data) :]
        except OSError as err:
            raise WriteError(self.name, err) from err
