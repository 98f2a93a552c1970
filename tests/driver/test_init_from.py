"""Multitask training, then each task fine-tuned from it (``--init_from RUN``, MT-DNN's recipe):
the run starts from RUN's encoder and the heads of the tasks both have, takes RUN's model
settings, and refuses what cannot start from RUN in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import train_multitask
from multitask.config import parse_args
from multitask.errors import UsageError
from tests.helpers import driver_argv, run_driver, short_run

SHORT = short_run(epochs=1)


@pytest.fixture
def multitask_run(finished_run) -> Path:
    """A finished tiny finetune run of the three tasks (the shared one: nothing here writes
    into it)."""
    return finished_run


def argv(checkpoint: Path, data: Path, out: Path, run: Path, *extra: str) -> list[str]:
    """The tiny driver command without --checkpoint: --init_from brings the run's."""
    line = driver_argv(checkpoint, data, out, "--init_from", str(run), *extra)
    return line[2:]


def test_a_task_starts_from_the_runs_encoder_and_its_own_head(
    multitask_run, tiny_checkpoint, tiny_data, tmp_path
):
    """Every encoder tensor and the sst head equal the run's best checkpoint bit for bit; the
    other tasks' heads are not in the new model."""
    cfg = parse_args(
        argv(tiny_checkpoint, tiny_data, tmp_path / "sst", multitask_run, "--tasks", "sst")
    )
    assert cfg.model.option == "finetune" and cfg.model.checkpoint == str(tiny_checkpoint)
    model = train_multitask.make_model(cfg, torch.device("cpu"))
    best = load_file(multitask_run / "best.safetensors")
    own = model.state_dict()
    started = [k for k in best if k in own]
    assert {k.split(".")[1] for k in started if k.startswith("heads.")} == {"sst"}
    assert all(k.startswith(("bert.", "heads.sst.")) for k in started)
    assert len([k for k in own if k.startswith("bert.")]) == len(
        [k for k in started if k.startswith("bert.")]
    )
    for key in started:
        assert torch.equal(own[key], best[key]), key


def test_the_run_trains_and_writes_beside_the_run_it_started_from(
    multitask_run, tiny_checkpoint, tiny_data, capsys
):
    """Without --out_dir the folder is RUN-then-TASKS; RUN is left as it was."""
    before = (multitask_run / "best.safetensors").read_bytes()
    line = argv(tiny_checkpoint, tiny_data, Path("unused"), multitask_run, "--tasks", "sts", *SHORT)
    line = line[: line.index("--out_dir")] + line[line.index("--out_dir") + 2 :]
    assert train_multitask.main(line) == 0
    out = Path(f"{multitask_run}-then-sts")
    assert (out / "best.safetensors").is_file() and (out / "metrics.jsonl").is_file()
    assert "started from" in capsys.readouterr().out
    assert (multitask_run / "best.safetensors").read_bytes() == before


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--checkpoint", "elsewhere"), "--checkpoint elsewhere: the run in"),
        (("--head_hidden", "16"), "--head_hidden 16: the run in"),
        (("--add_to", "{run}"), "give one"),
    ],
)
def test_what_cannot_start_from_the_run_is_refused_in_one_line(
    multitask_run, tiny_checkpoint, tiny_data, tmp_path, extra, says
):
    extra = tuple(e.replace("{run}", str(multitask_run)) for e in extra)
    line = argv(tiny_checkpoint, tiny_data, tmp_path / "x", multitask_run, "--tasks", "sst", *extra)
    with pytest.raises(UsageError, match=says) as raised:
        parse_args(line)
    assert "\n" not in str(raised.value)


def test_a_plugin_run_or_a_folder_inside_the_run_is_refused(
    multitask_run, tiny_checkpoint, tiny_data, tmp_path
):
    adapter = tmp_path / "adapter"
    assert run_driver(tiny_checkpoint, tiny_data, adapter, "--option", "adapter", *SHORT) == 0
    with pytest.raises(UsageError, match="per-task fine-tuning starts from a finetune run"):
        parse_args(argv(tiny_checkpoint, tiny_data, tmp_path / "y", adapter, "--tasks", "sst"))
    inside = multitask_run / "sub"
    with pytest.raises(UsageError, match="must differ from --init_from"):
        parse_args(argv(tiny_checkpoint, tiny_data, inside, multitask_run, "--tasks", "sst"))
