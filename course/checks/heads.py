"""Checks of ``tasks/heads.py`` and ``tasks/base.py``: the multitask heads (the ``pooling``,
``pair-features`` and ``cosine-head`` exercises) and each task kind's loss (``task-losses``), on
stored inputs handed straight to the student's functions (no encoder: no other exercise runs),
against stored outputs.
"""

from __future__ import annotations

import torch

from course.dropout import MODES, mode
from course.gradients import GRADIENT_CUT, gradient_failure
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import Context, check
from course.shapes import Given
from course.untouched import Untouched

# The stored inputs: mean pooling of (B, T, D) hidden states with these sentence lengths;
# pairs of D-vectors for the pair heads.
POOLING_SHAPE = (4, 7, 8)
POOLING_LENGTHS = (7, 3, 5, 1)
PAIR_HEAD = {"hidden": 8, "num_outputs": 3, "dropout": 0.3}
PAIR_LAYERS = {"one layer": 0, "two layers": 5}  # head_hidden of each graded PairFeatureHead
COSINE_PAIRS = 8  # pairs of 8-dim vectors: (8, 8), square on purpose (see the docstring)
LOSS_BATCH, LOSS_CLASSES, SCORE_RANGE = 6, 5, (0.0, 5.0)
# float32 outputs of size 1-5 (float64 for the pair head): 1e-5 is several float32 steps, far
# below what any mistake changes.
HEADS_TOLERANCE = 1e-5


@check(
    "pooling: mean pooling vs Σ m_t h_t / Σ m_t",
    tolerance=HEADS_TOLERANCE,
    judge=stored_cases(
        ("heads", "pooling", "eval"),
        given=lambda data: Given(
            counts={"mean pooling r": data["heads"]["pooling"]["attention_mask"].sum(1)}
        ),
    ),
    hint="weight each token's hidden state by its mask value (0 for padding), sum over the tokens "
    "and divide each sentence by its own number of real tokens",
    exercises=("pooling",),
    raises={
        "must match the size of tensor": "the mask (B, T) has no last axis to broadcast over the "
        "hidden states (B, T, D): give the mask a last axis of size 1 first",
    },
)
def check_pooling(ctx: Context) -> Outputs:
    """sentence_representation(..., "mean") on stored (B, T, D) hidden states and a padded mask
    against the stored Σ_t m_t h_t / Σ_t m_t; neither argument may change, and the gradient must
    reach the hidden states (``course/gradients.py``)."""
    from tasks.heads import sentence_representation

    data = ctx.course_data["heads"]["pooling"]
    hidden, mask = data["hidden"].clone(), data["attention_mask"].clone()
    axes = {
        "last_hidden_state": ("sentence", "token", "dim"),
        "attention_mask": ("sentence", "token"),
    }
    kept = Untouched({"last_hidden_state": hidden, "attention_mask": mask}, axes=axes)
    with torch.no_grad():
        r = sentence_representation({"last_hidden_state": hidden}, mask, "mean")
    if changed := kept.problem():
        return problem(f"sentence_representation {changed}")
    pooled = lambda _, h: sentence_representation({"last_hidden_state": h}, mask, "mean")
    failed = gradient_failure(pooled, {"last_hidden_state": data["hidden"]})
    return with_gradient(outputs(graded({"mean pooling r": r}, axes=("sentence", "dim"))), failed)


# The axes of a pair head's arguments, u and v (B, D), as messages name positions in them.
PAIR_AXES = {"u": ("pair", "dim"), "v": ("pair", "dim")}


def pair_heads(state: dict | None = None) -> torch.nn.ModuleDict:
    """The graded PairFeatureHeads (``PAIR_LAYERS``), in float64, with ``state`` loaded."""
    from tasks.heads import PairFeatureHead

    p = PAIR_HEAD
    heads = torch.nn.ModuleDict(
        {
            label: PairFeatureHead(p["hidden"], p["num_outputs"], p["dropout"], hidden)
            for label, hidden in PAIR_LAYERS.items()
        }
    ).double()
    if state is not None:
        heads.load_state_dict(state)
    return heads


@check(
    "pair-features: PairFeatureHead vs W [u; v; |u − v|; u ⊙ v] + b",
    tolerance=HEADS_TOLERANCE,
    judge=stored_cases(*[("heads", "pair_features", name) for name in MODES]),
    hint="concatenate u, v, |u − v| and u ⊙ v along the last axis in that order, and give them "
    "to LinearHead's forward (its dropout and layers)",
    exercises=("pair-features",),
    raises={
        "mat1 and mat2 shapes cannot be multiplied": "the features reach a layer of the wrong "
        "width: [u; v; |u − v|; u ⊙ v] is 4·D wide and goes through LinearHead's forward (its "
        "dropout and every layer), not straight to its last layer",
    },
)
def check_pair_features(ctx: Context) -> Outputs:
    """PairFeatureHead (one and two layers) on stored (B, D) pairs in float64 against the stored
    W · dropout([u; v; |u − v|; u ⊙ v]) + b, in eval and training mode; the gradients must reach
    u, v and the head's layers (``course/gradients.py``)."""
    data = ctx.course_data["heads"]["pair_features"]
    heads = pair_heads(data["state"])
    found = []
    for name in MODES:
        got = {}
        with mode(heads, name, ctx.course_data["seed"]) as recorder:
            for label, head in heads.items():
                kept = Untouched({"u": data["u"].clone(), "v": data["v"].clone()}, head, PAIR_AXES)
                got[f"logits, {label}"] = head(*kept.arguments.values())
                if said := kept.problem():
                    return problem(f"PairFeatureHead ({label}, {name} mode) {said}")
        found.append(graded(got, f"({name} mode) ", ("pair", "output"), recorder.calls))
    pair = {"u": data["u"], "v": data["v"]}
    failed = None
    for label, head in heads.items():
        pair_head = lambda m, u, v: m(u, v)
        failed = failed or gradient_failure(pair_head, pair, head, "PairFeatureHead", label)
    return with_gradient(outputs(*found), failed)


