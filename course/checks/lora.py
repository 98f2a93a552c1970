"""Checks of ``minbert/plugins/lora.py`` (the ``lora`` exercise): the LoRA linear site on stored
random (non-identity) weights in eval and training mode (recorded dropout on the update's
input), and merging the update into the model's weights and back.

Both run in float64: the outputs are of size 20-60, where a float32 step is about 4e-6, so
equivalent computations (through the merged matrix W + (α/r)·B A, or B (A x)) would differ by
several steps in float32; in float64 they agree to about 1e-13, far below the tolerance, while
every mistake moves the output by far more."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import torch

from course.dropout import MODES, mode
from course.gradients import gradient_failure
from course.measure import Measurement, compare, site_backward_problem, worst_of
from course.outcome import Outputs, graded, outputs, problem, stored_cases, with_gradient
from course.registry import PLUGIN_TASKS, Context, calling, check
from course.untouched import Untouched

LORA_OPTIONS = {
    "rank": 2,
    "alpha": 6.0,
    "targets": ["query", "value", "intermediate"],
    "dropout": 0.2,
}
# The axes of the linear site's arguments x and y, as messages name positions in them.
LINEAR_AXES = dict.fromkeys(("x", "y"), ("sentence", "token", "dim"))
LORA_NAMES = ("query", "key", "value", "intermediate", "output")
LORA_MERGE_CONFIG = {"vocab_size": 50}  # BertConfig.tiny overrides of the merge check's model


LORA_LINEAR_TOLERANCE = 1e-5


def judge_lora_linear(ctx: Context, out: Outputs) -> Measurement:
    """The update B A x alone first (``LowRankUpdate.forward``), then the linear site in eval
    and training mode (``LoRA.linear``): the first of the two outside the tolerance is the
    check's measurement, naming its function alone; else the worst of them."""
    update, *sites = out["cases"]
    parts = (
        ("LowRankUpdate.forward", stored_cases(("lora", "linear", "update", "eval")), [update]),
        ("LoRA.linear", stored_cases(*[("lora", "linear", name) for name in MODES]), sites),
    )
    found = []
    for function, judge, cases in parts:
        measured = judge(ctx, outputs(*cases))
        if not measured.max_abs_diff <= LORA_LINEAR_TOLERANCE:  # NaN included
            measured.functions = (function,)
            return measured
        found.append(measured)
    return worst_of(found)


@check(
    "lora: LoRA linear vs W x + b + (α/r)·B A x",
    tolerance=LORA_LINEAR_TOLERANCE,
    judge=judge_lora_linear,
    hint="add the low-rank update of the input (through A to rank r, then B), scaled by α/r, to "
    "the base output y; dropout on the update's input only",
    exercises=("lora",),
    functions=("LowRankUpdate.forward", "LoRA.linear"),
)
def check_lora_linear(ctx: Context) -> Outputs:
    """LoRA's linear site against the stored W x + b + (α/r)·B A dropout(x) on the targets,
    W x + b elsewhere, in eval and training mode; x, y and the weights must stay as they were,
    in training mode the backward pass must go through, and the gradients must reach x, A and B
    (``course/gradients.py``)."""
    from minbert.config import BertConfig
    from minbert.plugins.lora import LoRA, target_shape

    data = ctx.course_data["lora"]["linear"]
    config = BertConfig.tiny()
    plugin = LoRA(
        config, PLUGIN_TASKS, **LORA_OPTIONS
    ).double()  # float64, as stored: see the module docstring
    plugin.load_state_dict(data["state"])
    bases = {}
    for name in LORA_NAMES:
        bases[name] = torch.nn.Linear(*target_shape(config, name)).double()
        bases[name].load_state_dict(data["bases"][name])
    found = [graded(low_rank_updates(plugin, data["x"]))]
    for name in MODES:
        got = {}
        with mode(plugin, name, ctx.course_data["seed"]) as recorder:
            for key, x in data["x"].items():
                task, _, layer, target = key.split()
                base = bases[target]
                y = torch.nn.functional.linear(x, base.weight, base.bias)
                arguments = {"x": x.clone(), "y": y}
                kept = Untouched(arguments, torch.nn.ModuleList([plugin, base]), LINEAR_AXES)
                with calling("LoRA.linear"):  # the update ran alone above: an error is linear's
                    got[key] = plugin.linear(
                        int(layer), task, target, base, *kept.arguments.values()
                    )
                if said := kept.problem():
                    return problem(f"linear ({key}, {name} mode) {said}")
        found.append(graded(got, f"({name} mode) ", calls=recorder.calls))
    said = site_backward_problem(plugin, partial(lora_site, plugin, bases), data["x"])
    if said:
        return problem(said)
    return with_gradient(outputs(*found), lora_gradient_failure(plugin, bases, data["x"]))


def lora_gradient_failure(plugin, bases: dict, inputs: dict) -> Outputs | None:
    """The update B A x alone must pass gradients to x, A and B (``LowRankUpdate.forward``),
    then the linear site to x and the plug-in (``LoRA.linear``): the failure of the first of
    the two that cuts them, naming its function, or None."""
    x = next(iter(inputs.values()))  # layer 0's query input for sst: lora_site's
    update = plugin.by_task["sst"][0]["query"]
    alone = gradient_failure(
        lambda u, x: u(x), {"x": x}, update, "LowRankUpdate", functions=("LowRankUpdate.forward",)
    )
    site = lambda p, x: lora_site(p, bases, x)
    return alone or gradient_failure(site, {"x": x}, plugin, "LoRA", functions=("LoRA.linear",))


