"""Nothing lost and nothing silent: resuming after kill -9, determinism, non-finite losses and
unsafe checkpoint files, on a tiny random checkpoint and tiny synthetic data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
import torch

import train_multitask
from minbert.checkpoint import UnsafeCheckpointError, atomic_save, load_trusted
from multitask.model import MultitaskModel
from tests.helpers import (
    driver_argv,
    kill_when_resumable,
    run_driver,
    short_run,
    signal_when_resumable,
)

ROOT = Path(__file__).resolve().parents[2]


def metrics(out_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (out_dir / "metrics.jsonl").read_text().splitlines()]


def test_same_seed_same_metrics(tiny_checkpoint, tiny_data, tmp_path):
    extra = ("--epochs", "2", "--steps_per_epoch", "4", "--option", "finetune")
    for name in ("a", "b"):
        assert (
            train_multitask.main(
                driver_argv(tiny_checkpoint, tiny_data, tmp_path / name, "--no_plots", *extra)
            )
            == 0
        )
    assert metrics(tmp_path / "a") == metrics(tmp_path / "b")
    for split in ("dev", "test"):
        name = f"sts-{split}-output.csv"
        assert (tmp_path / "a" / name).read_text() == (tmp_path / "b" / name).read_text()


def test_resume_after_kill_matches_uninterrupted_run(tiny_checkpoint, tiny_data, tmp_path):
    """Kill -9 a run as soon as it has written a resumable checkpoint, resume, and compare every
    evaluation with a run that was never interrupted (same seed, same machine)."""
    threads = str(torch.get_num_threads())  # float sums depend on it; pin it for both processes
    extra = [
        "--epochs",
        "3",
        "--steps_per_epoch",
        "10",
        "--eval_every",
        "5",
        "--save_every",
        "2",
        "--option",
        "finetune",
        "--layer_decay",
        "0.9",
        "--swap_pairs",
        "--threads",
        threads,
    ]
    reference = tmp_path / "reference"
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, reference, "--no_plots", *extra)
        )
        == 0
    )

    killed = tmp_path / "killed"
    code = kill_when_resumable(tiny_checkpoint, tiny_data, killed, "--no_plots", *extra)
    assert code == -signal.SIGKILL, "the run finished before it could be killed"
    saved_step = load_trusted(killed / "last.pt")["step"]
    assert saved_step < 30

    (killed / ".last.pt.x1y2.tmp").write_bytes(b"half a save")  # as a kill mid-save leaves
    resume = [*driver_argv(tiny_checkpoint, tiny_data, killed, "--no_plots"), "--resume"]
    assert train_multitask.main(resume) == 0
    assert metrics(killed) == metrics(reference)
    assert not list(killed.glob(".*.tmp"))  # the interrupted save's temporary file is gone
    for name in ("train_log.jsonl",):
        assert (killed / name).read_text() == (reference / name).read_text()
    timing = {"wall_clock_s", "train_examples_per_s", "eval_s"}
    summaries = [json.loads((d / "summary.json").read_text()) for d in (killed, reference)]
    assert [{k: v for k, v in s.items() if k not in timing} for s in summaries] == [
        {k: v for k, v in summaries[1].items() if k not in timing}
    ] * 2
    assert (killed / "sst-dev-output.csv").read_text() == (
        reference / "sst-dev-output.csv"
    ).read_text()


def test_resume_of_a_run_older_than_a_flag(tiny_checkpoint, tiny_data, tmp_path):
    """A run whose config.json predates a flag resumes with that flag's default."""
    extra = ("--epochs", "1", "--steps_per_epoch", "2", "--option", "pretrain", "--no_plots")
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 0
    )
    config = json.loads((tmp_path / "config.json").read_text())
    del config["layer_decay"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert (
        train_multitask.main(
            [*driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots"), "--resume"]
        )
        == 0
    )


def test_resume_without_checkpoint_is_a_clear_error(tiny_checkpoint, tiny_data, tmp_path, capsys):
    assert (
        train_multitask.main(
            [*driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots"), "--resume"]
        )
        == 2
    )
    assert "--resume" in capsys.readouterr().err


def test_existing_run_is_not_overwritten(tiny_checkpoint, tiny_data, tmp_path, capsys):
    extra = ("--epochs", "1", "--steps_per_epoch", "2", "--option", "pretrain")
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 0
    )
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 2
    )
    assert "--overwrite" in capsys.readouterr().err


@pytest.fixture
def nan_on_third_step(monkeypatch):
    real = MultitaskModel.loss
    calls = {"n": 0}

    def loss_with_a_nan(model, task, batch):
        calls["n"] += 1
        loss = real(model, task, batch)
        return loss * float("nan") if calls["n"] == 3 else loss

    monkeypatch.setattr(MultitaskModel, "loss", loss_with_a_nan)


@pytest.fixture(params=["host", "device"])
def step_path(request) -> tuple[str, str]:
    """Both ways a step learns its losses are finite: read on the host every step (the CPU), or
    a flag kept on the device and read at --log_every (a GPU; here tried on the CPU)."""
    return ("--nonfinite_check", request.param)


def test_nan_loss_stops_and_names_step_and_task(
    tiny_checkpoint, tiny_data, tmp_path, capsys, nan_on_third_step, step_path
):
    extra = ("--epochs", "2", "--steps_per_epoch", "2", "--option", "finetune", *step_path)
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 3
    )
    err = capsys.readouterr().err
    assert "step 3 on task" in err and "non-finite" in err
    # The checkpoint of the evaluation at step 2 is the good one; the NaN never reached a file.
    best = load_trusted(tmp_path / "last.pt")
    assert best["step"] == 2
    assert all(torch.isfinite(t).all() for t in best["model"].values())


