"""pretrain_mlm.py's step is the driver's (multitask/step.py: ``train_step``): --max_grad_norm
clips it, a non-finite loss stops it before any update, the reporting extras hear what it logs
(and a resume drops what they heard past its step), and its state (``MLMState``, a typed
record) resumes from a last.pt of the layout written before that record existed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import pretrain_mlm
from multitask import extras
from multitask.errors import RunStopped
from multitask.run import RunFolder
from tests.driver.test_extras_hooks import extra_words, named_extras, names_in
from tests.driver.test_tensorboard_report import events, scalars

ROOT = Path(__file__).resolve().parents[2]
HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
# last.pt's keys as pretrain_mlm.py wrote them before its state was a typed record
OLD_LAYOUT = ("model", "optimizer", "scheduler", "stream", "rng", "step", "seconds", "recent")
THREADS = str(torch.get_num_threads())  # float sums depend on it; the same in every process


def argv(checkpoint: Path, data: Path, out: Path, *extra: str) -> list[str]:
    """Four steps on the tiny checkpoint and sst's tiny files, logged and saved every second."""
    return [
        *("--checkpoint", str(checkpoint), "--data_dir", str(data), "--out_dir", str(out)),
        *("--tasks", "sst", "--steps", "4", "--eval_every", "2", "--batch_size", "4"),
        *("--max_length", "32", "--held_out", "8", "--threads", THREADS, *extra),
    ]


def log(out: Path) -> list[dict]:
    """mlm_log.jsonl without the timing, which no two runs share."""
    rows = [json.loads(line) for line in (out / "mlm_log.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def gradient_norms(monkeypatch) -> list[float]:
    """The total L2 norm of the gradients each optimizer step of pretrain_mlm.py finds, read
    at the step (after any clipping), in the order of the steps."""
    norms: list[float] = []
    build = pretrain_mlm.optimizer_for

    def spied(*args, **kwargs):
        optimizer = build(*args, **kwargs)
        step = optimizer.step

        def step_and_note(self, *a, **k):
            grads = [p.grad for group in self.param_groups for p in group["params"]]
            norms.append(float(torch.stack([g.norm() for g in grads if g is not None]).norm()))
            return step(*a, **k)

        optimizer.step = types.MethodType(step_and_note, optimizer)  # as the scheduler wraps it
        return optimizer

    monkeypatch.setattr(pretrain_mlm, "optimizer_for", spied)
    return norms


def test_max_grad_norm_clips_every_update(tiny_checkpoint, tiny_data, tmp_path, monkeypatch):
    """Without --max_grad_norm the gradients' norm is far above 1e-6 at every step; with
    --max_grad_norm 1e-6 it is 1e-6 at every step (float32 rounding: 1e-4 relative), and the
    weights end elsewhere, nearer the start (AdamW's ε outweighs so small a gradient)."""
    norms = gradient_norms(monkeypatch)
    plain, clipped = tmp_path / "plain", tmp_path / "clipped"
    assert pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, plain)) == 0
    unclipped, norms[:] = list(norms), []
    assert (
        pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, clipped, "--max_grad_norm", "1e-6")) == 0
    )
    assert len(unclipped) == len(norms) == 4
    assert min(unclipped) > 1e-3
    assert norms == pytest.approx([1e-6] * 4, rel=1e-4)
    assert json.loads((clipped / "mlm_config.json").read_text())["max_grad_norm"] == 1e-6
    start = pretrain_mlm.load_mlm(tiny_checkpoint)[0].state_dict()
    a, b = load_file(plain / "model.safetensors"), load_file(clipped / "model.safetensors")
    moved = {name: 0.0 for name in ("plain", "clipped")}
    for key, before in start.items():
        if key in a:
            moved["plain"] += float((a[key] - before).double().pow(2).sum())
            moved["clipped"] += float((b[key] - before).double().pow(2).sum())
    assert 0 < moved["clipped"] < moved["plain"]


