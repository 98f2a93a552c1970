"""The Markdown results file of a suite of benchmarks/multitask_runs.py, from its JSON rows.

A row is one run: its best evaluation, summary.json, parameters.json and the command, commit and
machine it ran with. Rows named ``<configuration>-seed-<s>`` are also shown as mean ± sample
standard deviation over their seeds; for the suites COMPARED names, the file lists the pairs of
configurations whose means differ by more than their two standard deviations added (the only
orderings it calls beyond the seed spread). Rows that record each task's steps per epoch
(summary.json's ``steps_per_task``) get a table of them with each task's share.
"""

from __future__ import annotations

import json
import re
import statistics

from _common import RESULTS_DIR

SEED_SUFFIX = re.compile(r"-seed-\d+$")
METRICS = ("sst", "para", "sts", "overall")


def metric_cells(best: dict) -> list[str]:
    """One run's best evaluation as the tables print it: each of METRICS to four decimals, "-"
    for a task the run did not train."""
    return [f"{best[k]:.4f}" if k in best else "-" for k in METRICS]


def seed_stats(results: dict) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Configuration name -> {metric: (mean, sample sd, seeds)} over its rows
    ``<name>-seed-<s>``; groups of one seed are left out."""
    groups: dict[str, list[dict]] = {}
    for name, r in results.items():
        if SEED_SUFFIX.search(name):
            groups.setdefault(SEED_SUFFIX.sub("", name), []).append(r["best"])
    return {
        name: {
            k: (
                statistics.mean(b[k] for b in bests),
                statistics.stdev(b[k] for b in bests),
                len(bests),
            )
            for k in METRICS
            if all(k in b for b in bests)
        }
        for name, bests in groups.items()
        if len(bests) > 1
    }


def seed_groups(results: dict) -> dict[str, dict[str, str]]:
    """Configuration name -> {metric: "mean ± sd (n = k)"}, seed_stats as the tables print it."""
    return {
        name: {k: f"{m:.4f} ± {sd:.4f} (n = {n})" for k, (m, sd, n) in cells.items()}
        for name, cells in seed_stats(results).items()
    }


def against_first(names: list[str]) -> list[tuple[str, str]]:
    """Each row one change from the first: compare every row with the first (seeded) row."""
    return [(names[0], name) for name in names[1:]]


def within_option(names: list[str]) -> list[tuple[str, str]]:
    """Rows ``<option>-<setting>``: compare every two settings of the same option."""
    return [
        (a, b)
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if a.split("-", 1)[0] == b.split("-", 1)[0]
    ]


# Which seeded configurations each suite's question compares, and those words for the file.
COMPARED = {
    "adapter-study": (against_first, "each row against the first"),
    "sampling-shared": (within_option, "every two samplers of the same option"),
}


def beyond_spread(stats: dict, pairs: list[tuple[str, str]]) -> list[str]:
    """The differences that hold beyond the seed spread: pairs whose means on a metric differ
    by more than the two standard deviations added, the higher named first."""
    lines = []
    for a, b in pairs:
        for k in METRICS:
            if k not in stats[a] or k not in stats[b]:
                continue
            (ma, sa, _), (mb, sb, _) = stats[a][k], stats[b][k]
            if abs(ma - mb) > sa + sb:
                (hi, mh, sh), (lo, ml, sl) = sorted([(a, ma, sa), (b, mb, sb)], key=lambda t: -t[1])
                lines.append(
                    f"- {k}: {hi} ahead of {lo}, {mh:.4f} ± {sh:.4f} against {ml:.4f} ± {sl:.4f}"
                )
    return lines


def spread_section(suite: str, results: dict) -> list[str]:
    """The suite's compared pairs (COMPARED) that differ beyond the seed spread, and the rest."""
    stats = seed_stats(results)
    if suite not in COMPARED or not stats:
        return []
    compare, which = COMPARED[suite]
    pairs = compare(list(stats))
    held = beyond_spread(stats, pairs)
    lines = [
        "Differences beyond the seed spread (means apart by more than the two standard "
        f"deviations added), comparing {which} ({len(pairs)} pairs, {len(METRICS)} measures); "
        "every other difference is inside it:",
        "",
    ]
    return [*lines, *(held or ["- none"]), ""]


def taught_against_alone(groups: dict[str, dict[str, str]]) -> list[str]:
    """The distillation suite's question in one table, task by task: each task alone (its
    teacher), the plain multitask model (error-bars.json's finetune seeds, the same recipe
    untaught) and each student, mean ± sd over seeds."""
    teachers = {t: groups.get(f"teacher-{t}", {}).get(t, "-") for t in METRICS[:3]}
    error_bars = RESULTS_DIR / "error-bars.json"
    plain = seed_groups(json.loads(error_bars.read_text())) if error_bars.exists() else {}
    rows = [("each task alone (its teacher)", teachers)]
    rows.append(("multitask, untaught (error-bars.md, finetune)", plain.get("finetune", {})))
    rows += [(name, cells) for name, cells in groups.items() if not name.startswith("teacher-")]
    lines = ["Task by task: alone, shared untaught, shared taught (mean ± sd over seeds):", ""]
    lines += ["| model | sst acc | para acc | sts r |", "|---|---|---|---|"]
    for name, cells in rows:
        lines.append(f"| {name} | " + " | ".join(cells.get(k, "-") for k in METRICS[:3]) + " |")
    return [*lines, ""]


