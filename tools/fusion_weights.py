"""Which stage-1 adapter each task of a finished AdapterFusion run reads from, per layer.

    python -m tools.fusion_weights runs/fusion-annealed [--limit 500] [--out weights.png]

For each task of the run, its model (as predict builds it) runs on the task's first ``--limit``
dev examples with ``AdapterFusion.record`` on; the mean softmax weight each fusion layer gives
each source adapter is printed, one line per layer and position, and drawn: one panel per task,
rows the layers and positions, columns the source adapters.

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch

from minbert.checkpoint import atomic_write
from minbert.flags import ArgumentParser
from minbert.pretrained import CheckpointError, resolve_checkpoint_dir
from multitask.config import parse_args
from multitask.data import load_data
from multitask.errors import UsageError, run_command
from multitask.evaluation import head_outputs
from multitask.trained import TrainedRun
from tasks import get_task
from tools.attention import check_output_folder


def fusion_weights(run_dir: str, limit: int) -> tuple[dict[str, torch.Tensor], list[str], tuple]:
    """Task -> (L, positions, N), the source tasks and the positions: the mean softmax weight
    each of its fusion layers gives each source adapter, over every position of the task's first
    ``limit`` dev examples (in the length-grouped batches of the run's evaluation, so few
    positions are padding)."""
    run, found = TrainedRun(run_dir), {}  # a missing or broken run is named as RUN_DIR
    if run.settings.option != "fusion":
        raise UsageError(f"RUN_DIR {run_dir}: a run of --option {run.settings.option}, not fusion")
    cfg = parse_args(["--out_dir", run_dir, "--resume"])
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
    if args.limit < 1:
        raise UsageError(f"--limit {args.limit}: give the number of dev examples, at least 1")
    out = output_path(args.out, args.overwrite, protected_folders(args.run))
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
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(out, lambda f: fig.savefig(f, format="png", dpi=150))
    finally:
        plt.close(fig)
    print(f"wrote {out}")


def protected_folders(run_dir: str) -> list[Path]:
    """The folders --out never writes into besides every run, export and checkpoint folder: the
    run looked at, its stage-1 run and its checkpoint, wherever they are."""
    folders = [Path(run_dir).resolve()]
    with contextlib.suppress(UsageError, CheckpointError, OSError, ValueError):
        settings = TrainedRun(run_dir).settings
        folders.append(resolve_checkpoint_dir(settings.checkpoint).resolve())
        if settings.adapters_from:
            folders.append(Path(settings.adapters_from).resolve())
    return folders


def output_path(out: str, overwrite: bool, protected: list[Path]) -> Path:
    """The PNG ``--out`` names, checked before anything is computed (see the module docstring):
    the path checked is the path written."""
    if out == "" or out.endswith(("/", os.sep)) or Path(out).is_dir():
        raise UsageError(
            f"--out {out!r} is a folder or empty; give a file name (e.g. --out "
            f"{Path(out or '.') / 'fusion-weights.png'})"
        )
    given = Path(out)
    if given.suffix.lower() not in ("", ".png"):
        raise UsageError(f"--out {out}: the figure is a PNG; give a name ending in .png")
    path = given if given.suffix else given.with_name(f"{given.name}.png")
    if path.is_dir():
        raise UsageError(f"--out {out}: {path} is a folder; give another file name")
    check_output_folder(out, path.parent, protected)
    if path.exists() and not overwrite:
        raise UsageError(f"--out {out}: {path} exists; pass --overwrite to replace it")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m tools.fusion_weights",
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
    parser.add_argument(
        "--out",
        default="fusion-weights.png",
        help="the figure, a PNG (.png is added to a name without one); never inside a run, "
        "export or checkpoint folder",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out (never a run's file)"
    )
    return run_command(lambda: draw(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
