"""A LoRA run's tasks as PEFT adapters and back: ``python -m tools.export --format peft``
writes folders that ``peft.PeftModel.from_pretrained`` loads onto transformers' ``BertModel`` of
the base checkpoint with minBERT's hidden states (within 1e-5) and head outputs; ``--init_lora``
starts a run's LoRA from such a folder bit for bit; what PEFT cannot hold, and folders of another
LoRA or base, are refused in one line with nothing written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import train_multitask
from extras.peft_format import write_adapter
from minbert.pretrained import default_checkpoint_dir
from multitask.collate import Batch
from multitask.trained import TrainedRun
from tests.helpers import driver_argv, run_driver, short_run
from tools import export as export_command
from tools import predict as predict_command

peft = pytest.importorskip("peft")
SENTENCES = ["a good film", "what a bad movie, said the cat", "how do you do"]
ALL_TARGETS = "query,key,value,attention_output,intermediate,output"


def lora_run(checkpoint: Path, data: Path, out: Path, *extra: str) -> Path:
    short = (*short_run(2, 3), "--tasks", "sst,sts")
    assert run_driver(checkpoint, data, out, *short, "--option", "lora", *extra) == 0
    return out


@pytest.fixture(scope="module")
def runs(tiny_checkpoint, tiny_data, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("peft_runs")
    return {
        "default": lora_run(tiny_checkpoint, tiny_data, root / "default"),
        "all": lora_run(tiny_checkpoint, tiny_data, root / "all", "--lora_targets", ALL_TARGETS),
    }


def exported(run_dir: Path, out: Path) -> Path:
    assert export_command.main([str(run_dir), str(out), "--format", "peft"]) == 0
    return out


def peft_hidden(checkpoint: Path, folder: Path, batch: dict) -> torch.Tensor:
    from transformers import BertModel

    base = BertModel.from_pretrained(str(checkpoint))
    model = peft.PeftModel.from_pretrained(base, str(folder)).eval()
    with torch.no_grad():
        return model(**batch).last_hidden_state


@pytest.mark.numerics
@pytest.mark.parametrize("targets", ["default", "all"])
def test_peft_loads_each_task_with_minberts_outputs(targets, runs, tiny_checkpoint, tmp_path):
    """Hidden states within 1e-5 of minBERT's task model, and the head file applied to their
    mean gives the run's head outputs; each task its own adapter."""
    run = TrainedRun(runs[targets])
    out = exported(runs[targets], tmp_path / "peft")
    batch = {k: v for k, v in run.tokenizer()(SENTENCES).items() if k != "num_truncated"}
    hidden = {}
    for task in ("sst", "sts"):
        assert {p.name for p in (out / task).iterdir()} == {
            "adapter_config.json",
            "adapter_model.safetensors",
            f"head-{task}.safetensors",
            f"head-{task}.json",
        }
        hidden[task] = peft_hidden(tiny_checkpoint, out / task, batch)
        model = run.task_model(task).eval()
        with torch.no_grad():
            ours = model.bert(**batch, task=task)["last_hidden_state"]
        assert (hidden[task] - ours).abs().max() < 1e-5
    assert (hidden["sst"] - hidden["sts"]).abs().max() > 1e-4  # B moved away from 0
    head = load_file(str(out / "sst" / "head-sst.safetensors"))
    mask = batch["attention_mask"].unsqueeze(-1).float()
    mean = (hidden["sst"] * mask).sum(1) / mask.sum(1)
    with torch.no_grad():
        expected = run.task_model("sst")("sst", Batch([batch], None))
    assert (mean @ head["linear.weight"].T + head["linear.bias"] - expected).abs().max() < 1e-5
    config = json.loads((out / "sst" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (8, 16.0, "LORA")
    mark = json.loads((out / "export.json").read_text())
    assert mark["format"] == "peft" and "PeftModel.from_pretrained" in mark["load"]


def test_init_lora_starts_from_the_folder_bit_for_bit(
    runs, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """PEFT -> --init_lora -> the run's LoRA tensors are the folder's exactly (before any
    step), so an export of them is the folder again; a run started so trains and predicts."""
    out = exported(runs["default"], tmp_path / "peft")
    folders = f"sst={out / 'sst'},sts={out / 'sts'}"
    argv = driver_argv(tiny_checkpoint, tiny_data, tmp_path / "started", "--no_plots")
    argv += ["--option", "lora", "--tasks", "sst,sts", "--init_lora", folders]
    run = train_multitask.set_up(train_multitask.parse_args(argv))
    lora = run.model.bert.plugins["lora"]
    for task in ("sst", "sts"):
        saved = load_file(str(out / task / "adapter_model.safetensors"))
        for layer, maps in enumerate(lora.by_task[task]):
            for name, update in maps.items():
                path = {"query": "attention.self.query", "value": "attention.self.value"}[name]
                prefix = f"base_model.model.encoder.layer.{layer}.{path}"
                assert torch.equal(update.A.detach().cpu(), saved[f"{prefix}.lora_A.weight"])
                assert torch.equal(update.B.detach().cpu(), saved[f"{prefix}.lora_B.weight"])
        again = tmp_path / "again" / task  # and written out again: the same tensors, bit for bit
        write_adapter(again, run.model, run.cfg.model, task)
        written = load_file(str(again / "adapter_model.safetensors"))
        assert written.keys() == saved.keys()
        assert all(torch.equal(written[k], saved[k]) for k in saved)
    continued = lora_run(tiny_checkpoint, tiny_data, tmp_path / "continued", "--init_lora", folders)
    source = tmp_path / "input.txt"
    source.write_text("a good film\n")
    argv = [str(continued), "--task", "sst", "--input", str(source)]
    assert predict_command.main([*argv, "--output", str(tmp_path / "p.txt")]) == 0
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 1


def test_what_peft_cannot_hold_is_refused_in_one_line(
    runs, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    adapter = tmp_path / "adapter"
    short = (*short_run(1, 1), "--tasks", "sst")
    assert run_driver(tiny_checkpoint, tiny_data, adapter, *short, "--option", "adapter") == 0
    layernorms = lora_run(tiny_checkpoint, tiny_data, tmp_path / "ln", "--train_layernorms")
    capsys.readouterr()
    for run_dir, said in ((adapter, "only a LoRA run"), (layernorms, "--train_layernorms")):
        assert export_command.main([str(run_dir), str(tmp_path / "o"), "--format", "peft"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0]
        assert not (tmp_path / "o").exists()


def bad_folder(source: Path, tmp_path: Path, change) -> Path:
    folder = tmp_path / f"bad{len(list(tmp_path.iterdir()))}"
    shutil.copytree(source, folder)
    change(folder)
    return folder


def test_a_folder_of_another_lora_or_base_is_refused_before_anything_is_written(
    runs, tiny_checkpoint, tiny_data, tmp_path, capsys
):
    out = exported(runs["default"], tmp_path / "peft")

    def config_with(**changes):
        def change(folder: Path) -> None:
            path = folder / "adapter_config.json"
            path.write_text(json.dumps(json.loads(path.read_text()) | changes))

        return change

    def wider(folder: Path) -> None:  # a base with another hidden size
        path = folder / "adapter_model.safetensors"
        tensors = load_file(str(path))
        save_file(
            {k: torch.zeros(v.shape[0], v.shape[1] + 1) for k, v in tensors.items()}, str(path)
        )

    cases = {
        "no adapter_config.json": lambda f: (f / "adapter_config.json").unlink(),
        "r 4": config_with(r=4),
        "lora_alpha 32": config_with(lora_alpha=32),
        "target_modules": config_with(target_modules=["attention.self.key"]),
        "another base model": wider,
    }
    for said, change in cases.items():
        folder = bad_folder(out / "sst", tmp_path, change)
        run_dir = tmp_path / "never"
        argv = driver_argv(tiny_checkpoint, tiny_data, run_dir, "--no_plots", "--option", "lora")
        code = train_multitask.main([*argv, "--tasks", "sst", "--init_lora", f"sst={folder}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, (said, err)
        assert "--init_lora sst=" in err[0] and said in err[0], err[0]
        assert not run_dir.exists()
    argv = driver_argv(tiny_checkpoint, tiny_data, tmp_path / "never", "--no_plots")
    assert train_multitask.main([*argv, "--init_lora", f"sst={out / 'sst'}"]) == 2
    assert "goes with --option lora" in capsys.readouterr().err


@pytest.mark.numerics
def test_peft_on_the_packaged_checkpoint(tiny_data, tmp_path):
    """The same equality on the packaged all-MiniLM-L6-v2 (6 layers, hidden 384), the base a
    user's adapter sits on, for the default targets and all six, on the real tokens (about 4e-6
    seen; a padding position's state, which nothing reads, differs by up to 1.3e-5 through six
    layers of float32 rounding)."""
    checkpoint = default_checkpoint_dir()
    for targets in ("query,value", ALL_TARGETS):
        folder = tmp_path / targets.replace(",", "-")
        run_dir = lora_run(checkpoint, tiny_data, folder / "run", "--lora_targets", targets)
        out = exported(run_dir, folder / "peft")
        run = TrainedRun(run_dir)
        batch = {k: v for k, v in run.tokenizer()(SENTENCES).items() if k != "num_truncated"}
        real = batch["attention_mask"].bool()
        for task in ("sst", "sts"):
            model = run.task_model(task).eval()
            with torch.no_grad():
                ours = model.bert(**batch, task=task)["last_hidden_state"]
            differ = (peft_hidden(checkpoint, out / task, batch) - ours)[real].abs().max()
            assert differ < 1e-5
