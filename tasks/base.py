"""What a task is: its files, how to read a row, its head, loss, predictions, metric and SMART
divergence.

There are three kinds of task, one class each, and each kind carries its own behaviour (nothing
elsewhere switches on a kind); a task file declares one instance and registers it:

    MultiClassTask  C logits; loss = cross-entropy; prediction = argmax; accuracy;
                    SMART divergence: symmetric KL of two softmaxes (sst, cfimdb)
    BinaryTask      one logit z; loss = BCE(σ(z), y); prediction = 1 if z > 0 else 0; accuracy;
                    SMART divergence: symmetric KL of two Bernoullis (para)
    RegressionTask  one score ŷ; loss = (ŷ − y)²; prediction = ŷ clipped to the label range;
                    Pearson's r; SMART divergence: squared difference (sts)
"""

from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tasks.metrics import accuracy, pearson
from tasks.reader import Example, SkippedRow, read_examples

__all__ = [
    "TASKS",
    "BinaryTask",
    "MultiClassTask",
    "RegressionTask",
    "Task",
    "get_task",
    "read_predictions",
    "register",
]

TASKS: dict[str, Task] = {}
"""The registry: task name -> the one instance of that task. Filled by ``register``."""

SPLITS = ("train", "dev", "test")


class Task(ABC):
    """Base class of all tasks. Subclasses fill in labels, loss, predictions, metric, head and
    SMART divergence kind."""

    num_outputs: int
    metric_name: str
    smart_kind: str  # the divergence ℓ_s of minbert.smart.divergence for this kind of output

    def __init__(
        self,
        name: str,
        description: str,
        files: dict[str, str],
        text_columns: list[str],
        label_column: str,
        prediction_header: str,
        symmetric: bool = False,
    ) -> None:
        if not 1 <= len(text_columns) <= 2:
            raise ValueError(f"task {name!r}: expected one or two text columns, got {text_columns}")
        unknown = set(files) - set(SPLITS)
        if unknown:
            raise ValueError(f"task {name!r}: unknown split(s) {sorted(unknown)}; use {SPLITS}")
        self.name = name  # registry key, also the name the CLI and the plug-ins use
        self.description = description
        self.files = dict(files)  # split -> default file name in data/
        self.text_columns = list(text_columns)
        self.label_column = label_column
        self.prediction_header = prediction_header
        # A pair task whose label is the same for (a, b) and (b, a): paraphrase, similarity.
        self.symmetric = symmetric
        if symmetric and not self.is_pair:
            raise ValueError(f"task {name!r}: only a sentence-pair task can be symmetric")

    @property
    def is_pair(self) -> bool:
        """True for sentence-pair tasks (two text columns)."""
        return len(self.text_columns) == 2

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, num_outputs={self.num_outputs})"

    # -- data ----------------------------------------------------------------------------------

    def path(self, split: str, data_dir: str | Path = "data") -> Path:
        """The default file of ``split`` ("train", "dev", "test") under ``data_dir``."""
        if split not in self.files:
            raise ValueError(
                f"task {self.name!r} has no {split!r} file; it has {sorted(self.files)}"
            )
        return Path(data_dir) / self.files[split]

    @abstractmethod
    def parse_label(self, raw: str) -> int | float:
        """The label written in a file's label column; raises ValueError("reason") if bad."""

    def read(
        self, path: str | Path, strict: bool = False, require_label: bool = False
    ) -> tuple[list[Example], list[SkippedRow]]:
        """Read a data file of this task (see ``tasks.reader.read_examples``)."""
        return read_examples(
            path,
            self.text_columns,
            self.label_column,
            self.parse_label,
            strict=strict,
            require_label=require_label,
        )

    # -- model outputs ------------------------------------------------------------------------

    @abstractmethod
    def label_tensor(self, labels: Sequence[int | float]) -> Tensor:
        """Labels as the tensor ``loss`` expects, shape (B,)."""

    @abstractmethod
    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        """Mean loss of a batch; ``outputs`` (B, num_outputs), ``labels`` (B,)."""

    def taught_loss(self, outputs: Tensor, labels: Tensor, teacher: Tensor, gold: float) -> Tensor:
        """The task's loss against the mixed target λ·gold + (1 − λ)·teacher, λ = ``gold``, for
        the teacher's head outputs ``teacher`` (B, num_outputs) on the same examples (knowledge
        distillation with teacher annealing: Clark et al. 2019, "BAM! Born-Again Multi-Task
        Networks for Natural Language Understanding"; Liu et al. 2019 distil MT-DNN likewise).
        With λ = 1 it is ``loss`` itself, bit for bit. Each kind says what its target mixes."""
        if gold == 1:
            return self.loss(outputs, labels)
        return self._mixed_loss(outputs, labels, teacher.float(), gold)

    @abstractmethod
    def _mixed_loss(self, outputs: Tensor, labels: Tensor, teacher: Tensor, gold: float) -> Tensor:
        """``taught_loss`` for λ = ``gold`` < 1."""

    @abstractmethod
    def outputs_to_labels(self, outputs: Tensor) -> list[int | float]:
        """One prediction per row of ``outputs`` (B, num_outputs), as Python numbers."""

    @abstractmethod
    def describe(self, outputs: Tensor, probabilities: bool = False) -> list[dict[str, Any]]:
        """What a user reads for each row of (N, C) head outputs, as named fields (a
        prediction printed for a person); ``probabilities`` adds a classifier's class
        probabilities."""

    def metric(self, predictions: Sequence[int | float], labels: Sequence[int | float]) -> float:
        """The task's dev metric (``metric_name``): accuracy unless a kind says otherwise."""
        return accuracy(predictions, labels)

    def make_head(
        self, hidden: int, dropout: float, separate: bool, head_hidden: int = 0
    ) -> nn.Module:
        """The head on sentence vectors of size ``hidden``: linear on one vector, or, for a pair
        encoded one sentence at a time (``separate``), on the features [u; v; |u − v|; u ⊙ v];
        with ``head_hidden`` > 0, a tanh layer of that size first (``LinearHead``).

        The heads are imported here, where they are built, and not with this module: a
        tasks/heads.py that does not compile (an exercise half written) then fails the exercises
        of the heads only, and the losses of this module are still graded."""
        from tasks.heads import LinearHead, PairFeatureHead

        if separate:
            return PairFeatureHead(hidden, self.num_outputs, dropout, head_hidden)
        return LinearHead(hidden, self.num_outputs, dropout, head_hidden)

    def _check_outputs(self, outputs: Tensor) -> None:
        if outputs.dim() != 2 or outputs.shape[1] != self.num_outputs:
            raise ValueError(
                f"task {self.name!r}: expected outputs of shape (B, {self.num_outputs}), "
                f"got {tuple(outputs.shape)}"
            )

    # -- prediction files ---------------------------------------------------------------------

    def write_predictions(
        self, path: str | Path, ids: Sequence[str], predictions: Sequence[int | float]
    ) -> None:
        """Write a prediction file in the course's format: that of the CS224N default final
        project's starter code, byte for byte. A header line ``id \t <column> `` and then one row
        per example, ``<id> , <prediction> `` (note the spaces around the tab and the comma, and
        the trailing space). The columns are ``Predicted_Sentiment`` (sst and cfimdb),
        ``Predicted_Is_Paraphrase`` (para) and ``Predicted_Similiarity`` (sts; the misspelling is
        the course's, kept so that files written here are interchangeable with the course's).
        Floats are written with ``repr`` (shortest text that reads back to the same float), ints
        as ints."""
        if len(ids) != len(predictions):
            raise ValueError(f"{len(ids)} ids but {len(predictions)} predictions")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8", newline="\n") as f:
            f.write(f"id \t {self.prediction_header} \n")
            for example_id, prediction in zip(ids, predictions, strict=True):
                f.write(f"{example_id} , {_format_prediction(prediction)} \n")