def low_rank_updates(plugin, inputs: dict) -> dict:
    """``LowRankUpdate.forward`` alone, B A x, on the stored input of each target."""
    got = {}
    for key, x in inputs.items():
        task, _, layer, target = key.split()
        if target in LORA_OPTIONS["targets"]:
            got[f"update {key}"] = plugin.by_task[task][int(layer)][target](x.clone())
    return got


def lora_site(plugin, bases: dict, x: torch.Tensor) -> torch.Tensor:
    """LoRA's linear site of layer 0's query map for sst, on x: W x + b + (α/r)·B A x."""
    base = bases["query"]
    y = torch.nn.functional.linear(x, base.weight, base.bias)
    return plugin.linear(0, "sst", "query", base, x, y)


# The mistakes the merge check sees by themselves (``course/outcome.py``: ``observed``).
LORA_MERGE_SEEN = {
    "delta transposed": "ΔW is transposed: delta_weight returns a (d_in, d_out) matrix, "
    "(B A)ᵀ, where the base weight is (d_out, d_in): ΔW has the base weight's shape",
}


def judge_lora_merge(ctx: Context, out: Outputs) -> Measurement:
    """The merged weights against the stored ones, and each weight after unmerging against the
    weight before merging (a ΔW of the wrong shape is a problem, ``LORA_MERGE_SEEN``)."""
    found = [
        compare(f"unmerged {name} weight", after, before, axes=("out", "in"))
        for name, (after, before) in out["unmerged"].items()
    ]
    found.append(stored_cases(("lora", "merge", "eval"))(ctx, out))
    return worst_of(found)


@check(
    "lora: merge vs W + (α/r)·B A",
    tolerance=1e-6,
    judge=judge_lora_merge,
    hint="the merged weight adds the update's matrix, (d_out, d_in) like the base weight, "
    "scaled by α/r",
    exercises=("lora",),
    functions=("LowRankUpdate.delta_weight",),
    seen=LORA_MERGE_SEEN,
)
def check_lora_merge(ctx: Context) -> Outputs:
    """LoRA.merge(task) against the stored W + (α/r)·B A for every adapted weight; unmerge
    restores W."""
    from minbert.config import BertConfig
    from minbert.plugins.lora import LoRA, target_module

    data = ctx.course_data["lora"]["merge"]
    config = BertConfig.tiny(**LORA_MERGE_CONFIG)
    layers = linear_maps(data["model"], config.num_hidden_layers)
    plugin = LoRA(config, PLUGIN_TASKS, **LORA_OPTIONS).double()
    plugin.load_state_dict(data["plugin"])
    plugin.attach(SimpleNamespace(encoder=SimpleNamespace(layer=layers)))
    if said := transposed_delta_problem(plugin, layers):
        return said
    before = {
        (i, n): target_module(layer, n).weight.detach().clone()
        for i, layer in enumerate(layers)
        for n in LORA_OPTIONS["targets"]
    }
    got, unmerged = {}, {}
    for task in PLUGIN_TASKS:
        plugin.merge(task)
        for (i, name), _ in before.items():
            got[f"merged {task} layer {i} {name}"] = (
                target_module(layers[i], name).weight.detach().clone()
            )
        plugin.unmerge()
        for (i, name), weight in before.items():
            after = target_module(layers[i], name).weight.detach().clone()
            unmerged[f"{task} layer {i} {name}"] = [after, weight]
    return outputs(graded(got, axes=("out", "in"))) | {"unmerged": unmerged}


def linear_maps(state: dict, num_layers: int) -> list[torch.nn.Module]:
    """Each encoder layer of a stored BertModel ``state`` reduced to its linear maps, at their
    paths in a BertLayer (``minbert/sites.py``): all that merging touches, built without
    bert.py, so a broken attention exercise does not fail this check."""
    from minbert.sites import LINEAR_SITES

    layers = []
    for i in range(num_layers):
        layer = torch.nn.Module()
        for path in LINEAR_SITES.values():
            *parents, name = path.split(".")
            owner = layer
            for parent in parents:
                if not hasattr(owner, parent):
                    owner.add_module(parent, torch.nn.Module())
                owner = getattr(owner, parent)
            weight = state[f"encoder.layer.{i}.{path}.weight"]
            linear = torch.nn.Linear(weight.shape[1], weight.shape[0], dtype=weight.dtype)
            linear.load_state_dict(
                {"weight": weight, "bias": state[f"encoder.layer.{i}.{path}.bias"]}
            )
            owner.add_module(name, linear)
        layers.append(layer)
    return layers


def transposed_delta_problem(plugin, layers: list) -> Outputs | None:
    """A problem when some delta_weight has its base weight's shape transposed, (d_in, d_out):
    the given merge code would raise on it, far from the mistake, so it is named here, before
    merging (``LORA_MERGE_SEEN``), with where delta_weight is; None otherwise (another wrong
    shape is left to the merge, whose error names delta_weight too)."""
    from course.locate import relative_to_project
    from minbert.plugins.lora import target_module

    for task in PLUGIN_TASKS:
        for i, layer in enumerate(layers):
            for name in LORA_OPTIONS["targets"]:
                shape = tuple(target_module(layer, name).weight.shape)
                update = plugin.by_task[task][i][name]
                got = tuple(getattr(update.delta_weight(), "shape", ()))
                if got != shape and got == shape[::-1]:
                    code = type(update).delta_weight.__code__
                    where = f"{relative_to_project(code.co_filename)}:{code.co_firstlineno}"
                    return problem(
                        f"delta_weight ({task} layer {i} {name}) returned a {got} matrix, the "
                        f"base weight is {shape} (d_out, d_in) (your delta_weight: {where})",
                        "delta transposed",
                    )
    return None
