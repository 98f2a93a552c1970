"""Multitask fine-tuning of one BERT on SST-5 sentiment, Quora paraphrase and STS-B similarity.

    python train_multitask.py --option finetune --sampling annealed
    python train_multitask.py --option adapter --sampling annealed
    python train_multitask.py --evaluate runs/finetune-annealed       # predictions from a saved run

The run: config -> data -> model -> optimizer -> task sampler -> training loop -> evaluation.
Each step draws one task (round-robin, or p_i ∝ N_i^α, see minbert/sampling.py), takes that task's
next length-grouped batch, and updates the shared encoder (or only the plug-ins and heads) on that
task's loss. The run folder receives config.json, metrics.jsonl, train_log.jsonl, the best
checkpoint, prediction files and learning-curve plots; see README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from minbert.checkpoint import UnsafeCheckpointError, atomic_save, load_trusted
from minbert.layer_decay import layerwise_lr_decay
from minbert.optimizer import AdamW, linear_warmup_decay, param_groups
from minbert.plugins import (
    add_plugin,
    format_parameter_report,
    freeze_all_but_task,
    freeze_for_plugins,
    parameter_report,
)
from minbert.pretrained import CheckpointError, load_pretrained
from minbert.sampling import TaskSampler
from minbert.smart import MomentumTeacher, SmartConfig, bregman_term, smart_regularizer
from minbert.tokenizer import Tokenizer
from tasks import TASKS, get_task
from tasks.base import Task
from tasks.batching import length_grouped_batches
from tasks.collate import batch_to, collate, swap_at_random, token_lengths
from tasks.heads import PAIR_ENCODINGS, REPRESENTATIONS, MultitaskModel
from tasks.metrics import OVERALL_TASKS, overall_score
from tasks.reader import DataError, Example, format_skip_report

OPTIONS = ("pretrain", "finetune", "adapter", "pals", "lhuc", "lora")
PLUGIN_OPTIONS = ("adapter", "pals", "lhuc", "lora")
SAMPLINGS = ("round-robin", "proportional", "annealed")
SPLITS = ("train", "dev", "test")


class UsageError(Exception):
    """A mistake in the command line or the files it names: reported in one line, no traceback."""


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Appends "(default: ...)" to a flag's help, unless the help already says its default or
    there is none to say (a switch that is off, an optional value that is unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        help_text = action.help or ""
        if "(default:" in help_text or action.default in (None, False):
            return help_text
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    g = p.add_argument_group("what to train")
    g.add_argument(
        "--option",
        choices=OPTIONS,
        default="finetune",
        help="pretrain: frozen encoder, only the task heads train; finetune: every weight trains; "
        "adapter/pals/lhuc/lora: frozen encoder plus one parameter-efficient plug-in per task",
    )
    g.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default="annealed",
        help="which task each step trains: round-robin cycles the tasks; proportional draws task i "
        "with p_i ∝ N_i (training-set size); annealed uses p_i ∝ N_i^α with "
        "α = 1 − 0.8·(e − 1)/(E − 1) in epoch e of E",
    )
    g.add_argument(
        "--tasks", default="sst,para,sts", help=f"comma-separated subset of {sorted(TASKS)}"
    )
    g.add_argument(
        "--checkpoint",
        default="default",
        help="pretrained BERT directory (config.json + model.safetensors or pytorch_model.bin); "
        "'default' is the packaged all-MiniLM-L6-v2",
    )
    g.add_argument(
        "--representation",
        choices=REPRESENTATIONS,
        default="mean",
        help="sentence vector the heads read: BERT's pooler, the [CLS] state, "
        "or the mean of real tokens",
    )
    g.add_argument(
        "--pair_encoding",
        choices=PAIR_ENCODINGS,
        default=None,
        help="pair tasks: cross = one sequence [CLS] a [SEP] b [SEP]; separate = encode a and b "
        "apart and combine ([u,v,|u-v|,u*v] for paraphrase, cosine for similarity) (default: "
        "separate for pretrain, whose frozen encoder keeps the checkpoint's own cosine "
        "similarity; cross otherwise; measured in benchmarks/results/multitask.md)",
    )

    g = p.add_argument_group("data")
    g.add_argument("--data_dir", default="data", help="folder with the course's data files")
    for name in ("sst", "para", "sts", "cfimdb"):
        for split in SPLITS:
            g.add_argument(
                f"--{name}_{split}",
                default=None,
                help=f"{name} {split} file (default: <data_dir>/{TASKS[name].files[split]})",
            )
    g.add_argument(
        "--limit",
        type=int,
        default=None,
        help="at most N examples per task and split (default: all)",
    )
    g.add_argument(
        "--strict", action="store_true", help="a malformed data row is an error, not a skip"
    )
    g.add_argument(
        "--max_length", type=int, default=128, help="tokens per sequence after truncation"
    )

    g = p.add_argument_group("optimisation")
    g.add_argument("--epochs", type=int, default=3, help="training epochs")
    g.add_argument(
        "--steps_per_epoch",
        type=int,
        default=None,
        help="steps per epoch (default: total training examples of the chosen tasks / batch size)",
    )
    g.add_argument("--batch_size", type=int, default=32, help="examples per step")
    g.add_argument(
        "--lr",
        type=float,
        default=None,
        help="peak learning rate (default: 5e-5 for finetune, 1e-3 for the frozen-encoder options)",
    )
    g.add_argument(
        "--warmup", type=float, default=0.1, help="warm-up steps, as a fraction of all steps"
    )
    g.add_argument("--weight_decay", type=float, default=0.01, help="AdamW decoupled weight decay")
    g.add_argument("--dropout", type=float, default=0.1, help="dropout in the encoder and heads")
    g.add_argument(
        "--layer_decay",
        type=float,
        default=1.0,
        help="layer-wise learning-rate decay γ: encoder layer l of L trains at lr·γ^(L+1−l), the "
        "embeddings at lr·γ^(L+1), heads at lr (1: one rate for all; see minbert/layer_decay.py)",
    )
    g.add_argument(
        "--swap_pairs",
        action="store_true",
        help="train symmetric pair tasks (para, sts) on each pair in a random order, (a, b) or "
        "(b, a), so that the model cannot rely on which sentence comes first",
    )
    g.add_argument(
        "--seed", type=int, default=11711, help="random seed (data order, dropout, sampler)"
    )
    g.add_argument(
        "--eval_every",
        type=int,
        default=0,
        help="also evaluate every N steps (0: only at epoch ends)",
    )
    g.add_argument(
        "--log_every", type=int, default=50, help="write the mean training loss every N steps"
    )
    g.add_argument(
        "--save_every",
        type=int,
        default=0,
        help="also write the resumable last.pt every N steps (it is always written at evaluations)",
    )
    g.add_argument(
        "--nonfinite",
        choices=("stop", "skip"),
        default="stop",
        help="on a NaN or infinite loss: stop the run (naming step and task) or skip that batch",
    )

    g = p.add_argument_group("plug-ins (with --option adapter|pals|lhuc|lora)")
    g.add_argument("--adapter_size", type=int, default=64, help="adapter bottleneck m")
    g.add_argument(
        "--adapter_placement",
        choices=("houlsby", "pfeiffer"),
        default="houlsby",
        help="houlsby: after attention and feed-forward; pfeiffer: after feed-forward only",
    )
    g.add_argument("--adapter_share", type=int, default=1, help="share one adapter across k layers")
    g.add_argument(
        "--train_layernorms", action="store_true", help="also train the encoder's LayerNorms"
    )
    g.add_argument(
        "--pal_size", type=int, default=None, help="PAL projection size s (default: sized to D)"
    )
    g.add_argument(
        "--pal_heads",
        type=int,
        default=None,
        help="attention heads inside a PAL (default: the encoder's head count)",
    )
    g.add_argument("--lora_rank", type=int, default=8, help="LoRA rank r")
    g.add_argument(
        "--lora_alpha", type=float, default=16.0, help="LoRA scale α (update scaled by α/r)"
    )
    g.add_argument(
        "--lora_targets", default="query,value", help="linear maps LoRA adapts (comma-separated)"
    )

    g = p.add_argument_group("SMART regularization (Jiang et al. 2020)")
    g.add_argument("--smart", action="store_true", help="add SMART's adversarial and Bregman terms")
    g.add_argument("--smart_sigma", type=float, default=1e-5, help="σ: std of the initial noise")
    g.add_argument(
        "--smart_epsilon", type=float, default=1e-5, help="ε: radius of the perturbation ball"
    )
    g.add_argument("--smart_step_size", type=float, default=1e-3, help="η: ascent step size")
    g.add_argument("--smart_steps", type=int, default=1, help="K: ascent steps")
    g.add_argument(
        "--smart_weight", type=float, default=1.0, help="λ_s: weight of the adversarial term"
    )
    g.add_argument("--smart_bregman", type=float, default=1.0, help="μ: weight of the Bregman term")
    g.add_argument("--smart_momentum", type=float, default=0.99, help="β: EMA of the teacher")
    g.add_argument(
        "--smart_norm",
        choices=("linf", "l2"),
        default="linf",
        help="per-token norm of the ε-ball and of the ascent's gradient normalisation",
    )

    g = p.add_argument_group("run")
    g.add_argument(
        "--out_dir",
        default=None,
        help="run folder (default: runs/<option>-<sampling>; with --add_to: RUN_DIR+<tasks>)",
    )
    g.add_argument(
        "--resume", action="store_true", help="continue the run in --out_dir from last.pt"
    )
    g.add_argument(
        "--overwrite", action="store_true", help="reuse a non-empty --out_dir, starting over"
    )
    g.add_argument(
        "--evaluate",
        metavar="RUN_DIR",
        default=None,
        help="evaluate only: load RUN_DIR's best checkpoint, print dev metrics, write "
        "predictions (with the run's --batch_size they match the run's bit for bit; another "
        "batch size pads differently and may change the last float bits)",
    )
    g.add_argument(
        "--add_to",
        metavar="RUN_DIR",
        default=None,
        help="add tasks to RUN_DIR, a finished plug-in run: train only the plug-ins and heads of "
        "the --tasks named here (new tasks only) while RUN_DIR's tasks stay bit-identical; the "
        "model settings (option, sizes, encoding) come from RUN_DIR's config.json",
    )
    g.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda or cuda:N")
    g.add_argument("--bf16", action="store_true", help="bfloat16 autocast (CUDA only)")
    g.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU threads for torch (default: torch's choice, one per core); on a machine shared "
        "with other jobs, fewer threads than cores avoids over-subscription",
    )
    g.add_argument("--no_plots", action="store_true", help="skip the PNG learning curves")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    args.tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.base_tasks = []  # with --add_to: the earlier run's tasks, frozen
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown or not args.tasks:
        raise UsageError(f"--tasks: unknown task(s) {unknown}; known tasks are {sorted(TASKS)}")
    if args.lr is None:
        args.lr = 5e-5 if args.option == "finetune" else 1e-3
    if args.pair_encoding is None:
        args.pair_encoding = "separate" if args.option == "pretrain" else "cross"
    if args.out_dir is None:
        args.out_dir = args.evaluate or (
            f"{args.add_to.rstrip('/')}+{'+'.join(args.tasks)}"
            if args.add_to
            else f"runs/{args.option}-{args.sampling}"
        )
    if args.add_to and Path(args.out_dir).resolve() == Path(args.add_to).resolve():
        raise UsageError("--out_dir must differ from --add_to: the earlier run stays as it is")
    for flag in ("epochs", "batch_size", "max_length", "log_every"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag} must be at least 1")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    if not 0 <= args.warmup < 1:
        raise UsageError("--warmup is a fraction of all steps in [0, 1)")
    if not 0 < args.layer_decay <= 1:
        raise UsageError("--layer_decay is a factor in (0, 1]")
    return args


# --------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------


@dataclass
class TaskData:
    task: Task
    splits: dict[str, list[Example]] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)


def data_path(args: argparse.Namespace, task: Task, split: str) -> Path:
    override = getattr(args, f"{task.name}_{split}", None)
    return Path(override) if override else Path(args.data_dir) / task.files[split]


def load_data(args: argparse.Namespace, log_path: Path | None) -> dict[str, TaskData]:
    """Read every split of every chosen task and report skipped rows; test files are optional."""
    data: dict[str, TaskData] = {}
    all_skipped = []
    for name in args.tasks:
        task = get_task(name)
        td = TaskData(task)
        for split in SPLITS:
            path = data_path(args, task, split)
            if not path.is_file():
                if split == "test":
                    print(f"[{name}] no test file at {path}: test predictions are skipped")
                    continue
                raise UsageError(
                    f"--{name}_{split}: file {path} not found; put the course file there, point "
                    f"--data_dir at the folder that holds it, or run: python scripts/get_data.py"
                )
            examples, skipped = task.read(path, strict=args.strict, require_label=split != "test")
            all_skipped += skipped
            if args.limit is not None:
                examples = examples[: args.limit]
            if not examples:
                raise UsageError(f"--{name}_{split}: {path} has no usable rows")
            td.splits[split], td.paths[split] = examples, path
        data[name] = td
        sizes = ", ".join(f"{s} {len(e)}" for s, e in td.splits.items())
        print(f"[{name}] {task.description}: {sizes}")
    if all_skipped:
        report = format_skip_report(all_skipped)
        lines = report.splitlines()
        shown = lines if len(lines) <= 11 else [*lines[:10], "...", lines[-1]]
        print("\n".join(shown))
        if log_path is not None:
            log_path.write_text(report + "\n", encoding="utf-8")
            print(f"every skipped row is listed in {log_path}")
    return data


def report_truncation(data: dict[str, TaskData], tokenizer, model, max_length: int) -> None:
    """Say how many inputs are longer than --max_length tokens (they are truncated, not dropped)."""
    for name, td in data.items():
        separate = model.encodes_separately(td.task)
        for split, examples in td.splits.items():
            lengths = token_lengths(td.task, examples, tokenizer, separate)
            over = sum(1 for n in lengths if n > max_length)
            if over:
                print(
                    f"[{name}] {over} of {len(examples)} {split} inputs are longer than "
                    f"{max_length} tokens and are truncated (longest: {max(lengths)})"
                )


class BatchStream:
    """Endless length-grouped batches of one task's training set.

    Pass p over the data is shuffled with a generator seeded from (seed, task, p), so the stream's
    position is two integers (pass, index) and resuming rebuilds it exactly."""

    def __init__(
        self,
        name: str,
        lengths: list[int],
        batch_size: int,
        seed: int,
        make_batches=length_grouped_batches,
    ) -> None:
        self.name, self.lengths, self.batch_size, self.seed = name, lengths, batch_size, seed
        self.make_batches = make_batches  # (lengths, batch_size, generator) -> index lists
        self.pass_number, self.index = 0, 0
        self._batches = self._make_batches()

    def _make_batches(self) -> list[list[int]]:
        task_offset = sum(ord(c) for c in self.name)
        g = torch.Generator().manual_seed(
            self.seed * 1_000_003 + task_offset * 1009 + self.pass_number
        )
        return self.make_batches(self.lengths, self.batch_size, g)

    def next(self) -> list[int]:
        if self.index >= len(self._batches):
            self.pass_number, self.index = self.pass_number + 1, 0
            self._batches = self._make_batches()
        self.index += 1
        return self._batches[self.index - 1]

    def state_dict(self) -> dict:
        return {"pass_number": self.pass_number, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.pass_number, self.index = state["pass_number"], state["index"]
        self._batches = self._make_batches()


# --------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError(
            f"--device {name}: CUDA is not available on this machine; use --device cpu"
        )
    try:
        return torch.device(name)
    except RuntimeError as err:
        raise UsageError(f"--device {name}: {err}") from err


def build_model(args: argparse.Namespace) -> MultitaskModel:
    """Load the pretrained encoder, attach the option's plug-ins, add the heads, freeze; with
    --add_to, also load the earlier run's trained tensors and train only the new tasks."""
    bert = load_pretrained(args.checkpoint)
    for module in bert.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = args.dropout
    for layer in bert.encoder.layer:
        layer.attention.self.dropout_p = args.dropout
    names = [*args.base_tasks, *args.tasks]
    if args.option in PLUGIN_OPTIONS:
        attach_plugins(bert, args, names)
    tasks = [get_task(name) for name in names]
    model = MultitaskModel(bert, tasks, args.representation, args.pair_encoding, args.dropout)
    if args.option == "pretrain":
        bert.requires_grad_(False)
    elif args.base_tasks:
        freeze_all_but_task(bert, *args.tasks)  # earlier tasks' plug-ins and LayerNorms stay
        for name in args.base_tasks:
            model.heads[name].requires_grad_(False)
        load_base_run(model, Path(args.add_to))
    elif args.option in PLUGIN_OPTIONS:
        freeze_for_plugins(bert, train_layernorms=args.train_layernorms)
    return model