def test_nan_loss_can_skip_the_batch(
    tiny_checkpoint, tiny_data, tmp_path, capsys, nan_on_third_step, step_path
):
    extra = ("--epochs", "2", "--steps_per_epoch", "2", "--nonfinite", "skip", *step_path)
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 0
    )
    assert "step 3 on task" in capsys.readouterr().err
    assert all(all(v == v for v in m.values()) for m in metrics(tmp_path))


@pytest.mark.numerics
@pytest.mark.parametrize("option", ["finetune", "adapter"])
def test_a_step_that_reads_nothing_trains_as_one_that_reads_its_losses(
    tiny_checkpoint, tiny_data, tmp_path, option
):
    """The GPU's path (the finiteness of the losses a flag on the device, AdamW's step counts and
    bias corrections there) gives the host path's metrics and losses to 1e-5: the same
    arithmetic, but the bias corrections rounded in float32 on the device path and in float64
    on the host, over 8 steps; the metrics moved by up to 1.3e-6 on the CPUs tried."""
    extra = ("--epochs", "2", "--steps_per_epoch", "4", "--option", option, "--log_every", "2")
    for path in ("host", "device"):
        flags = ("--no_plots", "--nonfinite_check", path, *extra)
        assert (
            train_multitask.main(driver_argv(tiny_checkpoint, tiny_data, tmp_path / path, *flags))
            == 0
        )
    for name in ("metrics.jsonl", "train_log.jsonl"):
        rows = [(tmp_path / run / name).read_text().splitlines() for run in ("host", "device")]
        for a, b in zip(*rows, strict=True):
            a, b = json.loads(a), json.loads(b)
            assert a.keys() == b.keys()
            for key in a:
                same = a[key] == b[key]
                assert same or abs(a[key] - b[key]) <= 1e-5, (name, key, a[key], b[key])


