"""Teachers distilled into the multitask model (extras/distillation.py, BAM!): λ over the
steps, the mixed targets of each task kind on hand-made logits, λ = 1 as today's loss bit for
bit, the teacher outputs kept in the run folder and reused by a resume that equals the
uninterrupted run, and bad teacher folders refused before anything is written."""

from __future__ import annotations

import json
import math
import signal

import pytest
import torch
import torch.nn.functional as F

import train_multitask
from extras.distillation import CACHE, gold_weight
from minbert.checkpoint import load_tensors
from tasks import get_task
from tests.helpers import driver_argv, kill_when_resumable, run_driver, short_run

SHORT = short_run(2, 4)


def test_lambda_rises_from_0_at_the_first_step_to_1_at_the_last():
    assert gold_weight(1, 9, None) == 0.0
    assert gold_weight(5, 9, None) == 0.5
    assert gold_weight(9, 9, None) == 1.0
    assert gold_weight(1, 9, 0.25) == gold_weight(9, 9, 0.25) == 0.75  # constant mix: 1 − w
    assert gold_weight(1, 1, None) == 1.0


def test_mixed_targets_on_hand_made_logits():
    """λ = 0.25: each kind's loss against 0.25·gold + 0.75·teacher, computed by hand."""
    sst, para, sts = get_task("sst"), get_task("para"), get_task("sts")
    z = torch.tensor([[2.0, 0.0, 0.0, 0.0, 0.0]])  # the student's logits, one example
    t = torch.tensor([[0.0, math.log(3.0), 0.0, 0.0, 0.0]])  # teacher: softmax = (1,3,1,1,1)/7
    q = torch.tensor([[0.25 + 0.75 / 7, 0.75 * 3 / 7, 0.75 / 7, 0.75 / 7, 0.75 / 7]])  # gold 0
    log_p = z - math.log(math.exp(2.0) + 4.0)
    expected = -(q * log_p).sum()
    got = sst.taught_loss(z, torch.tensor([0]), t, 0.25)
    assert torch.allclose(got, expected, atol=1e-6)

    logit, teacher_logit = torch.tensor([[0.5]]), torch.tensor([[math.log(3.0)]])  # σ = 0.75
    target = 0.25 * 1.0 + 0.75 * 0.75
    p = 1 / (1 + math.exp(-0.5))
    expected = -(target * math.log(p) + (1 - target) * math.log(1 - p))
    got = para.taught_loss(logit, torch.tensor([1.0]), teacher_logit, 0.25)
    assert got.item() == pytest.approx(expected, abs=1e-6)

    got = sts.taught_loss(torch.tensor([[3.0]]), torch.tensor([4.0]), torch.tensor([[2.0]]), 0.25)
    assert got.item() == pytest.approx((3.0 - (0.25 * 4.0 + 0.75 * 2.0)) ** 2, abs=1e-6)


@pytest.mark.parametrize("name", ["sst", "para", "sts"])
def test_lambda_one_is_todays_loss_bit_for_bit(name):
    task = get_task(name)
    generator = torch.Generator().manual_seed(0)
    outputs = torch.randn(8, task.num_outputs, generator=generator)
    teacher = torch.randn(8, task.num_outputs, generator=generator)
    raw = [0, 4, 2, 1, 3, 0, 1, 2] if name == "sst" else [0, 1, 1, 0, 1, 0, 0, 1]
    labels = task.label_tensor([x * 1.25 for x in raw] if name == "sts" else raw)
    assert torch.equal(task.taught_loss(outputs, labels, teacher, 1.0), task.loss(outputs, labels))
    assert not torch.equal(
        task.taught_loss(outputs, labels, teacher, 0.5), task.loss(outputs, labels)
    )
    if name == "sst":  # the soft cross-entropy at λ = 1 is the hard one up to rounding
        onehot = F.one_hot(labels, 5).float()
        assert torch.allclose(F.cross_entropy(outputs, onehot), task.loss(outputs, labels))


