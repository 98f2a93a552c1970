"""Which recipe beats each task trained alone? The sharing suite's recipes against the
distillation suite's single-task rows, per task: mean ± sd over the seeds run, and the gap to
"each task alone" in points (one point = 0.01 of accuracy or of Pearson's r).

    python benchmarks/sharing_table.py            # writes benchmarks/results/sharing-vs-alone.md

Reads benchmarks/results/distillation.json (``teacher-<task>-seed-<s>``: each task alone, the
default finetune recipe, 3 epochs), error-bars.json (the multitask ``finetune`` rows),
sharing.json (``multitask``, ``multitask-then-<task>[-gentle|-taught]``, ``<task>-alone``,
``mlm-multitask[-then-<task>]``, ``adapter`` and ``fusion``, each ``-seed-<s>``) and
sharing-fusion-1-epoch.json (fusion, one epoch). The target: on every task at least the alone
row's mean, and +0.5 points on two tasks.
"""

from __future__ import annotations

import json
import statistics
import sys

from _common import RESULTS_DIR
from multitask_runs import TAUGHT  # taught by their runs alone in the per-task stage

TASKS = {"sst": "SST acc", "para": "Quora acc", "sts": "STS r"}
SEEDS = (1, 2, 3)


def scores(results: dict, row: str, task: str) -> dict[int, float]:
    """Seed -> the task's best dev score in ``<row>-seed-<s>``, for every seed that was run."""
    return {
        s: results[f"{row}-seed-{s}"]["best"][task]
        for s in SEEDS
        if f"{row}-seed-{s}" in results and task in results[f"{row}-seed-{s}"]["best"]
    }


def better_of(results: dict, first: str, then: str, task: str) -> dict[int, float]:
    """Per seed, the better dev score of the first stage (``first``) and of the task's own run
    started from it (``then``): the task's run with its start evaluated as one more candidate
    (0 further epochs), chosen on dev as every row's best epoch is."""
    return {
        s: max(
            results[f"{first}-seed-{s}"]["best"][task], results[f"{then}-seed-{s}"]["best"][task]
        )
        for s in SEEDS
        if f"{first}-seed-{s}" in results and f"{then}-seed-{s}" in results
    }


def cell(values: dict[int, float], alone: dict[int, float]) -> str:
    """mean ± sd (seeds), and the gap to alone's mean in points."""
    if not values:
        return "-"
    mean = statistics.mean(values.values())
    spread = f" ± {statistics.stdev(values.values()):.4f}" if len(values) > 1 else ""
    gap = 100 * (mean - statistics.mean(alone.values()))
    return f"{mean:.4f}{spread} ({len(values)}; {gap:+.2f})"


def seed_cell(values: dict[int, float], alone: dict[int, float], seed: int) -> str:
    """One seed's score and its gap in points to alone of the same seed."""
    if seed not in values:
        return "-"
    return f"{values[seed]:.4f} ({100 * (values[seed] - alone[seed]):+.2f})"


