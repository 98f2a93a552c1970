"""Reference equations shared by the checks, written out with plain torch operations (never
calling the code they grade), and the fixed random inputs the checks run them on.

A reference used by one checks file only stays in that file, next to its check
(``ref_layer`` in ``checks/bert.py``, ``ref_perturbation`` in ``checks/smart.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

# The tasks every plug-in check builds its plug-in for.
PLUGIN_TASKS = ["sst", "sts"]


def ref_linear(x: torch.Tensor, linear: torch.nn.Linear) -> torch.Tensor:
    """x Wᵀ + b."""
    return x @ linear.weight.T + linear.bias


def ref_layer_norm(x: torch.Tensor, norm: torch.nn.LayerNorm) -> torch.Tensor:
    """γ ⊙ (x − mean) / √(var + eps) + β over the last dimension (biased variance)."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def ref_gelu(x: torch.Tensor) -> torch.Tensor:
    """x · Φ(x), the exact (erf) form."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def ref_additive_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) of 1/0 -> (B, 1, 1, T) of 0 / the most negative float32."""
    return (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min


def ref_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """softmax(Q Kᵀ / √d_k + M) V, with the softmax written out."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + mask
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    return (weights / weights.sum(-1, keepdim=True)) @ v


def ref_multi_head(
    x: torch.Tensor,
    mask: torch.Tensor,
    query: Callable[[torch.Tensor], torch.Tensor],
    key: Callable[[torch.Tensor], torch.Tensor],
    value: Callable[[torch.Tensor], torch.Tensor],
    heads: int,
) -> torch.Tensor:
    """Concatenated heads of attention over x (B, T, D) with the given projections."""
    B, T, D = x.shape

    def split(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(B, T, heads, D // heads).permute(0, 2, 1, 3)

    y = ref_attention(split(query(x)), split(key(x)), split(value(x)), mask)
    return y.permute(0, 2, 1, 3).reshape(B, T, D)


def randomize(module: torch.nn.Module, generator: torch.Generator, std: float = 0.5) -> None:
    """Fill every parameter with N(0, std²) noise (LayerNorm gains with 1 + noise), so that no
    zero-initialised weight hides a missing term."""
    with torch.no_grad():
        for sub in module.modules():
            for name, p in sub.named_parameters(recurse=False):
                noise = torch.randn(p.shape, generator=generator) * std
                if isinstance(sub, torch.nn.LayerNorm) and name == "weight":
                    noise = noise + 1.0
                p.copy_(noise)


def padded_batch(generator: torch.Generator, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """x (3, 6, D) and its (3, 6) attention mask: one full sequence and two padded ones."""
    x = torch.randn(3, 6, D, generator=generator)
    attention_mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    return x, attention_mask
