"""The span ablation of a trained adapter run (Houlsby et al. 2019, figure 6; repeated by the
adapter re-implementation study): switch the adapters off in every contiguous span of layers
[i, j] (every task, every position), evaluate each task on its dev set, and draw one heatmap per
task: row i, column j, colour = the task's dev metric with layers i..j unadapted. The unablated
score is the reference: it is in each panel's title and marked on its colour bar.

    python benchmarks/adapter_ablation.py RUN_DIR [--data_dir ../shared/data] [--threads 1]

RUN_DIR is a finished ``train_multitask.py --option adapter`` run; its model is rebuilt from its
config.json and best checkpoint as ``--evaluate`` does. Writes
benchmarks/results/adapter-ablation.{md,json} and adapter-ablation.png (``--results`` changes the
stem). With L layers there are L·(L + 1)/2 spans, each one evaluation of every dev set.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from _common import DATA_DIR, RESULTS_DIR, Report, add_threads_flag, set_threads, table
from tqdm import tqdm

import train_multitask
from minbert.tokenizer import Tokenizer
from multitask.evaluation import evaluate
from multitask.model import MultitaskModel
from multitask.run import RunFolder

NAMES = {"sst": "SST-5 accuracy", "para": "Quora accuracy", "sts": "STS-B Pearson r"}


def spans(layers: int) -> list[tuple[int, int]]:
    """Every contiguous span [i, j], 0 ≤ i ≤ j < layers."""
    return [(i, j) for i in range(layers) for j in range(i, layers)]


def load_run(run_dir: Path, data_dir: Path) -> tuple:
    """The run's config, its model with the best checkpoint, and its dev sets."""
    with tempfile.TemporaryDirectory() as scratch:
        argv = ["--evaluate", str(run_dir), "--data_dir", str(data_dir), "--out_dir", scratch]
        cfg = train_multitask.parse_args(argv)
    if cfg.model.option != "adapter" and "adapter" not in cfg.model.also:
        raise SystemExit(f"{run_dir}: trained with --option {cfg.model.option}, not adapters")
    model = train_multitask.make_model(cfg, torch.device("cpu"))
    RunFolder(str(run_dir)).load_best(model)
    data, _ = train_multitask.read_data(cfg)
    return cfg, model, {name: data[name]["dev"] for name in cfg.tasks}


def ablate(model: MultitaskModel, dev: dict, tokenizer, batch_size: int) -> dict:
    """{"none": metrics, "i-j": metrics for each span}: dev metrics with layers i..j unadapted."""
    adapter = model.bert.plugins["adapter"]
    layers = model.bert.config.num_hidden_layers
    device = torch.device("cpu")
    results = {"none": evaluate(model, dev, tokenizer, batch_size, device)}
    try:
        for i, j in tqdm(spans(layers), desc="spans", file=sys.stderr):
            adapter.switched_off = frozenset(range(i, j + 1))
            results[f"{i}-{j}"] = evaluate(model, dev, tokenizer, batch_size, device)
    finally:
        adapter.switched_off = frozenset()
    return results


def grid(results: dict, task: str, layers: int) -> list[list[float | None]]:
    """rows i, columns j: the task's metric with layers i..j off (None below the diagonal)."""
    return [
        [results[f"{i}-{j}"][task] if j >= i else None for j in range(layers)]
        for i in range(layers)
    ]


def plot(results: dict, tasks: list[str], layers: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, len(tasks), figsize=(4.6 * len(tasks), 4.2), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        values = np.array(
            [[np.nan if v is None else v for v in row] for row in grid(results, task, layers)]
        )
        unablated = results["none"][task]
        low, high = min(np.nanmin(values), unablated), max(np.nanmax(values), unablated)
        image = ax.imshow(values, cmap="viridis", origin="upper", vmin=low, vmax=high)
        bar = fig.colorbar(image, ax=ax, fraction=0.046)
        bar.ax.axhline(unablated, color="red", linewidth=2)  # the unablated score
        ax.set(
            title=f"{NAMES.get(task, task)}\nunablated {unablated:.3f} (red on the bar)",
            xlabel="last layer switched off, j",
            ylabel="first layer switched off, i",
            xticks=range(layers),
            yticks=range(layers),
        )
        for i in range(layers):
            for j in range(i, layers):
                ax.text(
                    j, i, f"{values[i, j]:.2f}", ha="center", va="center", fontsize=7, color="white"
                )
    fig.suptitle("Adapters switched off over layers i..j (dev)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument(
        "run_dir", type=Path, nargs="?", help="a finished train_multitask.py adapter run"
    )
    p.add_argument("--data_dir", type=Path, default=DATA_DIR, help="the course's data files")
    p.add_argument("--batch_size", type=int, default=64, help="evaluation batch size")
    p.add_argument(
        "--results", type=Path, default=RESULTS_DIR / "adapter-ablation", help="results stem"
    )
    p.add_argument(
        "--replot",
        action="store_true",
        help="only draw the PNG again from the results JSON of an earlier run (no evaluation)",
    )
    add_threads_flag(p)
    args = p.parse_args(argv)
    set_threads(args.threads)
    if args.replot:
        payload = json.loads(args.results.with_suffix(".json").read_text())
        metrics, tasks = payload["metrics"], payload["run_config"]["tasks"]
        layers = max(int(span.split("-")[1]) for span in metrics if span != "none") + 1
        plot(metrics, tasks, layers, args.results.with_suffix(".png"))
        return 0
    if args.run_dir is None:
        p.error("name the RUN_DIR to ablate (or --replot an earlier result)")
    cfg, model, dev = load_run(args.run_dir, args.data_dir)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, cfg.model.max_length)
    layers = model.bert.config.num_hidden_layers
    report = Report(
        "adapter_ablation",
        "Adapter span ablation",
        "Adapters of every task switched off over each span of layers [i, j] of a trained run; "
        "dev metric of each task (rows i, columns j). Houlsby et al. 2019, figure 6.",
    )
    results = ablate(model, dev, tokenizer, args.batch_size)
    run_config = json.loads((args.run_dir / "config.json").read_text())
    report.add(f"Run: `{args.run_dir}`; its config: `{json.dumps(run_config)}`")
    report.add("Unablated: " + ", ".join(f"{k} {v:.4f}" for k, v in results["none"].items()))
    for task in cfg.tasks:
        rows = [
            [f"i = {i}", *("" if v is None else f"{v:.4f}" for v in row)]
            for i, row in enumerate(grid(results, task, layers))
        ]
        header = [NAMES.get(task, task), *(f"j = {j}" for j in range(layers))]
        report.add(f"### {task}\n\n" + table(header, rows))
    args.results.parent.mkdir(parents=True, exist_ok=True)
    png = args.results.with_suffix(".png")
    plot(results, cfg.tasks, layers, png)
    report.add(f"Heatmap: [{png.name}]({png.name})")
    payload = {"run_dir": str(args.run_dir), "run_config": run_config, "metrics": results}
    args.results.with_suffix(".json").write_text(json.dumps(payload, indent=2) + "\n")
    report.write(args.results.with_suffix(".md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
