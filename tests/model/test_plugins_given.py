"""What the course gives the student around the plug-ins: per-task LayerNorms, freezing, parameter
counts and the report, state loading, train/eval mode, bad options; the student tree leaves
these out."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minbert.bert import BertConfig, BertModel
from minbert.plugins import (
    add_plugin,
    count_formula,
    format_parameter_report,
    freeze_for_plugins,
    load_plugin_state_dict,
    parameter_report,
    plugin_class,
    plugin_state_dict,
    remove_plugin,
)
from minbert.plugins.lora import TARGETS as LORA_TARGETS
from tests.model.test_plugins import TASKS, base_model, batch, perturb, with_plugin


def test_per_task_layernorms_are_attached_first() -> None:
    model = with_plugin(base_model(), "adapter")
    with pytest.raises(ValueError, match="before any other plug-in"):
        add_plugin(model, "layernorm", TASKS)


def test_freeze_for_plugins_needs_a_plugin() -> None:
    with pytest.raises(ValueError, match="no plug-ins"):
        freeze_for_plugins(base_model())


def test_parameter_counts_match_the_formulas() -> None:
    config = BertConfig.tiny(num_hidden_layers=6)
    D, L, F_ = config.hidden_size, config.num_hidden_layers, config.intermediate_size
    model = BertModel(config)

    def per_task(kind: str, **options) -> int:
        plugin = plugin_class(kind)(config, ["sst", "para"], **options)
        counts = {sum(p.numel() for p in plugin.task_parameters(t)) for t in plugin.tasks}
        assert len(counts) == 1  # every task the same size
        total = sum(p.numel() for p in plugin.parameters())
        assert total == 2 * counts.pop()  # every parameter belongs to one task
        return total // 2

    m = 8
    adapter = 2 * m * D + D + m
    assert (
        per_task("adapter", size=m) == 2 * L * adapter == count_formula("adapter", config, size=m)
    )
    assert per_task("adapter", size=m, placement="pfeiffer") == L * adapter
    assert per_task("adapter", size=m, share=3) == 2 * (L // 3) * adapter
    assert count_formula("adapter", config, size=m, share=3) == 2 * (L // 3) * adapter
    assert per_task("adapter", size=m, share=4) == 2 * 2 * adapter  # ⌈6 / 4⌉ groups

    r = 4
    assert per_task("lora", rank=r) == L * 2 * r * (D + D) == count_formula("lora", config, rank=r)
    expected = L * r * (4 * (D + D) + (D + F_) + (F_ + D))  # 4 maps D→D, D→F, F→D
    assert per_task("lora", rank=r, targets=LORA_TARGETS) == expected
    assert count_formula("lora", config, rank=r, targets=LORA_TARGETS) == expected

    assert per_task("lhuc") == L * D == count_formula("lhuc", config)
    assert per_task("layernorm") == L * 2 * 2 * D == count_formula("layernorm", config)
    assert per_task("adapter", size=m, placement="after_layernorm") == 2 * L * adapter

    s, h = 12, 3
    pal = (D * s + s) + (s * D + D) + L * 3 * (s * s + s)  # V_E, V_D, per layer q, k, v
    assert (
        per_task("pals", size=s, heads=h) == pal == count_formula("pals", config, size=s, heads=h)
    )
    assert per_task("pals") == count_formula("pals", config)  # default size: 8 = 4 heads × 2

    report = parameter_report(model, {})
    assert report["base"] == sum(p.numel() for p in model.parameters())


def test_parameter_report() -> None:
    model = with_plugin(base_model(), "lhuc")
    base = sum(p.numel() for p in model.parameters()) - 2 * 2 * 32
    heads = {"sst": nn.Linear(32, 5), "para": nn.Linear(32, 1)}
    freeze_for_plugins(model)
    report = parameter_report(model, heads)
    assert report["base"] == base
    assert report["plugins"] == 2 * 2 * 32
    assert report["heads"] == 32 * 5 + 5 + 32 + 1
    assert report["total"] == base + report["plugins"] + report["heads"]
    assert report["trainable"] == report["plugins"] + report["heads"]
    assert report["shared_trainable"] == 0
    assert report["tasks"]["sst"]["trainable"] == 64
    assert report["tasks"]["sst"]["trainable_with_head"] == 64 + 165
    assert report["tasks"]["para"]["fraction_of_base"] == pytest.approx(64 / base)
    text = format_parameter_report(report)
    assert "sst" in text and "para" in text


def test_loading_a_mismatched_state_is_an_error() -> None:
    model = with_plugin(base_model(), "adapter")
    state = plugin_state_dict(model, "sst")
    other = with_plugin(base_model(), "adapter-pfeiffer")
    with pytest.raises(ValueError, match="missing"):
        load_plugin_state_dict(other, "sst", state)


def test_plugins_follow_the_model_train_eval_mode() -> None:
    model = base_model()  # in eval mode
    plugin = add_plugin(model, "pals", TASKS)
    assert not any(m.training for m in plugin.modules())
    plugin.add_task("sts")
    assert not any(m.training for m in plugin.modules())
    model.train()
    assert all(m.training for m in plugin.modules())


def test_bad_kinds_and_options_are_errors() -> None:
    model = base_model()
    with pytest.raises(ValueError, match="unknown plug-in kind"):
        add_plugin(model, "prefix", TASKS)
    with pytest.raises(ValueError, match="no option"):
        add_plugin(model, "adapter", TASKS, bottleneck=8)
    with pytest.raises(ValueError, match="placement"):
        add_plugin(model, "adapter", TASKS, placement="middle")
    with pytest.raises(ValueError, match="multiple of heads"):
        add_plugin(model, "pals", TASKS, size=10, heads=4)
    with pytest.raises(ValueError, match="targets"):
        add_plugin(model, "lora", TASKS, targets=["query", "pooler"])
    with pytest.raises(ValueError, match="list of task names"):
        add_plugin(model, "lhuc", "sst")
    assert len(model.plugins) == 0  # nothing half-attached
    add_plugin(model, "lhuc", TASKS)
    with pytest.raises(ValueError, match="already attached"):
        add_plugin(model, "lhuc", TASKS)
    with pytest.raises(ValueError, match="already has task"):
        model.plugins["lhuc"].add_task("sst")


def test_default_sizes_on_the_packaged_checkpoint_config() -> None:
    from minbert.pretrained import CheckpointError, load_config

    try:
        config = load_config()
    except CheckpointError as err:
        pytest.skip(f"packaged checkpoint not installed: {err}")
    assert (config.hidden_size, config.num_hidden_layers) == (384, 6)
    D, L = 384, 6
    assert count_formula("adapter", config) == 2 * L * (2 * 64 * D + D + 64)
    assert count_formula("pals", config) == 2 * D * 96 + D + 96 + 3 * L * (96 * 96 + 96)
    assert count_formula("lhuc", config) == L * D
    assert count_formula("lora", config) == L * 2 * 8 * (D + D)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, 24 * 99_136),  # one adapter per position and layer
        ({"share_sites": True}, 1_189_632),  # "Houlsby (shared in each layer)": 12 adapters
        ({"share": 3, "share_sites": True}, 396_544),  # the study's "3-shared": 4 adapters
        ({"share": 3}, 793_088),  # 3 layers share one adapter per position: 8 adapters
    ],
)
def test_adapter_sharing_counts_at_bert_base_size(options, expected):
    """The adapter study's parameter counts with m = 64 on a BERT-base-shaped model (D = 768,
    L = 12): an adapter has 2·m·D + D + m = 99,136 parameters."""
    model = BertModel(BertConfig(vocab_size=10))
    plugin = add_plugin(model, "adapter", ["sst"], size=64, **options)
    assert sum(p.numel() for p in plugin.task_parameters("sst")) == expected
    assert count_formula("adapter", model.config, size=64, **options) == expected


@pytest.mark.parametrize("kinds", [["adapter"], ["layernorm", "lora", "pals"], ["lhuc"]])
def test_a_model_whose_plugins_are_removed_is_the_bare_model_bit_for_bit(kinds) -> None:
    plain = base_model()
    model = base_model()
    for kind in kinds:
        add_plugin(model, kind, TASKS)
    perturb(model)  # plug-ins that change the output while attached
    with torch.no_grad():
        bare = plain(**batch())
        assert not torch.equal(model(**batch(), task="sst")["pooler_output"], bare["pooler_output"])
        for kind in reversed(kinds):
            remove_plugin(model, kind)
        assert not [m for m in model.modules() if m._forward_hooks or m._forward_pre_hooks]
        removed = model(**batch())
    for key in ("last_hidden_state", "pooler_output"):
        assert torch.equal(removed[key], bare[key])


def test_removing_a_kind_that_is_not_attached_is_refused() -> None:
    with pytest.raises(ValueError, match="no 'lora' plug-in is attached"):
        remove_plugin(with_plugin(base_model(), "adapter"), "lora")
