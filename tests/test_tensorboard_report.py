"""--report_to tensorboard (multitask/tensorboard_report.py, a lab extra in one file): a tiny
run's event files hold the losses of train_log.jsonl, the metrics of metrics.jsonl and the
learning rate; without the tensorboard package the flag is refused before anything runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from multitask import tensorboard_report
from tests.helpers import run_driver, short_run

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the event files in ``folder`` (TensorBoard's scalars
    plug-in format, which its reader keeps as tensors)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
    }


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_the_events_hold_the_logged_losses_metrics_and_learning_rate(
    tiny_checkpoint, tiny_data, tmp_path
):
    out = tmp_path / "run"
    flags = ("--report_to", "tensorboard", "--eval_every", "2", "--log_every", "1")
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(1, 4), *flags) == 0
    found = scalars(out / "tensorboard")
    for row in jsonl(out / "train_log.jsonl"):
        assert (row["step"], pytest.approx(row["loss"])) in found[f"train/loss/{row['task']}"]
    metrics = jsonl(out / "metrics.jsonl")
    assert [step for step, _ in found["dev/overall"]] == [m["step"] for m in metrics]
    assert [v for _, v in found["dev/overall"]] == pytest.approx([m["overall"] for m in metrics])
    rates = [v for _, v in found["train/learning_rate"]]
    # the rate of the next step, after each: 5e-5 decaying linearly to 0 over 4 steps
    assert rates == pytest.approx([3.75e-5, 2.5e-5, 1.25e-5, 0.0])


def test_without_the_package_the_flag_is_refused_before_anything_runs(
    tiny_checkpoint, tiny_data, tmp_path, capsys, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        tensorboard_report.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, "--report_to", "tensorboard") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --report_to tensorboard needs the tensorboard package: pip install tensorboard"
    ]
    assert not out.exists()
