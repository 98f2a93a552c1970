"""The results writers: benchmarks/suite_results.py's seed aggregation on hand-computed rows, and
the header every benchmark's results file starts with."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import _common
import multitask_runs
import parameter_table
import sharing_table
import suite_results


def row(sst: float, overall: float) -> dict:
    return {"best": {"sst": sst, "overall": overall}}


def test_seed_groups_mean_and_sample_standard_deviation():
    results = {
        "adapter-seed-1": row(0.40, 0.70),
        "adapter-seed-2": row(0.50, 0.72),
        "adapter-seed-3": row(0.60, 0.74),
        "finetune": row(0.45, 0.71),  # no seed suffix: not aggregated
        "lora-seed-1": row(0.30, 0.60),  # one seed: nothing to aggregate
    }
    groups = suite_results.seed_groups(results)
    assert list(groups) == ["adapter"]
    # mean 0.5; sample sd √(((−0.1)² + 0² + 0.1²) / 2) = 0.1; overall: 0.72 ± 0.02
    assert groups["adapter"] == {
        "sst": "0.5000 ± 0.1000 (n = 3)",
        "overall": "0.7200 ± 0.0200 (n = 3)",
    }
    text = suite_results.markdown(
        "adapter-study",
        {
            name: {
                **r,
                "parameters": {"trainable": 1},
                "summary": {"wall_clock_s": 1, "train_examples_per_s": 1},
                "task_checkpoint_bytes": {},
                "command": "c",
                "commit": "x",
                "machine": "m",
                "date": "d",
            }
            for name, r in results.items()
        },
        ["adapter"],
    )
    assert "| adapter | 0.5000 ± 0.1000 (n = 3) | - | - | 0.7200 ± 0.0200 (n = 3) |" in text


def test_a_stem_with_a_dot_keeps_its_whole_name(tmp_path):
    """``--results DIR/layer-decay-0.8-1`` reads and writes layer-decay-0.8-1.json and .md, not
    layer-decay-0.json (which three seeds once shared, losing two rows)."""
    stem = tmp_path / "layer-decay-0.8-1"
    (tmp_path / "layer-decay-0.8-1.json").write_text("{}")
    assert multitask_runs.main(["transfer-levers", "--render", "--results", str(stem)]) == 0
    assert (tmp_path / "layer-decay-0.8-1.md").is_file()
    assert not (tmp_path / "layer-decay-0.md").exists()


def test_a_labelled_results_file_names_the_script_that_wrote_it(tmp_path, monkeypatch):
    """``host_overhead.py --label before`` writes host-overhead-before.md, whose header names
    benchmarks/host_overhead.py (it once named a script host-overhead-before.py that does not
    exist) and the command as typed."""
    script = Path(_common.ROOT) / "benchmarks" / "host_overhead.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--label", "before"])
    report = _common.Report("host-overhead-before", "Title", "Intro.")
    text = report.write(tmp_path / "host-overhead-before.md").read_text()
    assert "Written by `benchmarks/host_overhead.py`;" in text
    assert "- Command: `python benchmarks/host_overhead.py --label before`" in text


def test_every_committed_results_file_names_a_script_that_exists():
    """A results file's "Written by" line is how a reader reruns it: each must name a file in
    the repository."""
    missing = []
    for md in sorted(_common.RESULTS_DIR.glob("*.md")):
        written_by = re.search(r"Written by `([^`]+)`", md.read_text())
        if written_by is None or not (_common.ROOT / written_by[1]).is_file():
            missing.append(md.name)
    assert missing == []


def test_beyond_spread_names_only_differences_larger_than_both_spreads_added():
    # sst: a 0.50 ± 0.01 (seeds 0.49, 0.50, 0.51), b 0.40 ± 0.01: apart by 0.10 > 0.02 -> held.
    # overall: a 0.70 ± 0.10 (0.6, 0.7, 0.8), b 0.65 ± 0.01: apart by 0.05 < 0.11 -> inside.
    results = {
        f"{name}-seed-{i}": row(sst, overall)
        for name, ssts, overalls in (
            ("finetune-annealed", (0.49, 0.50, 0.51), (0.6, 0.7, 0.8)),
            ("finetune-round-robin", (0.39, 0.40, 0.41), (0.64, 0.65, 0.66)),
            ("pals-annealed", (0.10, 0.10, 0.10), (0.10, 0.10, 0.10)),
        )
        for i, (sst, overall) in enumerate(zip(ssts, overalls), 1)
    }
    stats = suite_results.seed_stats(results)
    pairs = suite_results.within_option(list(stats))
    assert pairs == [("finetune-annealed", "finetune-round-robin")]  # pals is another option
    assert suite_results.beyond_spread(stats, pairs) == [
        "- sst: finetune-annealed ahead of finetune-round-robin, "
        "0.5000 ± 0.0100 against 0.4000 ± 0.0100"
    ]
    assert suite_results.against_first(["a", "b", "c"]) == [("a", "b"), ("a", "c")]


def test_steps_table_gives_each_tasks_steps_and_share_per_epoch():
    counts = {"1": {"sst": 1, "para": 2, "sts": 1}, "2": {"sst": 0, "para": 4, "sts": 0}}
    results = {
        "proportional": {"summary": {"steps_per_task": counts}},
        "older-row": {"summary": {}},  # written before runs recorded it: left out
    }
    assert suite_results.steps_table(results)[2:] == [
        "| run | epoch 1 | epoch 2 |",
        "|---|---|---|",
        "| proportional | sst 1 (0.25), para 2 (0.50), sts 1 (0.25) | "
        "sst 0 (0.00), para 4 (1.00), sts 0 (0.00) |",
        "",
    ]


def test_the_parameter_table_scores_a_variant_over_its_seeds_not_its_default_run():
    """parameter_table.md shows each adapter-study row as adapter-study.md does: mean ± sd over
    the ``-seed-<s>`` rows, leaving out the first run at the default seed (once it was averaged
    in as a fourth seed)."""
    results = {
        "a": row(0.90, 0.90),  # the default seed's run
        "a-seed-1": row(0.40, 0.60),
        "a-seed-2": row(0.60, 0.80),
        "b": row(0.45, 0.71),
    }
    # mean 0.5, sample sd √((0.1² + 0.1²) / 1) = 0.1414; overall 0.7 ± 0.1414
    assert parameter_table.scores(results, "a") == [
        "0.5000 ± 0.1414 (n = 2)",
        "-",
        "-",
        "0.7000 ± 0.1414 (n = 2)",
    ]
    assert parameter_table.scores(results, "b") == ["0.4500", "-", "-", "0.7100"]
    assert parameter_table.scores(results, "c") == ["not run"] * 4


def test_the_better_of_a_first_stage_and_the_run_from_it_is_taken_per_seed():
    """The multitask model kept where its task's own run does not beat it on dev: per seed the
    larger of the two; a seed without both rows is left out."""
    results = {
        "multitask-seed-1": row(0.49, 0.0),
        "multitask-then-sst-seed-1": row(0.48, 0.0),  # the run from it is worse: 0.49 kept
        "multitask-seed-2": row(0.47, 0.0),
        "multitask-then-sst-seed-2": row(0.50, 0.0),
        "multitask-seed-3": row(0.45, 0.0),  # no run from it
    }
    better = sharing_table.better_of(results, "multitask", "multitask-then-sst", "sst")
    assert better == {1: 0.49, 2: 0.50}


def test_a_seed_is_compared_with_alone_of_the_same_seed():
    """The seed-by-seed cell: the score and its gap in points to alone's score of that seed
    (not alone's mean); a seed the recipe did not run is "-"."""
    recipe, alone = {1: 0.49, 2: 0.50}, {1: 0.48, 2: 0.51, 3: 0.40}
    assert sharing_table.seed_cell(recipe, alone, 1) == "0.4900 (+1.00)"
    assert sharing_table.seed_cell(recipe, alone, 2) == "0.5000 (-1.00)"
    assert sharing_table.seed_cell(recipe, alone, 3) == "-"
