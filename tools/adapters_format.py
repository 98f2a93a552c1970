"""An adapter run's task as an AdapterHub bottleneck adapter folder (the ``adapters`` library).

    python -m tools.export RUN_DIR OUT_DIR --format adapters     # OUT_DIR/<task>/ per task

``mh_adapter`` is the position after attention (``attention.output``), ``output_adapter`` the one
after the feed-forward (``output``): houlsby and after_layernorm set both, pfeiffer the second
only. ``reduction_factor`` is chosen so that the library's ``int(hidden_size //
reduction_factor)`` is minBERT's bottleneck m; ``leave_out`` is empty (every layer has its
adapters). The tensors carry over unchanged:

    P.adapter_down.0.weight, P.adapter_down.0.bias      W_down, b_down
    P.adapter_up.weight, P.adapter_up.bias              W_up, b_up

Design notes: docs/design/multitask.md.
"""

from __future__ import annotations

import json
from pathlib import Path

from minbert.bert import BertConfig
from minbert.checkpoint import atomic_save, atomic_write_text
from minbert.plugins.adapter import PLACEMENTS
from multitask.model import ModelSettings, MultitaskModel

CONFIG, WEIGHTS = "adapter_config.json", "pytorch_adapter.bin"
VERSION = "adapters.1.3.0"  # the library version whose save_adapter this layout follows
SITES = {"attention": "attention.output", "feed_forward": "output"}  # minBERT -> HF module path


def unexportable(settings: ModelSettings) -> str | None:
    """Why a run of ``settings`` has no AdapterHub bottleneck adapter equivalent, or None."""
    if why := settings.not_alone("adapter", "an adapter run", "an AdapterHub adapter"):
        return why
    adapter = settings.adapter
    if adapter.share != 1:
        return (
            f"--adapter_share {adapter.share}: AdapterHub keeps one adapter per layer, "
            "none shared across layers"
        )
    if adapter.share_sites:
        return (
            "--adapter_share_sites: AdapterHub keeps one adapter per position, none shared by both"
        )
    return None


def reduction_factor(hidden: int, size: int) -> int | float:
    """A reduction factor ρ with ``int(hidden // ρ) == size``, as the library sizes the bottleneck:
    hidden / size where it divides, else hidden / (size + ½), whose quotient is size + ½ give or
    take a rounding, so its floor is size."""
    if hidden % size == 0:
        return hidden // size
    factor = hidden / (size + 0.5)
    assert int(hidden // factor) == size, (hidden, size, factor)
    return factor


def bottleneck_config(settings: ModelSettings, config: BertConfig) -> dict:
    """The ``BnConfig`` (as ``adapter_config.json`` holds it) that computes minBERT's adapter;
    each field is explained in the module docstring."""
    placement = settings.adapter.placement
    after_norm = placement == "after_layernorm"
    return {
        "mh_adapter": "attention" in PLACEMENTS[placement],
        "output_adapter": "feed_forward" in PLACEMENTS[placement],
        "reduction_factor": reduction_factor(config.hidden_size, settings.adapter.size),
        "non_linearity": "gelu",
        "original_ln_before": after_norm,
        "original_ln_after": not after_norm,
        "residual_before_ln": not after_norm,
        "adapter_residual_before_ln": False,
        "ln_before": False,
        "ln_after": False,
        "init_weights": "bert",
        "init_weights_seed": None,
        "is_parallel": False,
        "scaling": 1.0,
        "use_gating": False,
        "inv_adapter": None,
        "inv_adapter_reduction_factor": None,
        "cross_adapter": False,
        "leave_out": [],
        "dropout": 0.0,
        "phm_layer": False,
        "phm_dim": 4,
        "factorized_phm_W": True,
        "shared_W_phm": False,
        "shared_phm_rule": True,
        "factorized_phm_rule": False,
        "phm_c_init": "normal",
        "phm_init_range": 0.0001,
        "learn_phm": True,
        "hypercomplex_nonlinearity": "glorot-uniform",
        "phm_rank": 1,
        "phm_bias": True,
        "stochastic_depth": 0.0,
    }


def adapter_config(settings: ModelSettings, config: BertConfig, task: str) -> dict:
    """``adapter_config.json`` as ``save_adapter`` of a ``BertAdapterModel`` writes it."""
    return {
        "config": bottleneck_config(settings, config),
        "hidden_size": config.hidden_size,
        "model_class": "BertAdapterModel",
        "model_name": settings.checkpoint,
        "model_type": "bert",
        "name": task,
        "version": VERSION,
    }


def write_adapter(folder: Path, model: MultitaskModel, settings: ModelSettings, task: str) -> None:
    """The task's adapters as an AdapterHub adapter folder (``adapter_config.json``, the
    tensors); the run must be one ``unexportable`` lets through."""
    plugin = model.bert.plugins["adapter"]
    tensors = {}
    for position, adapters in plugin.by_task[task].items():
        for layer, adapter in enumerate(adapters):
            prefix = f"bert.encoder.layer.{layer}.{SITES[position]}.adapters.{task}"
            for name, linear in (("adapter_down.0", adapter.down), ("adapter_up", adapter.up)):
                tensors[f"{prefix}.{name}.weight"] = linear.weight.detach().cpu().contiguous()
                tensors[f"{prefix}.{name}.bias"] = linear.bias.detach().cpu().contiguous()
    folder.mkdir(parents=True, exist_ok=True)
    atomic_save(tensors, folder / WEIGHTS)
    text = json.dumps(adapter_config(settings, model.bert.config, task), indent=2, sort_keys=True)
    atomic_write_text(folder / CONFIG, text + "\n")
