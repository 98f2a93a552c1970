"""Masked-language modelling: masking statistics, the tied decoder, equivalence with Hugging Face
transformers' BertForMaskedLM, learning, and the pretraining command's checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

import pretrain_mlm
from minbert.bert import BertModel
from minbert.mlm import (
    IGNORE,
    BertForMaskedLM,
    load_mlm,
    mask_tokens,
    mlm_loss,
    word_continuations,
)
from minbert.pretrained import load_pretrained
from tests.helpers import tiny_config

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


def test_decoder_is_the_word_embedding_matrix():
    model = BertForMaskedLM(BertModel(tiny_config()))
    assert model.cls.predictions.decoder_weight is model.bert.embeddings.word_embeddings.weight
    assert "cls.predictions.decoder.weight" not in model.state_dict()  # one tensor, not two


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


def test_checkpoint_without_head_starts_from_init(tiny_checkpoint, caplog):
    model, had_head = load_mlm(tiny_checkpoint)
    assert not had_head and "no MLM head" in caplog.text
    assert torch.equal(model.cls.predictions.bias, torch.zeros(V))


def test_loss_falls_on_a_tiny_repeated_text():
    torch.manual_seed(0)
    model = BertForMaskedLM(BertModel(tiny_config(vocab_size=200, hidden_dropout_prob=0.0)))
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


def test_command_writes_a_checkpoint_the_driver_loads(tiny_checkpoint, tiny_data, tmp_path):
    """The output directory loads through load_pretrained (as train_multitask.py --checkpoint
    does) and gives exactly the encoder outputs of the model that wrote it; --resume after the
    end changes nothing; bad input is one line."""
    out = tmp_path / "mlm"
    argv = [
        "--checkpoint",
        str(tiny_checkpoint),
        "--data_dir",
        str(tiny_data),
        "--out_dir",
        str(out),
        "--steps",
        "4",
        "--eval_every",
        "2",
        "--batch_size",
        "8",
        "--max_length",
        "32",
    ]
    assert pretrain_mlm.main(argv) == 0
    written, _ = load_mlm(out)
    encoder = load_pretrained(out).eval()
    written.eval()
    ids, mask = batch(rows=3, length=12)
    with torch.no_grad():
        a = encoder(ids, mask)["last_hidden_state"]
        b = written.bert(ids, mask)["last_hidden_state"]
    assert torch.equal(a, b)
    log = [line for line in (out / "mlm_log.jsonl").read_text().splitlines()]
    assert len(log) == 3  # steps 0, 2, 4
    assert pretrain_mlm.main(argv) == 2  # the folder holds a run
    assert pretrain_mlm.main([*argv, "--resume"]) == 0
    assert pretrain_mlm.main([*argv[:-2], "--max_length", "1", "--overwrite"]) == 2


def test_command_reports_bad_input_in_one_line(tmp_path, capsys):
    assert (
        pretrain_mlm.main(["--text", str(tmp_path / "none.txt"), "--out_dir", str(tmp_path)]) == 2
    )
    assert pretrain_mlm.main(["--tasks", "nope", "--out_dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error: ") for line in err)
    assert "--text" in err[0] and "--tasks" in err[1]


def test_logits_at_the_chosen_positions_give_the_same_loss():
    torch.manual_seed(0)
    model = BertForMaskedLM(BertModel(tiny_config())).eval()
    ids, mask = batch(rows=4, length=12)
    masked, labels = mask_tokens(ids, mask, [CLS, SEP, PAD], MASK, V, torch.Generator())
    with torch.no_grad():
        full = mlm_loss(model(masked, mask), labels)
        logits, targets = model.masked_logits(masked, mask, labels)
    assert logits.shape == (int((labels != IGNORE).sum()), V)
    assert abs(mlm_loss(logits, targets).item() - full.item()) < 1e-5


def test_resume_refuses_a_flag_that_contradicts_the_run(
    tiny_checkpoint, tiny_data, tmp_path, capsys
):
    """--resume takes the run's own settings, as the driver's does: a flag given to change one is
    refused in one line (exit 2) and nothing in the folder changes; the same value is accepted."""
    out = tmp_path / "mlm"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data), "--out_dir"]
    argv += [str(out), "--steps", "2", "--eval_every", "1", "--batch_size", "4"]
    assert pretrain_mlm.main(argv) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert pretrain_mlm.main(["--out_dir", str(out), "--resume", "--lr", "1e-3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --lr 0.001: the run in")
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert pretrain_mlm.main(["--out_dir", str(out), "--resume", "--lr", "5e-5"]) == 0


def test_flags_out_of_range_are_refused_with_the_flag_named(tmp_path, capsys):
    for flag, value in [("--steps", "0"), ("--lr", "nan"), ("--warmup", "1"), ("--seed", "-1")]:
        assert pretrain_mlm.main([flag, value, "--out_dir", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: {flag} "), err
    assert not (tmp_path / "o").exists()
