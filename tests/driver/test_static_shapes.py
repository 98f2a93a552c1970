"""--pad_multiple: batches padded to a multiple of N tokens take few shapes and train exactly as
batches padded to their longest input (the padding is masked), and the batches cut on the
device from a split's tables are those built on the host."""

from __future__ import annotations

import json

import pytest
import torch

from minbert.tokenizer import Tokenizer
from multitask.collate import EncodedSplit
from multitask.model import ModelSettings, build_model
from multitask.step import TrainingStep
from tasks import get_task
from tests.helpers import run_driver


def split_of(tiny_checkpoint, tiny_data, name, separate, pad_multiple, max_length=32):
    task = get_task(name)
    tokenizer = Tokenizer.from_checkpoint(str(tiny_checkpoint), max_length=max_length)
    examples = task.read(tiny_data / task.files["train"])[0]
    return task, EncodedSplit(task, examples, tokenizer, separate, pad_multiple=pad_multiple)


@pytest.mark.parametrize("name,separate", [("sst", False), ("para", False), ("sts", True)])
def test_padded_widths_are_multiples_capped_at_max_length(
    tiny_checkpoint, tiny_data, name, separate
):
    _, plain = split_of(tiny_checkpoint, tiny_data, name, separate, 1, max_length=20)
    _, padded = split_of(tiny_checkpoint, tiny_data, name, separate, 6, max_length=20)
    widths = set()
    for start in range(0, len(plain.examples), 2):
        indices = [start, start + 1]
        for short, long in zip(plain.batch(indices).inputs, padded.batch(indices).inputs):
            T, W = short["input_ids"].shape[1], long["input_ids"].shape[1]
            assert W == min(20, -(-T // 6) * 6)  # the next multiple of 6, at most max_length
            widths.add(W)
            for key in ("input_ids", "token_type_ids", "attention_mask"):
                assert torch.equal(long[key][:, :T], short[key])  # the real batch, unchanged
                assert not long[key][:, T:].any()  # then [PAD] (id 0), type 0, mask 0
    assert widths <= {6, 12, 18, 20} and len(widths) > 1


@pytest.mark.parametrize("name,separate", [("sst", False), ("para", False), ("sts", True)])
def test_extra_padding_changes_neither_loss_nor_gradients(
    tiny_checkpoint, tiny_data, name, separate
):
    """Tolerance 1e-6 relative to each gradient's norm (‖g′ − g‖ ≤ 1e-6·‖g‖ + 1e-9; the loss
    within 1e-6): in float32 the padded positions get attention weight exp(−large) = 0 and are
    left out of the mean, so only the order of additions over the longer rows differs (measured:
    ≤ 5e-7). The 1e-9 is for the key biases, whose gradient is 0 in exact arithmetic (softmax
    ignores a shift shared by a query's scores), so what is computed is rounding (~1e-11)."""
    encoding = "separate" if separate else "cross"
    settings = ModelSettings(
        option="finetune", checkpoint=str(tiny_checkpoint), pair_encoding=encoding
    ).resolved()
    torch.manual_seed(0)
    model = build_model(settings, [name], dropout=0.0)
    step = TrainingStep(model)
    task, plain = split_of(tiny_checkpoint, tiny_data, name, separate, 1)
    _, padded = split_of(tiny_checkpoint, tiny_data, name, separate, 16)
    indices = [3, 1, 4, 15, 9, 26]
    results = []
    for split in (plain, padded):
        model.zero_grad(set_to_none=True)
        loss = step(task, split.batch(indices))
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((loss.detach(), grads, split.batch(indices).inputs[0]["input_ids"]))
    (loss_a, grads_a, ids_a), (loss_b, grads_b, ids_b) = results
    assert ids_b.shape[1] > ids_a.shape[1]  # the second batch really is wider
    torch.testing.assert_close(loss_b, loss_a, rtol=0, atol=1e-6)
    assert grads_a.keys() == grads_b.keys() and len(grads_a) > 10
    for key in grads_a:
        change, size = (grads_b[key] - grads_a[key]).norm(), grads_a[key].norm()
        assert change <= 1e-6 * size + 1e-9, (key, change.item(), size.item())


def test_a_split_on_another_device_cuts_the_same_batches(tiny_checkpoint, tiny_data):
    """The tables move once; a batch cut there equals the host's (the meta device stands in
    for a GPU: shapes and dtypes, no values)."""
    _, split = split_of(tiny_checkpoint, tiny_data, "para", False, 8)
    host = split.batch([0, 5, 2])
    moved = split.to(torch.device("meta")).batch([0, 5, 2])
    assert split.to(torch.device("meta")) is split and split.device.type == "meta"
    for a, b in zip(host.inputs, moved.inputs):
        for key in a:
            assert b[key].device.type == "meta" and b[key].shape == a[key].shape
    assert moved.labels.shape == host.labels.shape and moved.ids == host.ids


def test_the_setting_is_recorded_and_eval_time_reported(tiny_checkpoint, tiny_data, tmp_path):
    extra = ("--epochs", "1", "--steps_per_epoch", "3", "--pad_multiple", "16", "--no_plots")
    assert run_driver(tiny_checkpoint, tiny_data, tmp_path, *extra) == 0
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["pad_multiple"] == 16 and config["eval_batch_size"] == 8  # 2 x --batch_size
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_s"] >= 0 and "compiled_graphs" not in summary
