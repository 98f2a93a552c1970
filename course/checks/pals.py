"""Check of ``minbert/plugins/pals.py`` (the ``pals`` exercise): the PAL term of every layer,
through the plug-in's own site, on stored random (non-identity) weights, in eval and training
mode. Each layer's projected attention is swapped for a stand-in (not attention: a fixed map of
its input and the mask, with the dropout it is given), so this check needs no attention exercise
and grades what the exercise writes: V_E, the layer's attention with the mask and the dropout,
V_D."""

from __future__ import annotations

import torch

from course.dropout import MODES, mode
from course.outcome import Outputs, graded, outputs, stored_cases
from course.registry import PLUGIN_TASKS, Context, check

PAL_OPTIONS = {"size": 8, "heads": 2}


class StandInProjectedAttention(torch.nn.Module):
    """Called like a PAL layer's attention, (z, mask, dropout_p, fast) -> (B, T, s):
    dropout(tanh(z W + b) on the real tokens, dropout_p)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.mix = torch.nn.Linear(size, size)

    def forward(
        self, z: torch.Tensor, mask: torch.Tensor, dropout_p: float, fast: bool
    ) -> torch.Tensor:
        keep = (mask[:, 0, 0, :, None] == 0).to(z.dtype)  # (B, 1, 1, T) -> (B, T, 1)
        return torch.nn.functional.dropout(torch.tanh(self.mix(z)) * keep, dropout_p)


@check(
    "pals: PAL term vs V_D·g(V_E·x)",
    tolerance=1e-5,
    judge=stored_cases(*[("pals", name) for name in MODES]),
    hint="encode into the PAL space (V_E), this layer's projected attention with the mask and, in "
    "training only, the attention dropout, then decode (V_D)",
    exercises=("pals",),
)
def check_pals(ctx: Context) -> Outputs:
    """The PAL term of every layer against the stored V_D · g_l(V_E · x), eval and training."""
    from minbert.config import BertConfig
    from minbert.plugins.pals import PAL

    data = ctx.course_data["pals"]
    config = BertConfig.tiny()
    plugin = PAL(config, PLUGIN_TASKS, **PAL_OPTIONS)
    for task in PLUGIN_TASKS:
        plugin.by_task[task].layers = torch.nn.ModuleList(
            StandInProjectedAttention(plugin.size) for _ in range(config.num_hidden_layers)
        )
    plugin.load_state_dict(data["state"])
    found = []
    for name in MODES:
        got = {}
        with mode(plugin, name, ctx.course_data["seed"]) as recorder:
            for task in PLUGIN_TASKS:
                for layer in range(config.num_hidden_layers):
                    got[f"{task} layer {layer} PAL term"] = plugin.parallel(
                        layer, task, data["x"], data["mask"]
                    )
        found.append(graded(got, f"({name} mode) ", calls=recorder.calls))
    return outputs(*found)
