"""--compile: the step's forward and loss through torch.compile (extras/compiled.py) train as
the eager step does, compile once per task rather than once per padded length, and refuse the
options they do not support with one line. On the CPU (Inductor's default mode; CUDA graphs
need a GPU: tests/benchmarks/test_gpu_check.py and benchmarks/gpu_check.py run that path there)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch._inductor.config
from safetensors.torch import load_file

from extras.compiled import CompiledStep, compilations, mode_for
from minbert.tokenizer import Tokenizer
from multitask.collate import EncodedSplit
from multitask.model import ModelSettings, build_model
from multitask.step import TrainingStep
from tasks import get_task
from tests.helpers import run_driver


@pytest.fixture(autouse=True)
def fresh_dynamo():
    """Compilations are counted from zero, and no compiled graph outlives its test."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_one_graph_serves_every_padded_length(tiny_checkpoint, tiny_data):
    """Batches of four padded lengths and two sizes (a pass's short last batch) on one task:
    at most two compilations (the first shapes, then once with the batch size dynamic too;
    the length is dynamic from the start), and every loss as the eager step's within 1e-5
    (float32; the captured graph runs the same operations, aot_eager adds no fusion)."""
    settings = ModelSettings(option="finetune", checkpoint=str(tiny_checkpoint)).resolved()
    torch.manual_seed(0)
    model = build_model(settings, ["para"], dropout=0.0)
    task = get_task("para")
    tokenizer = Tokenizer.from_checkpoint(str(tiny_checkpoint), max_length=32)
    examples = task.read(tiny_data / task.files["train"])[0]
    split = EncodedSplit(task, examples, tokenizer, separate=False, pad_multiple=4)
    order = sorted(range(len(examples)), key=lambda i: split.lengths[i])
    batches = [order[i : i + 4] for i in range(0, len(order), 4)] + [order[:3]]
    eager, compiled = TrainingStep(model), CompiledStep(TrainingStep(model), "aot_eager")
    shapes = set()
    for indices in batches:
        batch = split.batch(indices)
        shapes.add(tuple(batch.inputs[0]["input_ids"].shape))
        torch.testing.assert_close(compiled(task, batch), eager(task, batch), rtol=0, atol=1e-5)
    assert len({T for _, T in shapes}) >= 4  # several padded lengths were seen
    assert 1 <= compilations() <= 2 < len(shapes)


def test_a_compiled_run_gives_the_eager_runs_dev_metrics(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """The driver with --compile (Inductor, default mode) against the same run eager, dropout 0
    (compiled code draws other random numbers): dev metrics within 1e-4 after 8 updates, since
    Inductor's fused kernels add in another order (float32 rounding, ~1e-7 a step) and a
    metric over 12 dev rows moves only if a prediction crosses a class boundary or the
    correlation moves by that much; the trained weights within 1e-5. At most two compilations
    per task, however many padded lengths the batches take."""
    if os.environ.get("ATEN_CPU_CAPABILITY") == "default":
        # On torch's plain kernels Inductor's vectorized C++ does not build (at::vec is not
        # declared there); scalar code (simdlen 1) tests the same graphs.
        monkeypatch.setattr(torch._inductor.config.cpp, "simdlen", 1)
    extra = ("--epochs", "2", "--steps_per_epoch", "4", "--dropout", "0", "--no_plots")
    extra += ("--pad_multiple", "8")
    runs = {}
    for name, flags in (("eager", ()), ("compiled", ("--compile",))):
        assert run_driver(tiny_checkpoint, tiny_data, tmp_path / name, *extra, *flags) == 0
        runs[name] = metrics(tmp_path / name)
    assert [m["step"] for m in runs["compiled"]] == [m["step"] for m in runs["eager"]] == [4, 8]
    for got, expected in zip(runs["compiled"], runs["eager"]):
        for key in ("sst", "para", "sts", "overall"):
            assert got[key] == pytest.approx(expected[key], abs=1e-4), key
    trained = {name: load_file(tmp_path / name / "best.safetensors") for name in runs}
    start = load_file(tiny_checkpoint / "model.safetensors")
    key = "encoder.layer.0.output.dense.weight"  # the updates reached the encoder
    assert (trained["eager"][f"bert.{key}"] - start[key]).abs().max() > 1e-4
    for name, tensor in trained["eager"].items():
        torch.testing.assert_close(trained["compiled"][name], tensor, rtol=0, atol=1e-5)
    summary = json.loads((tmp_path / "compiled" / "summary.json").read_text())
    assert 1 <= summary["compiled_graphs"] <= 2 * 3
    config = json.loads((tmp_path / "compiled" / "config.json").read_text())
    assert config["compile"] is True and config["pad_multiple"] == 8


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--compile", "--smart"), "--compile with --smart"),
        (("--compile", "--step_gradient", "summed"), "--compile with --step_gradient summed"),
        (("--compile", "--compile_mode", "reduce-overhead"), "CUDA graphs: it needs a GPU"),
        (("--compile_mode", "default"), "--compile_mode default goes with --compile"),
    ],
)
def test_unsupported_combinations_are_one_line(
    flags, message, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, "--device", "cpu", *flags) != 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], err
    assert not out.exists()  # refused before anything was written


def test_auto_is_cuda_graphs_on_a_gpu_only():
    assert mode_for("auto", torch.device("cuda")) == "reduce-overhead"
    assert mode_for("auto", torch.device("cpu")) == "default"
    assert mode_for("aot_eager", torch.device("cpu")) == "aot_eager"