class MultiClassTask(Task):
    """Single-label classification into ``num_classes`` classes 0..C−1.

    loss = −(1/B) Σ_b log softmax(o_b)[y_b]  (cross-entropy over the C logits o_b);
    prediction = argmax_c o_b,c; metric = accuracy.
    """

    metric_name = "acc"
    smart_kind = "multiclass"

    def __init__(self, *, num_classes: int, **kwargs) -> None:
        super().__init__(**kwargs)
        if num_classes < 2:
            raise ValueError(f"task {self.name!r}: need at least 2 classes, got {num_classes}")
        self.num_classes = num_classes
        self.num_outputs = num_classes

    def parse_label(self, raw: str) -> int:
        return _parse_class(raw, self.num_classes)

    def label_tensor(self, labels: Sequence[int | float]) -> Tensor:
        return torch.tensor(labels, dtype=torch.long)

    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        """L = −(1/B) Σ_b log softmax(o_b)[y_b] (the ``task-losses`` exercise): the mean
        cross-entropy of the (B, C) logits o (not probabilities) and the (B,) long class ids y."""
        self._check_outputs(outputs)
        # HINT: the docstring's L in float32: the log-softmax of each example's logits (not of
        # HINT: probabilities) read at its class id, averaged over the batch.
        # BEGIN SOLUTION: task-losses
        return F.cross_entropy(outputs.float(), labels)
        # END SOLUTION

    def _mixed_loss(self, outputs: Tensor, labels: Tensor, teacher: Tensor, gold: float) -> Tensor:
        """Cross-entropy to q = λ·onehot(y) + (1 − λ)·softmax(t), −(1/B) Σ_b Σ_c q_bc·log p_bc,
        which is linear in q: λ·``loss`` + (1 − λ)·(the cross-entropy to the teacher's
        distribution at temperature 1, as BAM! uses it)."""
        taught = -(teacher.softmax(dim=-1) * outputs.float().log_softmax(dim=-1)).sum(-1).mean()
        return gold * self.loss(outputs, labels) + (1 - gold) * taught

    def outputs_to_labels(self, outputs: Tensor) -> list[int]:
        self._check_outputs(outputs)
        return outputs.detach().argmax(dim=-1).tolist()

    def describe(self, outputs: Tensor, probabilities: bool = False) -> list[dict[str, Any]]:
        """{"class": argmax_c o_c} and, with ``probabilities``, softmax(o) over the C classes."""
        rows = [{"class": c} for c in self.outputs_to_labels(outputs)]
        if probabilities:
            for row, p in zip(rows, outputs.float().softmax(dim=-1).tolist()):
                row["probabilities"] = p
        return rows


