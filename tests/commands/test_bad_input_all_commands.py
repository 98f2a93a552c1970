"""What every command does with a real fault of the machine, in real processes and file
systems: a read-only folder (without root's permission bypass), a full tmpfs, a run folder
removed mid-run. And the tables together (tests/commands/test_bad_input_<command>.py): each case
id in exactly one table, and docs/guarantees.md counting them."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
import sys

import pytest

import multitask.run
import pretrain_mlm
import tools.export
import tools.predict
import train_multitask
from tests.commands.bad_input import (
    ROOT,
    case_ids,
    mlm_argv,
    one_error_line,
)
from tests.helpers import driver_argv

RUNS = ("run",)
TABLES = (
    "attention",
    "course",
    "export",
    "fusion_weights",
    "gradescope",
    "predict",
    "pretrain_mlm",
    "sanity_check",
    "scaffold",
    "suite_runner",
    "train_multitask",
)


READ_ONLY_SCRIPT = """
import contextlib, io, json, sys
import tools.export, tools.predict, pretrain_mlm, train_multitask
from tests.commands.bad_input import mlm_argv
run, ckpt, data, ro, text = sys.argv[1:6]
driver = ["--checkpoint", ckpt, "--data_dir", data, "--batch_size", "4", "--max_length", "32"]
calls = {
    "predict": (tools.predict.main, [run, "--task", "sst", "--input", text, "--output",
                                         ro + "/o.txt"]),
    "export": (tools.export.main, [run, ro + "/exported"]),
    "mlm": (pretrain_mlm.main, mlm_argv(ckpt, data, ro + "/mlm")),
    "evaluate": (train_multitask.main, [*driver, "--evaluate", run, "--out_dir", ro + "/ev"]),
    "driver": (train_multitask.main, [*driver, "--epochs", "1", "--steps_per_epoch", "2",
                                      "--out_dir", ro + "/new"]),
}
found = {}
for name, (main, argv) in calls.items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(argv)
    found[name] = [code, err.getvalue()]
print(json.dumps(found))
"""


def test_a_read_only_folder_is_one_line_for_every_command(
    made, tiny_checkpoint, tiny_data, tmp_path
):
    """Root's permission bypass dropped (setpriv), every command that writes into a read-only
    folder ends in one line naming what it could not write, exit 1, and the folder stays empty."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    ro = tmp_path / "ro"
    ro.mkdir()
    text = tmp_path / "in.txt"
    text.write_text("a good film\n")
    ro.chmod(0o555)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable]
    command += ["-c", READ_ONLY_SCRIPT, str(made["run"]), str(tiny_checkpoint), str(tiny_data)]
    command += [str(ro), str(text)]
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        ro.chmod(0o755)
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    assert done.returncode == 0, done.stderr
    for name, (code, err) in json.loads(done.stdout.splitlines()[-1]).items():
        line = one_error_line(err)
        assert code == 1 and str(ro) in line and "Permission denied" in line, (name, err)
    assert list(ro.iterdir()) == []


@pytest.fixture
def small_disk(tmp_path):
    """A 512 KiB tmpfs (skipped where mount is not allowed), unmounted afterwards."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(disk)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_a_full_disk_is_one_line_and_leaves_nothing_half_written(
    made, tiny_checkpoint, tiny_data, small_disk, tmp_path, capsys
):
    """A real full file system: export (a 4 MB encoder), pretrain_mlm.py (last.pt) and predict
    (into a disk already full) end in one line, exit 1, with no temporary file left."""
    assert tools.export.main([str(made["run"]), str(small_disk / "exported")]) == 1
    assert "exported" in one_error_line(capsys.readouterr().err)
    assert list(small_disk.iterdir()) == []
    assert pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, small_disk / "mlm")) == 1
    assert "last.pt" in one_error_line(capsys.readouterr().err)
    assert not [p for p in (small_disk / "mlm").iterdir() if p.name.endswith(".tmp")]
    filler = small_disk / "filler"
    with open(filler, "wb") as f, pytest.raises(OSError):
        f.write(b"\0" * 1024 * 1024)
    text = tmp_path / "in.txt"
    text.write_text("a good film\n" * 20)
    argv = [str(made["run"]), "--task", "sst", "--input", str(text)]
    assert tools.predict.main([*argv, "--output", str(small_disk / "o.txt")]) == 1
    assert "o.txt" in one_error_line(capsys.readouterr().err)
    assert not (small_disk / "o.txt").exists()
    assert not [p for p in small_disk.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize("command", ["driver", "mlm"])
def test_a_run_folder_removed_mid_run_is_one_line_and_not_made_again(
    command, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys
):
    """The run folder deleted under a running command (just after its first log line): the next
    write fails with one line naming the folder, exit 1, and nothing is written back."""
    out, append_log = tmp_path / "run", multitask.run.RunFolder.append_log

    def append_then_vanish(folder, name, records):
        append_log(folder, name, records)
        shutil.rmtree(folder.path)

    monkeypatch.setattr(multitask.run.RunFolder, "append_log", append_then_vanish)
    if command == "driver":
        argv = driver_argv(tiny_checkpoint, tiny_data, out, "--epochs", "1", "--no_plots")
        code = train_multitask.main([*argv, "--log_every", "2"])
    else:
        code = pretrain_mlm.main(mlm_argv(tiny_checkpoint, tiny_data, out, "--eval_every", "2"))
    line = one_error_line(capsys.readouterr().err)
    assert code == 1 and str(out) in line and "No such file or directory" in line, line
    assert not out.exists()


def table_ids() -> list[str]:
    """Every table's case ids, in the order of ``TABLES``."""
    found = []
    for command in TABLES:
        found += case_ids(importlib.import_module(f"tests.commands.test_bad_input_{command}").CASES)
    return found


def test_every_case_id_stands_in_exactly_one_table():
    ids = table_ids()
    assert len(ids) == len(set(ids)), sorted(i for i in set(ids) if ids.count(i) > 1)


def test_the_guarantees_count_the_cases_the_tables_hold():
    """docs/guarantees.md says how many bad-input cases the tables run; that number is theirs."""
    text = (ROOT / "docs" / "guarantees.md").read_text(encoding="utf-8")
    said = re.search(r"run (\d+) such cases", text)
    assert said and int(said.group(1)) == len(table_ids()), said
