"""A PAL layer's attention g_l (``minbert/plugins/pals.py``): the encoder's own multi-head
self-attention, ``BertSelfAttention``, on s-dimensional inputs with nh heads and without an
output projection, so the equation is written once, in bert.py:

    g_l(z) = [Attention(z W_i^Q, z W_i^K, z W_i^V)]_{i=1..nh}
"""

from __future__ import annotations

import torch
from torch import nn

from minbert.bert import BertSelfAttention
from minbert.config import BertConfig


class ProjectedAttention(BertSelfAttention):
    """g_l, one layer's attention in the PAL space (no plug-in sites), initialised as PAL's
    authors do: normal weights of std ``init_std``, zero biases."""

    def __init__(self, size: int, heads: int, init_std: float) -> None:
        config = BertConfig(hidden_size=size, num_attention_heads=heads, intermediate_size=size)
        super().__init__(config)
        for linear in (self.query, self.key, self.value):
            nn.init.normal_(linear.weight, std=init_std)
            nn.init.zeros_(linear.bias)

    def forward(  # type: ignore[override]
        self, z: torch.Tensor, mask: torch.Tensor, dropout_p: float, fast: bool
    ) -> torch.Tensor:
        """(B, T, s) -> (B, T, s); dropout_p is the attention dropout to apply (0 in eval)."""
        self.dropout_p, self.use_fast_path = dropout_p, fast
        return super().forward(z, mask)
