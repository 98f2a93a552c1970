"""What the CUDA-graphed step (extras/cuda_graphs.py) rests on, checked on the CPU: the static
buffers a replay reads, the learning rates as a device tensor the schedule writes in place, the
multi-tensor AdamW's update with that tensor rate (equal to the float rate's; a skipped step
leaves everything as it was), and the one line of each fallback. The captured step itself
against the eager step is in tests/driver/test_gpu.py (it needs a GPU)."""

from __future__ import annotations

import contextlib
import copy
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from extras.cuda_graphs import decide, fallback_reason, refuse_off_gpu
from extras.device_lr import DeviceRates
from extras.static_batch import StaticBatch, padded_width
from minbert.optimizer import param_groups
from minbert.optimizer_foreach import ForeachAdamW
from multitask.collate import Batch
from multitask.errors import UsageError
from multitask.step import DeviceFlagged, HostChecked, LinearWarmupDecay
from tests.helpers import run_driver

PAD = 0


def batch_of(lengths: list[list[int]], labels: torch.Tensor) -> Batch:
    """A batch with one sequence per list in ``lengths`` (each example's length): ids 1..n,
    type 1 after the first half, mask 1, padded with PAD to the longest."""
    inputs = []
    for column in lengths:
        T = max(column)
        ids = torch.full((len(column), T), PAD)
        types, mask = torch.zeros_like(ids), torch.zeros_like(ids)
        for i, n in enumerate(column):
            ids[i, :n] = torch.arange(1, n + 1)
            types[i, n // 2 : n] = 1
            mask[i, :n] = 1
        inputs.append({"input_ids": ids, "token_type_ids": types, "attention_mask": mask})
    return Batch(inputs, labels)


def test_a_batch_is_copied_into_the_buffers_padded_to_their_width():
    first = batch_of([[5, 3]], torch.tensor([1, 0]))
    static = StaticBatch(first, (8,), PAD)
    pointers = [t.data_ptr() for t in static.inputs[0].values()]
    static.copy_in(first)
    longer = batch_of([[7, 2]], torch.tensor([3, 4]))
    static.copy_in(longer)  # then a shorter one: nothing of the longer may remain
    static.copy_in(first)
    buffers = static.inputs[0]
    assert [t.data_ptr() for t in buffers.values()] == pointers  # in place, never reallocated
    assert all(t.shape == (2, 8) for t in buffers.values())
    for key, given in first.inputs[0].items():
        assert torch.equal(buffers[key][:, :5], given)
    assert torch.equal(buffers["input_ids"][:, 5:], torch.full((2, 3), PAD))
    assert not buffers["attention_mask"][:, 5:].any() and not buffers["token_type_ids"][:, 5:].any()
    assert torch.equal(static.labels, torch.tensor([1, 0])) and static.batch.labels is static.labels
    assert static.batch.inputs is static.inputs


def test_pairs_encoded_apart_keep_a_width_per_sequence():
    pair = batch_of([[4, 2], [6, 3]], torch.tensor([0.5, 2.0]))
    static = StaticBatch(pair, (4, 8), PAD)
    static.copy_in(pair)
    assert [s["input_ids"].shape for s in static.inputs] == [(2, 4), (2, 8)]
    assert torch.equal(static.inputs[1]["input_ids"][:, :6], pair.inputs[1]["input_ids"])
    assert static.labels.dtype == torch.float32


def test_the_padded_width_is_the_batch_s_with_pad_multiple_else_the_task_s():
    assert padded_width(32, pad_multiple=16, task_width=90) == 32
    assert padded_width(17, pad_multiple=1, task_width=90) == 90


def model_and_groups(weight_decay: float) -> tuple[nn.Module, list[dict]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.LayerNorm(5), nn.Linear(5, 3))
    return model, param_groups(model, weight_decay, 1e-2)


def test_the_schedule_s_rates_reach_the_device_tensor_in_place_at_every_step():
    model, groups = model_and_groups(0.01)
    optimizer = ForeachAdamW(groups, lr=1e-2)
    scheduler = LambdaLR(optimizer, LinearWarmupDecay(3, 10))
    rates = DeviceRates(optimizer, torch.device("cpu"))
    pointer = rates.rates.data_ptr()
    assert len(optimizer.param_groups) > 1
    for s in range(12):
        optimizer.step()  # no gradients: nothing moves, the scheduler sees a step taken
        floats = [group["lr"] for group in optimizer.param_groups]
        assert floats == [1e-2 * LinearWarmupDecay(3, 10)(s)] * len(floats)
        assert rates.rates.tolist() == torch.tensor(floats, dtype=torch.float32).tolist()
        scheduler.step()
        rates.write()
    assert rates.rates.data_ptr() == pointer and rates.rates.dtype == torch.float32


def updates(weight_decay: float, tensor_rate: bool, flags: list[bool]) -> tuple[nn.Module, dict]:
    """The model and optimizer state after steps through ``step(apply_if=flag)`` with seeded
    gradients (NaN where the flag is False), the rate a float or ``DeviceRates``' tensor, the
    schedule stepping after each."""
    model, groups = model_and_groups(weight_decay)
    optimizer = ForeachAdamW(groups, lr=1e-2)
    scheduler = LambdaLR(optimizer, LinearWarmupDecay(2, len(flags)))
    rates = DeviceRates(optimizer, torch.device("cpu"))
    generator = torch.Generator().manual_seed(1)
    for flag in flags:
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator)
            if not flag:
                p.grad[...] = float("nan")
        rates.write()
        context = rates.bound(optimizer) if tensor_rate else contextlib.nullcontext()
        with context:
            optimizer.step(apply_if=torch.tensor(flag))
        scheduler.step()
    assert all(isinstance(group["lr"], float) for group in optimizer.param_groups)
    return model, copy.deepcopy(optimizer.state_dict()["state"])


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_the_update_with_a_device_rate_equals_the_update_with_a_float(weight_decay):
    flags = [True] * 6
    floats, float_state = updates(weight_decay, False, flags)
    tensors, tensor_state = updates(weight_decay, True, flags)
    # The rate is float32 on the device: 1 - lr·λ rounds once more than the float's product.
    tolerance = {"rtol": 0.0, "atol": 0.0} if weight_decay == 0 else {"rtol": 1e-6, "atol": 1e-8}
    for a, b in zip(floats.parameters(), tensors.parameters()):
        torch.testing.assert_close(a, b, **tolerance)
    for k in float_state:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            torch.testing.assert_close(float_state[k][name], tensor_state[k][name], **tolerance)
    untrained, _ = model_and_groups(weight_decay)
    assert not torch.equal(untrained[0].weight, tensors[0].weight)


