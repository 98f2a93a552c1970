"""Check of ``minbert/plugins/lhuc.py`` (the ``lhuc`` exercise): LHUC through its own site, on
stored random (non-identity) weights, against stored outputs."""

from __future__ import annotations

from functools import partial

import torch

from course.gradients import gradient_failure
from course.measure import site_backward_problem
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import PLUGIN_TASKS, Context, check
from course.untouched import Untouched


# 1e-5 as the other float32 checks: the outputs reach 5, where a float32 ulp is 4.8e-7, so a
# tighter tolerance fails correct code that another CPU rounds a few ulps otherwise.
@check(
    "lhuc: LHUC vs h ⊙ 2·σ(r)",
    tolerance=1e-5,
    judge=stored_cases(("lhuc", "eval")),
    hint="scale each hidden unit by 2·sigmoid of this layer's r (2·σ(0) = 1 keeps the identity)",
    exercises=("lhuc",),
)
def check_lhuc(ctx: Context) -> Outputs:
    """LHUC on every layer's output against the stored h ⊙ 2·σ(r_layer); h must stay as it
    was, in training mode the backward pass must go through, and the gradients must reach h and
    r (``course/gradients.py``)."""
    from minbert.config import BertConfig
    from minbert.plugins.lhuc import LHUC

    data = ctx.course_data["lhuc"]
    plugin = LHUC(BertConfig.tiny(), PLUGIN_TASKS).eval()
    plugin.load_state_dict(data["state"])
    got = {}
    with torch.no_grad():
        for key, h in data["h"].items():
            task, _, layer = key.split()
            kept = Untouched({"h": h.clone()}, plugin, {"h": ("sentence", "token", "dim")})
            got[key] = plugin.after_layer(int(layer), task, kept.arguments["h"])
            if changed := kept.problem():
                return problem(f"after_layer ({key}) {changed}")
    said = site_backward_problem(plugin, partial(plugin.after_layer, 0, "sst"), data["h"])
    h = data["h"]["sst layer 1"]
    site = lambda p, x: p.after_layer(1, "sst", x)
    if said:
        return problem(said)
    return with_gradient(outputs(graded(got)), gradient_failure(site, {"h": h}, plugin, "LHUC"))
