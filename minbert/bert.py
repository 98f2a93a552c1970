"""BERT (Devlin et al. 2019, "BERT: Pre-training of Deep Bidirectional Transformers for Language
Understanding"), written out by hand so it can be read top to bottom.

Shapes: B batch size; T tokens per sequence (after padding); D hidden size (config.hidden_size); nh
attention heads (config.num_attention_heads); hs head size, D / nh; F feed-forward size
(config.intermediate_size).

Module attribute paths are exactly Hugging Face's BERT names (``embeddings.word_embeddings``,
``encoder.layer.N.attention.self.query``, ...), so a pretrained checkpoint loads with
``load_state_dict(strict=True)`` after a small key fix-up (see ``minbert/pretrained.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from minbert.config import ACTIVATIONS, BertConfig, gelu
from minbert.sites import Plugins

__all__ = ["ACTIVATIONS", "BertConfig", "BertModel", "gelu", "scaled_dot_product_attention"]


def extended_attention_mask(attention_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn a (B, T) mask of 1 (token) / 0 (padding) into the additive mask M of the attention
    equation: 0 where a key may be attended to, the most negative finite number where it may not."""
    mask = attention_mask[:, None, None, :].to(dtype)  # (B, T) -> (B, 1, 1, T)
    return (1.0 - mask) * torch.finfo(dtype).min


def scaled_dot_product_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, dropout_p: float = 0.0
) -> torch.Tensor:
    """Attention(Q, K, V) = softmax(QKᵀ / √d_k + M) · V, written out (Vaswani et al. 2017).

    q, k, v: (B, nh, T, hs); mask: additive, broadcastable to (B, nh, T, T).
    """
    # HINT: the equation above, d_k being the head size; the softmax normalises over the keys;
    # HINT: dropout (probability dropout_p) acts on the attention probabilities.
    # BEGIN SOLUTION: attention
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)) + mask  # (B, nh, T, T)
    probs = F.dropout(scores.softmax(dim=-1), p=dropout_p)
    return probs @ v  # (B, nh, T, T) @ (B, nh, T, hs) -> (B, nh, T, hs)
    # END SOLUTION


class BertEmbeddings(nn.Module):
    """E = dropout(LayerNorm(word[input_ids] + position[0..T-1] + token_type[token_type_ids]))."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id
        )
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        position_ids = torch.arange(config.max_position_embeddings)[None, :]
        self.register_buffer("position_ids", position_ids, persistent=False)

    def forward(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor) -> torch.Tensor:
        B, T = input_ids.shape
        # HINT: the equation of the class docstring: three embeddings of each token (its id, its
        # HINT: position 0..T−1 from the position_ids buffer, its token type) summed, normalised,
        # HINT: then dropout.
        # BEGIN SOLUTION: embeddings
        positions = self.position_ids[:, :T]  # (1, T)
        x = (
            self.word_embeddings(input_ids)
            + self.position_embeddings(positions)
            + self.token_type_embeddings(token_type_ids)
        )  # (B, T) -> (B, T, D)
        return self.dropout(self.LayerNorm(x))
        # END SOLUTION


class BertSelfAttention(nn.Module):
    """Multi-head self-attention: head_i = Attention(X W_i^Q, X W_i^K, X W_i^V), heads concatenated.

    ``use_fast_path`` routes the equation through PyTorch's fused
    ``torch.nn.functional.scaled_dot_product_attention``; ``tests/model/test_bert.py`` checks that
    both give the same numbers.
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout_p = config.attention_probs_dropout_prob
        self.use_fast_path = True

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape

        # HINT: project x with self.query, self.key, self.value; split D into nh heads of hs,
        # HINT: heads before tokens; attend with the mask and, in training only, the attention
        # HINT: dropout: torch's fused F.scaled_dot_product_attention when self.use_fast_path, else
        # HINT: the written-out one above; then merge the heads back to (B, T, D).
        # BEGIN SOLUTION: attention
        def split_heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, self.num_heads, D // self.num_heads).transpose(1, 2)

        q = split_heads(self.query(x))  # (B, T, D) -> (B, nh, T, hs)
        k = split_heads(self.key(x))
        v = split_heads(self.value(x))
        dropout_p = self.dropout_p if self.training else 0.0
        if self.use_fast_path:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)
        else:
            y = scaled_dot_product_attention(q, k, v, mask, dropout_p)
        return y.transpose(1, 2).reshape(B, T, D)  # (B, nh, T, hs) -> (B, T, D)
        # END SOLUTION

    def probabilities(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Each head's attention probabilities P = softmax(QKᵀ / √d_k + M), (B, T, D) ->
        (B, nh, T, T): row i is how much token i attends to each token j, after the mask and the
        softmax, before dropout (none is applied).

        This module's own ``forward`` runs on the written-out path while ``recorded_attention``
        records P (so the equation and the head split are written once, in the course by the
        student); LoRA on the query or key (a hook on them) is included. In training mode a
        plug-in's dropout on these projections (LoRA's) draws masks of its own here; read
        attention in eval mode.
        """
        fast, self.use_fast_path = self.use_fast_path, False
        try:
            with recorded_attention() as found:
                self.forward(x, mask)
        finally:
            self.use_fast_path = fast
        return found[-1]


@contextlib.contextmanager
def recorded_attention() -> Iterator[list[torch.Tensor]]:
    """While inside, every call of the written-out ``scaled_dot_product_attention`` (looked up in
    this module, as ``forward`` does) also records its probabilities P, (B, nh, T, S), in the
    list it yields: the same function with the identity as the values, P · I = P, exactly."""
    written = globals()["scaled_dot_product_attention"]
    found: list[torch.Tensor] = []

    def attend(q, k, v, mask=None, dropout_p=0.0):
        S = k.shape[-2]
        identity = torch.eye(S, dtype=q.dtype, device=q.device).expand(*q.shape[:-2], S, S)
        found.append(written(q, k, identity, mask))  # (B, nh, T, S)
        return written(q, k, v, mask, dropout_p)

    globals()["scaled_dot_product_attention"] = attend
    try:
        yield found
    finally:
        globals()["scaled_dot_product_attention"] = written
    if not found:
        raise RuntimeError(
            "no attention was recorded: with use_fast_path False, attention must call the "
            "written-out scaled_dot_product_attention of minbert/bert.py"
        )


class BertSelfOutput(nn.Module):
    """Attention output projection and add & norm: LayerNorm(x + dropout(W_O · heads)).

    (An adapter acts on the output of ``self.dropout``, before the residual add.)"""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, heads: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # HINT: the class docstring's equation with this module's dense, dropout and LayerNorm
        # HINT: (plug-ins act on what each of them returns).
        # BEGIN SOLUTION: layer
        return self.LayerNorm(x + self.dropout(self.dense(heads)))
        # END SOLUTION


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x, mask), x)


class BertIntermediate(nn.Module):
    """First half of the feed-forward network: act(x W_1 + b_1), (B, T, D) -> (B, T, F)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        self.act = ACTIVATIONS[config.hidden_act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.dense(x))  # (B, T, D) -> (B, T, F)


