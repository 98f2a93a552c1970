"""Check of ``minbert/plugins/adapter.py`` (the ``adapter`` exercise): the Houlsby adapter
through its own sites, on stored random (non-identity) weights, against stored outputs."""

from __future__ import annotations

from functools import partial

import torch

from course.gradients import gradient_failure
from course.measure import site_backward_problem
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import PLUGIN_TASKS, Context, check
from course.shapes import Given
from course.untouched import Untouched

ADAPTER_OPTIONS = {"size": 4}


@check(
    "adapter: Houlsby adapter vs h + W_up·GELU(W_down·h)",
    tolerance=1e-5,
    judge=stored_cases(
        ("adapter", "eval"),
        given=lambda data: Given({k: ("h", h) for k, h in data["adapter"]["h"].items()}),
    ),
    hint="a bottleneck (down-projection, GELU, up-projection) added to its input h",
    exercises=("adapter",),
)
def check_adapter(ctx: Context) -> Outputs:
    """Houlsby adapters at both positions of every layer against the stored
    h + W_up · GELU(W_down · h + b_down) + b_up; the gradients must reach h and the adapter's
    weights (``course/gradients.py``)."""
    from minbert.config import BertConfig
    from minbert.plugins.adapter import HoulsbyAdapter

    data = ctx.course_data["adapter"]
    plugin = HoulsbyAdapter(BertConfig.tiny(), PLUGIN_TASKS, **ADAPTER_OPTIONS).eval()
    plugin.load_state_dict(data["state"])
    got = {}
    with torch.no_grad():
        for key, h in data["h"].items():
            task, _, layer, position = key.split()
            site = plugin.after_attention if position == "attention" else plugin.after_feed_forward
            kept = Untouched({"h": h.clone()}, plugin, {"h": ("sentence", "token", "dim")})
            got[key] = site(int(layer), task, kept.arguments["h"])
            if changed := kept.problem():
                return problem(f"the adapter ({key}) {changed}")
    said = site_backward_problem(plugin, partial(plugin.after_attention, 0, "sst"), data["h"])
    h = data["h"]["sst layer 1 feed_forward"]
    site = lambda p, x: p.after_feed_forward(1, "sst", x)
    if said:
        return problem(said)
    return with_gradient(
        outputs(graded(got)), gradient_failure(site, {"h": h}, plugin, "the adapter")
    )
