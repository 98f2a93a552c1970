"""AdapterFusion (minbert/plugins/fusion.py): with one source adapter it starts as that adapter,
a task's fusion trains nothing of another task's or of the fixed adapters, and its parameter
count is its formula."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import train_multitask
from minbert.bert import BertConfig, BertModel
from minbert.plugins import add_plugin, count_formula, freeze_for_plugins
from multitask.config import parse_args
from multitask.errors import UsageError
from multitask.trained import TrainedRun
from tests.helpers import driver_argv, short_run, tiny_run
from tools import attention as attention_command
from tools import fusion_weights

SOURCES = ["sst", "para", "sts"]


def batch() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1, 1000, (3, 7), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def trained_adapters(model: BertModel, tasks: list[str], placement: str) -> dict:
    """An adapter plug-in of ``tasks`` with random (non-identity) weights; its state."""
    adapter = add_plugin(model, "adapter", tasks, size=4, placement=placement)
    with torch.no_grad():
        for p in adapter.parameters():
            p.normal_(0.0, 0.3)
    return adapter.state_dict()


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer", "after_layernorm"])
def test_fusion_of_one_adapter_starts_as_that_adapter(placement):
    """softmax over one adapter is 1 and W_V = I: fusion(h) = adapter(h) at every position (up to
    the rounding of the identity product: exactly, on these CPUs)."""
    torch.manual_seed(0)
    plain = BertModel(BertConfig.tiny()).eval()
    with_adapter = copy.deepcopy(plain)
    state = trained_adapters(with_adapter, ["sst"], placement)
    fused = copy.deepcopy(plain)
    fusion = add_plugin(fused, "fusion", ["sts"], size=4, placement=placement, sources=["sst"])
    fusion.sources.load_state_dict(state)
    with torch.no_grad():
        expected = with_adapter(**batch(), task="sst")["last_hidden_state"]
        got = fused(**batch(), task="sts")["last_hidden_state"]
        alone = plain(**batch())["last_hidden_state"]
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
    assert (got - alone).abs().max() > 1e-2  # the adapter does act


def test_a_tasks_fusion_trains_nothing_of_the_others():
    """The loss of task sst reaches sst's fusion layers only: no gradient on the other task's
    fusion layers or on the fixed source adapters, which freezing leaves frozen."""
    torch.manual_seed(0)
    model = BertModel(BertConfig.tiny())
    fusion = add_plugin(model, "fusion", ["sst", "sts"], size=4, sources=SOURCES)
    with torch.no_grad():
        for p in fusion.sources.parameters():
            p.normal_(0.0, 0.3)
    freeze_for_plugins(model)
    assert not any(p.requires_grad for p in fusion.sources.parameters())
    assert all(p.requires_grad for p in fusion.by_task.parameters())
    model(**batch(), task="sst")["last_hidden_state"].square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in fusion.task_parameters("sst"))
    assert all(p.grad is None for p in fusion.task_parameters("sts"))
    assert all(p.grad is None for p in fusion.sources.parameters())


def test_the_weights_over_the_adapters_sum_to_one_and_are_recorded():
    torch.manual_seed(0)
    model = BertModel(BertConfig.tiny()).eval()
    fusion = add_plugin(model, "fusion", ["para"], size=4, sources=SOURCES)
    fusion.record = {}
    with torch.no_grad():
        model(**batch(), task="para")
    L = BertConfig.tiny().num_hidden_layers
    assert set(fusion.record) == {
        ("para", layer, p) for layer in range(L) for p in ("attention", "feed_forward")
    }
    for total, count in fusion.record.values():  # summed over 3 sequences of 7 positions
        assert count == 3 * 7 and total.shape == (len(SOURCES),)
        torch.testing.assert_close(total.sum(), torch.tensor(21.0))


@pytest.mark.parametrize("placement", ["houlsby", "pfeiffer"])
def test_the_parameter_count_is_the_formula(placement):
    model = BertModel(BertConfig.tiny())
    fusion = add_plugin(model, "fusion", ["sst"], size=4, placement=placement, sources=SOURCES)
    real = sum(p.numel() for p in fusion.task_parameters("sst"))
    options = {"size": 4, "placement": placement, "sources": SOURCES}
    assert real == count_formula("fusion", BertConfig.tiny(), **options)


def test_fusion_needs_its_sources():
    with pytest.raises(ValueError, match="sources"):
        add_plugin(BertModel(BertConfig.tiny()), "fusion", ["sst"], size=4)


# -- the driver: --option fusion --adapters_from RUN ------------------------------------------


@pytest.fixture(scope="module")
def adapter_run(tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    """Stage 1: a finished tiny adapter run of the three tasks."""
    out = tmp_path_factory.mktemp("fusion") / "adapters"
    return tiny_run(tiny_checkpoint, tiny_data, out, "--option", "adapter", "--adapter_size", "4")


def fusion_argv(checkpoint: Path, data: Path, out: Path, run: Path, *extra: str) -> list[str]:
    """The tiny driver command of a fusion run (no --checkpoint: the stage-1 run brings it)."""
    line = driver_argv(checkpoint, data, out, "--option", "fusion", "--adapters_from", str(run))
    return [*line[2:], *short_run(), *extra]


def test_a_fusion_run_trains_its_fusion_and_heads_and_leaves_the_adapters_as_stage_one(
    adapter_run, tiny_checkpoint, tiny_data, tmp_path
):
    """The run takes stage 1's settings; its files hold fusion layers and heads only; the model
    it predicts with holds stage 1's adapters bit for bit."""
    out = tmp_path / "fusion"
    line = fusion_argv(tiny_checkpoint, tiny_data, out, adapter_run, "--tasks", "sst,sts")
    cfg = parse_args(line)
    assert cfg.model.adapter.size == 4 and cfg.model.checkpoint == str(tiny_checkpoint)
    assert train_multitask.main(line) == 0
    stored = load_file(out / "task-sts.safetensors")
    assert any(".by_task.sts." in k for k in stored) and all("sources" not in k for k in stored)
    model = TrainedRun(out).task_model("sts")
    stage_one = load_file(adapter_run / "best.safetensors")
    sources = model.bert.plugins["fusion"].sources.state_dict()
    adapters = {k: v for k, v in stage_one.items() if k.startswith("bert.plugins.adapter.")}
    assert len(adapters) == len(sources)
    for key, value in adapters.items():
        assert torch.equal(sources[key.removeprefix("bert.plugins.adapter.")], value), key


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--adapter_size", "8"), "--adapter_size 8: the run in"),
        (("--option", "adapter"), "go together"),
    ],
)
def test_what_cannot_fuse_the_run_is_refused_in_one_line(
    adapter_run, tiny_checkpoint, tiny_data, tmp_path, extra, says
):
    line = fusion_argv(tiny_checkpoint, tiny_data, tmp_path / "f", adapter_run, *extra)
    with pytest.raises(UsageError, match=says) as raised:
        train_multitask.make_model(parse_args(line), torch.device("cpu"))
    assert "\n" not in str(raised.value)


