"""Masked-language modelling: masking statistics, equivalence with Hugging Face transformers'
BertForMaskedLM, learning (the tied decoder's and the pretraining command's tests are the full
project's, not the student tree's)."""

from __future__ import annotations

import math

import pytest
import torch

from minbert.bert import BertConfig, BertModel
from minbert.mlm import (
    IGNORE,
    BertForMaskedLM,
    load_mlm,
    mask_tokens,
    mlm_loss,
    word_continuations,
)

CLS, SEP, PAD, MASK, V = 101, 102, 0, 103, 30522


def batch(rows: int = 64, length: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, V, (rows, length), generator=g)
    lengths = torch.randint(5, length + 1, (rows,), generator=g)
    mask = (torch.arange(length)[None] < lengths[:, None]).long()
    ids[:, 0] = CLS
    ids[torch.arange(rows), lengths - 1] = SEP
    return ids * mask, mask


def test_masking_statistics_over_many_draws():
    """15% of the real tokens are chosen; of those 80% become [MASK], 10% a random token, 10%
    stay; [CLS], [SEP] and padding never are. Tolerances: 4 binomial standard deviations."""
    ids, mask = batch(rows=400)
    masked, labels = mask_tokens(
        ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator().manual_seed(1)
    )
    real = mask.bool() & (ids != CLS) & (ids != SEP)
    chosen = labels != IGNORE
    n, k = int(real.sum()), int(chosen.sum())
    assert abs(k / n - 0.15) < 4 * math.sqrt(0.15 * 0.85 / n)
    assert not (chosen & ~real).any()  # never a special token or padding
    assert torch.equal(labels[chosen], ids[chosen])
    as_mask = (masked == MASK) & chosen
    kept = (masked == ids) & chosen
    replaced = chosen & ~as_mask & ~kept
    for count, p in ((as_mask, 0.8), (replaced, 0.1), (kept, 0.1)):
        share = int(count.sum()) / k
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / k) + 0.002  # kept: random = original
    assert torch.equal(masked[~chosen], ids[~chosen])  # nothing else changes


def test_masking_is_deterministic_under_a_seed():
    ids, mask = batch()
    first = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator().manual_seed(7))
    again = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator().manual_seed(7))
    other = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator().manual_seed(8))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[1], other[1])


def test_whole_word_masking_takes_every_piece_of_a_chosen_word():
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "play": 4, "##ing": 5, "##s": 6}
    vocab |= {"run": 7, "fast": 8}
    continuation = word_continuations(vocab)
    row = [1, 4, 5, 6, 7, 8, 4, 5, 2]  # [CLS] play ##ing ##s run fast play ##ing [SEP]
    ids = torch.tensor([row] * 2000)
    generator = torch.Generator().manual_seed(0)
    _, labels = mask_tokens(
        ids, torch.ones_like(ids), [0, 1, 2, 3], 3, 9, generator, continuation=continuation
    )
    chosen = labels != IGNORE
    assert torch.equal(chosen[:, 1], chosen[:, 2]) and torch.equal(chosen[:, 1], chosen[:, 3])
    assert torch.equal(chosen[:, 6], chosen[:, 7])
    assert abs(chosen[:, 4].float().mean().item() - 0.15) < 0.04  # a one-piece word
    assert not chosen[:, 0].any() and not chosen[:, 8].any()


@pytest.mark.numerics
def test_logits_and_loss_equal_transformers(tmp_path):
    """A random small BertForMaskedLM saved by transformers loads with its head (strictly); its
    logits agree within 1e-5 and its loss on the same masked batch is the same."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        vocab_size=200,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    reference = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():  # a head that is not at its initialisation
        for p in reference.cls.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    reference.save_pretrained(tmp_path)
    model, had_head = load_mlm(tmp_path)
    model.eval()
    assert had_head
    ids, mask = batch(rows=4, length=12)
    ids = ids % 200
    masked, labels = mask_tokens(ids, mask, [0], 3, 200, torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model(masked, mask)
        theirs = reference(input_ids=masked, attention_mask=mask, labels=labels)
    assert (ours - theirs.logits)[mask.bool()].abs().max() < 1e-5
    assert abs(mlm_loss(ours, labels).item() - theirs.loss.item()) < 1e-5


def test_loss_falls_on_a_tiny_repeated_text():
    torch.manual_seed(0)
    model = BertForMaskedLM(BertModel(BertConfig.tiny(vocab_size=200, hidden_dropout_prob=0.0)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids, mask = batch(rows=8, length=10, seed=3)
    ids = torch.where(ids > SEP, ids % 90 + 104, ids)  # a vocabulary of 200
    losses = []
    for step in range(30):
        generator = torch.Generator().manual_seed(step)
        masked, labels = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, 200, generator, 0.3)
        loss = mlm_loss(model(masked, mask), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert sum(losses[-3:]) / 3 < 0.6 * losses[0]


def test_logits_at_the_chosen_positions_give_the_same_loss():
    torch.manual_seed(0)
    model = BertForMaskedLM(BertModel(BertConfig.tiny())).eval()
    ids, mask = batch(rows=4, length=12)
    masked, labels = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator())
    with torch.no_grad():
        full = mlm_loss(model(masked, mask), labels)
        logits, targets = model.masked_logits(masked, mask, labels)
    assert logits.shape == (int((labels != IGNORE).sum()), V)
    assert abs(mlm_loss(logits, targets).item() - full.item()) < 1e-5
