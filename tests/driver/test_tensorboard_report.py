"""--report_to tensorboard (extras/tensorboard_report.py, a lab extra in one file): a tiny
run's event files hold the losses of train_log.jsonl, the metrics of metrics.jsonl and the
learning rate; without the tensorboard package the flag is refused before anything runs."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

import train_multitask
from extras import tensorboard_report
from tests.helpers import driver_argv, run_driver, short_run

ROOT = Path(__file__).resolve().parents[2]

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} of the event files in ``folder`` (TensorBoard's scalars
    plug-in format, which its reader keeps as tensors)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util.tensor_util import make_ndarray

    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, float(make_ndarray(e.tensor_proto))) for e in events.Tensors(tag)]
        for tag in events.Tags()["tensors"]
    }


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_the_events_hold_the_logged_losses_metrics_and_learning_rate(
    tiny_checkpoint, tiny_data, tmp_path
):
    out = tmp_path / "run"
    flags = ("--report_to", "tensorboard", "--eval_every", "2", "--log_every", "1")
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(1, 4), *flags) == 0
    found = scalars(out / "tensorboard")
    for row in jsonl(out / "train_log.jsonl"):
        assert (row["step"], pytest.approx(row["loss"])) in found[f"train/loss/{row['task']}"]
    metrics = jsonl(out / "metrics.jsonl")
    assert [step for step, _ in found["dev/overall"]] == [m["step"] for m in metrics]
    assert [v for _, v in found["dev/overall"]] == pytest.approx([m["overall"] for m in metrics])
    rates = [v for _, v in found["train/learning_rate"]]
    # the rate of the next step, after each: 5e-5 decaying linearly to 0 over 4 steps
    assert rates == pytest.approx([3.75e-5, 2.5e-5, 1.25e-5, 0.0])


def test_without_the_package_the_flag_is_refused_before_anything_runs(
    tiny_checkpoint, tiny_data, tmp_path, capsys, monkeypatch
):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        tensorboard_report.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tensorboard" else real(name, *a),
    )
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, "--report_to", "tensorboard") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: --report_to tensorboard needs the tensorboard package: pip install tensorboard"
    ]
    assert not out.exists()


def events(folder: Path) -> list[tuple[str, int, float]]:
    """Every scalar of every event file in ``folder``, as written: (tag, step, value), read with
    TensorBoard's raw loader (its accumulator would hide a step written twice)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util.tensor_util import make_ndarray

    found = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                found.append((value.tag, event.step, float(make_ndarray(value.tensor))))
    return found


# The driver, held at step HOLD_AT between the step's log line and its save: "logged" just
# after the log line (before the evaluation), "evaluated" after the evaluation was reported
# (before last.pt of the step is written). It prints "held" and sleeps until a signal comes.
HELD_RUN = """
import sys, time
import train_multitask as driver
point, step = sys.argv[1], int(sys.argv[2])
log_line, save_last = driver.log_line, driver.save_last
def hold(run, at):
    if at == point and run.state.step == step:
        print("held", flush=True)
        time.sleep(120)
def log_then_hold(run, *args):
    log_line(run, *args)
    hold(run, "logged")
def hold_then_save(run):
    hold(run, "evaluated")
    save_last(run)
driver.log_line, driver.save_last = log_then_hold, hold_then_save
sys.exit(driver.main(sys.argv[3:]))
"""
HOLD_AT = 8
RESUMED = ("--eval_every", "4", "--log_every", "1", "--report_to", "tensorboard", "--threads", "1")


@pytest.fixture(scope="module")
def uninterrupted(tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tb") / "reference"
    threads = torch.get_num_threads()
    try:
        assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(1, 12), *RESUMED) == 0
    finally:
        torch.set_num_threads(threads)
    return out


