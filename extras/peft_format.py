"""A LoRA run's task as a PEFT adapter folder, and a PEFT adapter folder as a task's LoRA.

    python -m tools.export RUN_DIR OUT_DIR --format peft     # OUT_DIR/<task>/ per task
    python train_multitask.py --option lora --init_lora sst=OUT_DIR/sst

PEFT (Hugging Face's parameter-efficient fine-tuning library, ``peft``) keeps a LoRA adapter as
two files: ``adapter_config.json`` (rank ``r``, ``lora_alpha``, ``target_modules``,
``lora_dropout``) and ``adapter_model.safetensors``, which holds for every adapted ``nn.Linear``
of transformers' ``BertModel`` the tensors

    base_model.model.encoder.layer.N.<module path>.lora_A.weight    A: r×d_in
    base_model.model.encoder.layer.N.<module path>.lora_B.weight    B: d_out×r

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from minbert.checkpoint import UnsafeCheckpointError, atomic_write_text, load_tensors, save_tensors
from minbert.flags import setting, task_folders
from minbert.pretrained import CheckpointError, resolve_checkpoint_dir
from minbert.sites import LINEAR_SITES
from multitask.errors import UsageError
from multitask.extras import Part
from multitask.model import ModelSettings, MultitaskModel

HF_PATHS = LINEAR_SITES  # a layer's linear maps by site name: their paths, Hugging Face's
CONFIG, WEIGHTS = "adapter_config.json", "adapter_model.safetensors"


@dataclass
class Settings:
    """The flag that starts a LoRA run from PEFT adapters (docs/flags.md has the details)."""

    init_lora: list[str] = setting(
        help="TASK=DIR,...: start each task's LoRA (--option lora) from a PEFT adapter folder",
        factory=list,
        group="PEFT LoRA adapters",
    )


class StartedFromPeft(Part):
    """A run with --init_lora: each named task's LoRA starts from its PEFT adapter folder."""

    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.entries = cfg.extras["peft_format"].init_lora

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        """--init_lora goes with --option lora, each entry a task of the run given once."""
        option = self.cfg.model.option
        if option != "lora":
            yield f"--init_lora starts LoRA: it goes with --option lora, not {option}"
        else:
            adapter_folders(self.entries, self.cfg.tasks)

    def wrap_model(self, model: MultitaskModel) -> MultitaskModel:
        """Each named task's LoRA from its PEFT folder, once the model is built (not on a
        resume, which restores its weights from last.pt)."""
        if not self.cfg.resume:
            load_adapters(self.entries, self.cfg.tasks, model, self.cfg.model.checkpoint)
        return model


def for_run(cfg: Any) -> StartedFromPeft | None:
    """Its part in a run with --init_lora; else None."""
    return StartedFromPeft(cfg) if cfg.extras["peft_format"].init_lora else None


def adapter_folders(entries: list[str], tasks: list[str]) -> dict[str, str]:
    """``--init_lora ["sst=out/sst", ...]`` -> ``{"sst": "out/sst"}``; ValueError names a bad
    entry."""
    return task_folders("--init_lora", entries, tasks)


def unexportable(settings: ModelSettings) -> str | None:
    """Why a run of ``settings`` has no PEFT LoRA adapter equivalent, or None."""
    return settings.not_alone("lora", "a LoRA run", "a PEFT LoRA adapter")


def target_modules(targets: tuple[str, ...]) -> list[str] | str:
    """PEFT's ``target_modules`` for minBERT's LoRA targets (see the module docstring)."""
    paths = [HF_PATHS[name] for name in targets]
    if "output" not in targets:
        return paths
    return r"encoder\.layer\.\d+\.(" + "|".join(re.escape(p) for p in paths) + ")"


def key(layer: int, target: str, part: str) -> str:
    return f"base_model.model.encoder.layer.{layer}.{HF_PATHS[target]}.lora_{part}.weight"


def adapter_config(settings: ModelSettings) -> dict:
    """``adapter_config.json`` as PEFT writes it for this LoRA (the fields PEFT reads)."""
    lora = settings.lora
    return {
        "peft_type": "LORA",
        "base_model_name_or_path": settings.checkpoint,
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "target_modules": target_modules(lora.target_names),
        "bias": "none",
        "fan_in_fan_out": False,
        "init_lora_weights": True,
        "use_rslora": False,
        "use_dora": False,
        "inference_mode": True,
        "modules_to_save": None,
        "layers_to_transform": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "task_type": None,
    }


def write_adapter(folder: Path, model: MultitaskModel, settings: ModelSettings, task: str) -> None:
    """The task's LoRA as a PEFT adapter folder (``adapter_config.json``, the tensors)."""
    updates = model.bert.plugins["lora"].by_task[task]
    tensors = {}
    for layer, maps in enumerate(updates):
        for target, update in maps.items():
            tensors[key(layer, target, "A")] = update.A.detach().contiguous()
            tensors[key(layer, target, "B")] = update.B.detach().contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    save_tensors(tensors, folder / WEIGHTS)
    atomic_write_text(folder / CONFIG, json.dumps(adapter_config(settings), indent=2) + "\n")


def read_config(folder: Path) -> dict:
    """``adapter_config.json`` as a dict whose rank and α are numbers; ValueError (one line
    naming the file) where it is not JSON, not an object, or ``r`` is not a rank."""
    path = folder / CONFIG
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ValueError(f"{path}: corrupted (not readable JSON: {err})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path}: corrupted (a JSON {type(config).__name__}, not an object)")
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        raise ValueError(f"{path}: r {rank!r} is not a rank (a whole number, at least 1)")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise ValueError(f"{path}: lora_alpha {alpha!r} is not a number")
    return config


