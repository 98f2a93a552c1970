"""An adapter run's tasks as AdapterHub adapters: ``python -m tools.export --format adapters``
writes folders that the ``adapters`` library (1.3.0, in its own environment .venv-adapters, made
by ``make adapters-env``: it needs an older transformers than the project's) loads onto
transformers' BERT of the base checkpoint with its own calls, giving minBERT's hidden states
(within 1e-5) and, through the head file, its head outputs; every placement exports, and what
the library cannot hold is refused in one line with nothing written."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from minbert.pretrained import default_checkpoint_dir
from multitask.collate import Batch
from multitask.trained import TrainedRun
from tests.helpers import run_driver, short_run
from tools import export as export_command
from tools.adapters_format import reduction_factor

ROOT = Path(__file__).resolve().parents[2]
VENV_PYTHON = ROOT / ".venv-adapters" / "bin" / "python"
SENTENCES = ["a good film", "what a bad movie, said the cat", "how do you do"]
TASKS = ("sst", "sts")

# Run by the adapters environment's Python: argv = checkpoint, batch file, output file, then
# LOADER:FOLDER pairs. LOADER "model" is BertAdapterModel.from_pretrained, "init" is
# adapters.init(BertModel.from_pretrained(...)); both then load_adapter and set_active_adapters.
LIBRARY_SIDE = """
import sys
import torch
import adapters
from transformers import BertModel

checkpoint, batch_file, out_file, *jobs = sys.argv[1:]
assert adapters.__version__ == "1.3.0", adapters.__version__
batch = torch.load(batch_file)
hidden = {}
for job in jobs:
    loader, folder = job.split(":", 1)
    if loader == "model":
        model = adapters.BertAdapterModel.from_pretrained(checkpoint)
    else:
        model = BertModel.from_pretrained(checkpoint)
        adapters.init(model)
    name = model.load_adapter(folder)
    model.set_active_adapters(name)
    model.eval()
    saved = torch.load(folder + "/pytorch_adapter.bin")
    state = model.state_dict()
    ours = [k for k in state if f".adapters.{name}." in k]
    assert len(ours) == len(saved), (sorted(ours), sorted(saved))
    for key, tensor in saved.items():
        key = key if key in state else key.removeprefix("bert.")
        assert torch.equal(state[key], tensor), key
    with torch.no_grad():
        out = model(**batch)
    hidden[job] = out.last_hidden_state if loader == "init" else out[0]
torch.save(hidden, out_file)
"""


def adapter_run(checkpoint: Path, data: Path, out: Path, *extra: str) -> Path:
    short = (*short_run(2, 3), "--tasks", ",".join(TASKS))
    assert run_driver(checkpoint, data, out, *short, "--option", "adapter", *extra) == 0
    return out


PLACEMENTS = {  # size 5 does not divide the hidden size 32: a fractional reduction factor
    "houlsby": ("--adapter_size", "8"),
    "pfeiffer": ("--adapter_placement", "pfeiffer", "--adapter_size", "5"),
    "after_layernorm": ("--adapter_placement", "after_layernorm", "--adapter_size", "4"),
}


@pytest.fixture(scope="module")
def library_python() -> Path:
    """The adapters environment's Python; without it the test is skipped before any training."""
    if not VENV_PYTHON.exists():
        pytest.skip(f"no {VENV_PYTHON.relative_to(ROOT)}: `make adapters-env` builds it")
    return VENV_PYTHON


