"""What the course gives the student in minbert/mlm.py (the decoder tied to the word embeddings, a
checkpoint without an MLM head); the student tree leaves these out."""

from __future__ import annotations

import torch

from minbert.bert import BertConfig, BertModel
from minbert.mlm import (
    BertForMaskedLM,
    load_mlm,
)
from tests.model.test_mlm import V


def test_decoder_is_the_word_embedding_matrix():
    model = BertForMaskedLM(BertModel(BertConfig.tiny()))
    assert model.cls.predictions.decoder_weight is model.bert.embeddings.word_embeddings.weight
    assert "cls.predictions.decoder.weight" not in model.state_dict()  # one tensor, not two


def test_checkpoint_without_head_starts_from_init(tiny_checkpoint, caplog):
    model, had_head = load_mlm(tiny_checkpoint)
    assert not had_head and "no MLM head" in caplog.text
    assert torch.equal(model.cls.predictions.bias, torch.zeros(V))
