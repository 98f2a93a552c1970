"""Plug-ins (Houlsby adapters, PALs, LHUC, LoRA, per-task LayerNorms) on a tiny random BERT:
identity at initialisation, structural freezing, per-task isolation, parameter counts against the
papers' formulas, per-task state round trips through safetensors, LoRA merging, tasks added later.

Exact comparisons (torch.equal) where the computation is the same; stated tolerances elsewhere.
"""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load_file, save_file
from torch import nn

from minbert.bert import BertConfig, BertModel
from minbert.plugins import (
    add_plugin,
    freeze_all_but_task,
    freeze_for_plugins,
    load_plugin_state_dict,
    option_kinds,
    plugin_state_dict,
)
from minbert.plugins.adapter import NEAR_IDENTITY_STD, Bottleneck
from minbert.plugins.lora import TARGETS as LORA_TARGETS

TASKS = ["sst", "para"]

# kind, options: every plug-in with its defaults, plus the variants the sources describe.
VARIANTS = {
    "adapter": ("adapter", {}),
    "adapter-pfeiffer": ("adapter", {"placement": "pfeiffer", "size": 8}),
    "adapter-2-shared": ("adapter", {"share": 2, "size": 8}),
    "adapter-shared-sites": ("adapter", {"share_sites": True, "size": 8}),
    "adapter-2-shared-sites": ("adapter", {"share": 2, "share_sites": True, "size": 8}),
    "adapter-after-layernorm": ("adapter", {"placement": "after_layernorm", "size": 8}),
    "pals": ("pals", {}),
    "pals-sized": ("pals", {"size": 12, "heads": 3}),
    "pals-gelu": ("pals", {"gelu": True}),
    "lhuc": ("lhuc", {}),
    "lora": ("lora", {}),
    "lora-all": ("lora", {"rank": 2, "alpha": 4.0, "targets": list(LORA_TARGETS)}),
    "layernorm": ("layernorm", {}),
}


