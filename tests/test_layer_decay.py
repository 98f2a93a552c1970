"""Layer-wise learning-rate decay: depths read from names, and the rate each parameter gets."""

from __future__ import annotations

import pytest
import torch

from minbert.bert import BertConfig, BertModel
from minbert.layer_decay import layer_depth, layerwise_lr_decay
from minbert.optimizer import AdamW, param_groups
from tasks import get_task
from tasks.heads import MultitaskModel
from tests.conftest import TINY_CONFIG

L = 3


@pytest.mark.parametrize(
    ("name", "depth"),
    [
        ("bert.embeddings.word_embeddings.weight", 0),
        ("embeddings.LayerNorm.bias", 0),
        ("bert.encoder.layer.0.attention.self.query.weight", 1),
        ("bert.encoder.layer.2.output.dense.bias", 3),
        ("bert.encoder.layer.2.attention.output.adapter.down.weight", 3),  # a plug-in in layer 2
        ("bert.pooler.dense.weight", L + 1),
        ("heads.sst.weight", L + 1),
    ],
)
def test_layer_depth(name, depth):
    assert layer_depth(name, L) == depth


def model() -> MultitaskModel:
    torch.manual_seed(0)
    config = BertConfig(**{**TINY_CONFIG, "num_hidden_layers": L})
    return MultitaskModel(BertModel(config), [get_task("sst"), get_task("para")], "mean", "cross")


def test_each_parameter_gets_lr_times_gamma_to_its_distance_from_the_top():
    m = model()
    lr, gamma = 1e-3, 0.5
    groups = layerwise_lr_decay(param_groups(m, 0.01), m, lr, gamma, L)
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
    opt_b = AdamW(layerwise_lr_decay(param_groups(b, 0.01), b, 1e-3, 1.0, L), lr=1e-3)
    ids = torch.randint(0, 1000, (2, 7))
    seq = {
        "input_ids": ids,
        "token_type_ids": torch.zeros_like(ids),
        "attention_mask": torch.ones_like(ids),
    }
    for m, opt in ((a, opt_a), (b, opt_b)):
        m.train(False)
        m("sst", {"inputs": [seq]}).sum().backward()
        opt.step()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(pa, pb), name


def test_bad_gamma_is_refused():
    m = model()
    with pytest.raises(ValueError, match="layer decay"):
        layerwise_lr_decay(param_groups(m, 0.01), m, 1e-3, 0.0, L)
