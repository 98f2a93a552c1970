"""Masked-language-model pretraining, BERT's own objective (Devlin et al. 2019, section 3.1),
written out: the prediction head, the masking, and the loss.

Masking (``mask_tokens``), for a batch of token ids x:

1. choose each real token (not [CLS], [SEP] or padding) with probability p = 0.15; with
   ``whole_word``, choose each word (a token and the "##" pieces that continue it) instead, and
   every piece of a chosen word with it;
2. of the chosen tokens, replace 80% by [MASK], 10% by a random token of the vocabulary, and
   keep 10% as they are (so the model cannot assume that an unmasked token is always right);
3. the labels are the original ids at the chosen positions and −100 (ignored) elsewhere.

Loss: the mean cross-entropy of the logits against the labels over the chosen positions only,
L = −(1/|M|) Σ_{i∈M} log softmax(logits_i)[x_i].
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from minbert.config import ACTIVATIONS, BertConfig
from minbert.pretrained import (
    fix_up_keys,
    load_pretrained,
    read_weights,
    resolve_checkpoint_dir,
    save_checkpoint_dir,
)

if TYPE_CHECKING:
    from minbert.bert import BertModel

log = logging.getLogger(__name__)

IGNORE = -100  # the label of a position that is not predicted (cross_entropy's ignore_index)
HEAD_PREFIX = "cls.predictions."


class MLMTransform(nn.Module):
    """z = LayerNorm(act(h W_t + b_t)), (B, T, D) -> (B, T, D)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = ACTIVATIONS[config.hidden_act]
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.act(self.dense(h)))


class MLMHead(nn.Module):
    """The prediction head (Hugging Face's ``cls.predictions``) on the encoder output h (B, T, D):

        z = LayerNorm(act(h W_t + b_t))          transform: dense D→D, the encoder's activation
        logits = z Eᵀ + b                        decoder: the word-embedding matrix E (V×D), tied

    with E the word embeddings (the same tensor, not a copy) and V the vocabulary size."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.transform = MLMTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.word_embeddings = [word_embeddings]  # a list: tied, so not a second submodule

    @property
    def decoder_weight(self) -> torch.Tensor:
        return self.word_embeddings[0].weight

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        z = self.transform(h)  # (B, T, D)
        return F.linear(z, self.decoder_weight, self.bias)  # (B, T, D) -> (B, T, V)


class PredictionHeads(nn.Module):
    """``cls``: holds ``predictions`` so that the state-dict keys read ``cls.predictions.*``."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding) -> None:
        super().__init__()
        self.predictions = MLMHead(config, word_embeddings)


class BertForMaskedLM(nn.Module):
    """A ``BertModel`` and its masked-language-model head."""

    def __init__(self, bert: BertModel) -> None:
        super().__init__()
        self.bert = bert
        self.cls = PredictionHeads(bert.config, bert.embeddings.word_embeddings)
        self.cls.apply(bert._init_weights)  # BERT's initialisation: N(0, 0.02²), LayerNorm 1, 0

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids=None
    ) -> torch.Tensor:
        """Token ids (B, T) -> vocabulary logits (B, T, V)."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids)["last_hidden_state"]
        return self.cls.predictions(hidden)

    def masked_logits(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        labels: torch.Tensor,
        token_type_ids=None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits at the chosen positions only, (N, V), and their labels (N,): the same
        loss as ``mlm_loss(forward(...), labels)`` for a sixth of the vocabulary projection."""
        hidden = self.bert(input_ids, attention_mask, token_type_ids)["last_hidden_state"]
        chosen = labels != IGNORE
        return self.cls.predictions(hidden[chosen]), labels[chosen]  # (N, D) -> (N, V)

    def save_pretrained(self, directory: str | Path, vocab_file: str | Path) -> None:
        """A checkpoint directory in Hugging Face's layout: ``config.json``, ``model.safetensors``
        (``bert.*`` and ``cls.predictions.*``; the tied decoder is the word embeddings),
        ``vocab.txt`` and ``tokenizer_config.json``."""
        state = {f"bert.{k}": v for k, v in self.bert.state_dict().items()}
        state |= {f"cls.{k}": v for k, v in self.cls.state_dict().items()}
        save_checkpoint_dir(directory, self.bert.config, state, vocab_file, "BertForMaskedLM")


def load_mlm(checkpoint_dir: str | Path | None = None) -> tuple[BertForMaskedLM, bool]:
    """The checkpoint's BERT with its MLM head: (model, whether the head came from the
    checkpoint). A checkpoint without ``cls.predictions.*`` gets a freshly initialised head (a
    message says so); one with a partial head is an error."""
    directory = resolve_checkpoint_dir(checkpoint_dir)
    model = BertForMaskedLM(load_pretrained(directory))
    saved = {}
    for key, tensor in read_weights(directory).items():
        key = key.removeprefix("bert.")
        if key.startswith(HEAD_PREFIX) and not key.startswith(HEAD_PREFIX + "decoder."):
            saved[key.removeprefix("cls.")] = tensor
    if not saved:
        log.warning("%s has no MLM head (cls.predictions.*): it starts from BERT's init", directory)
        return model, False
    saved, _ = fix_up_keys(saved)  # gamma/beta -> weight/bias in old checkpoints
    model.cls.load_state_dict(saved, strict=True)
    return model, True


