"""Loading checkpoint directories in Hugging Face layout (config.json + model.safetensors or
pytorch_model.bin): the key fix-up, strict loading, clear errors, and refusing unsafe pickles."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from minbert.bert import BertConfig, BertModel
from minbert.pretrained import (
    CheckpointError,
    config_from_dict,
    default_checkpoint_dir,
    load_pretrained,
)
from tests.helpers import driver_argv

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_FILE = ROOT / "sanity_check_reference.pt"


def hugging_face_layout(model: BertModel) -> dict[str, torch.Tensor]:
    """The state dict as a ``BertForPreTraining`` checkpoint of the TensorFlow era stores it:
    keys under ``bert.``, LayerNorm parameters named gamma / beta, a pre-training head
    (``cls.*``) and the ``position_ids`` buffer."""
    state: dict[str, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace(
            "LayerNorm.bias", "LayerNorm.beta"
        )
        state["bert." + key] = tensor.clone()
    state["bert.embeddings.position_ids"] = model.embeddings.position_ids.clone()
    state["cls.predictions.bias"] = torch.zeros(model.config.vocab_size)
    return state


def write_checkpoint(
    directory: Path, config: BertConfig, state: dict[str, torch.Tensor], fmt: str = "safetensors"
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    values = dataclasses.asdict(config) | {"model_type": "bert", "architectures": ["BertModel"]}
    (directory / "config.json").write_text(json.dumps(values))
    if fmt == "safetensors":
        save_file(
            {k: v.contiguous() for k, v in state.items()}, str(directory / "model.safetensors")
        )
    else:
        torch.save(state, directory / "pytorch_model.bin")
    return directory


def random_model(config: BertConfig, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    model = BertModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)  # far from the init, so a weight left unloaded would show
    return model.eval()


def inputs(vocab_size: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "input_ids": torch.randint(1, vocab_size, (2, 6), generator=g),
        "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]]),
        "token_type_ids": torch.tensor([[0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 0, 0]]),
    }


def assert_same_outputs(a: BertModel, b: BertModel) -> None:
    batch = inputs(a.config.vocab_size)
    with torch.no_grad():
        out_a, out_b = a.eval()(**batch), b.eval()(**batch)
    for name in ("last_hidden_state", "pooler_output"):
        assert torch.equal(out_a[name], out_b[name]), name


@pytest.mark.parametrize("fmt", ["safetensors", "bin"])
def test_hugging_face_layout_loads_strictly(tmp_path: Path, fmt: str, caplog) -> None:
    config = BertConfig.tiny()
    model = random_model(config)
    write_checkpoint(tmp_path, config, hugging_face_layout(model), fmt)
    with caplog.at_level(logging.INFO, logger="minbert.pretrained"):
        loaded = load_pretrained(tmp_path)
    assert loaded.config == config
    for key, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], tensor), key
    assert_same_outputs(model, loaded)
    assert "cls.predictions.bias" in caplog.text  # the loader says what it dropped


def test_bert_base_shaped_checkpoint_loads(tmp_path: Path) -> None:
    # bert-base's shapes (BertConfig's defaults), with a small vocabulary to keep it fast.
    config = BertConfig(vocab_size=100)
    torch.manual_seed(0)
    model = BertModel(config).eval()
    write_checkpoint(tmp_path, config, hugging_face_layout(model))
    loaded = load_pretrained(tmp_path)
    assert loaded.config == config
    assert_same_outputs(model, loaded)


@pytest.mark.parametrize("fault", ["missing", "shape", "unexpected"])
def test_mismatched_checkpoint_raises(tmp_path: Path, fault: str) -> None:
    config = BertConfig.tiny()
    state = hugging_face_layout(random_model(config))
    if fault == "missing":
        del state["bert.encoder.layer.1.output.dense.weight"]
    elif fault == "shape":
        state["bert.encoder.layer.0.intermediate.dense.weight"] = torch.zeros(25, 16)
    else:
        state["bert.encoder.layer.2.output.dense.weight"] = torch.zeros(16, 24)
    write_checkpoint(tmp_path, config, state)
    with pytest.raises(CheckpointError, match="layer"):
        load_pretrained(tmp_path)


def test_config_and_weights_disagree_raises(tmp_path: Path) -> None:
    state = hugging_face_layout(random_model(BertConfig.tiny()))
    write_checkpoint(tmp_path, BertConfig.tiny(num_hidden_layers=3), state)
    with pytest.raises(CheckpointError, match="encoder.layer.2"):
        load_pretrained(tmp_path)


class Payload:
    """Unpickling this runs ``os.system(command)``: what a hostile pytorch_model.bin can do."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_pickle_with_code_is_refused_and_never_runs(tmp_path: Path) -> None:
    config = BertConfig.tiny()
    state: dict[str, object] = dict(hugging_face_layout(random_model(config)))
    marker = tmp_path / "payload_ran"
    state["bert.pooler.dense.bias"] = Payload(f"touch {marker}")
    write_checkpoint(tmp_path / "ckpt", config, state, fmt="bin")  # type: ignore[arg-type]
    with pytest.raises(CheckpointError, match="refused"):
        load_pretrained(tmp_path / "ckpt")
    assert not marker.exists()