def recipes() -> tuple[dict, list[tuple[str, dict]]]:
    """Each task alone (seed -> score, per task), and every recipe's name and scores."""
    names = ("distillation", "error-bars", "sharing", "sharing-fusion-1-epoch")
    read = {
        n: json.loads((RESULTS_DIR / f"{n}.json").read_text())
        for n in names
        if (RESULTS_DIR / f"{n}.json").exists()
    }
    alone = {t: scores(read["distillation"], f"teacher-{t}", t) for t in TASKS}
    return alone, [
        ("each task alone (distillation.json `teacher-<task>`)", {t: alone[t] for t in TASKS}),
        (
            "multitask `finetune` (error-bars.json)",
            {t: scores(read["error-bars"], "finetune", t) for t in TASKS},
        ),
        (
            "multitask `finetune` (sharing.json `multitask`)",
            {t: scores(read["sharing"], "multitask", t) for t in TASKS},
        ),
        (
            "multitask, then each task fine-tuned from it (`multitask-then-<task>`)",
            {t: scores(read["sharing"], f"multitask-then-{t}", t) for t in TASKS},
        ),
        (
            "the same, the multitask model kept where it is better on dev (0 further epochs)",
            {t: better_of(read["sharing"], "multitask", f"multitask-then-{t}", t) for t in TASKS},
        ),
        (
            "the same, one epoch at 2e-5 (`multitask-then-<task>-gentle`)",
            {t: scores(read["sharing"], f"multitask-then-{t}-gentle", t) for t in TASKS},
        ),
        (
            "the same, SST with layer-wise lr decay 0.8 (`multitask-then-sst-layer-decay`)",
            {t: scores(read["sharing"], f"multitask-then-{t}-layer-decay", t) for t in TASKS},
        ),
        (
            "each task alone again, the teachers of the next row (sharing.json `<task>-alone`)",
            {t: scores(read["sharing"], f"{t}-alone", t) for t in TASKS},
        ),
        (
            "multitask then each task, SST and Quora taught by their runs alone "
            "(`multitask-then-<task>-taught`; STS as above)",
            {
                t: scores(read["sharing"], f"multitask-then-{t}{'-taught' * (t in TAUGHT)}", t)
                for t in TASKS
            },
        ),
        (
            "multitask from the MLM-pretrained checkpoint (`mlm-multitask`)",
            {t: scores(read["sharing"], "mlm-multitask", t) for t in TASKS},
        ),
        (
            "MLM, multitask, then each task (`mlm-multitask-then-<task>`)",
            {t: scores(read["sharing"], f"mlm-multitask-then-{t}", t) for t in TASKS},
        ),
        (
            "`adapter`, stage 1 (sharing.json `adapter`)",
            {t: scores(read["sharing"], "adapter", t) for t in TASKS},
        ),
        (
            "AdapterFusion over the three adapters (`fusion`)",
            {t: scores(read["sharing"], "fusion", t) for t in TASKS},
        ),
        (
            "the same, one epoch (sharing-fusion-1-epoch.json `fusion`, `--epochs 1`)",
            {t: scores(read.get("sharing-fusion-1-epoch", {}), "fusion", t) for t in TASKS},
        ),
    ]


def table(alone: dict, rows: list[tuple[str, dict]]) -> list[str]:
    """Each recipe: mean ± sd over its seeds and the gap to alone's mean, per task."""
    lines = [
        "| recipe | " + " | ".join(TASKS.values()) + " |",
        "|---|" + "---|" * len(TASKS),
    ]
    for name, values in rows:
        lines.append(f"| {name} | " + " | ".join(cell(values[t], alone[t]) for t in TASKS) + " |")
    return lines


def seed_table(alone: dict, rows: list[tuple[str, dict]]) -> list[str]:
    """Each recipe run over more than one seed (alone and the duplicate multitask row aside),
    seed by seed: the score and the gap to alone of the same seed."""
    lines = [
        "| recipe | seed | " + " | ".join(TASKS.values()) + " |",
        "|---|---|" + "---|" * len(TASKS),
    ]
    for name, values in rows[2:]:
        seeds = sorted(set().union(*(values[t] for t in TASKS)))
        for seed in seeds if len(seeds) > 1 else ():
            cells = " | ".join(seed_cell(values[t], alone[t], seed) for t in TASKS)
            lines.append(f"| {name} | {seed} | {cells} |")
    return lines


def main() -> int:
    out = RESULTS_DIR / "sharing-vs-alone.md"
    alone, rows = recipes()
    text = [
        "# Which recipe beats each task trained alone?",
        "",
        "Written by `benchmarks/sharing_table.py` from the suites' results files, whose rows",
        "name their commands, commits and machines. Dev scores, 3 epochs unless the row says so,",
        'the default recipe of each row: mean ± sd (seeds run; gap to "each task alone" in',
        "points).",
        "",
        *table(alone, rows),
        "",
        "Seed by seed, each score with its gap in points to each task alone of the same seed:",
        "",
        *seed_table(alone, rows),
        "",
    ]
    out.write_text("\n".join(text))
    print("\n".join(text))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
