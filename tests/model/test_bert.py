"""BertModel on tiny random configs: padding, the two attention paths, dropout, the forward as
encode of embed (the given structure's tests are the full project's, not the student tree's)."""

from __future__ import annotations

import pytest
import torch

from minbert.bert import BertConfig, BertModel

CONFIG = BertConfig.tiny()
V, D, NH, F = (
    CONFIG.vocab_size,
    CONFIG.hidden_size,
    CONFIG.num_attention_heads,
    CONFIG.intermediate_size,
)
P, TYPES = CONFIG.max_position_embeddings, CONFIG.type_vocab_size


def random_model(config: BertConfig | None = None, seed: int = 0) -> BertModel:
    """A model with large random weights. BERT's N(0, 0.02²) init makes attention almost uniform,
    which would hide masking mistakes; std 0.5 makes it peaked."""
    torch.manual_seed(seed)
    model = BertModel(config or BertConfig.tiny())
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
    return model.eval()


def random_batch(B: int = 3, T: int = 7, seed: int = 1) -> dict[str, torch.Tensor]:
    """Token ids in 1..V-1 (0 is [PAD]), both token types, rows of different real lengths."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, V, (B, T), generator=g)
    token_type_ids = torch.randint(0, TYPES, (B, T), generator=g)
    attention_mask = torch.ones(B, T, dtype=torch.long)
    for b in range(B):
        attention_mask[b, T - b :] = 0  # row b has b padding tokens
    input_ids = input_ids * attention_mask
    token_type_ids = token_type_ids * attention_mask
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
    }


@pytest.mark.parametrize("fast", [True, False], ids=["fast", "equation"])
def test_padding_does_not_change_real_tokens(fast: bool) -> None:
    model = random_model()
    model.set_fast_attention(fast)
    batch = random_batch()
    B, T = batch["input_ids"].shape
    extra = 4
    padded = {k: torch.cat([v, torch.zeros(B, extra, dtype=v.dtype)], 1) for k, v in batch.items()}
    with torch.no_grad():
        out = model(**batch)
        out_padded = model(**padded)
    real = batch["attention_mask"].bool()
    torch.testing.assert_close(
        out_padded["last_hidden_state"][:, :T][real],
        out["last_hidden_state"][real],
        rtol=0,
        atol=1e-5,
    )
    torch.testing.assert_close(out_padded["pooler_output"], out["pooler_output"], rtol=0, atol=1e-5)

    # Not vacuous: attending to the padding would have changed the outputs.
    unmasked = {**padded, "attention_mask": torch.ones_like(padded["attention_mask"])}
    with torch.no_grad():
        out_unmasked = model(**unmasked)
    diff = out_unmasked["last_hidden_state"][:, :T][real] - out["last_hidden_state"][real]
    assert diff.abs().max() > 1e-2


@pytest.mark.numerics
def test_fast_attention_equals_written_out_equation_with_padding() -> None:
    model = random_model()
    batch = random_batch()
    with torch.no_grad():
        model.set_fast_attention(True)
        fast = model(**batch)
        model.set_fast_attention(False)
        equation = model(**batch)
    for name in ("last_hidden_state", "pooler_output"):
        torch.testing.assert_close(fast[name], equation[name], rtol=0, atol=1e-5, msg=name)


def test_eval_is_deterministic_and_train_uses_dropout() -> None:
    model = random_model(BertConfig.tiny(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3))
    batch = random_batch()
    with torch.no_grad():
        torch.manual_seed(1)
        a = model(**batch)["last_hidden_state"]
        torch.manual_seed(2)
        b = model(**batch)["last_hidden_state"]
        assert torch.equal(a, b)
        model.train()
        c = model(**batch)["last_hidden_state"]
        d = model(**batch)["last_hidden_state"]
    assert not torch.equal(c, d)


def test_forward_is_encode_of_embed() -> None:
    model = random_model()
    batch = random_batch()
    with torch.no_grad():
        out = model(**batch)
        embeddings = model.embed(batch["input_ids"], batch["token_type_ids"])
        split = model.encode(embeddings, batch["attention_mask"])
    B, T = batch["input_ids"].shape
    assert embeddings.shape == (B, T, D)
    assert out["last_hidden_state"].shape == (B, T, D)
    assert out["pooler_output"].shape == (B, D)
    for name in ("last_hidden_state", "pooler_output"):
        assert torch.equal(out[name], split[name])


def test_defaults_are_all_ones_mask_and_type_zero() -> None:
    model = random_model()
    ids = random_batch()["input_ids"][:1].clamp(min=1)
    with torch.no_grad():
        default = model(ids)["last_hidden_state"]
        explicit = model(ids, torch.ones_like(ids), torch.zeros_like(ids))["last_hidden_state"]
    assert torch.equal(default, explicit)