def test_a_run_of_another_option_is_refused(tiny_checkpoint, tiny_data, tmp_path):
    finetune = tiny_run(tiny_checkpoint, tiny_data, tmp_path / "ft", "--option", "finetune")
    line = fusion_argv(tiny_checkpoint, tiny_data, tmp_path / "f", finetune)
    with pytest.raises(UsageError, match="fusion fuses the adapters of an --option adapter run"):
        train_multitask.make_model(parse_args(line), torch.device("cpu"))


@pytest.fixture(scope="module")
def fusion_run(adapter_run, tiny_checkpoint, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fusion-run") / "fusion"
    assert train_multitask.main(fusion_argv(tiny_checkpoint, tiny_data, out, adapter_run)) == 0
    return out


def test_the_weights_command_prints_and_draws_each_tasks_weights(fusion_run, tmp_path, capsys):
    """One line per layer and position for each task, each a distribution over the three
    sources; the figure is written, and not over an existing file without --overwrite."""
    out = tmp_path / "weights.png"
    assert fusion_weights.main([str(fusion_run), "--limit", "8", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.stat().st_size > 1000
    for task in SOURCES:
        assert f"{task}: mean weight on the adapters of sst, para, sts" in printed
    lines = [line.split() for line in printed.splitlines() if line.startswith("  layer")]
    assert len(lines) == 3 * BertConfig.tiny().num_hidden_layers * 2
    for line in lines:
        assert abs(sum(float(v) for v in line[3:]) - 1.0) < 2e-3  # three rounded to 3 places
    assert fusion_weights.main([str(fusion_run), "--out", str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err


def test_a_task_added_to_a_fusion_run_leaves_the_others_as_they_were(
    adapter_run, tiny_checkpoint, tiny_data, tmp_path
):
    """sts's fusion added to a fusion run of sst and para: their files stay bit for bit."""
    base, added = tmp_path / "base", tmp_path / "added"
    line = fusion_argv(tiny_checkpoint, tiny_data, base, adapter_run, "--tasks", "sst,para")
    assert train_multitask.main(line) == 0
    line = driver_argv(tiny_checkpoint, tiny_data, added, "--add_to", str(base))
    assert train_multitask.main([*line[2:], *short_run(), "--tasks", "sts"]) == 0
    assert len(load_file(added / "task-sts.safetensors")) > 0
    for task in ("sst", "para"):
        before = load_file(base / f"task-{task}.safetensors")
        after = load_file(added / f"task-{task}.safetensors")
        assert before.keys() == after.keys()
        assert all(torch.equal(before[k], after[k]) for k in before), task


def test_the_attention_page_opens_a_fusion_run(fusion_run, tmp_path, capsys):
    out = tmp_path / "page"
    argv = [str(fusion_run), "--task", "sst", "--input", "a witty film", "--out", str(out)]
    assert attention_command.main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "page.html").is_file() and (tmp_path / "page.png").is_file()