def base_model(layers: int = 2, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    return BertModel(BertConfig.tiny(num_hidden_layers=layers)).eval()


def batch(seed: int = 1) -> dict[str, torch.Tensor]:
    """Three sequences of up to 7 tokens, two of them padded."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 99, (3, 7), generator=g)
    attention_mask = torch.tensor([[1] * 7, [1] * 5 + [0] * 2, [1] * 3 + [0] * 4])
    input_ids = input_ids * attention_mask  # padding id 0
    token_type_ids = torch.tensor([[0] * 4 + [1] * 3, [0] * 3 + [1] * 4, [0] * 7])
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "token_type_ids": token_type_ids,
    }


def with_plugin(model: BertModel, variant: str, tasks=TASKS) -> BertModel:
    kind, options = VARIANTS[variant]
    model = copy.deepcopy(model)
    add_plugin(model, kind, list(tasks), **options)
    return model


@torch.no_grad()
def perturb(model: BertModel, seed: int = 2) -> None:
    """Move every plug-in parameter away from its identity initialisation."""
    g = torch.Generator().manual_seed(seed)
    for p in model.plugins.parameters():
        p.add_(0.1 * torch.randn(p.shape, generator=g))


def outputs(model: BertModel, task: str | None, inputs=None) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return model(**(inputs or batch()), task=task)


def assert_equal_outputs(a: dict, b: dict) -> None:
    assert torch.equal(a["last_hidden_state"], b["last_hidden_state"])
    assert torch.equal(a["pooler_output"], b["pooler_output"])


# ----- identity at initialisation -----


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("fast", [True, False])
def test_identity_at_initialisation(variant: str, fast: bool) -> None:
    plain = base_model()
    plain.set_fast_attention(fast)
    model = with_plugin(plain, variant)
    if "pals" in model.plugins:
        model.plugins["pals"].use_fast_path = fast
    expected = outputs(plain, None)
    for task in TASKS:
        assert_equal_outputs(outputs(model, task), expected)


def test_identity_with_every_plugin_attached_together() -> None:
    plain = base_model()
    model = copy.deepcopy(plain)
    for kind in option_kinds():
        add_plugin(model, kind, TASKS)
    assert list(model.plugins) == option_kinds()  # every kind, by name
    assert_equal_outputs(outputs(model, "para"), outputs(plain, None))


# ----- freezing and gradients -----


def backward_on(model: BertModel, task: str) -> None:
    model.zero_grad(set_to_none=True)
    out = model(**batch(), task=task)
    (out["last_hidden_state"].pow(2).mean() + out["pooler_output"].sum()).backward()


@pytest.mark.parametrize("variant", VARIANTS)
def test_freeze_for_plugins_trains_only_plugins(variant: str) -> None:
    model = with_plugin(base_model(), variant)
    freeze_for_plugins(model)
    plugin_ids = {id(p) for p in model.plugins.parameters()}
    for p in model.parameters():
        assert p.requires_grad == (id(p) in plugin_ids)
    backward_on(model, "sst")
    for name, p in model.named_parameters():
        if id(p) not in plugin_ids:
            assert p.grad is None, name
    sst = model.plugins[VARIANTS[variant][0]].task_parameters("sst")
    assert all(p.grad is not None for p in sst)
    assert any(p.grad.abs().sum() > 0 for p in sst)


def test_per_task_layernorms_start_from_the_pretrained_ones_and_are_per_task() -> None:
    plain = base_model()
    model = with_plugin(plain, "layernorm")
    plugin = model.plugins["layernorm"]
    for task in TASKS:
        for layer, pretrained in enumerate(plain.encoder.layer):
            own = plugin.by_task[task]
            assert torch.equal(
                own["attention"][layer].weight, pretrained.attention.output.LayerNorm.weight
            )
            assert torch.equal(own["feed_forward"][layer].bias, pretrained.output.LayerNorm.bias)
    freeze_for_plugins(model)
    norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    trainable = [m for m in norms if m.weight.requires_grad]
    assert len(trainable) == 2 * 2 * 2  # tasks × positions × layers; the pretrained stay frozen
    assert all(any(m is n for n in plugin.modules()) for m in trainable)
    # A task's LayerNorm acts on that task only, at both add & norms.
    before = outputs(model, "para")
    with torch.no_grad():
        plugin.by_task["sst"]["feed_forward"][1].weight.mul_(2.0)
    assert_equal_outputs(outputs(model, "para"), before)
    assert not torch.equal(outputs(model, "sst")["last_hidden_state"], before["last_hidden_state"])


def test_adapter_after_layernorm_acts_on_the_normalised_output() -> None:
    """adapter(LayerNorm(x + attention)): the attention block's output is the adapter applied to
    what the pretrained LayerNorm returned (hooks read both; the LayerNorm's ahead of the site's,
    which is a hook on the same module)."""
    model = with_plugin(base_model(), "adapter-after-layernorm")
    perturb(model)
    layer = model.encoder.layer[1]
    seen = {}
    norm = layer.attention.output.LayerNorm
    norm.register_forward_hook(lambda m, i, o: seen.update(norm=o), prepend=True)
    layer.attention.output.register_forward_hook(lambda m, i, o: seen.update(block=o))
    outputs(model, "sst")
    adapter = model.plugins["adapter"].by_task["sst"]["attention"][1]
    with torch.no_grad():
        assert torch.equal(seen["block"], adapter(seen["norm"]))
        assert not torch.equal(seen["block"], seen["norm"])


def test_near_identity_adapter_is_within_its_bound() -> None:
    """Truncated N(0, σ²) at 2σ on both projections: |adapter(h) − h| ≤ m·D·(2σ)²·max|h|
    (|GELU(z)| ≤ |z|), and not exactly the identity."""
    torch.manual_seed(0)
    m, D = 8, 32
    adapter = Bottleneck(D, m, init_std=0.02, init="near_identity")
    bound = 2 * NEAR_IDENTITY_STD
    assert adapter.down.weight.abs().max() <= bound and adapter.up.weight.abs().max() <= bound
    h = torch.randn(4, 7, D)
    with torch.no_grad():
        change = (adapter(h) - h).abs().max()
    assert 0 < change <= m * D * bound**2 * h.abs().max()


@pytest.mark.parametrize("variant", VARIANTS)
def test_other_task_gets_no_gradient(variant: str) -> None:
    model = with_plugin(base_model(), variant)
    perturb(model)  # so that every sst parameter is on the gradient path
    freeze_for_plugins(model)
    backward_on(model, "sst")
    plugin = model.plugins[VARIANTS[variant][0]]
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in plugin.task_parameters("sst"))
    for p in plugin.task_parameters("para"):
        assert p.grad is None or not p.grad.any()


# ----- parameter counts -----


def test_three_shared_adapter_has_a_third_of_the_adapters() -> None:
    model = base_model(layers=6)
    one = add_plugin(copy.deepcopy(model), "adapter", TASKS, size=8)
    three = add_plugin(model, "adapter", TASKS, size=8, share=3)

    def adapters(plugin) -> int:
        return sum(isinstance(m, Bottleneck) for m in plugin.modules())

    assert adapters(one) == 2 * 2 * 6  # tasks × positions × layers
    assert adapters(three) * 3 == adapters(one)
    # Layers 0-2 and 3-5 use one adapter per position: changing the first changes layers 0-2.
    feed_forward = three.by_task["sst"]["feed_forward"]
    assert len(feed_forward) == 2
    h = torch.randn(1, 3, 32)
    with torch.no_grad():
        feed_forward[0].up.weight.normal_()
    changed = [not torch.equal(three.after_feed_forward(i, "sst", h), h) for i in range(6)]
    assert changed == [True, True, True, False, False, False]


# ----- per-task state -----


@pytest.mark.parametrize("variant", VARIANTS)
def test_task_state_round_trip_through_safetensors(variant: str, tmp_path) -> None:
    base = base_model()
    model = with_plugin(base, variant)
    perturb(model)
    state = plugin_state_dict(model, "sst")
    full = model.state_dict()
    assert state and all(key in full and key.startswith("plugins.") for key in state)
    assert not any(".para." in key for key in state)
    save_file(state, tmp_path / "sst.safetensors")

    fresh = copy.deepcopy(base)  # a fresh pretrained model: the base weights only
    kind, options = VARIANTS[variant]
    add_plugin(fresh, kind, ["sst"], **options)
    load_plugin_state_dict(fresh, "sst", load_file(tmp_path / "sst.safetensors"))
    assert_equal_outputs(outputs(fresh, "sst"), outputs(model, "sst"))


# ----- LoRA merging -----


def test_lora_merge_and_unmerge() -> None:
    model = with_plugin(base_model(), "lora-all")
    perturb(model)
    lora = model.plugins["lora"]
    original = {k: v.clone() for k, v in model.state_dict().items() if not k.startswith("plugins.")}
    unmerged = outputs(model, "sst")

    lora.merge("sst")
    merged = outputs(model, "sst")
    # W x + s·B A x versus (W + s·B A) x: equal up to float32 rounding.
    torch.testing.assert_close(merged, unmerged, rtol=0, atol=1e-5)
    assert not torch.equal(
        model.encoder.layer[0].attention.self.query.weight,
        original["encoder.layer.0.attention.self.query.weight"],
    )
    with pytest.raises(ValueError, match="unmerge"):
        outputs(model, "para")
    with pytest.raises(ValueError, match="already merged"):
        lora.merge("sst")

    lora.unmerge()
    after = model.state_dict()
    assert all(torch.equal(after[k], v) for k, v in original.items())
    assert_equal_outputs(outputs(model, "sst"), unmerged)
    outputs(model, "para")  # other tasks run again


# ----- a task added later -----


@pytest.mark.parametrize(
    "variant", ["adapter", "adapter-after-layernorm", "pals", "lhuc", "lora", "layernorm"]
)
def test_task_added_later_leaves_other_tasks_untouched(variant: str) -> None:
    model = with_plugin(base_model(), variant)
    perturb(model)
    before = {task: outputs(model, task) for task in TASKS}
    plugin = model.plugins[VARIANTS[variant][0]]
    plugin.add_task("sts")
    assert_equal_outputs(outputs(model, "sts"), outputs(base_model(), None))  # identity

    freeze_all_but_task(model, "sts")
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert {id(p) for p in trainable} == {id(p) for p in plugin.task_parameters("sts")}
    optimizer = torch.optim.SGD(trainable, lr=0.1)
    model.train()
    target = torch.randn(3, 32, generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        optimizer.zero_grad()
        out = model(**batch(), task="sts")
        nn.functional.mse_loss(out["pooler_output"], target).backward()
        optimizer.step()
    model.eval()

    for task in TASKS:
        assert_equal_outputs(outputs(model, task), before[task])
    assert not torch.equal(outputs(model, "sts")["pooler_output"], before["sst"]["pooler_output"])
    assert not torch.equal(
        outputs(model, "sts")["pooler_output"], outputs(base_model(), None)["pooler_output"]
    )


# ----- tasks and options are checked -----


def test_unknown_or_missing_task_is_an_error() -> None:
    model = with_plugin(base_model(), "adapter")
    with pytest.raises(ValueError, match=r"unknown task 'sts'.*\['sst', 'para'\]"):
        outputs(model, "sts")
    with pytest.raises(ValueError, match=r"needs a task.*\['sst', 'para'\]"):
        outputs(model, None)
    with pytest.raises(ValueError, match="unknown task"):
        freeze_all_but_task(model, "sts")
    with pytest.raises(ValueError, match="unknown task"):
        plugin_state_dict(model, "sts")


# ----- PAL attention: fast path and padding -----


def test_pal_fast_path_matches_the_equation_and_respects_padding() -> None:
    model = with_plugin(base_model(), "pals")
    perturb(model)
    fast = outputs(model, "sst")
    model.set_fast_attention(False)
    model.plugins["pals"].use_fast_path = False
    slow = outputs(model, "sst")
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)

    # Different token ids under the padding leave the real tokens' outputs unchanged.
    model.set_fast_attention(True)
    model.plugins["pals"].use_fast_path = True
    inputs = batch()
    noisy = dict(inputs)
    noisy["input_ids"] = torch.where(
        inputs["attention_mask"].bool(),
        inputs["input_ids"],
        torch.full_like(inputs["input_ids"], 7),
    )
    a = outputs(model, "sst", inputs)["last_hidden_state"]
    b = outputs(model, "sst", noisy)["last_hidden_state"]
    real = inputs["attention_mask"].bool()
    torch.testing.assert_close(a[real], b[real], rtol=0, atol=1e-6)


def test_shared_sites_use_one_adapter_at_both_positions():
    model = base_model()
    plugin = add_plugin(model, "adapter", ["sst"], share_sites=True, size=4)
    adapter = plugin.by_task["sst"]["both"][1]
    with torch.no_grad():
        adapter.up.weight.normal_()
    h = torch.randn(2, 3, model.config.hidden_size)
    assert torch.equal(plugin.after_attention(1, "sst", h), adapter(h))
    assert torch.equal(plugin.after_feed_forward(1, "sst", h), adapter(h))
