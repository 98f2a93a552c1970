"""What the course gives the student around SMART: the regression divergence, the checks on input,
and the Bregman teacher (its EMA, its autocast, swapping its weights in, its state); the student
tree leaves these out."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from minbert.smart import (
    MomentumTeacher,
    SmartConfig,
    divergence,
)
from tests.model.test_smart import B, D, head_for


def test_regression_divergence_hand_computed() -> None:
    # (1 − 0.5)² = 0.25, (2 − 4)² = 4 -> mean 2.125
    a, b = torch.tensor([1.0, 2.0]), torch.tensor([0.5, 4.0])
    assert divergence(a, b, "regression").item() == pytest.approx(2.125)
    assert divergence(a[:, None], b[:, None], "regression").item() == pytest.approx(2.125)
    # (B, 2): summed over the outputs, averaged over the batch: (0.25 + 4 + 0 + 1) / 2 = 2.625
    a2, b2 = torch.tensor([[1.0, 2.0], [0.0, 1.0]]), torch.tensor([[0.5, 4.0], [0.0, 0.0]])
    assert divergence(a2, b2, "regression").item() == pytest.approx(2.625)


def test_divergence_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="kind"):
        divergence(torch.zeros(2, 1), torch.zeros(2, 1), "hinge")
    with pytest.raises(ValueError, match="same shape"):
        divergence(torch.zeros(2, 3), torch.zeros(2, 2), "multiclass")
    with pytest.raises(ValueError, match="norm"):
        SmartConfig(norm="l1")
    with pytest.raises(ValueError, match="momentum"):
        SmartConfig(momentum=1.5)


def test_teacher_forward_under_autocast_does_not_reuse_the_students_cached_casts() -> None:
    head = head_for(3)
    x = torch.randn(B, D)
    teacher = MomentumTeacher(head.parameters())
    with torch.no_grad():
        teacher.shadow[0].add_(1.0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        outputs = head(x)  # caches bf16 casts of the student's weight
        with torch.no_grad(), teacher.swapped_in():
            teacher_outputs = head(x)
    with torch.no_grad(), teacher.swapped_in(), torch.autocast("cpu", dtype=torch.bfloat16):
        fresh = head(x)
    assert torch.is_autocast_cache_enabled()
    assert torch.equal(teacher_outputs, fresh)
    assert not torch.allclose(teacher_outputs.float(), outputs.float())


def test_teacher_moves_by_the_ema_formula() -> None:
    head, frozen = head_for(3), nn.Linear(2, 2)
    frozen.requires_grad_(False)
    beta = 0.9
    teacher = MomentumTeacher(list(head.parameters()) + list(frozen.parameters()), momentum=beta)
    assert len(teacher.shadow) == 2
    for t, p in zip(teacher.shadow, head.parameters(), strict=True):
        assert torch.equal(t, p) and t.data_ptr() != p.data_ptr()
    old = [t.clone() for t in teacher.shadow]
    with torch.no_grad():
        for p in head.parameters():
            p.add_(torch.randn_like(p))
    teacher.update()
    assert teacher.num_updates == 1
    for t, o, p in zip(teacher.shadow, old, head.parameters(), strict=True):
        torch.testing.assert_close(t, beta * o + (1 - beta) * p.detach(), rtol=1e-6, atol=1e-7)


def test_swapped_in_restores_live_weights_exactly_also_on_exceptions() -> None:
    head = head_for(3)
    teacher = MomentumTeacher(head.parameters())
    with torch.no_grad():
        teacher.shadow[0].add_(1.0)
        teacher.shadow[1].sub_(2.0)
    live = [p.detach().clone() for p in head.parameters()]
    ptrs = [p.data_ptr() for p in head.parameters()]
    with teacher.swapped_in():
        for p, t in zip(head.parameters(), teacher.shadow, strict=True):
            assert torch.equal(p, t)
    with pytest.raises(KeyError), teacher.swapped_in():
        assert torch.equal(head.weight, teacher.shadow[0])
        raise KeyError("boom")
    for p, v, ptr in zip(head.parameters(), live, ptrs, strict=True):
        assert torch.equal(p, v) and p.data_ptr() == ptr
    with pytest.raises(RuntimeError, match="inside swapped_in"), teacher.swapped_in():
        teacher.update()
    assert torch.equal(head.weight, live[0])


def test_teacher_state_dict_round_trip() -> None:
    head = head_for(3)
    teacher = MomentumTeacher(head.parameters(), momentum=0.95)
    with torch.no_grad():
        head.weight.add_(1.0)
    teacher.update()
    state = {
        k: (v if k != "shadow" else [t.clone() for t in v]) for k, v in teacher.state_dict().items()
    }
    other = MomentumTeacher(head_for(3, seed=5).parameters(), momentum=0.5)
    other.load_state_dict(state)
    assert other.momentum == 0.95 and other.num_updates == 1
    for a, b in zip(other.shadow, teacher.shadow, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="shape"):
        MomentumTeacher(head_for(4).parameters()).load_state_dict(state)