# The settings that decide the model's shape (besides the task list): --evaluate and --add_to
# take them from a run.
MODEL_SETTINGS = (
    "option",
    "checkpoint",
    "representation",
    "pair_encoding",
    "max_length",
    "adapter_size",
    "adapter_placement",
    "adapter_share",
    "train_layernorms",
    "pal_size",
    "pal_heads",
    "lora_rank",
    "lora_alpha",
    "lora_targets",
)


def read_run_config(run_dir: Path, flag: str) -> dict:
    path = run_dir / "config.json"
    if not path.is_file():
        raise UsageError(f"{flag}: {path} not found; pass the folder of a training run")
    return json.loads(path.read_text())


def inherit_base_run(args: argparse.Namespace) -> None:
    """--add_to: take the model settings of the earlier run; --tasks must name new tasks only."""
    saved = read_run_config(Path(args.add_to), "--add_to")
    if saved["option"] not in PLUGIN_OPTIONS:
        raise UsageError(
            f"--add_to: {args.add_to} was trained with --option {saved['option']}, which changes "
            f"weights every task shares; tasks can be added only to a plug-in run "
            f"({', '.join(PLUGIN_OPTIONS)})"
        )
    base_tasks = [*saved.get("base_tasks", []), *saved["tasks"]]
    if repeated := [t for t in args.tasks if t in base_tasks]:
        raise UsageError(
            f"--tasks: {repeated} already trained in {args.add_to} (tasks {base_tasks}); "
            f"with --add_to, name only the new tasks"
        )
    for key in MODEL_SETTINGS:
        setattr(args, key, saved[key])
    args.base_tasks = base_tasks
    print(
        f"adding {args.tasks} to {args.add_to} (tasks {base_tasks}, frozen): --option "
        f"{args.option} and the other model settings come from its config.json"
    )


