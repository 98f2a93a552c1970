"""benchmarks/adapter_ablation.py on a tiny adapter run: with nothing switched off it gives the
run's own dev scores; every span is evaluated; switching every layer off gives the model without
adapters (same weights otherwise)."""

from __future__ import annotations

import json

import adapter_ablation
import pytest
import torch

from minbert.tokenizer import Tokenizer
from multitask.evaluation import evaluate
from tests.helpers import run_driver


def test_span_ablation_on_a_tiny_run(tiny_checkpoint, tiny_data, tmp_path):
    run = tmp_path / "run"
    flags = ("--option", "adapter", "--epochs", "1", "--steps_per_epoch", "4", "--lr", "1e-2")
    assert run_driver(tiny_checkpoint, tiny_data, run, *flags, "--no_plots") == 0
    best = max(
        (json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()),
        key=lambda m: m["overall"],
    )
    stem = tmp_path / "results" / "ablation"
    argv = [str(run), "--data_dir", str(tiny_data), "--results", str(stem), "--batch_size", "8"]
    assert adapter_ablation.main(argv) == 0

    metrics = json.loads(stem.with_suffix(".json").read_text())["metrics"]
    unablated = metrics.pop("none")
    for task in ("sst", "para", "sts", "overall"):
        assert unablated[task] == pytest.approx(best[task], abs=1e-6)
    layers = 2  # the tiny checkpoint's
    assert sorted(metrics) == ["0-0", "0-1", "1-1"]
    assert stem.with_suffix(".png").stat().st_size > 0
    assert "| i = 0 |" in stem.with_suffix(".md").read_text()

    # Every layer off is the model without adapters: its adapters' outputs are skipped.
    cfg, model, dev = adapter_ablation.load_run(run, tiny_data)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, cfg.model.max_length)
    for adapters in model.bert.plugins["adapter"].by_task.values():
        for position in adapters.values():
            for bottleneck in position:
                bottleneck.up.weight.data.zero_()
                bottleneck.up.bias.data.zero_()
    without = evaluate(model, dev, tokenizer, 8, torch.device("cpu"))
    assert metrics[f"0-{layers - 1}"] == pytest.approx(without, abs=1e-6)