class BertOutput(nn.Module):
    """Second half of the feed-forward network and add & norm: LayerNorm(x + dropout(h W_2 + b_2)).

    (An adapter acts on the output of ``self.dropout``; a PAL adds its term to the input of
    ``self.LayerNorm``.)"""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # HINT: the class docstring's equation with this module's dense, dropout and LayerNorm.
        # BEGIN SOLUTION: layer
        return self.LayerNorm(x + self.dropout(self.dense(h)))  # (B, T, F) -> (B, T, D)
        # END SOLUTION


class BertLayer(nn.Module):
    """One Transformer encoder layer (post-norm, as in BERT):

    a = LayerNorm(x + MultiHead(x))
    y = LayerNorm(a + FFN(a)),  FFN(a) = act(a W_1 + b_1) W_2 + b_2
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # HINT: the two sub-layers of the docstring with the sub-modules above.
        # BEGIN SOLUTION: layer
        a = self.attention(x, mask)
        return self.output(self.intermediate(a), a)
        # END SOLUTION


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))


class BertPooler(nn.Module):
    """pooler_output = tanh(W_p · h_[CLS] + b_p), the representation of the first token."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(hidden[:, 0]))  # (B, T, D) -> (B, D)


class BertModel(nn.Module):
    """BERT: embeddings, a stack of encoder layers, and the pooler.

    The course split is kept: ``embed`` maps token ids to vectors, ``encode`` runs the layers on
    vectors (so SMART can perturb embeddings and encode again),
    ``forward`` = ``encode(embed(...))``.
    Plug-ins attached to ``self.plugins`` (a container keyed by plug-in name) act through the
    sites of each layer for the task named in the call (``minbert/sites.py``).
    """

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config)
        self.plugins = Plugins()  # filled by minbert.plugins; empty for plain BERT
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module) -> None:
        """Random initialisation of BERT: N(0, initializer_range²) weights, zero biases,
        unit LayerNorm; only used when no checkpoint is loaded (tests, pretraining from scratch)."""
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None:
            nn.init.zeros_(module.weight[module.padding_idx])
        if isinstance(module, nn.LayerNorm):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def set_fast_attention(self, enabled: bool) -> None:
        """Choose fused attention (default) or the written-out equation in every layer."""
        for layer in self.encoder.layer:
            layer.attention.self.use_fast_path = enabled

    def embed(
        self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Token ids (B, T) -> input vectors (B, T, D)."""
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        B, T = input_ids.shape
        if T > self.config.max_position_embeddings:
            raise ValueError(
                f"sequence of {T} tokens is longer than the position table "
                f"({self.config.max_position_embeddings}); truncate it when tokenizing"
            )
        return self.embeddings(input_ids, token_type_ids)

    def encode(
        self, embeddings: torch.Tensor, attention_mask: torch.Tensor, task: str | None = None
    ) -> dict[str, Any]:
        """Run the encoder layers and the pooler on input vectors (B, T, D).

        attention_mask: (B, T), 1 for real tokens and 0 for padding.
        task: the active task; plug-ins use it to choose their per-task parameters.
        (The attention maps are captured by hooks on the layers, outside the model.)
        """
        mask = extended_attention_mask(attention_mask, embeddings.dtype)  # (B, T) -> (B, 1, 1, T)
        if len(self.plugins):
            self.plugins.activate(task)
        hidden = embeddings
        for layer in self.encoder.layer:
            hidden = layer(hidden, mask)
        return {"last_hidden_state": hidden, "pooler_output": self.pooler(hidden)}

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        task: str | None = None,
    ) -> dict[str, Any]:
        """``encode(embed(input_ids, token_type_ids), attention_mask, task)``; attention_mask
        defaults to all ones."""
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        embeddings = self.embed(input_ids, token_type_ids)
        return self.encode(embeddings, attention_mask, task)