def load_base_run(model: MultitaskModel, run_dir: Path) -> None:
    """Load the trained tensors of run_dir (and of the runs it was added to) into ``model``."""
    from safetensors.torch import load_file

    saved = read_run_config(run_dir, "--add_to")
    if saved.get("add_to"):
        load_base_run(model, Path(saved["add_to"]))
    path = run_dir / "best.safetensors"
    if not path.is_file():
        raise UsageError(f"--add_to: {path} not found: {run_dir} never reached an evaluation")
    state, own = load_file(str(path)), model.state_dict()
    if wrong := [k for k, v in state.items() if k not in own or own[k].shape != v.shape]:
        raise UsageError(f"--add_to: {path} does not fit the model, e.g. tensor {wrong[0]}")
    model.load_state_dict(state, strict=False)
    owned = set().union(*(model.task_keys(t) for t in model.tasks))
    model.trained_shared_keys |= set(state) - owned


def attach_plugins(bert, args: argparse.Namespace, tasks: list[str]) -> None:
    options = {
        "adapter": dict(
            size=args.adapter_size, placement=args.adapter_placement, share=args.adapter_share
        ),
        "pals": {k: v for k, v in dict(size=args.pal_size, heads=args.pal_heads).items() if v},
        "lhuc": {},
        "lora": dict(
            rank=args.lora_rank,
            alpha=args.lora_alpha,
            targets=[t.strip() for t in args.lora_targets.split(",") if t.strip()],
        ),
    }[args.option]
    try:
        add_plugin(bert, args.option, tasks, **options)
    except ValueError as err:
        raise UsageError(f"--option {args.option}: {err}") from err