class BinaryTask(Task):
    """Binary classification from a single logit z (the head has one output).

    loss = −(1/B) Σ_b [y_b log σ(z_b) + (1 − y_b) log(1 − σ(z_b))]  (BCE with logits);
    prediction = 1 if z_b > 0 (σ(z_b) > 0.5) else 0; metric = accuracy.
    """

    metric_name = "acc"
    smart_kind = "binary"
    num_outputs = 1

    def parse_label(self, raw: str) -> int:
        # The Quora files write 0.0 / 1.0.
        return _parse_class(raw, 2)

    def label_tensor(self, labels: Sequence[int | float]) -> Tensor:
        return torch.tensor(labels, dtype=torch.float32)

    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        """L = −(1/B) Σ_b [y_b log σ(z_b) + (1 − y_b) log(1 − σ(z_b))] (the ``task-losses``
        exercise): binary cross-entropy on the logits z = outputs[:, 0] (not σ(z)), the (B,)
        float labels y; its "with logits" form is the numerically stable one."""
        self._check_outputs(outputs)
        # HINT: the docstring's L in float32 on the logits of column 0, in its numerically stable
        # HINT: form that takes logits (no sigmoid of your own first), against the float labels.
        # BEGIN SOLUTION: task-losses
        return F.binary_cross_entropy_with_logits(outputs[:, 0].float(), labels.float())
        # END SOLUTION

    def _mixed_loss(self, outputs: Tensor, labels: Tensor, teacher: Tensor, gold: float) -> Tensor:
        """Binary cross-entropy to λ·y + (1 − λ)·σ(t), t the teacher's logit (``loss`` with
        soft labels)."""
        target = gold * labels.float() + (1 - gold) * torch.sigmoid(teacher[:, 0])
        return self.loss(outputs, target)

    def outputs_to_labels(self, outputs: Tensor) -> list[int]:
        self._check_outputs(outputs)
        return (outputs.detach()[:, 0] > 0).long().tolist()

    def describe(self, outputs: Tensor, probabilities: bool = False) -> list[dict[str, Any]]:
        """{"probability": σ(z)}: the probability of the positive class (a paraphrase)."""
        self._check_outputs(outputs)
        return [{"probability": p} for p in torch.sigmoid(outputs[:, 0].float()).tolist()]