@check(
    "cosine-head: CosineSimilarityHead vs a·cos(u, v) + b",
    tolerance=HEADS_TOLERANCE,
    judge=stored_cases(
        ("heads", "cosine", "eval"),
        given=lambda data: Given({"ŷ": ("the shift b", data["heads"]["cosine"]["state"]["shift"])}),
    ),
    hint="the cosine of each pair over the hidden axis (the last), scaled by self.scale and "
    "shifted by self.shift, as a (B, 1) column",
    exercises=("cosine-head",),
)
def check_cosine_head(ctx: Context) -> Outputs:
    """CosineSimilarityHead with stored a, b on stored (B, D) pairs against the stored
    a · cos(u, v) + b; the gradients must reach u, v, a and b (``course/gradients.py``)."""
    from tasks.heads import CosineSimilarityHead

    data = ctx.course_data["heads"]["cosine"]
    head = CosineSimilarityHead()
    head.load_state_dict(data["state"])
    kept = Untouched({"u": data["u"].clone(), "v": data["v"].clone()}, head, PAIR_AXES)
    with torch.no_grad():
        got = {"ŷ": head(*kept.arguments.values())}
    if said := kept.problem():
        return problem(f"CosineSimilarityHead {said}")
    pair = {"u": data["u"], "v": data["v"]}
    failed = gradient_failure(lambda m, u, v: m(u, v), pair, head, "CosineSimilarityHead")
    return with_gradient(outputs(graded(got, axes=("pair", "output"))), failed)


def loss_tasks() -> dict:
    """One task of each kind (graded output name -> task), built from the classes of
    tasks/base.py: the check needs no data file and no registered task."""
    from tasks.base import BinaryTask, MultiClassTask, RegressionTask

    common = {"description": "graded", "files": {}, "label_column": "label"}
    low, high = SCORE_RANGE
    return {
        "cross-entropy": MultiClassTask(
            name="classes",
            text_columns=["s"],
            prediction_header="c",
            num_classes=LOSS_CLASSES,
            **common,
        ),
        "binary cross-entropy": BinaryTask(
            name="binary", text_columns=["a", "b"], prediction_header="b", **common
        ),
        "squared error": RegressionTask(
            name="scores",
            text_columns=["a", "b"],
            prediction_header="s",
            low=low,
            high=high,
            **common,
        ),
    }


@check(
    "task-losses: each kind's loss vs cross-entropy, BCE on logits, squared error",
    tolerance=HEADS_TOLERANCE,
    judge=stored_cases(("heads", "losses", "eval")),
    hint="MultiClassTask: the cross-entropy of the logits; BinaryTask: binary cross-entropy on the "
    "logit (with logits: no sigmoid first); RegressionTask: the mean of (ŷ − y)² with ŷ the (B,) "
    "column 0; each a mean over the batch, labels as label_tensor makes them",
    exercises=("task-losses",),
    raises={
        "expected target dtype": "labels of the wrong dtype: cross-entropy takes class indices "
        "(torch.long), as label_tensor makes them",
        "can't be cast to the desired output type": "labels of the wrong dtype: binary "
        "cross-entropy on logits takes float labels (0.0 or 1.0), as label_tensor makes them",
    },
)
def check_task_losses(ctx: Context) -> Outputs:
    """Each kind's ``loss`` on stored head outputs and labels (``label_tensor``'s dtypes) against
    the stored mean losses; each loss must reach the outputs through autograd and leave both
    arguments as they were."""
    data = ctx.course_data["heads"]["losses"]
    got, failed = {}, None
    for name, task in loss_tasks().items():
        head_outputs = data[name]["outputs"].clone().requires_grad_(True)
        labels = task.label_tensor(data[name]["labels"].tolist())
        kept = Untouched({"outputs": head_outputs, "labels": labels})
        with torch.enable_grad():
            loss = task.loss(head_outputs, labels)
        if said := kept.problem():
            return problem(f"{type(task).__name__}.loss {said}")
        if isinstance(loss, torch.Tensor) and not loss.requires_grad:
            return problem(
                f"{type(task).__name__}.loss returned a loss detached from the outputs (no "
                "gradient reaches the head): compute it with torch operations on the outputs",
                GRADIENT_CUT,
            )
        got[name] = loss.detach() if isinstance(loss, torch.Tensor) else loss
        loss_of = lambda _, out, task=task, labels=labels: task.loss(out, labels)
        where = f"{type(task).__name__}.loss"
        failed = failed or gradient_failure(
            loss_of, {"outputs": data[name]["outputs"]}, where=where
        )
    return with_gradient(outputs(graded(got)), failed)
