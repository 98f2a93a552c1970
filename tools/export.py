"""Export a trained run to the Hugging Face layout, for tools that load a plain BERT, a LoRA
run's tasks as PEFT adapters, or an adapter run's tasks as AdapterHub adapters.

    python -m tools.export RUN_DIR OUT_DIR [--overwrite]
    python -m tools.export RUN_DIR OUT_DIR --format peft        # a LoRA run
    python -m tools.export RUN_DIR OUT_DIR --format adapters    # an adapter run

OUT_DIR is written in a temporary folder beside it and renamed when complete. An existing,
non-empty OUT_DIR is replaced only with ``--overwrite`` and only when it holds an earlier export:
a run folder, a checkpoint folder, the current directory or a folder of other files is never
written over, nor is anything inside the run or its checkpoint.

Design notes (what is written, by option; the formats): docs/design/multitask.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from extras import peft_format
from minbert.checkpoint import atomic_write_text, save_tensors
from minbert.flags import ArgumentParser
from minbert.pretrained import CheckpointError, resolve_checkpoint_dir, save_checkpoint_dir
from multitask.errors import RunStopped, UsageError, run_command
from multitask.model import MultitaskModel
from multitask.run import EXPORT_MARK, folder_kind, overlapping
from multitask.trained import TrainedRun
from tasks.base import BinaryTask, MultiClassTask, Task, get_task
from tools import adapters_format

MERGEABLE = {"lora", "layernorm"}  # plug-in kinds whose effect fits in a plain BERT's weights

REPRESENTATIONS = {
    "mean": "the mean of last_hidden_state over the real tokens (attention_mask == 1)",
    "cls": "last_hidden_state[:, 0], the [CLS] token's state",
    "pooler": "pooler_output, tanh(W_p h_[CLS] + b_p)",
}


def encoder_state(model: MultitaskModel, task: str) -> dict[str, torch.Tensor]:
    """The weights of a plain BERT that computes what ``model``'s encoder computes for ``task``:
    LoRA merged into the weights it adapts, the task's LayerNorms in place of the shared ones."""
    bert = model.bert
    plugins = bert.plugins
    if "lora" in plugins:
        plugins["lora"].merge(task)
    try:
        state = {
            k: v.detach().clone()
            for k, v in bert.state_dict().items()
            if not k.startswith("plugins.")
        }
    finally:
        if "lora" in plugins:
            plugins["lora"].unmerge()
    if "layernorm" in plugins:
        own = plugins["layernorm"].by_task[task]
        for i in range(bert.config.num_hidden_layers):
            for position, prefix in (("attention", "attention.output"), ("feed_forward", "output")):
                for name, tensor in own[position][i].state_dict().items():
                    state[f"encoder.layer.{i}.{prefix}.LayerNorm.{name}"] = tensor.clone()
    return state


def head_description(model: MultitaskModel, task: Task) -> dict:
    """How to apply the task's head to the exported encoder, in words and shapes."""
    head = model.heads[task.name]
    separate = model.encodes_separately(task)
    if not task.is_pair:
        inputs = "one sentence: [CLS] sentence [SEP]"
    elif separate:
        inputs = "each sentence of the pair encoded on its own, giving u and v"
    else:
        inputs = "the pair as one sequence [CLS] a [SEP] b [SEP], token_type_ids 0 then 1"
    if isinstance(task, MultiClassTask):
        meaning = f"{task.num_classes} logits: the class is their argmax (softmax: probabilities)"
    elif isinstance(task, BinaryTask):
        meaning = "one logit z: sigmoid(z) is the probability of the positive class (z > 0: 1)"
    else:
        meaning = f"one score, clipped to [{task.low:g}, {task.high:g}]"
    return {
        "task": task.name,
        "description": task.description,
        "input": inputs,
        "sentence_vector": REPRESENTATIONS[model.representation],
        "head": type(head).__name__ + ": " + (type(head).__doc__ or "").split("\n")[0].strip(),
        "dropout": "none at inference",
        "outputs": meaning,
        "tensors": {k: list(v.shape) for k, v in head.state_dict().items()},
    }


def write_encoder(folder: Path, run: TrainedRun, model: MultitaskModel, task: str) -> None:
    vocab = resolve_checkpoint_dir(run.settings.checkpoint) / "vocab.txt"
    state = encoder_state(model, task)
    config = model.bert.config
    save_checkpoint_dir(folder, config, state, vocab, "BertModel", run.settings.max_length)


def write_head(folder: Path, model: MultitaskModel, task: str) -> None:
    head = model.heads[task].state_dict()
    save_tensors({k: v.contiguous() for k, v in head.items()}, folder / f"head-{task}.safetensors")
    description = json.dumps(head_description(model, get_task(task)), indent=2) + "\n"
    atomic_write_text(folder / f"head-{task}.json", description)


