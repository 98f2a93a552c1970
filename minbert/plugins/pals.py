"""Projected attention layers, PALs (Stickland & Murray 2019, "BERT and PALs: Projected Attention
Layers for Efficient Adaptation in Multi-Task Learning").


Per task, an encoder V_E (s×D) and a decoder V_D (D×s) are shared by all layers; each layer l
has its own multi-head self-attention g_l that works inside the s-dimensional space. The PAL
term is computed from the layer input x and added in parallel to the layer, before the layer's
final LayerNorm:

    PAL_l(x) = V_D · g_l(V_E · x)
    y = LayerNorm(a + FFN(a) + PAL_l(x)),   a = the attention sub-layer's output

Default size: s = nh · ⌊204·D / (768·nh)⌋ with nh the model's head count (the paper's s = 204 for
BERT-base, D = 768); for the packaged D = 384 checkpoint, 96 (12 heads of 8).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from minbert.config import BertConfig, gelu
from minbert.flags import check_ranges, setting
from minbert.plugins.base import Plugin


@dataclass
class PALSettings:
    """Options of ``PAL`` (driver flags ``--pal_<name>``)."""

    size: int | None = setting(
        None, "PAL projection size s (default: sized to D, see pals.py)", within="[1, inf)"
    )
    heads: int | None = setting(
        None, "attention heads inside a PAL (default: the encoder's)", within="[1, inf)"
    )
    gelu: bool = setting(
        False,
        (
            "a GELU after the decoder V_D, as the PALs authors' code has (the paper's equation has "
            "none)"
        ),
    )

    def __post_init__(self) -> None:
        check_ranges(self)

    def resolved(self, config: BertConfig) -> tuple[int, int]:
        """(s, nh) for ``config``: the defaults of the module docstring where unset."""
        heads = config.num_attention_heads if self.heads is None else self.heads
        size = default_size(config, heads) if self.size is None else self.size
        if heads < 1 or size < 1 or size % heads != 0:
            raise ValueError(
                f"PAL size {size} (--pal_size) must be a positive multiple of heads {heads} "
                "(--pal_heads)"
            )
        return size, heads


def default_size(config: BertConfig, heads: int) -> int:
    """s = heads · ⌊204·D / (768·heads)⌋ (at least one unit per head): the paper's ratio."""
    return heads * max(1, (204 * config.hidden_size) // (768 * heads))


class Decoder(nn.Linear):
    """V_D: (B, T, s) -> (B, T, D), followed by a GELU when ``with_gelu``."""

    def __init__(self, size: int, hidden_size: int, with_gelu: bool) -> None:
        super().__init__(size, hidden_size)
        self.with_gelu = with_gelu

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        out = super().forward(z)
        return gelu(out) if self.with_gelu else out


class TaskPAL(nn.Module):
    """One task's PAL parameters: V_E and V_D shared by all layers, one attention per layer
    (``attention(init_std)`` makes each)."""

    def __init__(
        self,
        config: BertConfig,
        size: int,
        with_gelu: bool,
        attention: Callable[[float], nn.Module],
    ) -> None:
        super().__init__()
        D, std = config.hidden_size, config.initializer_range
        self.encoder = nn.Linear(D, size)  # V_E
        self.decoder = Decoder(size, D, with_gelu)  # V_D
        self.layers = nn.ModuleList(attention(std) for _ in range(config.num_hidden_layers))
        nn.init.normal_(self.encoder.weight, std=std)
        nn.init.zeros_(self.encoder.bias)
        nn.init.zeros_(self.decoder.weight)
        nn.init.zeros_(self.decoder.bias)


class PAL(Plugin):
    """Per task, a projected attention layer in parallel with every encoder layer.

    Options in ``PALSettings`` (defaults: see the module docstring). Attention dropout
    follows ``config.attention_probs_dropout_prob`` (attribute ``dropout_p``) in training mode;
    ``use_fast_path`` chooses fused attention, as ``BertSelfAttention.use_fast_path`` does.
    """

    kind = "pals"
    Settings = PALSettings
    flag_prefix = "pal_"
    widths = ("size", "heads")
    summary = "projected attention layers beside each layer"

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.size, self.heads = self.settings.resolved(config)
        self.dropout_p = config.attention_probs_dropout_prob
        self.use_fast_path = True
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        return TaskPAL(self.config, self.size, self.settings.gelu, self.projected_attention)

    def projected_attention(self, init_std: float) -> nn.Module:
        """g_l: the encoder's own self-attention in the PAL space (``ProjectedAttention``),
        imported here, so that the PAL exercise's check can stand in for it without bert.py."""
        from minbert.plugins.projected_attention import ProjectedAttention

        return ProjectedAttention(self.size, self.heads, init_std)

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        """Layer l's attention acts in layer l; V_E and V_D serve every layer (the top one)."""
        pal = self.by_task[task]
        top = self.config.num_hidden_layers - 1
        depths = {p: top for p in [*pal.encoder.parameters(), *pal.decoder.parameters()]}
        for layer, attention in enumerate(pal.layers):
            depths |= {p: layer for p in attention.parameters()}
        return depths

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """2·D·s + D + s (V_E, V_D) + 3·L·(s² + s) (query, key, value in every layer)."""
        s, _ = cls.make_settings(**options).resolved(config)
        D, L = config.hidden_size, config.num_hidden_layers
        return 2 * D * s + D + s + 3 * L * (s * s + s)

    def parallel(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        if mask is None:
            raise RuntimeError(
                "PAL attends over the layer input and needs the attention mask: call the layer "
                "as layer(x, mask)"
            )
        # HINT: PAL_l(x) = V_D · g_l(V_E · x) with this task's encoder V_E, this layer's
        # HINT: projected attention g_l (called with the mask, the attention dropout, which only
        # HINT: applies in training, and self.use_fast_path) and decoder V_D (it adds the GELU).
        # BEGIN SOLUTION: pals
        pal = self.by_task[task]
        dropout_p = self.dropout_p if self.training else 0.0
        z = pal.encoder(x)  # (B, T, D) -> (B, T, s)
        z = pal.layers[layer](z, mask, dropout_p, self.use_fast_path)
        return pal.decoder(z)  # (B, T, s) -> (B, T, D)
        # END SOLUTION

    def attentions(
        self, layer: int, task: str, x: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        """{"pals": P}: g_l's attention probabilities in the projected space, (B, T, D) ->
        (B, nh, T, T) with this PAL's heads, recorded while this PAL's own ``parallel`` runs on
        the written-out path (``recorded_attention``); drawn attention maps hold them, one per
        layer, as ``plugin_attentions["pals"]``."""
        from minbert.bert import recorded_attention

        fast, self.use_fast_path = self.use_fast_path, False
        try:
            with recorded_attention() as found:
                self.parallel(layer, task, x, mask)
        finally:
            self.use_fast_path = fast
        return {"pals": found[-1]}

    def extra_repr(self) -> str:
        return (
            f"tasks={self.tasks}, size={self.size}, heads={self.heads}, gelu={self.settings.gelu}"
        )
