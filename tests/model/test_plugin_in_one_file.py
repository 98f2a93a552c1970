"""Adding a plug-in kind is adding one file and its name to the table of kinds: a copy of this
project with one new file, ``minbert/plugins/gain.py`` (a learned gain per layer, the identity at
start), and "gain" in ``KIND_NAMES`` trains with ``--option gain`` and its flag
``--gain_start``, with nothing else changed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

GAIN = '''"""A learned gain per layer and task: h ↦ g_l · h after layer l (g_l = --gain_start)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from minbert.config import BertConfig
from minbert.flags import setting
from minbert.plugins.base import Plugin


@dataclasses.dataclass
class GainSettings:
    start: float = setting(1.0, "the gain every layer starts from", within="(0, inf)")


class Gain(Plugin):
    kind = "gain"
    Settings = GainSettings
    flag_prefix = "gain_"
    summary = "a learned gain of every layer"

    def __init__(self, config: BertConfig, tasks: Iterable[str], **options: Any) -> None:
        super().__init__(config, **options)
        self.add_tasks(tasks)

    def build_task(self) -> nn.Module:
        gains = torch.full((self.config.num_hidden_layers,), self.settings.start)
        return nn.ParameterDict({"g": nn.Parameter(gains)})

    def layer_of(self, task: str) -> dict[nn.Parameter, int]:
        return {self.by_task[task]["g"]: self.config.num_hidden_layers - 1}

    @classmethod
    def parameters_per_task(cls, config: BertConfig, **options: Any) -> int:
        return config.num_hidden_layers

    def after_layer(self, layer: int, task: str, h: torch.Tensor) -> torch.Tensor:
        return h * self.by_task[task]["g"][layer]
'''


def project_copy(to: Path) -> Path:
    """This project's tracked files (and its data folder's), copied to ``to``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():
            (to / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, to / rel)
    return to


def test_a_plugin_kind_is_one_file_and_a_table_line(tiny_checkpoint, tiny_data, tmp_path):
    copy = project_copy(tmp_path / "project")
    (copy / "minbert/plugins/gain.py").write_text(GAIN, encoding="utf-8")
    kinds = copy / "minbert/plugins/kinds.py"
    table = 'KIND_NAMES = ("adapter", "fusion", "layernorm", "lhuc", "lora", "pals"'
    text = kinds.read_text(encoding="utf-8")
    assert text.count(table) == 1
    kinds.write_text(text.replace(table, table + ', "gain"'), encoding="utf-8")
    run = [sys.executable, "train_multitask.py"]
    shown = subprocess.run([*run, "--help"], cwd=copy, capture_output=True, text=True)
    assert "gain" in shown.stdout and "--gain_start" in shown.stdout, shown.stderr[-2000:]
    out = tmp_path / "run"
    argv = ["--checkpoint", str(tiny_checkpoint), "--data_dir", str(tiny_data)]
    argv += ["--out_dir", str(out), "--option", "gain", "--gain_start", "0.5"]
    argv += ["--epochs", "1", "--steps_per_epoch", "3", "--no_plots", "--threads", "1"]
    done = subprocess.run([*run, *argv], cwd=copy, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["gain_start"] == 0.5
    assert (out / "task-sst.safetensors").is_file()  # its parameters and head, saved per task
    parameters = json.loads((out / "parameters.json").read_text())
    assert parameters["plugins"] == 3 * 2  # a gain per layer (the tiny model has 2) and task
