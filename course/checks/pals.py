"""Check of ``minbert/plugins/pals.py`` (the ``pals`` exercise): the PAL term of every layer,
through the plug-in's own site, on stored random (non-identity) weights, in eval and training
mode. Each layer's projected attention is a stand-in (not attention: a fixed map of
its input and the mask, with the dropout it is given), so this check needs no attention exercise
and grades what the exercise writes: V_E, the layer's attention with the mask and the dropout,
V_D."""

from __future__ import annotations

from functools import partial

import torch

from course.dropout import MODES, mode
from course.gradients import gradient_failure
from course.measure import site_backward_problem
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import PLUGIN_TASKS, Context, check
from course.untouched import Untouched

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


def graded_pal(config, tasks) -> torch.nn.Module:
    """The exercise's PAL (``minbert/plugins/pals.py``) with each layer's projected attention
    the stand-in: built without bert.py, so a broken attention exercise does not fail it."""
    from minbert.plugins.pals import PAL

    class StandInPAL(PAL):
        def projected_attention(self, init_std: float) -> torch.nn.Module:
            return StandInProjectedAttention(self.size)

    return StandInPAL(config, tasks, **PAL_OPTIONS)


@check(
    "pals: PAL term vs V_D·g(V_E·x)",
    tolerance=1e-5,
    judge=stored_cases(*[("pals", name) for name in MODES]),
    hint="encode into the PAL space (V_E), this layer's projected attention with the mask and, in "
    "training only, the attention dropout, then decode (V_D)",
    exercises=("pals",),
    raises={
        "mat1 and mat2 shapes cannot be multiplied": "x reached the projected attention without "
        "the encoder V_E (D → s) or the decoder V_D (s → D) in its place",
    },
)
def check_pals(ctx: Context) -> Outputs:
    """The PAL term of every layer against the stored V_D · g_l(V_E · x), eval and training;
    x, the mask and the PAL's weights must stay as they were, in training mode the backward
    pass must go through, and the gradients must reach x and the PAL's weights
    (``course/gradients.py``)."""
    from minbert.config import BertConfig

    data = ctx.course_data["pals"]
    config = BertConfig.tiny()
    plugin = graded_pal(config, PLUGIN_TASKS)
    plugin.load_state_dict(data["state"])
    found = []
    for name in MODES:
        got = {}
        with mode(plugin, name, ctx.course_data["seed"]) as recorder:
            for task in PLUGIN_TASKS:
                for layer in range(config.num_hidden_layers):
                    key = f"{task} layer {layer} PAL term"
                    kept = Untouched({"x": data["x"].clone(), "mask": data["mask"].clone()}, plugin)
                    got[key] = plugin.parallel(layer, task, *kept.arguments.values())
                    if said := kept.problem():
                        return problem(f"parallel ({key}, {name} mode) {said}")
        found.append(graded(got, f"({name} mode) ", calls=recorder.calls))
    site = partial(plugin.parallel, 0, "sst", mask=data["mask"])
    said = site_backward_problem(plugin, site, {"x": data["x"]})
    mask = data["mask"].double()  # additive, not differentiated
    site = lambda p, x: p.parallel(1, "sst", x, mask)
    if said:
        return problem(said)
    failed = gradient_failure(site, {"x": data["x"]}, plugin, "the PAL")
    return with_gradient(outputs(*found), failed)