class RegressionTask(Task):
    """Regression of a score in [low, high] from one output ŷ.

    loss = (1/B) Σ_b (ŷ_b − y_b)²  (MSE); prediction = min(max(ŷ_b, low), high);
    metric = Pearson's r.
    """

    metric_name = "pearson"
    smart_kind = "regression"
    num_outputs = 1

    def __init__(self, *, low: float, high: float, **kwargs) -> None:
        super().__init__(**kwargs)
        if not low < high:
            raise ValueError(f"task {self.name!r}: need low < high, got {low}, {high}")
        self.low = float(low)
        self.high = float(high)

    def parse_label(self, raw: str) -> float:
        value = _parse_number(raw)
        if not self.low <= value <= self.high:
            raise ValueError(f"{value} is out of range {self.low:g}..{self.high:g}")
        return value

    def label_tensor(self, labels: Sequence[int | float]) -> Tensor:
        return torch.tensor(labels, dtype=torch.float32)

    def loss(self, outputs: Tensor, labels: Tensor) -> Tensor:
        """L = (1/B) Σ_b (ŷ_b − y_b)² (the ``task-losses`` exercise): the mean squared error of
        the scores ŷ = outputs[:, 0], shape (B,) like the float labels y (scores such as 3.8,
        kept as they are)."""
        self._check_outputs(outputs)
        # HINT: the mean squared error of column 0 of the (B, 1) outputs against the (B,) float
        # HINT: labels (a (B, 1) - (B,) difference broadcasts to (B, B)), in float32.
        # BEGIN SOLUTION: task-losses
        return F.mse_loss(outputs[:, 0].float(), labels.float())
        # END SOLUTION

    def _mixed_loss(self, outputs: Tensor, labels: Tensor, teacher: Tensor, gold: float) -> Tensor:
        """Squared error to λ·y + (1 − λ)·ŷ_t, ŷ_t the teacher's score (``loss`` with the mixed
        target)."""
        return self.loss(outputs, gold * labels.float() + (1 - gold) * teacher[:, 0])

    def outputs_to_labels(self, outputs: Tensor) -> list[float]:
        self._check_outputs(outputs)
        return outputs.detach()[:, 0].float().clamp(self.low, self.high).tolist()

    def describe(self, outputs: Tensor, probabilities: bool = False) -> list[dict[str, Any]]:
        """{"score": the prediction}, the score clipped to [low, high]."""
        return [{"score": score} for score in self.outputs_to_labels(outputs)]

    def metric(self, predictions: Sequence[float], labels: Sequence[float]) -> float:
        return pearson(predictions, labels)

    def make_head(
        self, hidden: int, dropout: float, separate: bool, head_hidden: int = 0
    ) -> nn.Module:
        """A pair encoded one sentence at a time: ŷ = a·cos(u, v) + b (``CosineSimilarityHead``,
        which has no layer to widen: ``head_hidden`` does not apply)."""
        from tasks.heads import CosineSimilarityHead  # here: see ``Task.make_head``

        if separate:
            return CosineSimilarityHead()
        return super().make_head(hidden, dropout, separate, head_hidden)


# ----------------------------------------------------------------------------------------------
# Registry


def register(task: Task) -> Task:
    """Add ``task`` to ``TASKS`` under ``task.name``; a second task of the same name is an error."""
    if task.name in TASKS:
        raise ValueError(f"a task named {task.name!r} is already registered")
    TASKS[task.name] = task
    return task


def get_task(name: str) -> Task:
    """The registered task called ``name``; a ValueError lists the known names otherwise."""
    try:
        return TASKS[name]
    except KeyError:
        known = ", ".join(sorted(TASKS)) or "(none registered)"
        raise ValueError(f"unknown task {name!r}; known tasks: {known}") from None


# ----------------------------------------------------------------------------------------------
# Helpers


# A number as the course's files write it: ASCII digits, an optional sign, point and exponent
# (or inf / nan, refused as not finite). Python's float() also takes "0_5" or "٣" (an Arabic-
# Indic three), which no one means as a label.
_NUMBER = re.compile(
    r"[+-]?((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?|inf(inity)?|nan)", re.IGNORECASE | re.ASCII
)
_INTEGRAL = re.compile(
    r"[+-]?\d+(\.0*)?", re.ASCII
)  # "3", "-1" or "3.0" (the Quora files write 1.0)


def _parse_number(raw: str) -> float:
    if not _NUMBER.fullmatch(raw.strip()):
        raise ValueError("not a number")
    value = float(raw)
    if not math.isfinite(value):
        raise ValueError("not a finite number")
    return value


def _parse_class(raw: str, num_classes: int) -> int:
    """A class index 0..num_classes−1, written as an integer ("3") or integral float ("3.0");
    not in scientific notation (``1e-400`` is 0.0 to float(), but no one writes a class so)."""
    value = _parse_number(raw)
    if not _INTEGRAL.fullmatch(raw.strip()):
        raise ValueError(f"{raw.strip()} is not an integer class")
    if not 0 <= value < num_classes:
        raise ValueError(f"class {int(value)} is out of range 0..{num_classes - 1}")
    return int(value)


def _format_prediction(prediction: int | float) -> str:
    # bool and numpy/torch scalars are normalised so the file reads "1", not "True" or "tensor(1)".
    if hasattr(prediction, "item"):
        prediction = prediction.item()
    if isinstance(prediction, bool):
        prediction = int(prediction)
    return repr(prediction) if isinstance(prediction, float) else str(prediction)


def read_predictions(path: str | Path) -> tuple[str, list[tuple[str, str]]]:
    """Read a prediction file written by ``write_predictions``: (column name, [(id, value)])."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    if not lines:
        raise ValueError(f"{path}: empty prediction file")
    header = [part.strip() for part in lines[0].split("\t")]
    if len(header) != 2 or header[0] != "id":
        raise ValueError(f"{path}:1: expected header 'id \\t <column>', got {lines[0]!r}")
    rows = []
    for number, line in enumerate(lines[1:], start=2):
        parts = line.split(" , ")
        if len(parts) != 2:
            raise ValueError(f"{path}:{number}: expected '<id> , <prediction>', got {line!r}")
        rows.append((parts[0].strip(), parts[1].strip()))
    return header[1], rows
