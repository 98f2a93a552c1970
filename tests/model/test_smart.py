"""Tests of minbert/smart.py on a tiny random BERT (CPU, seconds)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from minbert.bert import BertConfig, BertModel
from minbert.smart import (
    MomentumTeacher,
    SmartConfig,
    adversarial_perturbation,
    bregman_term,
    divergence,
    project,
    smart_regularizer,
    symmetric_kl,
)

B, T, D = 4, 7, 32


def tiny_bert(dropout: float = 0.0, seed: int = 0) -> BertModel:
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=100,
        hidden_size=D,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=32,
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
    )
    return BertModel(config)


def tiny_batch(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, 100, (B, T), generator=g)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    attention_mask[1, 5:] = 0  # two rows end in padding
    attention_mask[3, 3:] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


def head_for(num_outputs: int, seed: int = 2, scale: float = 1.0) -> nn.Linear:
    torch.manual_seed(seed)
    head = nn.Linear(D, num_outputs)
    with torch.no_grad():
        head.weight.mul_(scale)
    return head


def forward_fn(model: BertModel, head: nn.Module, mask: torch.Tensor):
    """encode + head on a list with one (B, T, D) embedding tensor; never calls embed."""

    def forward(embeddings: list[torch.Tensor]) -> torch.Tensor:
        return head(model.encode(embeddings[0], mask)["pooler_output"])

    return forward


# --------------------------------------------------------------------------------------------
# Divergences
# --------------------------------------------------------------------------------------------


def test_symmetric_kl_hand_computed() -> None:
    # P = [0.5, 0.5], Q = [0.9, 0.1] (logits [0, ln 9] -> softmax [0.9, 0.1]):
    # KL(P‖Q) = 0.5·ln(0.5/0.9) + 0.5·ln(0.5/0.1) = 0.5·(−0.587787) + 0.5·1.609438 = 0.510826
    # KL(Q‖P) = 0.9·ln(0.9/0.5) + 0.1·ln(0.1/0.5) = 0.9·0.587787 − 0.1·1.609438 = 0.368064
    # sum = 0.878890
    p = torch.tensor([[0.0, 0.0]])
    q = torch.tensor([[math.log(9.0), 0.0]])
    assert symmetric_kl(p, q).item() == pytest.approx(0.878890, abs=1e-6)
    assert symmetric_kl(q, p).item() == pytest.approx(0.878890, abs=1e-6)
    assert symmetric_kl(p, p).item() == 0.0
    # mean over the batch: rows 0.878890 and 0 -> 0.439445; logits are shift-invariant
    pp, qq = torch.cat([p, q + 3.0]), torch.cat([q, q])
    assert symmetric_kl(pp, qq).item() == pytest.approx(0.439445, abs=1e-6)
    assert divergence(pp, qq, "multiclass").item() == pytest.approx(0.439445, abs=1e-6)


def test_binary_divergence_hand_computed() -> None:
    # Bernoulli(sigmoid(0)) = Bernoulli(0.5) vs Bernoulli(sigmoid(ln 9)) = Bernoulli(0.9): the same
    # two distributions as above, so 0.878890 = (0.5 − 0.9)·(0 − ln 9) = 0.4·2.197225.
    a, b = torch.tensor([0.0]), torch.tensor([math.log(9.0)])
    assert divergence(a, b, "binary").item() == pytest.approx(0.878890, abs=1e-6)
    assert divergence(a[:, None], b[:, None], "binary").item() == pytest.approx(0.878890, abs=1e-6)
    # equal to the two-class symmetric KL of logits [0, a] and [0, b], for any logits
    x, y = torch.randn(5), torch.randn(5)
    two_class = symmetric_kl(
        torch.stack([torch.zeros(5), x], 1), torch.stack([torch.zeros(5), y], 1)
    )
    torch.testing.assert_close(divergence(x, y, "binary"), two_class)


# --------------------------------------------------------------------------------------------
# R_s
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,num_outputs", [("multiclass", 3), ("binary", 1), ("regression", 1)])
def test_no_noise_no_steps_gives_exactly_zero(kind: str, num_outputs: int) -> None:
    model, head = tiny_bert(), head_for(num_outputs)
    input_ids, mask = tiny_batch()
    embeddings = model.embed(input_ids)
    forward = forward_fn(model, head, mask)
    clean = forward([embeddings])
    config = SmartConfig(sigma=0.0, ascent_steps=0)
    assert smart_regularizer(forward, [embeddings], clean, kind, config).item() == 0.0


@pytest.mark.parametrize("norm", ["linf", "l2"])
def test_perturbation_stays_in_the_ball(norm: str) -> None:
    model = tiny_bert()
    input_ids, mask = tiny_batch()
    # a pair encoded sentence by sentence: two embedding tensors, each with its own δ
    e1, e2 = model.embed(input_ids), model.embed(input_ids.flip(0))
    torch.manual_seed(3)
    pair_head = nn.Linear(2 * D, 3)

    def forward(embs: list[torch.Tensor]) -> torch.Tensor:
        u = model.encode(embs[0], mask)["pooler_output"]
        v = model.encode(embs[1], mask.flip(0))["pooler_output"]
        return pair_head(torch.cat([u, v], -1))

    eps = 1e-2
    # σ ≫ ε: the random start must be projected too; η ≫ ε: every step overshoots the ball
    config = SmartConfig(sigma=1.0, epsilon=eps, step_size=1.0, ascent_steps=3, norm=norm)
    clean = forward([e1, e2])
    deltas = adversarial_perturbation(forward, [e1, e2], clean, "multiclass", config)
    assert [d.shape for d in deltas] == [e1.shape, e2.shape]
    for d in deltas:
        assert not d.requires_grad
        norms = d.abs().amax(-1) if norm == "linf" else torch.linalg.vector_norm(d, dim=-1)
        assert norms.max().item() <= eps * (1 + 1e-6)
        assert norms.max().item() == pytest.approx(eps, rel=1e-5)  # it does reach the boundary
    assert not torch.equal(deltas[0], deltas[1])
    # project is idempotent
    torch.testing.assert_close(project(deltas[0], eps, norm), deltas[0], rtol=0, atol=1e-9)


def test_ascent_finds_a_worse_perturbation_than_random() -> None:
    """With the same ε, K ascent steps give a larger divergence than a random corner of the ball."""
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    forward = forward_fn(model, head, mask)
    e = model.embed(input_ids)
    clean = forward([e])
    eps = 1e-2
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        random = SmartConfig(sigma=1.0, epsilon=eps, ascent_steps=0)  # δ = ε·sign(ν), mostly
        r_random = smart_regularizer(forward, [e], clean, "multiclass", random, generator=g)
        g = torch.Generator().manual_seed(seed)
        ascent = SmartConfig(sigma=1e-3, epsilon=eps, step_size=1.0, ascent_steps=2)
        r_ascent = smart_regularizer(forward, [e], clean, "multiclass", ascent, generator=g)
        assert r_ascent.item() > 2 * r_random.item() > 0


def test_generator_makes_it_reproducible() -> None:
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    forward = forward_fn(model, head, mask)
    e = model.embed(input_ids)
    clean = forward([e])
    config = SmartConfig(sigma=1e-2, epsilon=1e-2)
    r1 = smart_regularizer(
        forward, [e], clean, "multiclass", config, torch.Generator().manual_seed(0)
    )
    r2 = smart_regularizer(
        forward, [e], clean, "multiclass", config, torch.Generator().manual_seed(0)
    )
    assert torch.equal(r1, r2)


def test_padding_positions_are_harmless() -> None:
    """Noise at padding positions changes no output, and the ascent leaves it where it started."""
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    forward = forward_fn(model, head, mask)
    e = model.embed(input_ids).detach()
    clean = forward([e])
    pad = (mask == 0).unsqueeze(-1)  # (B, T, 1)
    noisy = e + 10.0 * torch.randn_like(e) * pad
    torch.testing.assert_close(forward([noisy]), clean, rtol=0, atol=1e-6)

    config = SmartConfig(sigma=1e-3, epsilon=1e-2, step_size=1e-3, ascent_steps=2)
    deltas = adversarial_perturbation(
        forward, [e], clean, "multiclass", config, torch.Generator().manual_seed(0)
    )
    start = project(
        1e-3 * torch.randn(e.shape, generator=torch.Generator().manual_seed(0)), 1e-2, "linf"
    )
    assert torch.equal(deltas[0][pad.expand_as(e)], start[pad.expand_as(e)])
    assert not torch.equal(deltas[0][~pad.expand_as(e)], start[~pad.expand_as(e)])


# --------------------------------------------------------------------------------------------
# Gradients, embedding once, and the teacher in a training step
# --------------------------------------------------------------------------------------------


def training_step(model, head, teacher, optimizer, config, input_ids, mask, labels) -> dict:
    """One SMART step as a driver would write it, with a frozen embedding layer (so the teacher's
    forward reuses the step's embeddings)."""
    embeddings = model.embed(input_ids)
    forward = forward_fn(model, head, mask)
    outputs = forward([embeddings])
    loss = nn.functional.cross_entropy(outputs, labels)
    r_s = smart_regularizer(forward, [embeddings], outputs, "multiclass", config)
    d_breg = bregman_term(lambda: forward([embeddings.detach()]), outputs, teacher, "multiclass")
    total = loss + config.weight * r_s + config.bregman_weight * d_breg
    optimizer.zero_grad(set_to_none=True)
    total.backward()
    grads = {name: p.grad for name, p in model.named_parameters()}
    head_grads = [p.grad for p in head.parameters()]
    optimizer.step()
    teacher.update()
    return {"r_s": r_s, "d_breg": d_breg, "grads": grads, "head_grads": head_grads}


def test_frozen_encoder_gets_no_gradient_and_embed_runs_once_per_step() -> None:
    model, head = tiny_bert(dropout=0.1), head_for(3, scale=50.0)
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)
    teacher = MomentumTeacher(list(model.parameters()) + list(head.parameters()), momentum=0.9)
    assert len(teacher.parameters) == 2  # only the head's weight and bias
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)

    calls = []
    embed = model.embed

    def counting_embed(*args, **kwargs):
        calls.append(1)
        return embed(*args, **kwargs)

    model.embed = counting_embed
    input_ids, mask = tiny_batch()
    labels = torch.tensor([0, 1, 2, 1])
    config = SmartConfig(sigma=1e-2, epsilon=1e-2)
    for step in range(1, 3):
        out = training_step(model, head, teacher, optimizer, config, input_ids, mask, labels)
        assert len(calls) == step  # one embed per training step, however many forwards SMART runs
        assert all(g is None for g in out["grads"].values())
        assert all(g is not None and g.abs().sum() > 0 for g in out["head_grads"])
        assert out["r_s"].item() > 0 and out["d_breg"].item() > 0  # dropout and perturbation


