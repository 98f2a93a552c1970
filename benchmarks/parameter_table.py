"""Each variant's trainable parameters beside its scores, as Table 1 of Houlsby et al. 2019
("Parameter-Efficient Transfer Learning for NLP") puts them: counted from the code, at BERT-base's
shape (12 layers of 768; built on the meta device, no weights) and on this project's checkpoint,
for every row of the adapter study (benchmarks/multitask_runs.py adapter-study), with the
study's dev scores beside them, and for each --option at its defaults. The scores are mean ± sd
over seeds where a row has them: every measure at 450 steps per epoch, where the rows separate
beyond their seed spread (benchmarks/results/adapter-study-450-steps.json), and overall at the
study's first budget of 150 (adapter-study.json).

"Per task" counts what one task adds and trains: its plug-in parameters and its head (what a
task's checkpoint stores); "shared" counts trainable parameters that belong to no task (the
encoder under finetune, per-task LayerNorms count as the task's). No training runs.

    python benchmarks/parameter_table.py
"""

from __future__ import annotations

import argparse
import json
import sys

import _common
import multitask_runs
import suite_results
import torch

from minbert.bert import BertConfig, BertModel
from minbert.plugins.report import parameter_report
from multitask.model import build_model

TASKS = ["sst", "para", "sts"]
OPTIONS = ["finetune", "pretrain", "adapter", "pals", "lhuc", "lora"]


def counts(flags: list[str], base_shape: bool) -> dict:
    """parameter_report of the model the driver builds for ``flags``: at BERT-base's shape on
    the meta device, or on the configured checkpoint."""
    cfg = _common.driver_args("finetune", flags)
    if not base_shape:
        model = build_model(cfg.model, cfg.tasks, cfg.dropout, cfg.base_tasks)
    else:
        with torch.device("meta"):
            encoder = BertModel(BertConfig())
            model = build_model(cfg.model, cfg.tasks, cfg.dropout, cfg.base_tasks, encoder)
    return parameter_report(model.bert, dict(model.heads))


def per_task(report: dict) -> str:
    """Each task's trainable parameters with its head, and the share of the base they are."""
    tasks = report["tasks"]
    shown = [f"{t} {tasks[t]['trainable_with_head']:,}" for t in TASKS if t in tasks]
    share = max(tasks[t]["fraction_of_base_with_head"] for t in tasks)
    return f"{', '.join(shown)} (≤ {share:.2%})"


def scores(results: dict, name: str) -> list[str]:
    """The dev metrics of ``name`` in one budget's study ``results``, as its Markdown file gives
    them: mean ± sd over its seeds where it has them (its first run, at the default seed, is not
    one of them), else that one run."""
    groups = suite_results.seed_groups(results)
    if name in groups:
        return [groups[name].get(m, "-") for m in suite_results.METRICS]
    if name in results:
        return suite_results.metric_cells(results[name]["best"])
    return ["not run"] * len(suite_results.METRICS)


def row(name: str, flags: list[str]) -> list[str]:
    base, here = counts(flags, base_shape=True), counts(flags, base_shape=False)
    return [
        name,
        per_task(base),
        f"{base['shared_trainable']:,}",
        per_task(here),
        f"{here['shared_trainable']:,}",
    ]


def main() -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0]).parse_args()  # only --help
    report = _common.Report(
        "parameter_table",
        "Trainable parameters beside the scores (Houlsby et al. 2019, Table 1)",
        __doc__.split("\n\n")[1],
    )
    header = ["variant", "per task at BERT-base", "shared", "per task here", "shared here"]
    at_450 = json.loads((_common.RESULTS_DIR / "adapter-study-450-steps.json").read_text())
    at_150 = json.loads((_common.RESULTS_DIR / "adapter-study.json").read_text())
    metrics = [f"{m} (dev, 450 steps per epoch)" for m in suite_results.METRICS]
    metrics.append("overall (dev, 150 steps per epoch)")
    overall = suite_results.METRICS.index("overall")
    rows = [
        row(name, flags) + scores(at_450, name) + [scores(at_150, name)[overall]]
        for name, flags in multitask_runs.SUITES["adapter-study"]
    ]
    report.add("## The adapter study\n\n" + _common.table(header + metrics, rows))
    options = [row(option, ["--option", option]) for option in OPTIONS]
    report.add("## Each option at its defaults\n\n" + _common.table(header, options))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