def test_bad_directories_raise(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_pretrained(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="config.json"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="JSON"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(BertConfig.tiny())))
    with pytest.raises(CheckpointError, match="neither"):
        load_pretrained(tmp_path)


def packaged_checkpoint() -> Path:
    try:
        return default_checkpoint_dir()
    except CheckpointError as err:
        pytest.skip(str(err))


@pytest.mark.numerics
def test_packaged_checkpoint_matches_reference_outputs() -> None:
    """The one test on the real weights: all-MiniLM-L6-v2 against Hugging Face's outputs, saved by
    scripts/make_reference.py (sanity_check.py runs the same comparison with more detail)."""
    model = load_pretrained(packaged_checkpoint()).eval()
    assert (model.config.num_hidden_layers, model.config.hidden_size) == (6, 384)
    from course.measure import measure_sealed
    from course.observed import Observed

    reference = torch.load(REFERENCE_FILE, weights_only=True)
    for batch_name in ("single", "pair"):
        ref = reference[batch_name]
        with torch.no_grad():
            out = model(ref["input_ids"], ref["attention_mask"], ref["token_type_ids"])
        real = ref["attention_mask"].bool()[..., None]
        got = {
            # the file holds the outputs sealed (digests and projections), padding zeroed
            "last_hidden_state": torch.where(real, out["last_hidden_state"], 0.0),
            "pooler_output": out["pooler_output"],
        }
        for name, tensor in got.items():
            m = measure_sealed(name, Observed(name, tensor, ref[name]), ref[name])
            assert m.max_abs_diff <= 1e-5, (batch_name, m.hint)


def test_config_from_dict_warns_on_unknown_keys_only() -> None:
    values = BertConfig.tiny().__dict__ | {"model_type": "bert", "architectures": ["BertModel"]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # metadata keys are not worth a warning
        assert config_from_dict(values) == BertConfig.tiny()
    with pytest.warns(UserWarning, match="rotary_dim"):
        config = config_from_dict(values | {"rotary_dim": 8})
    assert config == BertConfig.tiny()


def test_a_checkpoint_holding_nan_is_named_as_the_checkpoints(tiny_checkpoint, tiny_data, tmp_path):
    """NaN in the weights a run starts from is the checkpoint's fault, said before training
    (exit 2, naming the checkpoint), never a non-finite loss blamed on --lr."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint, broken)
    tensors = load_file(broken / "model.safetensors")
    tensors["pooler.dense.bias"][0] = float("nan")
    save_file(tensors, broken / "model.safetensors")
    with pytest.raises(CheckpointError, match="the weights hold NaN or inf"):
        load_pretrained(broken)
    cmd = [sys.executable, "train_multitask.py"]
    cmd += driver_argv(broken, tiny_data, tmp_path / "run", "--epochs", "1", "--no_plots")
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and f"{broken}: the weights hold NaN or inf" in done.stderr
    assert "--lr" not in done.stderr