def mask_tokens(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    special_ids: list[int],
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    probability: float = 0.15,
    continuation: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked inputs and labels, both (B, T) (steps 1-3 of the module docstring).

    special_ids: ids never chosen ([CLS], [SEP], [PAD], ...); padding (attention_mask 0) never is.
    continuation: with whole-word masking, a (V,) bool tensor, True for a "##" piece: a piece is
        chosen exactly when the word it continues is.

    The random draws, in this order, from ``generator`` (so that a seed fixes the result):
    u = rand(B, T): a token is chosen when u < probability (with whole-word masking, the u of the
    first token of its word decides for every piece of the word); a = rand(B, T): a chosen token
    becomes [MASK] when a < 0.8, a random id when 0.8 ≤ a < 0.9, and stays as it is otherwise;
    r = randint(vocab_size, (B, T)): the random ids.
    """
    B, T = input_ids.shape
    # HINT: steps 1-3 of the module docstring with the three draws above, in their order: the
    # HINT: candidates are the real tokens that are not special; with ``continuation``, a "##"
    # HINT: piece that is a candidate follows the choice of its word's first token.
    # BEGIN SOLUTION: masking
    candidates = attention_mask.bool() & ~torch.isin(input_ids, torch.tensor(special_ids))
    draw = torch.rand(B, T, generator=generator)
    if continuation is None:
        chosen = candidates & (draw < probability)
    else:
        pieces = continuation[input_ids] & candidates  # (B, T): continues the token before it
        positions = torch.arange(T).expand(B, T)
        starts = torch.where(pieces, 0, positions).cummax(dim=1).values  # its word's first token
        chosen = candidates & (torch.gather(draw, 1, starts) < probability)
    labels = torch.where(chosen, input_ids, torch.full_like(input_ids, IGNORE))
    action = torch.rand(B, T, generator=generator)  # < 0.8: [MASK]; < 0.9: random; else keep
    random_ids = torch.randint(vocab_size, (B, T), generator=generator)
    masked = torch.where(chosen & (action < 0.8), torch.full_like(input_ids, mask_id), input_ids)
    masked = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, masked)
    return masked, labels
    # END SOLUTION


def mlm_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over the chosen positions: (B, T, V) and (B, T), or the chosen
    positions alone, (N, V) and (N,) -> scalar."""
    # HINT: the loss of the module docstring, in float32: positions labelled IGNORE count
    # HINT: neither in the sum nor in the number of terms.
    # BEGIN SOLUTION: mlm-loss
    return F.cross_entropy(logits.flatten(0, -2).float(), labels.flatten(), ignore_index=IGNORE)
    # END SOLUTION


def word_continuations(vocab: dict[str, int]) -> torch.Tensor:
    """(V,) bool: True for the WordPiece pieces that continue a word ("##ing")."""
    continuation = torch.zeros(max(vocab.values()) + 1, dtype=torch.bool)
    for token, index in vocab.items():
        continuation[index] = token.startswith("##")
    return continuation


@torch.no_grad()
def evaluate_mlm(
    model: BertForMaskedLM,
    tokenizer,
    sentences: list[str],
    batch_size: int = 64,
    seed: int = 0,
) -> dict[str, float]:
    """Masked-token accuracy and perplexity exp(mean loss) on ``sentences``, masked with a
    generator seeded with ``seed`` (the same masks for every model, so figures compare)."""
    was_training = model.training
    model.eval()
    vocab = tokenizer.backend.get_vocab()
    generator = torch.Generator().manual_seed(seed)
    total_loss, correct, count = 0.0, 0, 0
    for start in range(0, len(sentences), batch_size):
        batch = tokenizer(sentences[start : start + batch_size])
        masked, labels = mask_batch(batch, vocab, generator)
        logits, targets = model.masked_logits(
            masked, batch["attention_mask"], labels, batch["token_type_ids"]
        )
        if len(targets):
            total_loss += mlm_loss(logits, targets).item() * len(targets)
            correct += int((logits.argmax(-1) == targets).sum())
            count += len(targets)
    model.train(was_training)
    loss = total_loss / max(count, 1)
    accuracy = correct / max(count, 1)
    perplexity = float(torch.tensor(loss).exp())
    return {"loss": loss, "perplexity": perplexity, "accuracy": accuracy, "masked_tokens": count}


def mask_batch(
    batch: dict[str, torch.Tensor],
    vocab: dict[str, int],
    generator: torch.Generator,
    continuation: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``mask_tokens`` on a tokenizer's batch, with the vocabulary's special ids, [MASK] and
    size: (masked ids, labels)."""
    return mask_tokens(
        batch["input_ids"],
        batch["attention_mask"],
        special_ids(vocab),
        vocab["[MASK]"],
        len(vocab),
        generator,
        continuation=continuation,
    )


def special_ids(vocab: dict[str, int]) -> list[int]:
    """The ids masking never chooses: [CLS], [SEP], [PAD] (and [MASK], [UNK] when present)."""
    return [vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]", "[MASK]", "[UNK]") if t in vocab]