@pytest.fixture(scope="module")
def runs(library_python, tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters_runs")
    return {
        name: adapter_run(tiny_checkpoint, tiny_data, root / name, *extra)
        for name, extra in PLACEMENTS.items()
    }


def exported(run_dir: Path, out: Path) -> Path:
    assert export_command.main([str(run_dir), str(out), "--format", "adapters"]) == 0
    return out


def library_hidden(
    python: Path, checkpoint: Path, jobs: list[str], batch: dict, tmp_path: Path
) -> dict:
    """last_hidden_state of each LOADER:FOLDER job, computed by the adapters library."""
    torch.save(batch, tmp_path / "batch.pt")
    script = tmp_path / "library_side.py"
    script.write_text(LIBRARY_SIDE)
    argv = [str(python), str(script), str(checkpoint), str(tmp_path / "batch.pt")]
    argv += [str(tmp_path / "hidden.pt"), *jobs]
    env = os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return torch.load(tmp_path / "hidden.pt")


def test_reduction_factor_gives_the_bottleneck_size():
    for hidden in (32, 768, 1024):
        for size in range(1, hidden + 1):
            assert int(hidden // reduction_factor(hidden, size)) == size


@pytest.mark.numerics
@pytest.mark.parametrize("placement", list(PLACEMENTS))
def test_adapters_loads_each_task_with_minberts_outputs(
    placement, library_python, runs, tiny_checkpoint, tmp_path
):
    """Hidden states within 1e-5 of minBERT's task model through both of the library's ways
    in (BertAdapterModel, adapters.init(BertModel)), and the head file applied to their mean
    gives the run's head outputs; each task its own adapter."""
    run = TrainedRun(runs[placement])
    out = exported(runs[placement], tmp_path / "adapters")
    batch = {k: v for k, v in run.tokenizer()(SENTENCES).items() if k != "num_truncated"}
    for task in TASKS:
        assert {p.name for p in (out / task).iterdir()} == {
            "adapter_config.json",
            "pytorch_adapter.bin",
            f"head-{task}.safetensors",
            f"head-{task}.json",
        }
    jobs = [f"{loader}:{out / task}" for task in TASKS for loader in ("model", "init")]
    theirs = library_hidden(library_python, tiny_checkpoint, jobs, batch, tmp_path)
    for task in TASKS:
        model = run.task_model(task).eval()
        with torch.no_grad():
            ours = model.bert(**batch, task=task)["last_hidden_state"]
        for loader in ("model", "init"):
            assert (theirs[f"{loader}:{out / task}"] - ours).abs().max() < 1e-5, (task, loader)
    sst, sts = (theirs[f"model:{out / task}"] for task in TASKS)
    assert (sst - sts).abs().max() > 1e-4  # the adapters moved away from the identity
    head = load_file(str(out / "sst" / "head-sst.safetensors"))
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = (sst * mask).sum(1) / mask.sum(1)
    with torch.no_grad():
        expected = run.task_model("sst")("sst", Batch([batch], None))
    assert (mean @ head["linear.weight"].T + head["linear.bias"] - expected).abs().max() < 1e-5
    config = json.loads((out / "sst" / "adapter_config.json").read_text())
    assert config["name"] == "sst" and config["config"]["non_linearity"] == "gelu"
    mark = json.loads((out / "export.json").read_text())
    assert mark["format"] == "adapters" and "load_adapter" in mark["load"]


REFUSED = {
    "--also lhuc": ("--also", "lhuc"),
    "--train_layernorms": ("--train_layernorms",),
    "--train_encoder": ("--train_encoder",),
    "--adapter_share 2": ("--adapter_share", "2"),
    "--adapter_share_sites": ("--adapter_share_sites",),
}


def test_what_adapters_cannot_hold_is_refused_in_one_line(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    short = (*short_run(1, 1), "--tasks", "sst")
    cases = {"only an adapter run": ("--option", "lora")}
    cases |= {said: ("--option", "adapter", *extra) for said, extra in REFUSED.items()}
    for i, (said, extra) in enumerate(cases.items()):
        run_dir = tmp_path / f"run{i}"
        assert run_driver(tiny_checkpoint, tiny_data, run_dir, *short, *extra) == 0
        capsys.readouterr()
        argv = [str(run_dir), str(tmp_path / "o"), "--format", "adapters"]
        assert export_command.main(argv) == 2, said
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "AdapterHub" in err[0], (said, err)
        assert not (tmp_path / "o").exists()
    plain = tmp_path / "plain"  # the Hugging Face layout points an adapter run to this format
    assert run_driver(tiny_checkpoint, tiny_data, plain, *short, "--option", "adapter") == 0
    capsys.readouterr()
    assert export_command.main([str(plain), str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("or --format adapters"), err
    assert not (tmp_path / "o").exists()


@pytest.mark.numerics
def test_adapters_on_the_packaged_checkpoint(library_python, tiny_data, tmp_path):
    """The same equality on the packaged all-MiniLM-L6-v2 (6 layers, hidden 384), the base a
    user's adapter sits on, loaded by the library's BertAdapterModel, on the real tokens (a
    padding position's state, which nothing reads, differs by up to 1.8e-5 on torch's plain
    kernels through six layers of float32 rounding)."""
    checkpoint = default_checkpoint_dir()
    run_dir = adapter_run(checkpoint, tiny_data, tmp_path / "run", "--adapter_size", "16")
    out = exported(run_dir, tmp_path / "adapters")
    run = TrainedRun(run_dir)
    batch = {k: v for k, v in run.tokenizer()(SENTENCES).items() if k != "num_truncated"}
    jobs = [f"model:{out / task}" for task in TASKS]
    theirs = library_hidden(library_python, checkpoint, jobs, batch, tmp_path)
    real = batch["attention_mask"].bool()  # a padding position's state, read by nothing, aside
    for task in TASKS:
        model = run.task_model(task).eval()
        with torch.no_grad():
            ours = model.bert(**batch, task=task)["last_hidden_state"]
        assert (theirs[f"model:{out / task}"] - ours)[real].abs().max() < 1e-5, task
