"""Which stage-1 adapter each task of a finished AdapterFusion run reads from, per layer.

    python -m multitask.fusion_weights runs/fusion-annealed [--limit 500] [--out weights.png]

For each task of the run, its model (as predict builds it) runs on the task's first ``--limit``
dev examples with ``AdapterFusion.record`` on; the mean softmax weight each fusion layer gives
each source adapter is printed, one line per layer and position, and drawn: one panel per task,
rows the layers and positions, columns the source adapters (``--out``, a PNG, replaced only with
``--overwrite``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

from multitask.config import parse_args
from multitask.data import load_data
from multitask.errors import UsageError, run_command
from multitask.evaluation import head_outputs
from multitask.trained import TrainedRun
from tasks import get_task


def fusion_weights(run_dir: str, limit: int) -> tuple[dict[str, torch.Tensor], list[str], tuple]:
    """Task -> (L, positions, N), the source tasks and the positions: the mean softmax weight
    each of its fusion layers gives each source adapter, over every position of the task's first
    ``limit`` dev examples (in the length-grouped batches of the run's evaluation, so few
    positions are padding)."""
    cfg = parse_args(["--out_dir", run_dir, "--resume"])
    if cfg.model.option != "fusion":
        raise UsageError(f"{run_dir}: a run of --option {cfg.model.option}, not fusion")
    run, found = TrainedRun(run_dir), {}
    data, _ = load_data(run.tasks, cfg.data_path, strict=False, limit=limit)
    for name in run.tasks:
        model = run.task_model(name)
        plugin = model.bert.plugins["fusion"]
        plugin.record = {}
        task, cpu = get_task(name), torch.device("cpu")
        head_outputs(model, task, data[name]["dev"], run.tokenizer(), cfg.eval_batch_size, cpu)
        means = [
            [
                total / count
                for total, count in (plugin.record[(name, l, p)] for p in plugin.positions)
            ]
            for l in range(plugin.layers)
        ]
        found[name] = torch.stack([torch.stack(row) for row in means])
    return found, plugin.sources.tasks, plugin.positions


def draw(args: argparse.Namespace) -> None:
    """Print each task's weights per layer and position, and draw them (one panel per task:
    rows the layers and positions, columns the source adapters)."""
    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise UsageError(f"--out {out}: the file exists; pass --overwrite to replace it")
    weights, sources, positions = fusion_weights(args.run, args.limit)
    layers = len(next(iter(weights.values())))
    rows = [f"layer {layer} {p}" for layer in range(layers) for p in positions]
    for task, w in weights.items():
        print(f"{task}: mean weight on the adapters of {', '.join(sources)}")
        for label, values in zip(rows, w.flatten(0, 1).tolist()):
            print(f"  {label:<24}" + "".join(f"{v:8.3f}" for v in values))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1,
        len(weights),
        figsize=(2.6 * len(weights) + 1.5, 0.35 * len(rows) + 1.8),
        squeeze=False,
        layout="constrained",
    )
    for ax, (task, w) in zip(axes[0], weights.items()):
        image = ax.imshow(w.flatten(0, 1).numpy(), vmin=0.0, vmax=1.0, cmap="viridis")
        ax.set_title(f"task {task}", fontsize=9)
        ax.set_xticks(range(len(sources)), sources, fontsize=8)
        ax.set_yticks(range(len(rows)), rows if ax is axes[0][0] else [], fontsize=7)
    fig.colorbar(image, ax=axes[0].tolist(), label="mean softmax weight")
    fig.suptitle(f"{args.run}: which adapter each task's fusion reads from", fontsize=9)
    fig.savefig(out, dpi=150)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m multitask.fusion_weights",
        description=(
            "Which stage-1 adapter each task of a finished --option fusion run reads from: the "
            "mean softmax weight of each fusion layer on each source adapter, over the task's dev "
            "examples, printed and drawn"
        ),
    )
    parser.add_argument("run", metavar="RUN_DIR", help="a finished --option fusion run")
    parser.add_argument(
        "--limit", type=int, default=500, help="dev examples per task (default: %(default)s)"
    )
    parser.add_argument("--out", default="fusion-weights.png", help="the figure (PNG)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    return run_command(lambda: draw(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
