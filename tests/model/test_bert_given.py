"""What the course gives the student in minbert/bert.py (Hugging Face names, the position buffer,
the checks on the config and on the length); the student tree leaves these out, as it holds only
the tests of what the student writes."""

from __future__ import annotations

import pytest
import torch

from minbert.bert import BertConfig, BertModel
from tests.model.test_bert import TYPES, D, F, P, V, random_model


def test_state_dict_keys_and_shapes_are_hugging_face_bert() -> None:
    # Written out by hand from Hugging Face's BertModel naming, for 2 layers.
    expected = {
        "embeddings.word_embeddings.weight": (V, D),
        "embeddings.position_embeddings.weight": (P, D),
        "embeddings.token_type_embeddings.weight": (TYPES, D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
        "encoder.layer.0.attention.self.query.weight": (D, D),
        "encoder.layer.0.attention.self.query.bias": (D,),
        "encoder.layer.0.attention.self.key.weight": (D, D),
        "encoder.layer.0.attention.self.key.bias": (D,),
        "encoder.layer.0.attention.self.value.weight": (D, D),
        "encoder.layer.0.attention.self.value.bias": (D,),
        "encoder.layer.0.attention.output.dense.weight": (D, D),
        "encoder.layer.0.attention.output.dense.bias": (D,),
        "encoder.layer.0.attention.output.LayerNorm.weight": (D,),
        "encoder.layer.0.attention.output.LayerNorm.bias": (D,),
        "encoder.layer.0.intermediate.dense.weight": (F, D),
        "encoder.layer.0.intermediate.dense.bias": (F,),
        "encoder.layer.0.output.dense.weight": (D, F),
        "encoder.layer.0.output.dense.bias": (D,),
        "encoder.layer.0.output.LayerNorm.weight": (D,),
        "encoder.layer.0.output.LayerNorm.bias": (D,),
        "encoder.layer.1.attention.self.query.weight": (D, D),
        "encoder.layer.1.attention.self.query.bias": (D,),
        "encoder.layer.1.attention.self.key.weight": (D, D),
        "encoder.layer.1.attention.self.key.bias": (D,),
        "encoder.layer.1.attention.self.value.weight": (D, D),
        "encoder.layer.1.attention.self.value.bias": (D,),
        "encoder.layer.1.attention.output.dense.weight": (D, D),
        "encoder.layer.1.attention.output.dense.bias": (D,),
        "encoder.layer.1.attention.output.LayerNorm.weight": (D,),
        "encoder.layer.1.attention.output.LayerNorm.bias": (D,),
        "encoder.layer.1.intermediate.dense.weight": (F, D),
        "encoder.layer.1.intermediate.dense.bias": (F,),
        "encoder.layer.1.output.dense.weight": (D, F),
        "encoder.layer.1.output.dense.bias": (D,),
        "encoder.layer.1.output.LayerNorm.weight": (D,),
        "encoder.layer.1.output.LayerNorm.bias": (D,),
        "pooler.dense.weight": (D, D),
        "pooler.dense.bias": (D,),
    }
    state = BertModel(BertConfig.tiny()).state_dict()
    assert {k: tuple(v.shape) for k, v in state.items()} == expected


def test_position_ids_is_a_non_persistent_buffer() -> None:
    model = BertModel(BertConfig.tiny())
    buffers = dict(model.named_buffers())
    assert "embeddings.position_ids" in buffers
    assert torch.equal(buffers["embeddings.position_ids"][0], torch.arange(P))
    assert not any("position_ids" in k for k in model.state_dict())


def test_sequence_longer_than_position_table_raises() -> None:
    model = random_model()
    with pytest.raises(ValueError, match="position table"):
        model(torch.ones(1, P + 1, dtype=torch.long))


def test_config_rejects_inconsistent_values() -> None:
    with pytest.raises(ValueError, match="multiple"):
        BertConfig.tiny(hidden_size=18)
    with pytest.raises(ValueError, match="hidden_act"):
        BertConfig.tiny(hidden_act="swish")
    with pytest.raises(ValueError, match="position_embedding_type"):
        BertConfig.tiny(position_embedding_type="relative_key")
