"""Shared fixtures and helpers: the one tiny model config (``tiny_config``, the project's
``BertConfig.tiny``), a tiny random BERT checkpoint in Hugging Face layout (with the real
vocabulary, so the real tokenizer works), tiny synthetic data files in the course's format, and
the one way the tests run the driver (``driver_argv`` / ``run_driver``, and
``kill_when_resumable`` for a run killed as soon as it can be resumed), and ``model_and_batch``:
a tiny two-task model with a training batch of each task."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import save_file

from minbert.bert import BertConfig, BertModel
from minbert.pretrained import default_checkpoint_dir

tiny_config = BertConfig.tiny  # tiny_config(**overrides): 2 layers, hidden 32, real vocab size

WORDS = (
    "good bad movie film great awful what how is the a of why do you fine cat dog sat ran".split()
)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A 2-layer, hidden-32 BERT saved like a Hugging Face checkpoint directory."""
    directory = tmp_path_factory.mktemp("tiny_bert")
    import torch

    config = tiny_config()

    torch.manual_seed(0)
    model = BertModel(config)
    save_file(
        {k: v.contiguous() for k, v in model.state_dict().items()}, directory / "model.safetensors"
    )
    (directory / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    shutil.copyfile(default_checkpoint_dir() / "vocab.txt", directory / "vocab.txt")
    return directory


def driver_argv(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> list[str]:
    """The driver's command line for a tiny run: the tiny checkpoint and data, batches of 4,
    sequences of at most 32 tokens, then ``extra``."""
    return [
        "--checkpoint",
        str(checkpoint),
        "--data_dir",
        str(data),
        "--out_dir",
        str(out_dir),
        "--batch_size",
        "4",
        "--max_length",
        "32",
        *extra,
    ]


def run_driver(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> int:
    """``train_multitask.main`` on ``driver_argv``; its exit code."""
    import train_multitask

    return train_multitask.main(driver_argv(checkpoint, data, out_dir, *extra))


def signal_when_resumable(cmd: list[str], out_dir: Path, stop: int) -> tuple[int, str]:
    """Start ``cmd`` (from the repository root) in a fresh process and send it ``stop`` as soon
    as ``out_dir/last.pt`` exists (or after 120 s); its return code and stderr."""
    # A shell without job control starts background commands with SIGINT ignored, and Python
    # keeps an ignored SIGINT; the child gets the default back, as a terminal's Ctrl-C finds it.
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while not (out_dir / "last.pt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(stop)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def kill_when_resumable(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> int:
    """Start the driver on ``driver_argv`` in a fresh process and kill -9 it as soon as its
    ``last.pt`` exists (or after 120 s); its return code (−SIGKILL when the kill came first)."""
    cmd = [sys.executable, "train_multitask.py", *driver_argv(checkpoint, data, out_dir, *extra)]
    return signal_when_resumable(cmd, out_dir, signal.SIGKILL)[0]


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12)))


def write_course_file(path: Path, columns: list[str], rows: list[list[str]]) -> None:
    lines = ["\t" + "\t".join(columns)]
    lines += [f"{i}\t" + "\t".join(row) for i, row in enumerate(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory) -> Path:
    """Course-format files for sst, para and sts with a few dozen rows each."""
    directory = tmp_path_factory.mktemp("tiny_data")
    rng = random.Random(0)
    sizes = {"train": 40, "dev": 12, "test": 10}
    for split, n in sizes.items():
        labelled = split != "test"
        suffix = "-test-student" if split == "test" else f"-{split}"
        rows = [
            [f"s{split}{i}", _sentence(rng)] + ([str(rng.randint(0, 4))] if labelled else [])
            for i in range(n)
        ]
        write_course_file(
            directory / f"ids-sst{suffix}.csv",
            ["id", "sentence"] + (["sentiment"] if labelled else []),
            rows,
        )
        rows = [
            [f"q{split}{i}", _sentence(rng), _sentence(rng)]
            + ([f"{rng.randint(0, 1)}.0"] if labelled else [])
            for i in range(n)
        ]
        write_course_file(
            directory / f"quora{suffix}.csv",
            ["id", "sentence1", "sentence2"] + (["is_duplicate"] if labelled else []),
            rows,
        )
        rows = [
            [f"t{split}{i}", _sentence(rng), _sentence(rng)]
            + ([f"{rng.uniform(0, 5):.1f}"] if labelled else [])
            for i in range(n)
        ]
        write_course_file(
            directory / f"sts{suffix}.csv",
            ["id", "sentence1", "sentence2"] + (["similarity"] if labelled else []),
            rows,
        )
    return directory


@pytest.fixture
def model_and_batch(tiny_checkpoint, tiny_data):
    """A finetune model of the tiny checkpoint for sst and para (dropout 0) and a batch of six
    training examples of each, as [(task, batch), ...]."""
    import torch

    from minbert.tokenizer import Tokenizer
    from multitask.collate import collate
    from multitask.model import ModelSettings, build_model
    from tasks import get_task

    settings = ModelSettings(option="finetune", checkpoint=str(tiny_checkpoint)).resolved()
    torch.manual_seed(0)
    model = build_model(settings, ["sst", "para"], dropout=0.0)
    tokenizer = Tokenizer.from_checkpoint(str(tiny_checkpoint), max_length=32)
    sst, para = get_task("sst"), get_task("para")
    sst_examples = sst.read(tiny_data / sst.files["train"])[0][:6]
    para_examples = para.read(tiny_data / para.files["train"])[0][:6]
    batches = [
        (sst, collate(sst, sst_examples, tokenizer, separate=False)),
        (para, collate(para, para_examples, tokenizer, separate=False)),
    ]
    return model, batches