def test_a_nonfinite_loss_stops_before_the_update(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """A NaN loss at step 3: RunStopped (exit 3) naming the step and last.pt of step 2, and the
    weights in memory are still exactly those of step 2, which last.pt holds."""
    real, calls = pretrain_mlm.mlm_loss, []

    def nan_at_the_third(logits, targets):
        calls.append(1)
        loss = real(logits, targets)
        return loss * float("nan") if len(calls) == 3 else loss

    monkeypatch.setattr(pretrain_mlm, "mlm_loss", nan_at_the_third)
    out = tmp_path / "mlm"
    run = pretrain_mlm.set_up(pretrain_mlm.parse_args(argv(tiny_checkpoint, tiny_data, out)))
    with pytest.raises(RunStopped) as stopped:
        pretrain_mlm.train_steps(run)
    assert stopped.value.exit_code == 3
    message = str(stopped.value)
    assert message.startswith("non-finite loss at step 3 (is --lr too large?); the step did not")
    assert f"{out / 'last.pt'} (step 2) is on disk" in message
    saved = RunFolder(out).load_state()
    assert saved["step"] == 2 and run.state.step == 3
    in_memory = run.model.state_dict()
    assert saved["model"].keys() == in_memory.keys()
    assert all(torch.equal(saved["model"][k], in_memory[k]) for k in in_memory)


def stop_before_the_save_at(step: int, monkeypatch) -> None:
    """Ctrl-C in the run's save of last.pt at ``step`` (its log line and reports written)."""
    save = RunFolder.save_state

    def save_or_stop(folder, state, at):
        if at == step:
            raise KeyboardInterrupt
        save(folder, state, at)

    monkeypatch.setattr(RunFolder, "save_state", save_or_stop)


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_the_reporter_hears_the_logged_losses_metrics_and_learning_rate(
    tiny_checkpoint, tiny_data, tmp_path
):
    out = tmp_path / "mlm"
    assert (
        pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, out, "--report_to", "tensorboard")) == 0
    )
    found, rows = scalars(out / "tensorboard"), log(out)
    assert [step for step, _ in found["dev/loss"]] == [0, 2, 4]
    for name in ("loss", "perplexity", "accuracy"):
        assert [v for _, v in found[f"dev/{name}"]] == pytest.approx([r[name] for r in rows])
    trained = [(r["step"], pytest.approx(r["train_loss"])) for r in rows[1:]]
    assert found["train/loss/mlm"] == trained
    # the rate of the next step, after each logged one: 5e-5 decaying linearly to 0 over 4 steps
    assert found["train/learning_rate"] == [(2, pytest.approx(2.5e-5)), (4, 0.0)]


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="the tensorboard package is not installed")
def test_a_resume_drops_the_reports_past_its_step(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """Stopped after step 4's reports but before its save, then resumed from step 2 (in a
    process of its own: an event file is named by the second and the process): every (tag,
    step) is reported once, with the uninterrupted run's value."""
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    flags = ("--report_to", "tensorboard")
    assert pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, reference, *flags)) == 0
    with monkeypatch.context() as patch:
        stop_before_the_save_at(4, patch)
        assert pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, stopped, *flags)) == 130
    assert Counter((t, s) for t, s, _ in events(stopped / "tensorboard"))[("dev/loss", 4)] == 1
    resume = [sys.executable, "pretrain_mlm.py", "--out_dir", str(stopped), "--resume"]
    done = subprocess.run([*resume, "--threads", THREADS], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = events(stopped / "tensorboard")
    assert max(Counter((t, s) for t, s, _ in found).values()) == 1
    assert sorted(found) == sorted(events(reference / "tensorboard"))


def test_a_last_pt_of_the_old_layout_resumes_exactly(
    tiny_checkpoint, tiny_data, tmp_path, monkeypatch
):
    """last.pt as pretrain_mlm.py wrote it before ``MLMState`` (``OLD_LAYOUT``, its keys spelled
    out here, not taken from the code) resumes to the uninterrupted run's log and weights."""
    reference, stopped = tmp_path / "reference", tmp_path / "stopped"
    assert pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, reference)) == 0
    with monkeypatch.context() as patch:
        stop_before_the_save_at(4, patch)
        assert pretrain_mlm.main(argv(tiny_checkpoint, tiny_data, stopped)) == 130
    saved = torch.load(stopped / "last.pt", weights_only=False)
    assert set(saved) == set(OLD_LAYOUT)  # the layout is still the old one
    old = {key: saved[key] for key in OLD_LAYOUT}
    old["step"], old["seconds"] = 2, 1.5  # an int and a float, as that code saved them
    old["recent"] = [float(x) for x in saved["recent"]]
    torch.save(old, stopped / "last.pt")
    assert pretrain_mlm.main(["--out_dir", str(stopped), "--resume", "--threads", THREADS]) == 0
    assert log(stopped) == log(reference)
    weights = "model.safetensors"
    assert (stopped / weights).read_bytes() == (reference / weights).read_bytes()


def test_without_a_reporting_extra_there_is_no_flag(tmp_path, monkeypatch, capsys):
    """The student tree (no extra present): --help offers no reporting flag, and one given is
    an unknown flag, refused before anything is written."""
    monkeypatch.setattr(extras, "present", lambda: [])
    assert "--report_to" not in pretrain_mlm.build_parser().format_help()
    out = tmp_path / "o"
    with pytest.raises(SystemExit) as refused:  # argparse's own exit, as for any unknown flag
        pretrain_mlm.main(["--report_to", "tensorboard", "--out_dir", str(out)])
    assert refused.value.code == 2
    assert "--report_to" in capsys.readouterr().err
    assert not out.exists()


def test_pretrain_mlm_names_no_extra():
    """As the driver, pretrain_mlm.py reaches the reporting extras through their hooks only: no
    extra's name, module, flag or choice is in any string or identifier of it."""
    source = (ROOT / "pretrain_mlm.py").read_text(encoding="utf-8")
    words = extra_words()
    named = {(text[:60], extra) for text in names_in(source) for extra in named_extras(text, words)}
    assert not named, sorted(named)
