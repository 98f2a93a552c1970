"""Per-task LayerNorms (Houlsby et al. 2019, "Parameter-Efficient Transfer Learning for NLP",
section 2.1: "we also train the layer normalization parameters" for each new task).

Shapes: B batch size; T tokens per sequence; D hidden size; L number of layers.

Every encoder layer has two add & norms, LayerNorm(h) = γ ⊙ (h − μ(h)) / √(σ²(h) + ε) + β, after
the attention sub-layer and after the feed-forward sub-layer. This plug-in gives each task its
own (γ, β) for each of them, copied from the pretrained LayerNorm when the task is added, so a
task starts exactly where the pretrained model is and tasks never share a LayerNorm: a task added
later (``--add_to``) leaves the others bit-identical. The pretrained LayerNorms themselves stay
frozen. Parameters per task: L · 2 · 2D.

The embeddings' LayerNorm is not included: the embeddings are computed once for a batch before
any task-specific part of the encoder (SMART perturbs them), so they stay the pretrained ones.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from minbert.config import BertConfig
from minbert.plugins.base import Plugin

POSITIONS = ("attention", "feed_forward")


class TaskLayerNorms(Plugin):
    """Per task, (γ, β) for both add & norms of every layer, initialised from the pretrained ones
    when the plug-in is attached (and for tasks added after that)."""

    kind = "layernorm"
    option = False  # beside another kind: --train_layernorms

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.pretrained: list[dict[str, nn.LayerNorm]] = []  # filled by attach
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        D, L = self.config.hidden_size, self.config.num_hidden_layers
        return nn.ModuleDict(
            {
                position: nn.ModuleList(
                    nn.LayerNorm(D, eps=self.config.layer_norm_eps) for _ in range(L)
                )
                for position in POSITIONS
            }
        )

    def attach(self, model: nn.Module) -> None:
        """Remember the model's own LayerNorms and copy them into every task. Attached first, so
        that plug-ins acting after a LayerNorm see the task's (its ``norm`` replaces the output)."""
        if list(model.plugins)[0] != self.kind:
            raise ValueError("attach per-task LayerNorms before any other plug-in")
        self.pretrained = [
            {"attention": layer.attention.output.LayerNorm, "feed_forward": layer.output.LayerNorm}
            for layer in model.encoder.layer
        ]
        for task in self.tasks:
            self._copy_pretrained(task)

    def add_task(self, name: str) -> nn.Module:
        modules = super().add_task(name)
        if self.pretrained:
            self._copy_pretrained(name)
        return modules

    @torch.no_grad()
    def _copy_pretrained(self, task: str) -> None:
        for position, norms in self.by_task[task].items():
            for layer, norm in enumerate(norms):
                norm.load_state_dict(self.pretrained[layer][position].state_dict())

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        return {
            p: layer
            for norms in self.by_task[task].values()
            for layer, norm in enumerate(norms)
            for p in norm.parameters()
        }

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        """L · 2 · 2D: γ and β of both add & norms in every layer."""
        cls.make_settings(**options)
        return config.num_hidden_layers * len(POSITIONS) * 2 * config.hidden_size

    def norm(
        self,
        layer: int,
        task: str,
        name: str,
        module: nn.LayerNorm,
        h: torch.Tensor,
        y: torch.Tensor,
    ) -> torch.Tensor:
        """The task's LayerNorm on h, in place of the pretrained one's output y."""
        own = self.by_task[task][name][layer]
        return F.layer_norm(h, own.normalized_shape, own.weight, own.bias, own.eps)