class RunsCode:
    """Unpickling this would call os.system: a checkpoint must never be able to do that."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_pickle_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "last.pt"
    torch.save({"model": {}, "payload": RunsCode(marker)}, path)
    with pytest.raises(UnsafeCheckpointError):
        load_trusted(path)
    assert not marker.exists()


def test_resume_refuses_a_crafted_checkpoint(tiny_checkpoint, tiny_data, tmp_path, capsys):
    extra = ("--epochs", "1", "--steps_per_epoch", "2", "--option", "pretrain")
    assert (
        train_multitask.main(
            driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots", *extra)
        )
        == 0
    )
    marker = tmp_path / "pwned"
    torch.save({"payload": RunsCode(marker)}, tmp_path / "last.pt")
    assert (
        train_multitask.main(
            [*driver_argv(tiny_checkpoint, tiny_data, tmp_path, "--no_plots"), "--resume"]
        )
        == 2
    )
    assert "refused" in capsys.readouterr().err
    assert not marker.exists()


def test_atomic_save_leaves_old_file_when_the_write_fails(tmp_path):
    path = tmp_path / "state.pt"
    atomic_save({"x": torch.ones(2)}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError):
        atomic_save({"x": Unpicklable()}, path)
    assert torch.equal(load_trusted(path)["x"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_resume_refuses_a_changed_training_file(tiny_checkpoint, tiny_data, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(tiny_data, data)
    extra = short_run(2, 2)
    assert train_multitask.main(driver_argv(tiny_checkpoint, data, tmp_path / "r", *extra)) == 0
    with open(data / "ids-sst-train.csv", "a") as f:
        f.write("99\tnew\ta new sentence .\t3\n")
    again = [*driver_argv(tiny_checkpoint, data, tmp_path / "r", *extra), "--resume"]
    assert train_multitask.main(again) == 2
    err = capsys.readouterr().err
    assert "ids-sst-train.csv changed since the run started" in err


@pytest.mark.parametrize(
    "stop, code, words",
    [(signal.SIGINT, 130, "interrupted at step"), (signal.SIGTERM, 143, "terminated (SIGTERM) at")],
)
def test_ctrl_c_or_sigterm_leaves_a_resumable_run_and_says_how_to_resume(
    stop, code, words, tiny_checkpoint, tiny_data, tmp_path
):
    out = tmp_path / "run"
    extra = ["--epochs", "50", "--steps_per_epoch", "10", "--save_every", "1", "--no_plots"]
    cmd = [
        sys.executable,
        "train_multitask.py",
        *driver_argv(tiny_checkpoint, tiny_data, out, *extra),
    ]
    returncode, err = signal_when_resumable(cmd, out, stop)
    assert returncode == code, err
    assert "Traceback" not in err
    message = [line for line in err.replace("\r", "\n").splitlines() if "error:" in line]
    assert len(message) == 1 and message[0].startswith("error: ") and words in message[0]
    assert f"train_multitask.py --out_dir {out} --resume" in message[0]
    step = load_trusted(out / "last.pt")["step"]
    assert step >= 1 and not list(out.glob(".*.tmp"))


@pytest.mark.parametrize("flag", [("--smart",), ("--step_gradient", "pcgrad")])
def test_the_device_check_is_refused_where_losses_must_be_read(flag, tmp_path):
    from multitask.errors import UsageError

    with pytest.raises(UsageError, match="--nonfinite_check device"):
        train_multitask.parse_args(
            ["--out_dir", str(tmp_path), "--nonfinite_check", "device", *flag]
        )


def test_ctrl_c_inside_torchs_writer_is_the_interrupt_not_a_write_fault(tmp_path):
    """Ctrl-C while torch.save writes a tensor's bytes: torch's zip writer then fails with a
    RuntimeError (an "inline_container" enforce) raised while handling the KeyboardInterrupt,
    which must stay the interrupt (the commands' one-line stop message), not "cannot write"."""
    from minbert.checkpoint import atomic_write

    def interrupted_write(f) -> None:
        f.write(b"half")
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RuntimeError(
                "[enforce fail at inline_container.cc:672] . unexpected pos"
            ) from None

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "last.pt", interrupted_write)
    assert not list(tmp_path.iterdir())  # nor the temporary file


def test_a_run_folder_is_free_for_the_next_command_of_the_same_process(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """A command releases its run folder's lock when it ends, not when the garbage collector
    gets to the folder object: with every folder kept alive (as a reference cycle or a notebook
    would), the next command on the same folder in the same process still starts."""
    import multitask.run

    kept = []
    start = multitask.run.RunFolder.start
    monkeypatch.setattr(
        multitask.run.RunFolder, "start", lambda f, r: kept.append(f) or start(f, r)
    )
    out = tmp_path / "run"
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(1, 2)) == 0
    assert run_driver(tiny_checkpoint, tiny_data, out, *short_run(1, 2), "--overwrite") == 0
    assert len(kept) == 2