def held_and_stopped(cmd: list[str], stop: int) -> tuple[int, str]:
    """Run ``cmd`` until it prints "held", send it ``stop``; its return code and stderr."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        for line in proc.stdout:
            if line == "held\n":
                break
        proc.send_signal(stop)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc.returncode, err


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("point", ["logged", "evaluated"])
def test_a_resume_writes_every_tag_and_step_once_with_the_uninterrupted_value(
    point, stop, uninterrupted, tiny_checkpoint, tiny_data, tmp_path
):
    """Stopped between step 8's log line and its save (last.pt is at step 4; the events of
    steps 5-8 are on disk), then --resume: every (tag, step) is in the event files once, with
    the value of a run never stopped, as train_log.jsonl is."""
    stopped = tmp_path / "stopped"
    argv = driver_argv(tiny_checkpoint, tiny_data, stopped, *short_run(1, 12), *RESUMED)
    code, err = held_and_stopped([sys.executable, "-c", HELD_RUN, point, str(HOLD_AT), *argv], stop)
    assert code == {signal.SIGINT: 130, signal.SIGTERM: 143}.get(stop, -stop), err
    assert ("train/learning_rate", HOLD_AT) in {
        (t, s) for t, s, _ in events(stopped / "tensorboard")
    }
    threads = torch.get_num_threads()
    try:
        resume = driver_argv(tiny_checkpoint, tiny_data, stopped, "--no_plots", "--resume")
        assert train_multitask.main([*resume, "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    found, expected = events(stopped / "tensorboard"), events(uninterrupted / "tensorboard")
    twice = [key for key, n in Counter((tag, step) for tag, step, _ in found).items() if n > 1]
    assert twice == []
    assert sorted(found) == sorted(expected)
    assert (stopped / "train_log.jsonl").read_text() == (
        uninterrupted / "train_log.jsonl"
    ).read_text()


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_overwrite_replaces_the_events_of_the_run_it_replaces(tiny_checkpoint, tiny_data, tmp_path):
    """tensorboard/ belongs to the run folder: --overwrite starts afresh, the earlier run's
    event files gone (a file of the user's in the folder stays), each (tag, step) once."""
    out, flags = tmp_path / "run", (*short_run(1, 2), "--report_to", "tensorboard")
    assert run_driver(tiny_checkpoint, tiny_data, out, *flags) == 0
    (out / "tensorboard" / "notes.txt").write_text("mine\n")
    # by content: a file's name holds the second it was made, which two short runs may share
    first = {p.read_bytes() for p in (out / "tensorboard").glob("events.out.tfevents.*")}
    assert run_driver(tiny_checkpoint, tiny_data, out, *flags, "--overwrite", "--lr", "1e-4") == 0
    now = sorted((out / "tensorboard").glob("events.out.tfevents.*"))
    assert len(now) == 1 and now[0].read_bytes() not in first
    assert (out / "tensorboard" / "notes.txt").read_text() == "mine\n"
    found = events(out / "tensorboard")
    assert len(found) == len({(tag, step) for tag, step, _ in found})
    assert [step for tag, step, _ in found if tag == "dev/overall"] == [2]


# A fresh tiny run reporting to TensorBoard, in a real process: its exit code and stderr.
REPORTING = [sys.executable, "train_multitask.py", "--report_to", "tensorboard", "--no_plots"]


def one_line_naming_the_events_file(done, folder: Path, reason: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: {folder}/events.out.tfevents.") and reason in lines[0]
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_a_read_only_events_folder_is_one_line_naming_the_file(
    tiny_checkpoint, tiny_data, tmp_path
):
    """Root's permission bypass dropped (setpriv): the events file that cannot be made is named
    in one line, exit 1, no traceback of a writer thread."""
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv is not installed")
    out = tmp_path / "run"
    (out / "tensorboard").mkdir(parents=True)
    (out / "tensorboard").chmod(0o555)
    command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *REPORTING]
    command += driver_argv(tiny_checkpoint, tiny_data, out, *short_run(1, 2), "--threads", "1")
    try:
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    finally:
        (out / "tensorboard").chmod(0o755)
    if "Operation not permitted" in done.stderr and "setpriv" in done.stderr:
        pytest.skip("setpriv cannot drop capabilities here")
    one_line_naming_the_events_file(done, out / "tensorboard", "Permission denied")


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_a_full_events_folder_is_one_line_naming_the_file(tiny_checkpoint, tiny_data, tmp_path):
    """A real full file system (a tmpfs of one page, filled) where the events go: one line
    naming the events file, exit 1, no traceback of a writer thread; the user's file stays."""
    out = tmp_path / "run"
    disk = out / "tensorboard"
    disk.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with open(disk / "filler", "wb") as f, pytest.raises(OSError):
            f.write(b"\0" * 65536)
        filler = (disk / "filler").read_bytes()
        command = [*REPORTING, *driver_argv(tiny_checkpoint, tiny_data, out, *short_run(1, 2))]
        command += ["--threads", "1"]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        one_line_naming_the_events_file(done, disk, "No space left on device")
        assert (disk / "filler").read_bytes() == filler
    finally:
        subprocess.run(["umount", str(disk)], check=False)
