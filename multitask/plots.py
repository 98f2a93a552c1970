"""The learning curves of a run folder (multitask/run.py), drawn from its logs into
learning_curves.png: the training loss of each task and each dev metric against the step."""

from __future__ import annotations

from multitask.run import RunFolder


def plot_learning_curves(folder: RunFolder, tasks: list[str]) -> None:
    """learning_curves.png: training loss per task and each dev metric against the step."""
    if not folder.writes:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = folder.read_log("train_log.jsonl", ("task", "loss"))
    evals = folder.read_log("metrics.jsonl")
    fig, (ax_loss, ax_dev) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in tasks:
        points = [(r["step"], r["loss"]) for r in train if r["task"] == name]
        if points:
            ax_loss.plot(*zip(*points), label=name)
    ax_loss.set(
        xlabel="step", ylabel="training loss (mean since last point)", title="Training loss"
    )
    ax_loss.legend()
    for key in [*tasks, "overall"]:
        points = [(r["step"], r[key]) for r in evals if key in r]
        if points:
            ax_dev.plot(*zip(*points), marker="o", label=key)
    ax_dev.set(xlabel="step", ylabel="dev metric", title="Dev metrics (acc; Pearson r for sts)")
    ax_dev.legend()
    fig.tight_layout()
    fig.savefig(folder.file("learning_curves.png"), dpi=100)
    plt.close(fig)