def test_regularizer_gradient_reaches_encoder_and_embeddings_when_they_train() -> None:
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    forward = forward_fn(model, head, mask)
    embeddings = model.embed(input_ids)
    clean = forward([embeddings])
    config = SmartConfig(sigma=1e-2, epsilon=1e-2)
    smart_regularizer(forward, [embeddings], clean, "multiclass", config).backward()
    for name, p in model.named_parameters():
        if name.startswith("pooler") or ".layer.0." in name or "word_embeddings" in name:
            assert p.grad is not None and p.grad.abs().sum() > 0, name
    assert all(p.grad is not None for p in head.parameters())


def test_bregman_is_zero_with_a_fresh_teacher_and_keeps_the_graph_valid() -> None:
    """θ̃ = θ at the start: D_Breg = 0 exactly, its gradient is 0, and swapping the teacher in
    between the student's forward and backward leaves that backward intact."""
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    labels = torch.tensor([0, 1, 2, 1])
    params = list(model.parameters()) + list(head.parameters())
    teacher = MomentumTeacher(params, momentum=0.99)
    forward = lambda: head(model(input_ids, mask)["pooler_output"])  # noqa: E731

    reference = torch.autograd.grad(nn.functional.cross_entropy(forward(), labels), params)
    outputs = forward()
    d_breg = bregman_term(forward, outputs, teacher, "multiclass")
    assert d_breg.item() == 0.0
    grads = torch.autograd.grad(nn.functional.cross_entropy(outputs, labels) + d_breg, params)
    for g, r in zip(grads, reference, strict=True):
        torch.testing.assert_close(g, r, rtol=0, atol=0)


def test_bregman_uses_the_teacher_weights() -> None:
    model, head = tiny_bert(), head_for(3, scale=50.0)
    input_ids, mask = tiny_batch()
    teacher = MomentumTeacher(head.parameters(), momentum=0.5)
    forward = lambda: head(model(input_ids, mask)["pooler_output"])  # noqa: E731
    with torch.no_grad():
        before = forward()
        head.weight.add_(0.3)
    teacher.update()  # θ̃ = (θ_0 + θ_1) / 2 for the weight
    outputs = forward()
    with torch.no_grad():
        pooled = model(input_ids, mask)["pooler_output"]
        expected = pooled @ teacher.shadow[0].T + teacher.shadow[1]
    captured = []
    bregman_term(lambda: captured.append(forward()) or captured[-1], outputs, teacher, "multiclass")
    torch.testing.assert_close(captured[0], expected)
    assert not torch.allclose(captured[0], before) and not torch.allclose(captured[0], outputs)


# --------------------------------------------------------------------------------------------
# MomentumTeacher
# --------------------------------------------------------------------------------------------
