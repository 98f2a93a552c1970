"""What the course gives the student beside AdamW's step: the warm-up schedule, the parameter
groups, the checks on hyperparameters; the student tree leaves these out."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minbert.bert import BertConfig, BertModel
from minbert.optimizer import AdamW, param_groups
from multitask.step import LinearWarmupDecay, linear_warmup_decay

pytestmark = pytest.mark.numerics  # hand-worked values: a second pass in CI, as test_optimizer.py


@pytest.mark.parametrize(
    ("warmup", "total", "expected"),
    [
        # w = 4, N = 10: s/4 for s < 4, then (10 − s)/6.
        (4, 10, {0: 0.0, 1: 0.25, 2: 0.5, 3: 0.75, 4: 1.0, 7: 0.5, 10: 0.0, 12: 0.0}),
        # no warmup: (10 − s)/10 from the first step.
        (0, 10, {0: 1.0, 1: 0.9, 5: 0.5, 10: 0.0, 11: 0.0}),
        # warmup over the whole run.
        (5, 5, {0: 0.0, 4: 0.8, 5: 0.0}),
    ],
)
def test_schedule_hand_values(warmup: int, total: int, expected: dict[int, float]) -> None:
    factor = LinearWarmupDecay(warmup, total)
    for step, value in expected.items():
        assert factor(step) == pytest.approx(value, abs=1e-12), f"step {step}"


def test_scheduler_sets_learning_rate_per_group() -> None:
    p, q = nn.Parameter(torch.zeros(1)), nn.Parameter(torch.zeros(1))
    opt = AdamW([{"params": [p], "lr": 1.0}, {"params": [q], "lr": 0.1}])
    sched = linear_warmup_decay(opt, warmup_steps=2, total_steps=6)
    lrs = []
    for _ in range(7):
        lrs.append([g["lr"] for g in opt.param_groups])
        opt.step()
        sched.step()
    expected = [0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0]
    assert [a for a, _ in lrs] == pytest.approx(expected)
    assert [b for _, b in lrs] == pytest.approx([0.1 * e for e in expected])


def test_schedule_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        LinearWarmupDecay(-1, 10)
    with pytest.raises(ValueError):
        LinearWarmupDecay(11, 10)
    with pytest.raises(ValueError):
        LinearWarmupDecay(0, 0)


def test_param_groups_structural_split() -> None:
    model = BertModel(BertConfig.tiny())
    model.embeddings.word_embeddings.weight.requires_grad_(False)  # frozen: left out
    decay, no_decay = param_groups(model, weight_decay=0.01)
    assert decay["weight_decay"] == 0.01 and no_decay["weight_decay"] == 0.0

    names = {id(p): n for n, p in model.named_parameters()}
    decay_names = {names[id(p)] for p in decay["params"]}
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert {id(m.weight) for m in linears} <= {id(p) for p in decay["params"]}
    assert {id(m.bias) for m in linears} <= {id(p) for p in no_decay["params"]}
    assert {id(m.weight) for m in layer_norms} <= {id(p) for p in no_decay["params"]}
    assert "embeddings.word_embeddings.weight" not in decay_names | no_decay_names
    assert "embeddings.position_embeddings.weight" in decay_names
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert decay_names | no_decay_names == trainable
    assert not decay_names & no_decay_names
    # Usable as is.
    AdamW([decay, no_decay], lr=1e-3)


def test_rejects_bad_hyperparameters() -> None:
    p = [nn.Parameter(torch.zeros(1))]
    for kwargs in ({"lr": -1.0}, {"betas": (1.0, 0.9)}, {"eps": -1.0}, {"weight_decay": -0.1}):
        with pytest.raises(ValueError):
            AdamW(p, **kwargs)