def check_out_dir(out_dir: str, run: TrainedRun, overwrite: bool) -> Path:
    """OUT_DIR as the module docstring allows it, or a UsageError that names what it is."""
    if out_dir == "":
        raise UsageError("OUT_DIR: an empty path; give the folder to write")
    out = Path(out_dir)
    if blocking := next((p for p in (out, *out.parents) if p.exists() and not p.is_dir()), None):
        raise UsageError(f"OUT_DIR {out}: {blocking} is a file; export to a folder")
    try:
        checkpoint = resolve_checkpoint_dir(run.settings.checkpoint)
    except CheckpointError as err:
        raise UsageError(f"{run.path}: base checkpoint: {err}") from None
    for folder, what in ((run.path, "the run"), (checkpoint, "the run's checkpoint folder")):
        if overlapping(out, folder):
            raise UsageError(f"OUT_DIR {out} overlaps {what} {folder}; export to another folder")
    if out.is_dir() and any(out.iterdir()):
        if not (out / EXPORT_MARK).is_file():
            kind = folder_kind(out) or "a folder of other files"
            raise UsageError(
                f"OUT_DIR {out} is {kind}, not an earlier export; it is left as it is "
                "(--overwrite replaces only an export): export to a new or empty folder"
            )
        if not overwrite:
            raise UsageError(
                f"OUT_DIR {out} holds an earlier export; pass --overwrite to replace it"
            )
    return out


def remove_interrupted(out: Path) -> None:
    """The temporary folders that a killed export to ``out`` left beside it."""
    for stale in out.parent.glob(f".{out.name}.export-*"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale)
            print(f"removed {stale}, left by an interrupted export")


PEFT_LOADING = (
    "from transformers import BertModel; from peft import PeftModel; "
    "model = PeftModel.from_pretrained(BertModel.from_pretrained(CHECKPOINT), OUT_DIR/TASK)"
)
ADAPTERS_LOADING = (
    "from adapters import BertAdapterModel; model = BertAdapterModel.from_pretrained(CHECKPOINT); "
    "name = model.load_adapter(OUT_DIR/TASK); model.set_active_adapters(name)"
)
# The adapter formats: the module that writes and refuses, the library's name, how to load.
FORMATS = {
    "peft": (peft_format, "PEFT adapter", PEFT_LOADING),
    "adapters": (adapters_format, "AdapterHub adapter", ADAPTERS_LOADING),
}


def export(run_dir: str, out_dir: str, overwrite: bool = False, form: str = "hf") -> list[Path]:
    """Write the export (what, by option: docs/design/multitask.md); returns the directories."""
    run = TrainedRun(run_dir)
    refused = [k for k in run.settings.plugin_kinds if k not in MERGEABLE]
    if form in FORMATS and (why := FORMATS[form][0].unexportable(run.settings)):
        raise UsageError(f"{run.path}: no {FORMATS[form][1]} for this run: {why}")
    if refused and form == "hf":
        raise UsageError(
            f"{run.path} was trained with {' and '.join(refused)} plug-ins, which add computations "
            "a plain BERT has no place for; use its per-task files "
            f"({run.path}/task-<task>.safetensors) with python -m tools.predict, or "
            "multitask.trained.TrainedRun in Python"
            + ("" if adapters_format.unexportable(run.settings) else ", or --format adapters")
        )
    out = check_out_dir(out_dir, run, overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_interrupted(out)
        with tempfile.TemporaryDirectory(prefix=f".{out.name}.export-", dir=out.parent) as tmp:
            written = write_export(Path(tmp) / "export", run, out, form)
            if out.exists():
                out.rename(Path(tmp) / "replaced")  # removed with the temporary folder
            (Path(tmp) / "export").rename(out)
    except OSError as err:
        raise RunStopped(f"{err}; {out} was left as it was before this export", 1) from None
    return written


def write_export(staged: Path, run: TrainedRun, out: Path, form: str = "hf") -> list[Path]:
    """Every file of the export into ``staged``; the folders they will have under ``out``."""
    written = []
    mark = {"run": str(run.path.resolve()), "option": run.settings.option, "tasks": run.tasks}
    if form in FORMATS:
        module, _, loading = FORMATS[form]
        for task in run.tasks:
            model = run.task_model(task)
            module.write_adapter(staged / task, model, run.settings, task)
            write_head(staged / task, model, task)
            written.append(out / task)
        mark |= {"format": form, "checkpoint": run.settings.checkpoint, "load": loading}
    elif run.settings.option in ("finetune", "pretrain"):
        if run.settings.option == "finetune":  # one model holds every task
            models = dict.fromkeys(run.tasks, run.task_model(run.tasks[0]))
        else:
            models = {task: run.task_model(task) for task in run.tasks}
        write_encoder(staged, run, models[run.tasks[0]], run.tasks[0])
        for task, model in models.items():
            write_head(staged, model, task)
        written.append(out)
    else:
        for task in run.tasks:
            model = run.task_model(task)
            write_encoder(staged / task, run, model, task)
            write_head(staged / task, model, task)
            written.append(out / task)
    atomic_write_text(staged / EXPORT_MARK, json.dumps(mark, indent=2) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    p = ArgumentParser(
        prog="python -m tools.export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a finished train_multitask.py run folder")
    p.add_argument(
        "out_dir",
        metavar="OUT_DIR",
        help="the folder to write (an existing, non-empty one only with --overwrite)",
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing OUT_DIR")
    p.add_argument(
        "--format",
        choices=("hf", *FORMATS),
        default="hf",
        help=(
            "hf: a plain BERT per run (finetune, pretrain) or per task (lora, merged); peft: "
            "a LoRA run's tasks unmerged, as PEFT adapters of the base checkpoint; adapters: an "
            "adapter run's tasks as AdapterHub (adapters library) bottleneck adapters"
        ),
    )
    args = p.parse_args(argv)

    def body() -> None:
        for folder in export(args.run_dir, args.out_dir, args.overwrite, args.format):
            print(f"wrote {folder}")

    return run_command(body, "OUT_DIR was left as it was before this export")


if __name__ == "__main__":
    sys.exit(main())