def read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    """``adapter_model.safetensors``'s tensors, by minBERT's names (PEFT's ``.default.``
    dropped); a cut-off or foreign file is corrupted, named as the project's checkpoints are."""
    try:
        tensors = load_tensors(folder / WEIGHTS)
    except UnsafeCheckpointError as err:
        raise ValueError(str(err)) from None
    return {k.replace(".default.", "."): v for k, v in tensors.items()}


def shape_problem(name: str, found: torch.Tensor, wanted: torch.Tensor, rank: int) -> str | None:
    """What is wrong with one tensor's shape, in words: a rank other than the config's ``r``
    (A is r×d_in, B is d_out×r), or a base model's width other than this one's."""
    if list(found.shape) == list(wanted.shape):
        return None
    side = 0 if name.endswith("lora_A.weight") else 1  # where the rank is
    if found.dim() != 2:
        return f"{name} has {found.dim()} dimensions, not 2: corrupted"
    if found.shape[1 - side] != wanted.shape[1 - side]:
        return (
            f"another base model: {name} is {list(found.shape)} (this model: {list(wanted.shape)})"
        )
    return f"{name} is {list(found.shape)}, rank {found.shape[side]}, but {CONFIG} says r {rank}"


def read_adapter(folder: str | Path, model: MultitaskModel, task: str) -> dict[str, torch.Tensor]:
    """The tensors of a PEFT LoRA adapter folder for ``task``'s LoRA in ``model``, by this
    model's names; ValueError (one line naming the file) where the folder is not a LoRA
    adapter of this model's rank, α, targets and base shapes."""
    folder = Path(folder)
    for name in (CONFIG, WEIGHTS):
        if not (folder / name).is_file():
            raise ValueError(f"{folder}: no {name}; give a folder PEFT's save_pretrained wrote")
    config = read_config(folder)
    named = read_tensors(folder)
    lora = model.bert.plugins["lora"]
    ours = {
        "peft_type": "LORA",
        "r": lora.rank,
        "lora_alpha": lora.alpha,
        "target_modules": target_modules(lora.targets),
        "use_dora": False,
        "use_rslora": False,
    }
    theirs = {k: config.get(k) for k in ours}
    if isinstance(theirs["target_modules"], list):
        theirs["target_modules"] = sorted(theirs["target_modules"])
        ours["target_modules"] = sorted(ours["target_modules"])
    if differ := [
        f"{k} {theirs[k]!r} (this run: {ours[k]!r})" for k in ours if theirs[k] != ours[k]
    ]:
        raise ValueError(f"{folder / CONFIG}: another LoRA than this run's: {'; '.join(differ)}")
    expected = {
        key(layer, target, part): getattr(update, part)
        for layer, maps in enumerate(lora.by_task[task])
        for target, update in maps.items()
        for part in "AB"
    }
    if set(named) != set(expected):
        missing, extra = sorted(set(expected) - set(named)), sorted(set(named) - set(expected))
        raise ValueError(
            f"{folder / WEIGHTS}: another base model: missing {missing[:2]}, extra {extra[:2]}"
        )
    for name, wanted in expected.items():
        if problem := shape_problem(name, named[name], wanted, lora.rank):
            raise ValueError(f"{folder / WEIGHTS}: {problem}")
    return named


def same_base(named: object, checkpoint: str) -> bool:
    """Whether ``base_model_name_or_path`` names the run's checkpoint: the same words, the same
    folder, or the name the checkpoint's own config.json gives it (``_name_or_path``). A name
    that is absent says nothing either way."""
    if not isinstance(named, str) or not named or named == checkpoint:
        return True
    try:
        ours = resolve_checkpoint_dir(checkpoint).resolve()
    except CheckpointError:
        return False
    if Path(named).is_dir() and Path(named).resolve() == ours:
        return True
    if named == "default" and ours == resolve_checkpoint_dir(None).resolve():
        return True
    try:
        config = json.loads((ours / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(config, dict) and config.get("_name_or_path") == named


@torch.no_grad()
def load_adapter(folder: str | Path, model: MultitaskModel, task: str) -> None:
    """Start ``task``'s LoRA in ``model`` from a PEFT adapter folder (``read_adapter``)."""
    tensors = read_adapter(folder, model, task)
    for layer, maps in enumerate(model.bert.plugins["lora"].by_task[task]):
        for target, update in maps.items():
            update.A.copy_(tensors[key(layer, target, "A")])
            update.B.copy_(tensors[key(layer, target, "B")])


def load_adapters(
    entries: list[str], tasks: list[str], model: MultitaskModel, checkpoint: str
) -> None:
    """``--init_lora TASK=FOLDER,...``: each named task's LoRA from its PEFT folder; a folder that
    does not fit the model is one line naming it. A folder whose config names another base model
    than ``checkpoint`` (the run's) is loaded, since its shapes fit, but with a warning: the same
    shapes on other weights train from a LoRA that means nothing there."""
    for task, folder in adapter_folders(entries, tasks).items():
        try:
            load_adapter(folder, model, task)
        except ValueError as err:
            raise UsageError(f"--init_lora {task}={folder}: {err}") from None
        named = read_config(Path(folder)).get("base_model_name_or_path")
        if not same_base(named, checkpoint):
            print(
                f"warning: --init_lora {task}={folder}: {CONFIG} names the base model {named!r}, "
                f"this run's checkpoint is {checkpoint}; the shapes fit, so it is loaded: make "
                "sure it was trained on this checkpoint",
                file=sys.stderr,
            )
