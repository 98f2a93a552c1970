"""A finished run opened outside the driver: its settings, its tokenizer and one task's model.

The full project's finished-run tools (predictions, exports) and its runs that teach another
use this; so can your own code::

    run = TrainedRun("runs/adapter-annealed")
    model = run.task_model("sts")          # eval mode, on the CPU
    tokenizer = run.tokenizer()
"""

from __future__ import annotations

from pathlib import Path

import torch

from minbert.checkpoint import UnsafeCheckpointError, load_tensors
from minbert.flags import unflatten
from minbert.pretrained import CheckpointError
from minbert.tokenizer import Tokenizer
from multitask.config import read_run
from multitask.errors import RunStopped, UsageError
from multitask.model import ModelSettings, MultitaskModel, build_model
from multitask.run import RunFolder
from tasks.base import TASKS


class TrainedRun:
    """The settings of a finished run folder and the models it holds."""

    def __init__(self, path: str | Path, flag: str = "RUN_DIR") -> None:
        if str(path) == "":
            raise UsageError(f"{flag}: an empty path; give the folder of a training run")
        self.folder = RunFolder(path, writes=False)
        self.path = self.folder.path
        flat = read_run(path, flag)  # the one reader of config.json: --evaluate's checks
        config = self.folder.file("config.json")
        tasks, base = flat["tasks"], flat.get("base_tasks", [])
        batch_size = flat.get("batch_size", 32)
        if not all(
            isinstance(t, list) and all(isinstance(x, str) for x in t) for t in (tasks, base)
        ):
            raise UsageError(
                f"{flag}: {config} is corrupted (tasks {tasks!r}, base_tasks {base!r})"
            )
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise UsageError(f"{flag}: {config} is corrupted (batch_size {batch_size!r})")
        try:
            self.settings: ModelSettings = unflatten(ModelSettings, flat).resolved()
        except (TypeError, ValueError) as err:
            raise UsageError(f"{flag}: {config} is corrupted ({err})") from None
        # The tasks of earlier runs (--add_to) first, as the driver builds them.
        self.tasks: list[str] = [*base, *tasks]
        self.eval_batch_size: int = 2 * batch_size
        unknown = [t for t in self.tasks if t not in TASKS]
        if not self.tasks or unknown:
            raise UsageError(f"{config} names no known tasks ({unknown})")

    def check_task(self, task: str, flag: str = "--task") -> None:
        if task not in self.tasks:
            raise UsageError(
                f"{flag} {task}: {self.path} was trained on {', '.join(self.tasks)}; "
                "name one of them"
            )

    def tokenizer(self) -> Tokenizer:
        """The base checkpoint's tokenizer, truncating at the run's --max_length."""
        try:
            return Tokenizer.from_checkpoint(self.settings.checkpoint, self.settings.max_length)
        except (CheckpointError, ValueError) as err:
            raise UsageError(f"{self.path}: base checkpoint: {err}") from None

    def task_model(self, task: str) -> MultitaskModel:
        """The model that predicts ``task`` as the run's best evaluation did (eval mode, CPU)."""
        self.check_task(task)
        try:
            if self.settings.option == "finetune":
                model = build_model(self.settings, self.tasks)
                self.folder.load_best(model, "RUN_DIR")
            else:
                model = build_model(self.settings, [task])
                model.load_task_state_dict(task, self._read(f"task-{task}.safetensors"))
        except CheckpointError as err:
            raise UsageError(f"{self.path}: base checkpoint: {err}") from None
        except ValueError as err:  # a task file of another model
            raise UsageError(f"{self.path}: {err}") from None
        self.check_finite(model, task)
        return model.eval()

    def check_finite(self, model: MultitaskModel, task: str) -> None:
        """A NaN or infinity in the weights ends the command in one line (exit 3) naming the run's
        weights file (a base checkpoint holding one is refused when it loads)."""
        bad = [name for name, p in model.state_dict().items() if not torch.isfinite(p).all()]
        if bad:
            finetune = self.settings.option == "finetune"
            where = self.folder.file("best.safetensors" if finetune else f"task-{task}.safetensors")
            raise RunStopped(f"{where} holds NaN or inf ({bad[0]}): the model cannot predict", 3)

    def _read(self, name: str) -> dict[str, torch.Tensor]:
        path = self.folder.file(name)
        if not path.is_file():
            raise UsageError(
                f"{path} not found: a run writes its task files when it finishes; finish it with "
                f"python train_multitask.py --out_dir {self.path} --resume"
            )
        try:
            return load_tensors(path)
        except UnsafeCheckpointError as err:
            raise UsageError(str(err)) from None
