"""WordPiece tokenization on the real (packaged) uncased vocabulary, and on a tiny one."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

from minbert.bert import BertConfig
from minbert.pretrained import CheckpointError, default_checkpoint_dir
from minbert.tokenizer import Tokenizer

CLS, SEP, PAD = 101, 102, 0
REFERENCE_FILE = Path(__file__).resolve().parents[2] / "sanity_check_reference.pt"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    try:
        return Tokenizer.from_checkpoint(default_checkpoint_dir(), max_length=32)
    except CheckpointError as err:
        pytest.skip(str(err))


def test_hello_world(tokenizer: Tokenizer) -> None:
    batch = tokenizer(["hello world"])
    assert batch["input_ids"].tolist() == [[CLS, 7592, 2088, SEP]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1]]
    assert batch["num_truncated"] == 0
    assert tokenizer(["Hello WORLD"])["input_ids"].tolist() == [[CLS, 7592, 2088, SEP]]  # uncased


def test_pair_token_types_are_0_then_1(tokenizer: Tokenizer) -> None:
    batch = tokenizer(["hello world", "hello"], ["world", "hello world hello"])
    # [CLS] hello world [SEP] world [SEP]            (then padding)
    # [CLS] hello [SEP] hello world hello [SEP]
    assert batch["input_ids"].tolist() == [
        [CLS, 7592, 2088, SEP, 2088, SEP, PAD],
        [CLS, 7592, SEP, 7592, 2088, 7592, SEP],
    ]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1, 1]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1]]


def test_pairs_need_equal_lengths(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError):
        tokenizer(["a", "b"], ["c"])


def test_batch_is_padded_to_its_longest_member(tokenizer: Tokenizer) -> None:
    batch = tokenizer(["hello", "hello world hello world"])
    assert batch["input_ids"].shape == (2, 6)
    assert batch["input_ids"][0].tolist() == [CLS, 7592, SEP, PAD, PAD, PAD]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0, 0], [1] * 6]
    assert all(v.dtype == torch.long for k, v in batch.items() if k != "num_truncated")


def test_truncation_to_max_length(tokenizer: Tokenizer) -> None:
    long = "hello world " * 40  # 80 words, 82 tokens with [CLS] and [SEP]
    batch = tokenizer([long, "hello"])
    assert batch["input_ids"].shape == (2, 32)
    assert batch["input_ids"][0, 0] == CLS and batch["input_ids"][0, -1] == SEP
    assert batch["num_truncated"] == 1
    pair = tokenizer([long], [long])
    assert pair["input_ids"].shape == (1, 32)
    assert (pair["input_ids"][0] == SEP).sum() == 2  # both segments keep their [SEP]
    assert pair["token_type_ids"][0].tolist() == [0] * 16 + [1] * 16  # longest first, evenly
    # Counting does not truncate, and leaves truncation on afterwards.
    assert tokenizer.count_tokens([long, "hello"]) == [82, 3]
    assert tokenizer([long])["input_ids"].shape == (1, 32)


def test_max_length_above_packaged_position_table_raises(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="position table"):
        Tokenizer.from_checkpoint(default_checkpoint_dir(), max_length=513)


def test_max_length_above_position_table_raises(tmp_path: Path) -> None:
    # A tiny checkpoint directory with a 16-position table and its own vocabulary.
    config = BertConfig(
        vocab_size=8, hidden_size=8, num_attention_heads=2, max_position_embeddings=16
    )
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s"]
    (tmp_path / "vocab.txt").write_text("\n".join(words) + "\n")
    with pytest.raises(ValueError, match="position table"):
        Tokenizer.from_checkpoint(tmp_path, max_length=17)
    small = Tokenizer.from_checkpoint(tmp_path, max_length=16)
    assert small(["hello worlds"])["input_ids"].tolist() == [[2, 5, 6, 7, 3]]


def test_matches_hugging_face_tokenizer_on_reference_sentences(tokenizer: Tokenizer) -> None:
    """The ids in sanity_check_reference.pt come from transformers' tokenizer."""
    reference = torch.load(REFERENCE_FILE, weights_only=True)
    single = reference["single"]
    ours = tokenizer(single["sentences"])
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(ours[key], single[key]), key
    pair = reference["pair"]
    first, second = zip(*pair["sentences"], strict=True)
    ours = tokenizer(list(first), list(second))
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert torch.equal(ours[key], pair[key]), key
