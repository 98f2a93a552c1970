"""AdapterFusion's first stage, as a fusion run reads it: the adapters of a finished adapter run.

    python train_multitask.py --option adapter --out_dir runs/adapters              # stage 1
    python train_multitask.py --option fusion --adapters_from runs/adapters         # stage 2

``--adapters_from RUN`` names a finished ``--option adapter`` run (its adapters alone: no
``--also``, per-task LayerNorms, trained encoder or ``--add_to`` chain). Its settings that shape
the encoder (checkpoint, sentence representation, pair encoding, --max_length, every
``--adapter_*`` flag) become the fusion run's; its tasks are the fusion's sources, and its
``best.safetensors`` gives their adapter weights, loaded into ``AdapterFusion.sources``
(``minbert/plugins/fusion.py``) whenever a fusion run's model is built (training, --resume,
--evaluate, predict), so that folder must stay where it is. Which adapter each task reads from:
``python -m tools.fusion_weights RUN`` (``tools/fusion_weights.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from minbert.checkpoint import UnsafeCheckpointError, load_tensors
from multitask.errors import UsageError
from multitask.extras import Part

# The encoder-shaping settings a fusion run takes from its stage-1 run (config.json keys).
STAGE_ONE_KEYS = ("checkpoint", "representation", "pair_encoding", "max_length")
ADAPTER_PREFIX = "bert.plugins.adapter."


class StageTwo(Part):
    """A run with --option fusion or --adapters_from: the two go together. (The fusion itself is
    built with the model: multitask/model.py, the one core file that names this extra.)"""

    def check_settings(self, elsewhere: bool) -> Iterator[str]:
        yield "--option fusion and --adapters_from RUN_DIR (its stage-1 adapter run) go together"


def for_run(cfg: Any) -> StageTwo | None:
    """Its part where exactly one of --option fusion and --adapters_from is given (what its
    check refuses); else None."""
    return StageTwo() if (cfg.model.option == "fusion") != bool(cfg.model.adapters_from) else None


def stage_one(run_dir: str) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The tasks of the adapter run ``run_dir`` and its adapters' state, keyed as in a
    ``HoulsbyAdapter`` (``by_task.<task>....``); a UsageError in one line when it is not a
    finished adapter run of adapters alone."""
    folder = Path(run_dir)
    config, best = folder / "config.json", folder / "best.safetensors"
    try:
        saved = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UsageError(f"--adapters_from {run_dir}: no readable config.json there") from None
    if not isinstance(saved, dict) or saved.get("option") != "adapter":
        option = saved.get("option") if isinstance(saved, dict) else None
        raise UsageError(
            f"--adapters_from {run_dir}: a run of --option {option}; fusion fuses the adapters "
            "of an --option adapter run"
        )
    for key, why in (
        ("also", "--also"),
        ("train_layernorms", "--train_layernorms"),
        ("train_encoder", "--train_encoder"),
        ("base_tasks", "--add_to"),
    ):
        if saved.get(key):
            raise UsageError(
                f"--adapters_from {run_dir}: trained with {why}; fusion reads adapters alone on "
                "the checkpoint's frozen encoder"
            )
    if not best.is_file():
        raise UsageError(f"--adapters_from {run_dir}: {best} not found (the run never evaluated)")
    try:
        tensors = load_tensors(best)
    except UnsafeCheckpointError as err:
        raise UsageError(str(err)) from None
    state = {
        k[len(ADAPTER_PREFIX) :]: v for k, v in tensors.items() if k.startswith(ADAPTER_PREFIX)
    }
    return list(saved["tasks"]), state


def load_sources(sources: nn.Module, run_dir: str, state: dict[str, torch.Tensor]) -> None:
    """The stage-1 adapters into the fusion's ``sources``. They are read from ``run_dir`` each
    time a fusion run's model is built, so a folder since replaced by another adapter run (other
    sizes or placement) would not fit the run's settings: one line naming --adapters_from and
    the folder, not load_state_dict's traceback."""
    try:
        sources.load_state_dict(state)
    except RuntimeError as err:
        detail = [line.strip() for line in str(err).splitlines()[1:] if line.strip()]
        raise UsageError(
            f"--adapters_from {run_dir}: its adapters do not fit this fusion run "
            f"({detail[0] if detail else err}); the folder holds another adapter run than the "
            "one the fusion was trained on: put that run back in it"
        ) from None
