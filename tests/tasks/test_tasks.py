"""Tasks (registry, labels, losses, predictions, prediction files) and the metric functions."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from multitask.collate import swap_at_random
from tasks import TASKS, get_task
from tasks.base import MultiClassTask, read_predictions, register
from tasks.heads import CosineSimilarityHead
from tasks.metrics import accuracy, overall_score, pearson
from tasks.reader import Example

# -- registry ----------------------------------------------------------------------------------


def test_registry_has_the_four_tasks():
    assert set(TASKS) == {"sst", "para", "sts", "cfimdb"}
    for name, task in TASKS.items():
        assert task.name == name
        assert get_task(name) is task


def test_unknown_task_lists_the_known_names():
    message = r"unknown task 'nope'; known tasks: cfimdb, para, sst, sts"
    with pytest.raises(ValueError, match=message):
        get_task("nope")


def test_declarations():
    sst, para, sts, cfimdb = (get_task(n) for n in ("sst", "para", "sts", "cfimdb"))
    assert (sst.num_outputs, para.num_outputs, sts.num_outputs, cfimdb.num_outputs) == (5, 1, 1, 2)
    assert [t.metric_name for t in (sst, para, sts, cfimdb)] == ["acc", "acc", "pearson", "acc"]
    assert [t.is_pair for t in (sst, para, sts, cfimdb)] == [False, True, True, False]
    assert sst.files == {
        "train": "ids-sst-train.csv",
        "dev": "ids-sst-dev.csv",
        "test": "ids-sst-test-student.csv",
    }
    assert para.files["test"] == "quora-test-student.csv"
    assert sts.text_columns == ["sentence1", "sentence2"] and sts.label_column == "similarity"
    assert str(sst.path("dev", "somewhere")) == "somewhere/ids-sst-dev.csv"
    with pytest.raises(ValueError, match="has no 'valid' file"):
        sst.path("valid")


def test_adding_a_task_is_one_declaration():
    task = register(
        MultiClassTask(
            name="toy",
            description="a toy task",
            files={"train": "toy-train.csv"},
            text_columns=["sentence"],
            label_column="label",
            num_classes=3,
            prediction_header="Predicted_Toy",
        )
    )
    try:
        assert get_task("toy") is task and task.num_outputs == 3
        with pytest.raises(ValueError, match="already registered"):
            register(task)
    finally:
        del TASKS["toy"]


# -- labels ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "task_name, raw, value",
    [
        ("sst", "3", 3),
        ("sst", " 0 ", 0),
        ("sst", "4.0", 4),
        ("cfimdb", "1", 1),
        ("para", "1.0", 1),
        ("para", "0.0", 0),
        ("sts", "4.6", 4.6),
        ("sts", "0", 0.0),
        ("sts", "5.0", 5.0),
    ],
)
def test_parse_label_accepts(task_name, raw, value):
    parsed = get_task(task_name).parse_label(raw)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize(
    "task_name, raw, reason",
    [
        ("sst", "five", "not a number"),
        ("sst", "5", "class 5 is out of range 0..4"),
        ("sst", "-1", "out of range"),
        ("sst", "1.5", "not an integer class"),
        ("cfimdb", "2", "class 2 is out of range 0..1"),
        ("para", "0.5", "not an integer class"),
        ("para", "", "not a number"),
        ("sts", "5.01", "out of range 0..5"),
        ("sts", "-0.1", "out of range"),
        ("sts", "inf", "not a finite number"),
    ],
)
def test_parse_label_rejects(task_name, raw, reason):
    with pytest.raises(ValueError, match=reason):
        get_task(task_name).parse_label(raw)


def test_label_tensor_dtypes():
    assert get_task("sst").label_tensor([0, 4]).dtype == torch.long
    assert get_task("cfimdb").label_tensor([0, 1]).dtype == torch.long
    assert get_task("para").label_tensor([0, 1]).dtype == torch.float32
    assert get_task("sts").label_tensor([0.5, 4.0]).dtype == torch.float32


# -- losses and predictions --------------------------------------------------------------------


def test_multiclass_loss_and_predict():
    sst = get_task("sst")
    outputs = torch.tensor([[0.0, 1.0, 3.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0, 1.0]])
    labels = sst.label_tensor([2, 4])
    # Hand value: mean of −log softmax(o_b)[y_b].
    expected = -(torch.log_softmax(outputs[0], -1)[2] + torch.log_softmax(outputs[1], -1)[4]) / 2
    assert torch.allclose(sst.loss(outputs, labels), expected)
    assert sst.outputs_to_labels(outputs) == [2, 0]


def test_binary_loss_and_predict():
    para = get_task("para")
    outputs = torch.tensor([[2.0], [-1.0], [0.5]])
    labels = para.label_tensor([1, 1, 0])
    z, y = outputs[:, 0], labels
    expected = -(y * torch.log(torch.sigmoid(z)) + (1 - y) * torch.log(1 - torch.sigmoid(z))).mean()
    assert torch.allclose(para.loss(outputs, labels), expected)
    assert para.outputs_to_labels(outputs) == [1, 0, 1]
    assert para.outputs_to_labels(torch.tensor([[0.0]])) == [0]  # σ(0) = 0.5 is not > 0.5


def test_regression_loss_and_predict():
    sts = get_task("sts")
    outputs = torch.tensor([[1.0], [6.0], [-2.0]])
    labels = sts.label_tensor([2.0, 5.0, 0.0])
    assert torch.allclose(sts.loss(outputs, labels), torch.tensor((1.0 + 1.0 + 4.0) / 3))
    assert sts.outputs_to_labels(outputs) == [1.0, 5.0, 0.0]


def test_loss_checks_the_output_width():
    with pytest.raises(ValueError, match=r"expected outputs of shape \(B, 5\), got \(2, 3\)"):
        get_task("sst").loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))


def test_loss_is_differentiable_and_bf16_safe():
    sts = get_task("sts")
    outputs = torch.randn(4, 1, requires_grad=True)
    loss = sts.loss(outputs.bfloat16(), sts.label_tensor([1.0, 2.0, 3.0, 4.0]))
    assert loss.dtype == torch.float32
    loss.backward()
    assert outputs.grad is not None
    logits = torch.randn(4, 5)
    assert torch.allclose(
        get_task("sst").loss(logits, torch.tensor([0, 1, 2, 3])),
        F.cross_entropy(logits, torch.tensor([0, 1, 2, 3])),
    )


def test_task_metric_dispatch():
    assert get_task("sst").metric([1, 2, 3, 3], [1, 2, 3, 4]) == 0.75
    assert get_task("sts").metric([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 4.0]) == pytest.approx(0.8)


# -- prediction files --------------------------------------------------------------------------


def test_prediction_files_use_the_course_format(tmp_path):
    path = tmp_path / "out" / "sst-dev-output.csv"
    get_task("sst").write_predictions(path, ["a1", "b2"], [3, 0])
    assert path.read_text(encoding="utf-8") == "id \t Predicted_Sentiment \na1 , 3 \nb2 , 0 \n"

    get_task("para").write_predictions(tmp_path / "para.csv", ["x"], [torch.tensor(1)])
    assert (tmp_path / "para.csv").read_text() == "id \t Predicted_Is_Paraphrase \nx , 1 \n"

    get_task("sts").write_predictions(tmp_path / "sts.csv", ["y", "z"], [3.25, 0.1])
    expected = "id \t Predicted_Similiarity \ny , 3.25 \nz , 0.1 \n"
    assert (tmp_path / "sts.csv").read_text() == expected
    assert read_predictions(tmp_path / "sts.csv") == (
        "Predicted_Similiarity",
        [("y", "3.25"), ("z", "0.1")],
    )


def test_prediction_file_length_mismatch(tmp_path):
    with pytest.raises(ValueError, match="2 ids but 1 predictions"):
        get_task("sst").write_predictions(tmp_path / "x.csv", ["a", "b"], [1])


# -- metrics -----------------------------------------------------------------------------------


def test_accuracy():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    with pytest.raises(ValueError, match="3 predictions but 2 labels"):
        accuracy([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="at least 1"):
        accuracy([], [])


def test_pearson_hand_computed():
    # x = [1, 2, 3, 4], y = [1, 3, 2, 4]: centred x = [−1.5, −0.5, 0.5, 1.5],
    # centred y = [−1.5, 0.5, −0.5, 1.5]; Σxy = 2.25 − 0.25 − 0.25 + 2.25 = 4, Σx² = Σy² = 5,
    # r = 4 / √(5 · 5) = 0.8.
    assert pearson([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8, abs=1e-12)
    assert pearson([1, 2, 3], [6, 4, 2]) == pytest.approx(-1.0)
    assert pearson([0.0, 1.0], [10.0, 30.0]) == 1.0


def test_pearson_matches_numpy():
    g = torch.Generator().manual_seed(0)
    x = torch.rand(100, generator=g).tolist()
    y = torch.rand(100, generator=g).tolist()
    import numpy as np

    assert pearson(x, y) == pytest.approx(float(np.corrcoef(x, y)[0, 1]), abs=1e-12)


def test_pearson_constant_input_is_zero():
    assert pearson([2.5, 2.5, 2.5], [1.0, 2.0, 4.0]) == 0.0
    assert pearson([1.0, 2.0], [3.0, 3.0]) == 0.0


def test_pearson_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 2"):
        pearson([1.0], [1.0])
    with pytest.raises(ValueError, match="finite"):
        pearson([1.0, math.nan], [1.0, 2.0])


def test_overall_score_hand_example():
    # (0.5 + 0.8 + (0.6 + 1) / 2) / 3 = (0.5 + 0.8 + 0.8) / 3 = 0.7
    assert overall_score({"sst": 0.5, "para": 0.8, "sts": 0.6}) == pytest.approx(0.7)
    # A subset averages the present terms: (0.5 + 0.8) / 2.
    assert overall_score({"sst": 0.5, "sts": 0.6}) == pytest.approx(0.65)
    assert overall_score({"sts": -1.0}) == 0.0
    # Tasks outside the course score do not count.
    assert overall_score({"para": 0.9, "cfimdb": 0.1}) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="at least one of"):
        overall_score({"cfimdb": 0.9})


def test_symmetric_tasks_are_the_order_free_pair_tasks():
    assert {name for name, t in TASKS.items() if t.symmetric} == {"para", "sts"}
    with pytest.raises(ValueError, match="only a sentence-pair task can be symmetric"):
        MultiClassTask(
            name="x",
            description="",
            files={},
            text_columns=["sentence"],
            label_column="y",
            prediction_header="P",
            num_classes=2,
            symmetric=True,
        )


def test_swap_at_random_swaps_about_half_and_keeps_everything_else():
    examples = [Example(str(i), (f"a{i}", f"b{i}"), float(i % 2), i + 2) for i in range(2000)]
    torch.manual_seed(0)
    swapped = swap_at_random(examples)
    flipped = 0
    for before, after in zip(examples, swapped):
        assert (after.id, after.label, after.line) == (before.id, before.label, before.line)
        assert after.texts in (before.texts, before.texts[::-1])
        flipped += after.texts != before.texts
    # Binomial(2000, 1/2): standard deviation 22.4, so ±150 is more than 6 of them
    assert abs(flipped - 1000) < 150
    torch.manual_seed(0)
    assert swap_at_random(examples) == swapped  # the global seed fixes the draw


def test_cosine_head_starts_as_the_fixed_map_onto_0_to_5():
    """At initialisation ŷ = 2.5 · (cos + 1): orthogonal vectors → 2.5, same → 5, opposite → 0."""
    head = CosineSimilarityHead()
    u = torch.tensor([[1.0, 0.0], [2.0, 2.0], [1.0, 1.0], [3.0, 4.0]])
    v = torch.tensor([[0.0, 3.0], [1.0, 1.0], [-1.0, -1.0], [4.0, 3.0]])
    expected = torch.tensor([[2.5], [5.0], [0.0], [2.5 * (24 / 25 + 1)]])
    torch.testing.assert_close(head(u, v), expected)
    assert sorted(n for n, _ in head.named_parameters()) == ["scale", "shift"]


def test_cosine_head_calibrates_to_the_least_squares_line():
    """calibrate sets (a, b) = argmin Σ (a·cos + b − y)²: cos 0, 0.5, 1 with labels 1, 2.5, 3
    fit y = 2·cos + 7/6; a falling fit, or cosines that do not vary, leave the head as it was."""
    head = CosineSimilarityHead()
    assert head.calibrate(torch.tensor([0.0, 0.5, 1.0]), torch.tensor([1.0, 2.5, 3.0]))
    # slope = Σ(x − x̄)(y − ȳ) / Σ(x − x̄)² = (−0.5·(1 − 13/6) + 0.5·(3 − 13/6)) / 0.5 = 2
    assert head.scale.item() == pytest.approx(2.0) and head.shift.item() == pytest.approx(
        13 / 6 - 1
    )
    before = {n: p.clone() for n, p in head.named_parameters()}
    assert not head.calibrate(torch.tensor([0.0, 1.0]), torch.tensor([3.0, 1.0]))
    assert not head.calibrate(torch.tensor([0.4, 0.4]), torch.tensor([3.0, 1.0]))
    assert all(torch.equal(p, before[n]) for n, p in head.named_parameters())