def trainable_state_dict(model: MultitaskModel) -> dict[str, torch.Tensor]:
    """The tensors that training changes: every weight for finetune, else plug-ins + heads (and
    LayerNorms when trained). Selected by requires_grad, i.e. by the freezing, not by name."""
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    return {k: v.detach().clone() for k, v in model.state_dict().items() if k in trainable}


# --------------------------------------------------------------------------------------------
# Evaluation and outputs
# --------------------------------------------------------------------------------------------


def autocast(args: argparse.Namespace, device: torch.device):
    if args.bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.no_grad()
def predict(
    model: MultitaskModel, td: TaskData, split: str, tokenizer: Tokenizer, args, device
) -> tuple[list[str], list]:
    """Predictions for one split, in the file's order; batches grouped by length for speed."""
    model.eval()
    task, examples = td.task, td.splits[split]
    separate = model.encodes_separately(task)
    lengths = token_lengths(task, examples, tokenizer, separate)
    predictions: list = [None] * len(examples)
    for indices in length_grouped_batches(lengths, args.batch_size * 2, None):
        batch = batch_to(collate(task, [examples[i] for i in indices], tokenizer, separate), device)
        with autocast(args, device):
            outputs = model(task.name, batch)
        for i, p in zip(indices, task.predict(outputs.float())):
            predictions[i] = p
    return [e.id for e in examples], predictions