def test_a_skipped_step_with_a_device_rate_is_as_if_never_drawn():
    """A step whose flag is False (NaN gradients) changes no weight, moment or step count: the
    weights after [ok, skipped, ok] are those after [ok, ok] with the schedule's rate of the
    third step (a skipped batch still costs its step of the schedule)."""
    skipped, skipped_state = updates(0.01, True, [True, True, False])
    before, before_state = updates(0.01, True, [True, True])
    for a, b in zip(skipped.parameters(), before.parameters()):
        assert torch.equal(a, b)
    for k in before_state:
        for name in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(skipped_state[k][name], before_state[k][name])


def settings(compile=False, teachers=(), **changed) -> SimpleNamespace:
    """A run's settings as fallback_reason reads them: the core's, and two extras'."""
    extras = {
        "compiled": SimpleNamespace(compile=compile),
        "distillation": SimpleNamespace(teachers=list(teachers)),
    }
    core = dict(smart=False, step_gradient="one-task", optimizer="foreach", extras=extras)
    return SimpleNamespace(**(core | changed))


class Unsafe(nn.Module):
    graph_safe = False


def reason_for(processes=1, update=None, optimizer=None, model=None, **changed) -> str | None:
    model = model or nn.Linear(2, 2)
    optimizer = optimizer or ForeachAdamW(model.parameters(), lr=1e-3)
    update = update or DeviceFlagged(torch.ones((), dtype=torch.bool))
    return fallback_reason(settings(**changed), processes, optimizer, update, model)


@pytest.mark.parametrize(
    ("case", "says"),
    [
        (dict(processes=2), "several processes"),
        (dict(compile=True), "--compile"),
        (dict(smart=True), "--smart"),
        (dict(teachers=["sst=run"]), "--teachers"),
        (dict(step_gradient="summed"), "--step_gradient summed"),
        (dict(step_gradient="pcgrad"), "--step_gradient pcgrad"),
        (dict(update=HostChecked()), "the host checks each loss"),
        (dict(optimizer=torch.optim.SGD(nn.Linear(2, 2).parameters())), "--optimizer"),
        (
            dict(model=nn.Sequential(nn.Linear(2, 2), Unsafe())),
            "plug-in cannot be captured (Unsafe",
        ),
    ],
)
def test_each_fallback_prints_its_one_line(case, says, capsys):
    reason = reason_for(**case)
    assert says in reason
    assert decide("on", torch.device("cuda"), reason) is False
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"--cuda_graphs on: the eager step trains: {reason}"]


def test_a_run_that_can_be_captured_is_on_cuda_with_on_and_silent_elsewhere(capsys):
    assert reason_for() is None
    assert decide("on", torch.device("cuda"), None) is True
    assert decide("off", torch.device("cuda"), None) is False
    assert decide("auto", torch.device("cpu"), None) is False
    assert capsys.readouterr().out == ""  # off, or auto on the CPU: nothing to say


def test_auto_is_off_on_a_gpu_until_the_graphed_step_is_measured(capsys):
    """No GPU run has timed the graphed step against eager yet: the default stays eager, and
    the help says so."""
    from extras import cuda_graphs

    assert cuda_graphs.AUTO_CAPTURES_ON_A_GPU is False
    assert decide("auto", torch.device("cuda"), None) is False
    assert capsys.readouterr().out == ""
    help_text = cuda_graphs.Settings.__dataclass_fields__["cuda_graphs"].metadata["help"]
    assert "auto (off: not yet measured on a GPU)" in help_text


def test_on_off_a_gpu_is_refused_in_one_line(tiny_checkpoint, tiny_data, tmp_path, capsys):
    with pytest.raises(UsageError, match="--cuda_graphs on captures CUDA graphs: it needs a GPU"):
        refuse_off_gpu(torch.device("cpu"))
    refuse_off_gpu(torch.device("cuda"))  # on a GPU: nothing to refuse
    out = tmp_path / "run"
    code = run_driver(tiny_checkpoint, tiny_data, out, "--device", "cpu", "--cuda_graphs", "on")
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert "--cuda_graphs on captures CUDA graphs" in lines[0] and not out.exists()
