"""Bad input to ``python -m tools.export``: never over a run, a checkpoint, the current
directory or the user's files (the promise and how a case is run: tests/commands/bad_input.py).
Tests of their own below: what kill -9 in the middle of an export leaves, and the next export
that cleans it up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest

import tools.export
from tests.commands.bad_input import (
    ROOT,
    Case,
    Ctx,
    case_ids,
    check,
    checkpoint_copy,
    config_cases,
    disk_full,
    in_config,
    interrupt,
    then,
)

RUNS = ("run", "adapter", "mlm")


def export(run: str, out: str, *extra: str):
    def argv(ctx: Ctx) -> list[str]:
        where = str(ctx.copy(run)) if run in ctx.made else run.format(tmp=ctx.tmp)
        return [where, out.format(tmp=ctx.tmp, ckpt=ctx.checkpoint), *extra]

    return argv


CASES = [
    Case("e-run-missing", "export", export("{tmp}/nope", "{tmp}/x"), "nope"),
    Case(
        "e-run-is-checkpoint",
        "export",
        then(checkpoint_copy, export("{tmp}/ckpt", "{tmp}/x")),
        "checkpoint folder",
    ),
    Case("e-out-empty", "export", export("run", "", "--overwrite"), "OUT_DIR"),
    Case("e-out-cwd", "export", export("run", ".", "--overwrite"), "."),
    Case(
        "e-out-other-run",
        "export",
        then(lambda c: c.copy("adapter"), export("run", "{tmp}/adapter", "--overwrite")),
        "run folder",
    ),
    Case("e-out-checkpoint", "export", export("run", "{ckpt}", "--overwrite"), "checkpoint"),
    Case(
        "e-out-mlm-run",
        "export",
        then(lambda c: c.copy("mlm"), export("run", "{tmp}/mlm", "--overwrite")),
        "MLM pretraining run folder",
    ),
    Case(
        "e-out-user-files",
        "export",
        then(lambda c: c.folder("mine", "a.txt"), export("run", "{tmp}/mine", "--overwrite")),
        "mine",
    ),
    Case("e-out-in-run", "export", export("run", "{tmp}/run/exported"), "run"),
    Case("e-out-in-ckpt", "export", export("run", "{ckpt}/exported"), "checkpoint"),
    Case("e-out-holds-run", "export", export("run", "{tmp}", "--overwrite"), "run"),
    Case(
        "e-out-is-file",
        "export",
        then(lambda c: c.file("f.txt", "x"), export("run", "{tmp}/f.txt")),
        "f.txt",
    ),
    Case(
        "e-out-under-file",
        "export",
        then(lambda c: c.file("f.txt", "x"), export("run", "{tmp}/f.txt/sub")),
        "f.txt",
    ),
    Case("e-adapter", "export", export("adapter", "{tmp}/x"), "adapter"),
    Case(
        "e-no-option",
        "export",
        then(in_config("option", remove=True), export("run", "{tmp}/x")),
        "corrupted",
    ),
    Case(
        "e-ctrl-c",
        "export",
        export("run", "{tmp}/x"),
        "interrupted",
        130,
        interrupt(tools.export, "write_head"),
    ),
    Case(
        "e-disk-full",
        "export",
        export("run", "{tmp}/x"),
        "x",
        1,
        disk_full("fsync"),
    ),
    # -- the run's config.json, one reader for all commands --
    *config_cases("export", "run", ("../run", "{tmp}/exported")),
]


@pytest.mark.parametrize("case", CASES, ids=case_ids(CASES))
def test_bad_invocation(case, made, tiny_checkpoint, tiny_data, tmp_path, monkeypatch, capsys):
    check(case, Ctx(tmp_path, made, tiny_checkpoint, tiny_data), monkeypatch, capsys)


def test_an_interrupted_exports_temporary_folder_is_removed(made, tmp_path, capsys):
    """What kill -9 in the middle of an export leaves (its temporary folder beside OUT_DIR) is
    removed by the next export to OUT_DIR, which then holds the export and its export.json."""
    stale = tmp_path / ".exported.export-k1ll3d" / "export"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    assert tools.export.main([str(made["run"]), str(tmp_path / "exported")]) == 0
    assert "left by an interrupted export" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]
    assert json.loads((tmp_path / "exported" / "export.json").read_text())["option"] == "finetune"
    again = [str(made["run"]), str(tmp_path / "exported"), "--overwrite"]
    assert tools.export.main(again) == 0  # an earlier export is replaced with --overwrite


HELD_EXPORT = """
import sys, time
import tools.export as export
write_export = export.write_export
def write_and_hold(*args, **kwargs):
    written = write_export(*args, **kwargs)
    print("written", flush=True)
    time.sleep(120)
    return written
export.write_export = write_and_hold
sys.exit(export.main(sys.argv[1:]))
"""


def test_kill_9_mid_export_leaves_no_out_dir_and_the_next_export_cleans_up(made, tmp_path):
    """A real export process killed with SIGKILL after writing its files, before the rename:
    OUT_DIR does not exist (nothing half-made is taken for an export), and the next export
    removes the temporary folder and leaves OUT_DIR alone beside the run."""
    out = tmp_path / "exported"
    command = [sys.executable, "-c", HELD_EXPORT, str(made["run"]), str(out)]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "written\n"
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists() and list(tmp_path.glob(".exported.export-*/export"))
    assert tools.export.main([str(made["run"]), str(out)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exported"]
