"""The suites of benchmarks/multitask_runs.py against the results they wrote: each row, resolved
by the driver's parser at HEAD with the pins its results file gives, trains with the settings
the file records (``settings``: the run's config.json, or for rows written before it was kept,
the recorded command resolved at its recorded commit by benchmarks/record_settings.py). A
default changed since a row ran, or a suite row edited, fails here until the suite pins the
old setting or ``python benchmarks/record_settings.py`` records the row's pins. The rows ran on
other machines: a run folder a command names (a teacher) is checked only where it is here."""

from __future__ import annotations

import pytest
import record_settings

import train_multitask

ROWS = list(record_settings.results_rows())
PARSE = record_settings.head_parser()


@pytest.mark.parametrize("path, name, row", ROWS, ids=[f"{p.stem}/{n}" for p, n, _ in ROWS])
def test_each_suite_row_with_its_pins_trains_what_its_results_record(path, name, row):
    if "settings" not in row:
        pytest.skip("the settings of this row could not be recovered (see the test below)")
    changed = record_settings.differences(row, PARSE)
    if changed is None:
        pytest.skip("no suite has this row any more")
    assert changed == {}, "setting: (at HEAD, recorded)"


def test_the_rows_without_settings_are_the_known_few():
    """Six GPU rows ran flags of a change not yet committed (--step_gradient), which the parser
    of their recorded commit does not take; every other row's settings are recorded."""
    missing = [f"{p.stem}/{n}" for p, n, row in ROWS if "settings" not in row]
    assert sorted(missing) == [
        f"gpu-transfer-levers/{row}-seed-{seed}"
        for row in ("all-tasks-summed", "pcgrad")
        for seed in (1, 2, 3)
    ]


def test_a_changed_default_is_found_and_pinned():
    """A row recorded with LHUC's LayerNorms frozen (the default before): at HEAD its suite row
    trains them, which the comparison finds; the pin --no-train_layernorms brings it back."""
    command = "python train_multitask.py --data_dir d --out_dir runs/plugins-lhuc --overwrite "
    row = {"command": command + "--option lhuc"}
    row["settings"] = record_settings.resolve(
        ["--option", "lhuc", "--no-train_layernorms"], train_multitask.parse_args
    )
    parse = train_multitask.parse_args
    assert record_settings.differences(row, parse, pins=[]) == {"train_layernorms": (True, False)}
    assert record_settings.differences(row, parse, pins=["--no-train_layernorms"]) == {}


def test_a_recorded_teacher_is_checked_only_where_it_is_here(tmp_path):
    """A teacher folder of another machine is left unchecked under ``elsewhere``; one that is
    here is checked as always, and without ``elsewhere`` an absent one is refused."""
    from multitask.errors import UsageError

    absent, unfinished = tmp_path / "absent", tmp_path / "unfinished"
    unfinished.mkdir()
    argv = ["--out_dir", str(tmp_path / "run"), "--teachers"]
    assert PARSE([*argv, f"sst={absent}"]).extras["distillation"].teachers == [f"sst={absent}"]
    with pytest.raises(UsageError, match="holds no finished run"):
        train_multitask.parse_args([*argv, f"sst={absent}"])
    with pytest.raises(UsageError, match="holds no finished run"):
        PARSE([*argv, f"sst={unfinished}"])