def steps_table(results: dict) -> list[str]:
    """The steps each task trained in each epoch (summary.json's ``steps_per_task``, the sampler's
    drawn schedule), for the rows that record it, with each task's share of the epoch."""
    rows = {
        name: r["summary"]["steps_per_task"]
        for name, r in results.items()
        if "steps_per_task" in r["summary"]
    }
    if not rows:
        return []
    epochs = max(len(per_epoch) for per_epoch in rows.values())
    lines = ["Steps each task trained per epoch, and its share of the epoch's steps:", ""]
    lines += ["| run | " + " | ".join(f"epoch {e}" for e in range(1, epochs + 1)) + " |"]
    lines += ["|---|" + "---|" * epochs]
    for name, per_epoch in rows.items():
        cells = []
        for counts in per_epoch.values():
            total = sum(counts.values())
            cells.append(", ".join(f"{t} {n} ({n / total:.2f})" for t, n in counts.items()))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def markdown(suite: str, results: dict, order: list[str], name: str | None = None) -> str:
    """The results file ``name`` (default: the suite's own) of ``suite``: its rows in the
    suite's ``order`` (whatever ran first), mean ± sd over seeds, the differences beyond the seed
    spread, each task's steps per epoch and every run's command, commit and machine."""

    def place(name: str) -> tuple[int, str]:  # a seeded row by its configuration, then seed
        base = SEED_SUFFIX.sub("", name)
        return (order.index(base) if base in order else len(order), name)

    results = dict(sorted(results.items(), key=lambda kv: place(kv[0])))
    title = suite if name in (None, suite) else f"{name} (the {suite} suite)"
    lines = [
        f"# Results: {title}",
        "",
        "Written by `benchmarks/multitask_runs.py` from real runs; do not edit by hand. "
        "Dev metrics are of the best evaluation (by overall score). The Quora dev file here is "
        "a fixed split of the course's Quora dev file (see data/README.md), so para "
        "accuracy is not comparable one-to-one with published Quora dev figures.",
        "",
        "| run | sst acc | para acc | sts r | overall | trainable in all | "
        "trainable / task (with head) | "
        "checkpoint / task | wall-clock s | train ex/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        b, s = r["best"], r["summary"]
        per_task = r["parameters"].get("tasks", {})
        trainable = (
            ", ".join(
                f"{t} {v['trainable_with_head']:,}"
                for t, v in per_task.items()
                if isinstance(v, dict) and "trainable_with_head" in v
            )
            or "-"
        )
        total = r["parameters"]["trainable"]  # "-" for a row with no task model (pretraining)
        cells, total = metric_cells(b), f"{total:,}" if isinstance(total, int) else total
        sizes = ", ".join(
            f"{k[len('task-') : -len('.safetensors')]} {v / 1024:.0f} KiB"
            for k, v in sorted(r["task_checkpoint_bytes"].items())
        )
        lines.append(
            f"| {name} | {' | '.join(cells)} | {total} | {trainable} | "
            f"{sizes or '-'} | "
            f"{s['wall_clock_s']} | {s['train_examples_per_s']} |"
        )
    lines.append("")
    if groups := seed_groups(results):
        lines += ["Mean ± standard deviation over seeds (of each run's best evaluation):", ""]
        lines += [
            "| configuration | sst acc | para acc | sts r | overall |",
            "|---|---|---|---|---|",
        ]
        for name, cells in groups.items():
            lines.append(f"| {name} | " + " | ".join(cells.get(k, "-") for k in METRICS) + " |")
        lines.append("")
    lines += spread_section(suite, results)
    lines += steps_table(results)
    if suite == "distillation" and groups:
        lines += taught_against_alone(groups)
    for name, r in results.items():
        base = results.get(name.removesuffix("-smart"))
        if name.endswith("-smart") and base is not None:
            ratio = base["summary"]["train_examples_per_s"] / r["summary"]["train_examples_per_s"]
            lines.append(f"- step time {name} / {name.removesuffix('-smart')}: {ratio:.2f}x")
    lines.append("")
    for name, r in results.items():
        lines += [
            f"- **{name}**: `{r['command']}`",
            f"  commit `{r['commit']}`, {r['machine']}, {r['date']}",
        ]
        if r.get("pins"):  # benchmarks/record_settings.py: defaults changed since this run
            lines.append(
                f"  to train the same at HEAD, the suite row also needs `{' '.join(r['pins'])}`"
            )
    return "\n".join(lines) + "\n"