def evaluate(model, data: dict[str, TaskData], tokenizer, args, device) -> dict[str, float]:
    metrics = {}
    for name, td in data.items():
        _, preds = predict(model, td, "dev", tokenizer, args, device)
        metrics[name] = td.task.metric(preds, [e.label for e in td.splits["dev"]])
    if any(name in OVERALL_TASKS for name in metrics):
        metrics["overall"] = overall_score(metrics)
    else:  # e.g. --tasks cfimdb: the course's score is undefined, so rank by the mean metric
        metrics["overall"] = sum(metrics.values()) / len(metrics)
    return metrics


def write_predictions(model, data, tokenizer, args, device, out_dir: Path) -> None:
    for name, td in data.items():
        for split in ("dev", "test"):
            if split not in td.splits:
                continue
            ids, preds = predict(model, td, split, tokenizer, args, device)
            path = out_dir / f"{name}-{split}-output.csv"
            td.task.write_predictions(path, ids, preds)
    print(f"predictions written to {out_dir}")


def plot_learning_curves(out_dir: Path, tasks: list[str]) -> None:
    """learning_curves.png: training loss per task and each dev metric against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [json.loads(line) for line in (out_dir / "train_log.jsonl").read_text().splitlines()]
    evals = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    fig, (ax_loss, ax_dev) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name in tasks:
        points = [(r["step"], r["loss"]) for r in train if r["task"] == name]
        if points:
            ax_loss.plot(*zip(*points), label=name)
    ax_loss.set(
        xlabel="step", ylabel="training loss (mean since last point)", title="Training loss"
    )
    ax_loss.legend()
    for key in [*tasks, "overall"]:
        points = [(r["step"], r[key]) for r in evals if key in r]
        if points:
            ax_dev.plot(*zip(*points), marker="o", label=key)
    ax_dev.set(xlabel="step", ylabel="dev metric", title="Dev metrics (acc; Pearson r for sts)")
    ax_dev.legend()
    fig.tight_layout()
    fig.savefig(out_dir / "learning_curves.png", dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------


def smart_kind(task: Task) -> str:
    if task.metric_name == "pearson":
        return "regression"
    return "binary" if task.num_outputs == 1 else "multiclass"


def prepare_out_dir(args: argparse.Namespace) -> Path:
    out_dir = Path(args.out_dir)
    if args.resume:
        if not (out_dir / "last.pt").is_file():
            raise UsageError(f"--resume: {out_dir / 'last.pt'} not found; nothing to resume")
        return out_dir
    if (out_dir / "metrics.jsonl").exists() and not args.overwrite:
        raise UsageError(
            f"--out_dir {out_dir} already holds a run; pass --resume to continue it, "
            "--overwrite to start over, or another --out_dir"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "train_log.jsonl", "last.pt", "best.safetensors"):
        (out_dir / name).unlink(missing_ok=True)
    return out_dir


@dataclass
class Distributed:
    """Data parallelism under torchrun: every rank draws the same task and the same global batch
    (the samplers and batch streams are pure functions of the seed), computes the loss on its
    shard of that batch (examples rank, rank + world, ...), and DistributedDataParallel averages
    the gradients. Only rank 0 writes files and prints progress."""

    rank: int = 0
    world: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def shard(self, indices: list[int]) -> list[int]:
        return indices[self.rank :: self.world]

    def mean(self, value: torch.Tensor) -> float:
        """The mean of a scalar over all processes (the global batch's loss, for the logs)."""
        if self.world > 1:
            value = value.clone()
            torch.distributed.all_reduce(value)
            value /= self.world
        return value.item()


def setup_distributed(args: argparse.Namespace, device: torch.device) -> Distributed:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return Distributed()
    import torch.distributed as dist

    if args.batch_size < world:
        raise UsageError(f"--batch_size {args.batch_size} is smaller than the {world} processes")
    if device.type == "cuda":  # one GPU per process
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return Distributed(rank=dist.get_rank(), world=dist.get_world_size())


class TrainingStep(torch.nn.Module):
    """The loss of one batch as a module, so that DistributedDataParallel sees the whole step
    (SMART's extra forwards included) as its forward."""

    def __init__(self, model: MultitaskModel, smart: dict | None) -> None:
        super().__init__()
        self.model = model
        self.smart = smart

    def forward(self, task: Task, batch: dict) -> torch.Tensor:
        return training_loss(self.model, task, batch, self.smart)


def restore_saved_config(args: argparse.Namespace) -> argparse.Namespace:
    """--resume continues the run as configured when it started; only where it runs may change.
    A flag added to the driver after the run started takes the value a run without it had (its
    default, resolved as for a command line without flags)."""
    saved = read_run_config(Path(args.out_dir), "--resume")
    keep = {
        k: getattr(args, k) for k in ("resume", "device", "bf16", "out_dir", "no_plots", "threads")
    }
    defaults = vars(parse_args([]))
    return argparse.Namespace(**{**defaults, **saved, **keep})


def truncate_logs(out_dir: Path, step: int) -> None:
    """After a resume, drop log lines written after the checkpoint the run continues from."""
    for name in ("metrics.jsonl", "train_log.jsonl"):
        path = out_dir / name
        if path.exists():
            lines = [x for x in path.read_text().splitlines() if json.loads(x)["step"] <= step]
            path.write_text("".join(line + "\n" for line in lines))


def train(args: argparse.Namespace) -> dict[str, float]:
    out_dir = prepare_out_dir(args)
    if args.resume:
        args = restore_saved_config(args)
    elif args.add_to:
        inherit_base_run(args)
    device = pick_device(args.device)
    if args.bf16 and device.type != "cuda":
        raise UsageError("--bf16 needs a CUDA device (--device cuda)")
    dist_info = setup_distributed(args, device)
    if device.type == "cuda" and dist_info.world > 1:
        device = torch.device("cuda", torch.cuda.current_device())
    main_process = dist_info.is_main
    if not main_process:
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 -- rank 0 alone prints
    torch.manual_seed(args.seed)
    if main_process and not args.resume:
        (out_dir / "config.json").write_text(json.dumps(vars(args), indent=2) + "\n")

    data = load_data(args, out_dir / "skipped_rows.txt" if main_process else None)
    tokenizer = Tokenizer.from_checkpoint(args.checkpoint, max_length=args.max_length)
    model = build_model(args).to(device)
    if main_process:
        print_parameter_report(model, out_dir)

    report_truncation(data, tokenizer, model, args.max_length)
    sizes = {name: len(td.splits["train"]) for name, td in data.items()}
    steps_per_epoch = args.steps_per_epoch or math.ceil(sum(sizes.values()) / args.batch_size)
    total_steps = steps_per_epoch * args.epochs
    groups = param_groups(model, args.weight_decay)
    if args.layer_decay != 1.0:
        layers = model.bert.config.num_hidden_layers
        groups = layerwise_lr_decay(groups, model, args.lr, args.layer_decay, layers)
    optimizer = AdamW(groups, lr=args.lr)
    scheduler = linear_warmup_decay(optimizer, int(args.warmup * total_steps), total_steps)
    sampler = TaskSampler(args.sampling, sizes, args.epochs, args.seed)
    streams = {
        name: BatchStream(
            name,
            token_lengths(
                td.task, td.splits["train"], tokenizer, model.encodes_separately(td.task)
            ),
            args.batch_size,
            args.seed,
        )
        for name, td in data.items()
    }
    smart = setup_smart(args, [p for p in model.parameters() if p.requires_grad])
    step_module: torch.nn.Module = TrainingStep(model, smart)
    if dist_info.world > 1:
        # Other tasks' heads and plug-ins take no part in a step, hence find_unused_parameters.
        step_module = torch.nn.parallel.DistributedDataParallel(
            step_module, find_unused_parameters=True
        )

    step, best = 0, -math.inf
    if args.resume:
        state = load_trusted(out_dir / "last.pt")
        model.load_state_dict(state["model"], strict=False)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        for name, s in state["streams"].items():
            streams[name].load_state_dict(s)
        if smart is not None:
            smart["teacher"].load_state_dict(state["teacher"])
        torch.set_rng_state(state["rng"])
        if state.get("cuda_rng") is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])  # dropout on the GPU draws from these
        step, best = state["step"], state["best"]
        if main_process:
            truncate_logs(out_dir, step)
        print(f"resumed {out_dir} at step {step}")

    def save_last() -> None:
        if not main_process:
            return
        state = {
            "model": trainable_state_dict(model),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "streams": {n: s.state_dict() for n, s in streams.items()},
            "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "step": step,
            "best": best,
        }
        if smart is not None:
            state["teacher"] = smart["teacher"].state_dict()
        atomic_save(state, out_dir / "last.pt")

    start = time.time()
    examples_seen = 0
    running: dict[str, list[float]] = {name: [] for name in data}
    while step < total_steps:
        epoch = step // steps_per_epoch + 1
        schedule = sampler.schedule(epoch, steps_per_epoch)
        if step % steps_per_epoch == 0:
            probs = sampler.probabilities(epoch)
            print(
                f"epoch {epoch}/{args.epochs}: task probabilities "
                + ", ".join(f"{k} {v:.3f}" for k, v in probs.items())
            )
        model.train()
        bar = tqdm(
            total=steps_per_epoch,
            initial=step % steps_per_epoch,
            desc=f"epoch {epoch}/{args.epochs}",
            dynamic_ncols=True,
            disable=not main_process,
            file=sys.stderr,
            mininterval=0.1 if sys.stderr.isatty() else 60,  # a log file gets a line a minute
        )
        while step < epoch * steps_per_epoch:
            name = schedule[step % steps_per_epoch]
            td = data[name]
            indices = dist_info.shard(streams[name].next())
            separate = model.encodes_separately(td.task)
            examples = [td.splits["train"][i] for i in indices]
            if args.swap_pairs and td.task.symmetric:
                examples = swap_at_random(examples)
            batch = batch_to(collate(td.task, examples, tokenizer, separate), device)
            with autocast(args, device):
                loss = step_module(td.task, batch)
            step += 1
            bar.update(1)
            optimizer.zero_grad(set_to_none=True)
            if not torch.isfinite(loss):
                message = f"non-finite loss ({loss.item()}) at step {step} on task {name}"
                if args.nonfinite == "stop":
                    raise FloatingPointError(message + "; the last good checkpoint is kept")
                tqdm.write(message + ": batch skipped", file=sys.stderr)
                loss.backward()  # keeps every process's gradient exchange in step; then dropped
                optimizer.zero_grad(set_to_none=True)
                scheduler.step()
                continue
            loss.backward()
            optimizer.step()
            scheduler.step()
            if smart is not None:
                smart["teacher"].update()
            examples_seen += len(indices)
            running[name].append(dist_info.mean(loss.detach()))
            recent = running[name][-50:]
            bar.set_postfix(task=name, loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
            if main_process and (step % args.log_every == 0 or step == total_steps):
                log_training(out_dir, step, epoch, running)
            if step % steps_per_epoch == 0 or (args.eval_every and step % args.eval_every == 0):
                metrics = evaluate(model, data, tokenizer, args, device)
                model.train()
                if main_process:
                    with open(out_dir / "metrics.jsonl", "a") as f:
                        f.write(json.dumps({"step": step, "epoch": epoch, **metrics}) + "\n")
                tqdm.write(
                    f"step {step} epoch {epoch}: "
                    + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()),
                    file=sys.stdout,
                )
                if metrics["overall"] > best:
                    best = metrics["overall"]
                    if main_process:
                        save_best(model, out_dir)
                save_last()
            elif args.save_every and step % args.save_every == 0:
                save_last()
        bar.close()

    elapsed = time.time() - start
    examples_seen = round(dist_info.mean(torch.tensor(float(examples_seen))) * dist_info.world)
    if dist_info.world > 1:
        torch.distributed.barrier()  # rank 0's best checkpoint is on disk before anyone reads it
    load_best(model, out_dir)
    summary = {
        "best_overall": best,
        "wall_clock_s": round(elapsed, 1),
        "train_examples_per_s": round(examples_seen / max(elapsed, 1e-9), 2),
        "steps": step,
        "train_examples": examples_seen,  # summed over processes
        "processes": dist_info.world,
    }
    if main_process:
        write_predictions(model, data, tokenizer, args, device, out_dir)
        if args.option != "finetune":
            save_task_checkpoints(model, out_dir)
        (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if not args.no_plots:
            plot_learning_curves(out_dir, args.tasks)
        print(f"done: {summary}")
    if dist_info.world > 1:
        torch.distributed.destroy_process_group()
    return summary


def save_task_checkpoints(model: MultitaskModel, out_dir: Path) -> None:
    """task-<name>.safetensors: one task's plug-ins + head, loadable onto the pretrained encoder."""
    from safetensors.torch import save_file

    for name in model.tasks:
        path = out_dir / f"task-{name}.safetensors"
        state = model.task_state_dict(name)
        save_file(state, str(path))
        count = sum(t.numel() for t in state.values())
        print(f"{path}: {count:,} parameters, {path.stat().st_size / 1024:.1f} KiB")


def training_loss(
    model: MultitaskModel, task: Task, batch: dict, smart: dict | None
) -> torch.Tensor:
    """The task loss, plus SMART's λ_s·R_s + μ·D_Breg when SMART is on."""
    embeddings = model.embed(task.name, batch)
    outputs = model.outputs_from_embeddings(task.name, embeddings, batch)
    loss = task.loss(outputs.float(), batch["labels"])
    if smart is None:
        return loss
    config, kind = smart["config"], smart_kind(task)

    def perturbed_outputs(perturbed: list[torch.Tensor]) -> torch.Tensor:
        return model.outputs_from_embeddings(task.name, perturbed, batch)

    def teacher_outputs() -> torch.Tensor:
        # A trainable embedding layer differs in the teacher, so the teacher embeds again;
        # a frozen one gives the same vectors, so they are reused (one embed per step).
        if any(p.requires_grad for p in model.bert.embeddings.parameters()):
            return model(task.name, batch)
        return model.outputs_from_embeddings(task.name, [e.detach() for e in embeddings], batch)

    adversarial = smart_regularizer(perturbed_outputs, embeddings, outputs, kind, config)
    bregman = bregman_term(teacher_outputs, outputs, smart["teacher"], kind)
    return loss + config.weight * adversarial + config.bregman_weight * bregman


def setup_smart(args: argparse.Namespace, trainable: list[torch.nn.Parameter]) -> dict | None:
    if not args.smart:
        return None
    config = SmartConfig(
        sigma=args.smart_sigma,
        epsilon=args.smart_epsilon,
        step_size=args.smart_step_size,
        ascent_steps=args.smart_steps,
        weight=args.smart_weight,
        bregman_weight=args.smart_bregman,
        momentum=args.smart_momentum,
        norm=args.smart_norm,
    )
    return {"config": config, "teacher": MomentumTeacher(trainable, args.smart_momentum)}


def log_training(out_dir: Path, step: int, epoch: int, running: dict[str, list[float]]) -> None:
    with open(out_dir / "train_log.jsonl", "a") as f:
        for name, losses in running.items():
            if losses:
                record = {
                    "step": step,
                    "epoch": epoch,
                    "task": name,
                    "loss": sum(losses) / len(losses),
                }
                f.write(json.dumps(record) + "\n")
            losses.clear()


def save_best(model: MultitaskModel, out_dir: Path) -> None:
    from safetensors.torch import save_file

    tmp = out_dir / "best.safetensors.tmp"
    save_file({k: v.contiguous().cpu() for k, v in trainable_state_dict(model).items()}, str(tmp))
    os.replace(tmp, out_dir / "best.safetensors")


def load_best(model: MultitaskModel, out_dir: Path) -> None:
    """Load best.safetensors (the trained tensors) over a model built from the same config."""
    from safetensors.torch import load_file

    path = out_dir / "best.safetensors"
    if not path.is_file():
        raise UsageError(f"{path} not found: the run in {out_dir} never reached an evaluation")
    state = load_file(str(path))
    expected = trainable_state_dict(model)
    differ = sorted(
        k
        for k in set(state) | set(expected)
        if k not in state or k not in expected or state[k].shape != expected[k].shape
    )
    if differ:
        raise UsageError(
            f"{path} does not match the model built from {out_dir / 'config.json'}: "
            f"{len(differ)} tensors differ in name or shape, e.g. {differ[0]}"
        )
    model.load_state_dict(state, strict=False)


def print_parameter_report(model: MultitaskModel, out_dir: Path) -> None:
    report = parameter_report(model.bert, dict(model.heads))
    print(format_parameter_report(report))
    (out_dir / "parameters.json").write_text(json.dumps(report, indent=2) + "\n")


def evaluate_only(args: argparse.Namespace) -> dict[str, float]:
    """Rebuild the model from RUN_DIR/config.json, load its best checkpoint, evaluate, predict."""
    run_dir = Path(args.evaluate)
    saved = read_run_config(run_dir, "--evaluate")
    # The model is rebuilt as trained; data paths, batch size and device may be changed here.
    for key in (*MODEL_SETTINGS, "tasks", "add_to", "base_tasks"):
        if key in saved:
            setattr(args, key, saved[key])
    device = pick_device(args.device)
    data = load_data(args, None)
    tokenizer = Tokenizer.from_checkpoint(args.checkpoint, max_length=args.max_length)
    model = build_model(args).to(device)
    load_best(model, run_dir)
    metrics = evaluate(model, data, tokenizer, args, device)
    print("dev: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_predictions(model, data, tokenizer, args, device, out_dir)
    return metrics


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        if args.threads is not None:
            torch.set_num_threads(args.threads)
        if args.evaluate:
            evaluate_only(args)
        else:
            train(args)
    except (UsageError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"error: --checkpoint: {err}", file=sys.stderr)
        return 2
    except UnsafeCheckpointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except FloatingPointError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
