"""Single-task teachers distilled into the multitask model, with teacher annealing.

Clark, Luong, Khandelwal, Manning, Le 2019, "BAM! Born-Again Multi-Task Networks for Natural
Language Understanding" (ACL 2019): finished runs teach the student's tasks, and each taught
task trains towards the mixed target λ·gold + (1 − λ)·teacher (``tasks.base.Task.taught_loss``:
cross-entropy to λ·onehot + (1 − λ)·softmax(t) for a classifier, binary cross-entropy to
λ·y + (1 − λ)·σ(t) for a binary task, squared error to λ·y + (1 − λ)·ŷ_t for a score). Liu, He,
Chen, Gao 2019 distil MT-DNN from ensembles of single-task models in the same way.

    python train_multitask.py --teachers sst=runs/sst,para=runs/para,sts=runs/sts
    python train_multitask.py --teachers sst=runs/sst --teacher_weight 0.5     # a constant mix

Hooks (multitask/extras.py): problems, prepare, started, wrap_objective. Design notes:
docs/design/multitask.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minbert.checkpoint import load_tensors, save_tensors
from minbert.flags import setting, task_folders
from minbert.pretrained import CheckpointError, resolve_checkpoint_dir
from multitask.collate import Batch, to_device
from multitask.errors import UsageError
from multitask.evaluation import head_outputs
from multitask.extras import Part
from multitask.model import ModelSettings, MultitaskModel
from multitask.run import RunFolder, overlapping
from multitask.trained import TrainedRun
from tasks.base import Task, get_task
from tasks.reader import Example

CACHE = "teacher-outputs.safetensors"


@dataclass
class Settings:
    """The distillation flags (docs/flags.md has the details)."""

    teachers: list[str] = setting(
        help="TASK=RUN_DIR,...: finished runs whose outputs teach these tasks; given twice, merged",
        factory=list,
        group="distillation from teachers",
    )
    teacher_annealing: bool = setting(
        False, "λ rises linearly from 0 to 1 over the run (the default with --teachers)"
    )
    teacher_weight: float | None = setting(
        None,
        "a constant mix instead of annealing: λ = 1 − w, the teacher's share w",
        within="[0, 1]",
    )


def parse_teachers(entries: Sequence[str], tasks: Sequence[str]) -> dict[str, str]:
    """``["sst=runs/sst", ...]`` -> ``{"sst": "runs/sst"}``; ValueError names a bad entry."""
    return task_folders("--teachers", entries, tasks)


def gold_weight(step: int, total: int, teacher_weight: float | None) -> float:
    """λ, the gold label's share of the target at step ``step`` (1..total): (s − 1)/(S − 1)
    with annealing (``teacher_weight`` None), else 1 − w."""
    if teacher_weight is not None:
        return 1.0 - teacher_weight
    return (step - 1) / (total - 1) if total > 1 else 1.0


def teacher_problem(name: str, folder: str, student: ModelSettings) -> str | None:
    """What makes ``folder`` unfit to teach task ``name`` to a student with these settings, or
    None: it must be a finished run that trained the task, tokenized as the student is."""
    flag = f"--teachers {name}={folder}"
    if not RunFolder(folder).file("summary.json").is_file():
        return f"{flag}: {folder} holds no finished run of train_multitask.py (no summary.json)"
    run = TrainedRun(folder)
    if name not in run.tasks:
        return f"{flag}: {folder} was trained on {', '.join(run.tasks)}, not {name}"
    weights = (
        "best.safetensors" if run.settings.option == "finetune" else f"task-{name}.safetensors"
    )
    if not run.folder.file(weights).is_file():
        return f"{flag}: {run.folder.file(weights)} not found; the run is incomplete"
    if run.settings.max_length != student.max_length:
        return (
            f"{flag}: the teacher truncates at --max_length {run.settings.max_length}, the "
            f"student at {student.max_length}; train them with the same"
        )
    try:
        same = vocabulary(run.settings.checkpoint) == vocabulary(student.checkpoint)
    except CheckpointError as err:
        return f"{flag}: {err}"
    if not same:
        return f"{flag}: the teacher's checkpoint has another vocabulary than the student's"
    return None


def vocabulary(checkpoint: str) -> bytes:
    path = resolve_checkpoint_dir(checkpoint) / "vocab.txt"
    if not path.is_file():
        raise CheckpointError(f"{path} not found")
    return path.read_bytes()


def teacher_outputs(
    folder: RunFolder,
    entries: Sequence[str],
    train: dict[str, Sequence[Example]],
    device: torch.device,
    resume: bool,
) -> dict[str, torch.Tensor]:
    """Each taught task's teacher outputs (N, C) on its training examples (``entries``: the
    --teachers flag, TASK=RUN_DIR; ``train``: each task's examples), in their order: read
    from the run folder on a resume, else computed. Called before the run folder is touched (a
    teacher that cannot be read stops the command before ``--overwrite`` removes anything);
    ``save_teacher_outputs`` writes them once the folder is started."""
    teachers = parse_teachers(entries, list(train))
    if not teachers:
        return {}
    cache = folder.file(CACHE)
    if resume and cache.is_file():
        saved = load_tensors(cache)
        if sorted(saved) != sorted(teachers):
            raise UsageError(
                f"--teachers: {cache} holds the teacher outputs of {', '.join(saved) or 'no task'}"
                f", but the run is taught {', '.join(teachers)}; remove the file to compute every "
                "teacher's outputs again from the --teachers runs"
            )
        for name, outputs in saved.items():
            if len(outputs) != len(train[name]):
                raise UsageError(f"{cache} does not fit the run's training data")
        return saved
    outputs = {}
    with torch.random.fork_rng(devices=[]):  # building a teacher draws no number of the run's
        for name, path in teachers.items():
            outputs[name] = one_teacher(name, path, train[name], device)
    return outputs


def save_teacher_outputs(folder: RunFolder, outputs: dict[str, torch.Tensor], resume: bool) -> None:
    """Once the run folder is started: keep the outputs there for a resume (unless a resume read
    them from there)."""
    if outputs and folder.writes and not (resume and folder.file(CACHE).is_file()):
        save_tensors(outputs, folder.file(CACHE))


class Taught:
    """Distillation from single-task teachers: a taught task trains towards λ·gold + (1 − λ)·
    teacher, the teacher's outputs on the batch's examples (``Batch.rows``) and λ from ``gold``
    (the step's share of the gold label); every other task keeps ``inner``'s loss (the model's,
    or the objective it is given)."""

    def __init__(
        self,
        model: MultitaskModel,
        inner: Any,
        teachers: dict[str, torch.Tensor],
        gold: Callable[[], float],
    ) -> None:
        self.model, self.inner, self.teachers, self.gold = model, inner, teachers, gold

    def criterion(self, task: Task, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        if task.name not in self.teachers:
            return self.inner.criterion(task, outputs, batch)
        teacher = to_device(self.teachers[task.name][batch.rows], outputs.device)
        return task.taught_loss(outputs.float(), batch.labels, teacher, self.gold())

    def __call__(self, task: Task, batch: Batch) -> torch.Tensor:
        return self.criterion(task, self.model(task.name, batch), batch)


# -- its part of a run (multitask/extras.py: Part) -----------------------------------------------


class Distillation(Part):
    """A run with any of the distillation flags: its settings checked; with --teachers, each
    taught task's teacher outputs read before the run folder is started (``on_set_up``), kept in
    it once started (for a resume), and the objective ``Taught`` around the inner one."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.outputs: dict[str, torch.Tensor] = {}  # each taught task's teacher outputs

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        """What is wrong with the distillation flags of a driver config (``multitask.config``'s
        TrainConfig), first things first: a teacher that is the run being written (or
        overwritten) is refused before its folder is read as a teacher."""
        cfg, own = self.cfg, self.cfg.extras["distillation"]
        teachers = parse_teachers(own.teachers, cfg.tasks)
        if own.teacher_annealing and own.teacher_weight is not None:
            yield "--teacher_annealing and --teacher_weight: choose one (annealing is the default)"
        if (own.teacher_annealing or own.teacher_weight is not None) and not own.teachers:
            yield "--teacher_annealing / --teacher_weight: name the teachers with --teachers"
        for name, folder in teachers.items():
            if overlapping(Path(cfg.out_dir), Path(folder)):
                yield (
                    f"--teachers {name}={folder}: the teacher is the run --out_dir {cfg.out_dir} "
                    "writes (or lies inside it, or holds it); a run cannot teach itself: give a "
                    "finished run in another folder"
                )
        cached = cfg.resume and (Path(cfg.out_dir) / CACHE).is_file()  # teachers not needed
        for name, folder in [] if cached else teachers.items():
            if elsewhere and not Path(folder).exists():
                continue
            if problem := teacher_problem(name, folder, cfg.model):
                yield problem

    def on_set_up(
        self, folder: RunFolder, train: dict[str, Sequence[Example]], device: torch.device
    ) -> None:
        """Each taught task's teacher outputs (``teacher_outputs``), read before the run folder
        is started."""
        teachers = self.cfg.extras["distillation"].teachers
        self.outputs = teacher_outputs(folder, teachers, train, device, self.cfg.resume)

    def wrap_objective(self, inner: Any, model: MultitaskModel, progress: Any) -> Any:
        """``Taught`` around ``inner``, λ from the step the loop is at (``progress``: step() of
        total, multitask/extras.py's Progress), annealed or constant (``gold_weight``)."""
        if not self.outputs:
            return inner
        weight = self.cfg.extras["distillation"].teacher_weight

        def gold() -> float:
            return gold_weight(progress.step(), progress.total, weight)

        return Taught(model, inner, self.outputs, gold)

    def on_start(self, folder: RunFolder, step: int) -> None:
        """The teacher outputs kept in the started run folder, for a resume."""
        save_teacher_outputs(folder, self.outputs, self.cfg.resume)


def for_run(cfg: Any) -> Distillation | None:
    """Its part in a run that sets any distillation flag; else None."""
    own = cfg.extras["distillation"]
    if not own.teachers and not own.teacher_annealing and own.teacher_weight is None:
        return None
    return Distillation(cfg)


def one_teacher(
    name: str, path: str, examples: Sequence[Example], device: torch.device
) -> torch.Tensor:
    """The head outputs (N, C) of the run in ``path`` for task ``name`` on ``examples``, with
    its own tokenizer and model, which is released when this returns."""
    run = TrainedRun(path)
    model = run.task_model(name).to(device)
    print(f"[{name}] teacher {path}: outputs on {len(examples)} training examples")
    return head_outputs(
        model, get_task(name), examples, run.tokenizer(), run.eval_batch_size, device, progress=True
    )
