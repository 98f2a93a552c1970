"""PCGrad (Yu et al. 2020, "Gradient Surgery for Multi-Task Learning", NeurIPS 2020): when two
tasks' gradients point against each other, remove from each the part that undoes the other.

With g_1..g_K the gradients of the K task losses with respect to the shared parameters, task i's
gradient is projected, one other task at a time (the others in random order), onto the normal
plane of every gradient it conflicts with; the update direction is Σ_i g_i':

    g_i' ← g_i
    for j in a random order of {1..K} \\ {i}:
        if g_i' · g_j < 0:                         (a conflict: the angle is over 90°)
            g_i' ← g_i' − (g_i' · g_j / ‖g_j‖²) · g_j

Design notes: docs/design/minbert.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["project_conflicting", "surgery"]


def project_conflicting(grads: Sequence[torch.Tensor], generator: torch.Generator) -> torch.Tensor:
    """Σ_i g_i' for the flat task gradients ``grads`` (K vectors of one length), each g_i'
    projected off the g_j it conflicts with, the j in an order drawn from ``generator``."""
    total = torch.zeros_like(grads[0])
    for i, g_i in enumerate(grads):
        projected = g_i.clone()
        others = [j for j in torch.randperm(len(grads), generator=generator).tolist() if j != i]
        for j in others:
            g_j = grads[j]
            dot = torch.dot(projected, g_j)
            squared_norm = torch.dot(g_j, g_j)
            if dot < 0 and squared_norm > 0:
                projected -= (dot / squared_norm) * g_j
        total += projected
    return total


def surgery(
    per_task: Sequence[Sequence[torch.Tensor | None]], generator: torch.Generator
) -> list[torch.Tensor | None]:
    """The combined gradient of each parameter from ``per_task[i][k]``, task i's gradient of
    parameter k (None where the task's loss does not reach it): PCGrad over the parameters that
    every task reaches, the plain sum over the others, None where no task reaches one.

    A gradient of all zeros counts as not reaching the parameter: a plug-in may give the
    parameters of tasks other than its batch's a zero gradient instead of none."""
    reached = [[g is not None and bool(g.any()) for g in task] for task in per_task]
    shared = [k for k in range(len(per_task[0])) if all(r[k] for r in reached)]
    combined: list[torch.Tensor | None] = []
    for k in range(len(per_task[0])):
        present = [g[k] for g, r in zip(per_task, reached) if r[k]]
        combined.append(torch.stack(present).sum(0) if 0 < len(present) < len(per_task) else None)
    if shared:
        flat = [torch.cat([g[k].reshape(-1).float() for k in shared]) for g in per_task]
        projected = project_conflicting(flat, generator)
        for k, piece in zip(shared, projected.split([per_task[0][k].numel() for k in shared])):
            combined[k] = piece.view_as(per_task[0][k]).to(per_task[0][k].dtype)
    return combined
