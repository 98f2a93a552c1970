"""What a graded call must leave as it was: the caller's tensors, and its module's parameters
and buffers. Code can return the right numbers and still change the caller's tensor in place,
or replace a buffer (``self.position_ids = self.position_ids[:, :T]``: the next, longer batch
fails). A check takes a snapshot before the call and names the first change after it:

    kept = Untouched({"x": x, "mask": mask}, layer)
    got = layer(x, mask)
    if said := kept.problem():
        return problem(f"BertLayer {said}")
"""

from __future__ import annotations

import torch

from course.observed import position_name


def same(before: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    """Where ``after`` holds what ``before`` held: equal values, NaN where NaN was."""
    if before.is_floating_point():
        return (before == after) | (before.isnan() & after.isnan())
    return before == after


def unchanged_problem(
    name: str,
    before: torch.Tensor,
    after: torch.Tensor,
    axes: tuple[str, ...] = (),
    what: str = "argument",
) -> str | None:
    """What a function did to its ``what`` (argument, parameter or buffer) ``name`` beyond its
    return value: None when it is as it was, else how many values changed and the first
    (``axes`` name the positions)."""
    kept = same(before, after)
    if bool(kept.all()):
        return None
    differ = (~kept).nonzero()
    first = tuple(int(i) for i in differ[0])
    return (
        f"changed its {what} {name} in place: {len(differ)} of {before.numel()} values, the "
        f"first at {position_name(first, axes, before.dim())} ({before[first].item()} became "
        f"{after[first].item()}); the caller's tensor must stay as it was: build new tensors "
        "(torch.where) or work on a copy"
    )


def module_state(module: torch.nn.Module | None) -> dict[tuple[str, str], torch.Tensor]:
    """(``parameter`` or ``buffer``, name) -> the tensor ``module`` holds there now."""
    if module is None:
        return {}
    state = {("parameter", name): p for name, p in module.named_parameters()}
    return state | {("buffer", name): b for name, b in module.named_buffers()}


class Untouched:
    """Snapshots of ``arguments`` (name -> the caller's tensor, as passed) and of ``module``'s
    parameters and buffers, taken when made; ``problem()`` says what has changed since."""

    def __init__(
        self,
        arguments: dict[str, torch.Tensor],
        module: torch.nn.Module | None = None,
        axes: dict[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.arguments = arguments
        self.axes = axes or {}
        self.before = {name: t.detach().clone() for name, t in arguments.items()}
        self.module = module
        self.held = module_state(module)
        self.state = {key: t.detach().clone() for key, t in self.held.items()}

    def problem(self) -> str | None:
        """The first change, in the student's terms (an argument, then the module's state), or
        None when everything is as it was."""
        for name, tensor in self.arguments.items():
            axes = self.axes.get(name, ())
            if said := unchanged_problem(name, self.before[name], tensor.detach(), axes):
                return said
        now = module_state(self.module)
        for (what, name), tensor in self.held.items():
            saved = self.state[(what, name)]
            if now.get((what, name)) is not tensor:
                return replaced(what, name, saved, now.get((what, name)))
            if said := unchanged_problem(name, saved, tensor.detach(), what=what):
                return said
        return None


def replaced(what: str, name: str, saved: torch.Tensor, now: torch.Tensor | None) -> str:
    """The message for a parameter or buffer that the call replaced (or removed)."""
    became = "removed it" if now is None else f"put a {tuple(now.shape)} tensor in its place"
    return (
        f"replaced its {what} {name}: it held a {tuple(saved.shape)} tensor and the call "
        f"{became}; the next call (a longer batch) reads what is left: keep the {what} as it "
        "is and slice it into a local variable"
    )
