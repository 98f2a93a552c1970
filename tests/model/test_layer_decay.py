"""Layer-wise learning-rate decay: depths chosen by structure, and the rate each parameter gets."""

from __future__ import annotations

import pytest
import torch

from minbert.bert import BertConfig, BertModel
from minbert.optimizer import AdamW, layer_depths, param_groups
from minbert.plugins import add_plugin
from multitask.collate import Batch
from multitask.model import MultitaskModel
from tasks import get_task

L = 3


def model(*plugins: str) -> MultitaskModel:
    torch.manual_seed(0)
    bert = BertModel(BertConfig.tiny(num_hidden_layers=L))
    for kind in plugins:
        add_plugin(bert, kind, ["sst", "para"])
    return MultitaskModel(bert, [get_task("sst"), get_task("para")], "mean", "cross")


@pytest.mark.parametrize(
    ("name", "depth"),
    [
        ("bert.embeddings.word_embeddings.weight", 0),
        ("bert.embeddings.LayerNorm.bias", 0),
        ("bert.encoder.layer.0.attention.self.query.weight", 1),
        ("bert.encoder.layer.2.output.dense.bias", 3),
        # plug-ins sit at the depth of the layer they act in (names as the project makes them)
        ("bert.plugins.adapter.by_task.sst.attention.2.down.weight", 3),
        ("bert.plugins.adapter.by_task.para.feed_forward.0.up.bias", 1),
        ("bert.plugins.lora.by_task.sst.1.value.A", 2),
        ("bert.plugins.pals.by_task.sst.layers.0.query.weight", 1),
        ("bert.plugins.pals.by_task.sst.encoder.weight", L),  # V_E serves every layer: the top
        ("bert.plugins.lhuc.by_task.para.r", L),  # one (L, D) table: the top layer
        ("bert.pooler.dense.weight", L + 1),
        ("heads.sst.linear.weight", L + 1),
    ],
)
def test_layer_depth(name, depth):
    m = model("adapter", "lora", "pals", "lhuc")
    parameter = dict(m.named_parameters())[name]
    assert layer_depths(m).get(id(parameter), L + 1) == depth


def test_plugin_parameters_get_their_layers_rate():
    """An adapter in layer 0 trains at lr·γ^L, the rate of layer 0, not at the heads' lr."""
    m = model("adapter")
    m.bert.requires_grad_(False)
    m.bert.plugins.requires_grad_(True)
    lr, gamma = 1e-3, 0.5
    rates = {id(p): g["lr"] for g in param_groups(m, 0.01, lr, gamma) for p in g["params"]}
    adapters = m.bert.plugins["adapter"].by_task["sst"]
    assert rates[id(adapters["attention"][0].down.weight)] == pytest.approx(lr * gamma**L)
    assert rates[id(adapters["feed_forward"][2].up.weight)] == pytest.approx(lr * gamma)
    assert rates[id(m.heads["sst"].linear.weight)] == pytest.approx(lr)


def test_each_parameter_gets_lr_times_gamma_to_its_distance_from_the_top():
    m = model()
    lr, gamma = 1e-3, 0.5
    groups = param_groups(m, 0.01, lr, gamma)
    names = {id(p): n for n, p in m.named_parameters()}
    seen = []
    for g in groups:
        for p in g["params"]:
            name = names[id(p)]
            seen.append(name)
            if name.startswith("bert.embeddings."):
                expected = lr * gamma**4
            elif name.startswith("bert.encoder.layer.0."):
                expected = lr * gamma**3
            elif name.startswith("bert.encoder.layer.2."):
                expected = lr * gamma
            elif name.startswith(("heads.", "bert.pooler.")):
                expected = lr
            else:
                continue
            assert g["lr"] == pytest.approx(expected), name
            # weight decay is still by structure: matrices decay, vectors do not
            assert g["weight_decay"] == (0.01 if p.ndim >= 2 and "LayerNorm" not in name else 0.0)
    assert sorted(seen) == sorted(n for n, p in m.named_parameters() if p.requires_grad)


def test_gamma_one_changes_nothing():
    """γ = 1: the same update as the plain groups, to the last bit."""
    a, b = model(), model()
    opt_a = AdamW(param_groups(a, 0.01), lr=1e-3)
    opt_b = AdamW(param_groups(b, 0.01, 1e-3, 1.0), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 7))
    seq = {
        "input_ids": ids,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": torch.ones_like(ids),
    }
    for m, opt in ((a, opt_a), (b, opt_b)):
        m.train(False)
        m("sst", Batch([seq], None)).sum().backward()
        opt.step()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name


def test_bad_gamma_is_refused():
    m = model()
    with pytest.raises(ValueError, match="layer decay"):
        param_groups(m, 0.01, 1e-3, 0.0)


def test_encoder_lr_trains_the_encoder_at_its_own_rate(tiny_checkpoint):
    """--option adapter --train_encoder --encoder_lr: every encoder weight at the encoder's rate
    (times its layer's decay), every adapter and head at --lr; nothing lost or listed twice."""
    from multitask.model import ModelSettings, build_model
    from multitask.step import optimizer_for

    settings = ModelSettings(option="adapter", checkpoint=str(tiny_checkpoint), train_encoder=True)
    model = build_model(settings, ["sst", "sts"])
    bert = model.bert
    plugin_ids = {id(p) for p in bert.plugins.parameters()}
    encoder_ids = {id(p) for p in bert.parameters()} - plugin_ids
    for layer_decay in (1.0, 0.5):
        optimizer = optimizer_for(model, 1e-3, 0.01, layer_decay, encoder_lr=2e-5)
        plain = optimizer_for(model, 1e-3, 0.01, layer_decay)
        rate = {id(p): g["lr"] for g in optimizer.param_groups for p in g["params"]}
        before = {id(p): g["lr"] for g in plain.param_groups for p in g["params"]}
        assert rate.keys() == before.keys() == {id(p) for p in model.parameters()}
        assert sum(len(g["params"]) for g in optimizer.param_groups) == len(rate)
        for pid, lr in rate.items():
            expected = before[pid] * (2e-5 / 1e-3) if pid in encoder_ids else before[pid]
            assert lr == pytest.approx(expected, rel=1e-12)
        assert {rate[pid] for pid in plugin_ids} <= {before[pid] for pid in plugin_ids}


def test_encoder_lr_is_recorded_and_checked(tmp_path):
    import train_multitask
    from multitask.errors import UsageError

    cfg = train_multitask.parse_args(
        ["--option", "pals", "--train_encoder", "--out_dir", str(tmp_path)]
    )
    assert cfg.encoder_lr == 5e-5 and cfg.to_flat()["encoder_lr"] == 5e-5
    assert train_multitask.parse_args(["--option", "adapter"]).encoder_lr is None
    with pytest.raises(UsageError, match="--encoder_lr goes with --train_encoder"):
        train_multitask.parse_args(["--encoder_lr", "1e-5"])
    with pytest.raises(UsageError, match="--encoder_lr 0.0"):
        train_multitask.parse_args(["--option", "lora", "--train_encoder", "--encoder_lr", "0"])