@pytest.fixture(scope="module")
def teacher(tiny_checkpoint, tiny_data, tmp_path_factory):
    """A finished tiny run of SST alone, the teacher."""
    out = tmp_path_factory.mktemp("teacher") / "sst"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT, "--tasks", "sst") == 0
    return out


def test_teacher_outputs_are_kept_and_a_resume_equals_the_uninterrupted_run(
    tiny_checkpoint, tiny_data, tmp_path, teacher
):
    threads = str(torch.get_num_threads())
    extra = ["--no_plots", "--epochs", "3", "--steps_per_epoch", "10", "--save_every", "2"]
    extra += ["--eval_every", "5", "--teachers", f"sst={teacher}", "--threads", threads]
    reference = tmp_path / "reference"
    assert train_multitask.main(driver_argv(tiny_checkpoint, tiny_data, reference, *extra)) == 0
    cached = load_tensors(reference / CACHE)
    assert set(cached) == {"sst"} and cached["sst"].shape == (40, 5)  # every training example
    killed = tmp_path / "killed"
    code = kill_when_resumable(tiny_checkpoint, tiny_data, killed, *extra)
    assert code == -signal.SIGKILL, "the run finished before it could be killed"
    (teacher / "best.safetensors").rename(teacher / "moved")  # a resume must not need it
    try:
        resume = [*driver_argv(tiny_checkpoint, tiny_data, killed, "--no_plots"), "--resume"]
        assert train_multitask.main(resume) == 0
    finally:
        (teacher / "moved").rename(teacher / "best.safetensors")
    for name in ("metrics.jsonl", "train_log.jsonl", "sst-dev-output.csv"):
        assert (killed / name).read_text() == (reference / name).read_text(), name
    assert torch.equal(load_tensors(killed / CACHE)["sst"], cached["sst"])


def test_lambda_one_trains_as_a_run_without_teachers(tiny_checkpoint, tiny_data, tmp_path, teacher):
    """--teacher_weight 0 (λ = 1 at every step): the same run as no teacher, to the last bit."""
    plain, taught = tmp_path / "plain", tmp_path / "taught"
    assert run_driver(tiny_checkpoint, tiny_data, plain, *SHORT) == 0
    flags = ("--teachers", f"sst={teacher}", "--teacher_weight", "0")
    assert run_driver(tiny_checkpoint, tiny_data, taught, *SHORT, *flags) == 0
    assert (plain / "metrics.jsonl").read_text() == (taught / "metrics.jsonl").read_text()
    assert (plain / "train_log.jsonl").read_text() == (taught / "train_log.jsonl").read_text()


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "unfinished",
        "lacks-the-task",
        "other-max-length",
        "not-a-task-of-the-run",
        "weight-without-teachers",
        "both-modes",
    ],
)
def test_bad_teachers_are_refused_before_anything_is_written(
    tiny_checkpoint, tiny_data, tmp_path, teacher, capsys, case
):
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text((teacher / "config.json").read_text())
    config = json.loads((teacher / "config.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    for path in teacher.iterdir():
        (other / path.name).write_bytes(path.read_bytes())
    (other / "config.json").write_text(json.dumps(config | {"max_length": 16}))
    flags = {
        "missing": ["--teachers", f"sst={tmp_path / 'nothing'}"],
        "unfinished": ["--teachers", f"sst={unfinished}"],
        "lacks-the-task": ["--teachers", f"para={teacher}"],
        "other-max-length": ["--teachers", f"sst={other}"],
        "not-a-task-of-the-run": ["--tasks", "sts", "--teachers", f"sst={teacher}"],
        "weight-without-teachers": ["--teacher_weight", "0.5"],
        "both-modes": [
            "--teachers",
            f"sst={teacher}",
            "--teacher_annealing",
            "--teacher_weight",
            "0.5",
        ],
    }[case]
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *SHORT, *flags) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --teach"), err
    assert not out.exists()
