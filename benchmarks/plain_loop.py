"""A plain Hugging Face training loop for the three tasks: the reference of the batching comparison.

Steps per epoch = ceil(training examples / 32), as in the driver. The task heads, losses,
predictions and dev metrics are the project's (tasks/), so only the training procedure
differs. ``--device cuda --bf16`` runs it on a GPU under bfloat16 autocast, as the driver's
``--device cuda --bf16`` does (each batch tokenized on the host and copied, as a plain loop
does; benchmarks/gpu_check.py compares the two there). It writes what
benchmarks/multitask_runs.py reads from a driver run folder (metrics.jsonl, summary.json,
parameters.json), so the batching suite lists it beside the driver's rows:

    python benchmarks/multitask_runs.py batching --only plain-loop --seeds 1,2,3 -- --threads 1

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minbert.pretrained import resolve_checkpoint_dir  # noqa: E402
from minbert.sampling import annealed_alpha, task_probabilities  # noqa: E402
from multitask.data import load_data  # noqa: E402
from tasks.base import get_task  # noqa: E402
from tasks.metrics import overall_score  # noqa: E402

TASKS = ("sst", "para", "sts")


class PlainModel(nn.Module):
    """transformers' BertModel, the mean of its real tokens' last hidden states, a head per task."""

    def __init__(self, checkpoint: Path, dropout: float) -> None:
        from transformers import BertModel

        super().__init__()
        self.bert = BertModel.from_pretrained(checkpoint, add_pooling_layer=False)
        D = self.bert.config.hidden_size
        self.heads = nn.ModuleDict(
            {name: get_task(name).make_head(D, dropout, separate=False) for name in TASKS}
        )

    def forward(self, task: str, inputs: dict) -> torch.Tensor:
        hidden = self.bert(**inputs).last_hidden_state  # (B, T, D)
        mask = inputs["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        return self.heads[task]((hidden * mask).sum(1) / mask.sum(1))


def encode(tokenizer, examples, max_length: int, device: str = "cpu") -> dict:
    """A batch of examples as padded tensors on ``device``; pairs as one sequence
    [CLS] a [SEP] b [SEP]."""
    texts = [list(column) for column in zip(*(e.texts for e in examples))]
    batch = tokenizer(
        *texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt"
    )
    return {k: v.to(device) for k, v in batch.items()}


def precision(bf16: bool, device: str) -> contextlib.AbstractContextManager:
    """bfloat16 autocast with --bf16 (as the driver's), else nothing."""
    if bf16:
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class Batches:
    """The index lists of one task's batches: random draws, or the next of shuffled passes."""

    def __init__(self, size: int, batch_size: int, draw: str, rng: np.random.Generator) -> None:
        self.size, self.batch_size, self.draw, self.rng = size, batch_size, draw, rng
        self.order, self.position = np.empty(0, dtype=np.int64), 0

    def next(self) -> list[int]:
        if self.draw == "random":
            return self.rng.choice(self.size, size=min(self.batch_size, self.size), replace=False)
        if self.position >= len(self.order):
            self.order, self.position = self.rng.permutation(self.size), 0
        self.position += self.batch_size
        return self.order[self.position - self.batch_size : self.position]


@torch.no_grad()
def evaluate(model: PlainModel, tokenizer, data: dict, args: argparse.Namespace) -> dict:
    model.eval()
    metrics = {}
    for name in TASKS:
        task, examples = get_task(name), data[name]["dev"]
        predictions = []
        for start in range(0, len(examples), 64):
            chunk = examples[start : start + 64]
            with precision(args.bf16, args.device):
                outputs = model(name, encode(tokenizer, chunk, args.max_length, args.device))
            predictions += task.outputs_to_labels(outputs.float().cpu())
        metrics[name] = task.metric(predictions, [e.label for e in examples])
    model.train()
    return metrics | {"overall": overall_score(metrics)}


def build_parser() -> argparse.ArgumentParser:
    """The command line (defaults shown in --help)."""
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data_dir", default=str(ROOT / "data"), help="the course's data files")
    p.add_argument("--checkpoint", default="default", help="BERT folder ('default': packaged)")
    p.add_argument("--out_dir", required=True, help="where the run's metrics and summary go")
    p.add_argument("--overwrite", action="store_true", help="reuse an existing --out_dir")
    p.add_argument(
        "--draw",
        choices=("random", "passes"),
        default="random",
        help="how a task's batch is drawn (module docstring)",
    )
    p.add_argument("--epochs", type=int, default=1, help="epochs of ceil(examples / batch) steps")
    p.add_argument("--batch_size", type=int, default=32, help="examples per step")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate")
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up, a fraction of all steps")
    p.add_argument("--weight_decay", type=float, default=0.01, help="AdamW weight decay")
    p.add_argument("--dropout", type=float, default=0.1, help="dropout before each head")
    p.add_argument("--max_length", type=int, default=128, help="tokens per input")
    p.add_argument("--seed", type=int, default=11711, help="weights of the heads, data, dropout")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's choice)")
    p.add_argument("--device", default="cpu", help="where it trains: cpu, cuda or cuda:N")
    p.add_argument("--limit", type=int, default=None, help="at most N examples per task and split")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast (with --device cuda)")
    return p


def prepare_out_dir(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Path:
    """The run folder, created; one that holds files is refused unless --overwrite."""
    out_dir = Path(args.out_dir)
    if out_dir.exists() and any(out_dir.iterdir()) and not args.overwrite:
        parser.error(f"--out_dir {out_dir} is not empty; pass --overwrite to reuse it")
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir


def make_optimizer(model: nn.Module, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with weight decay on the matrices, none on biases and LayerNorms."""
    decayed = [p for p in model.parameters() if p.ndim >= 2]
    others = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decayed, "weight_decay": weight_decay},
            {"params": others, "weight_decay": 0.0},
        ],
        lr=lr,
    )


@dataclass
class Training:
    """Everything a run trains with: the data, tokenizer, model, optimizer and its schedule,
    each task's batches, and the random generator of the task draws."""

    data: dict  # task name -> split -> examples
    tokenizer: object  # transformers' BertTokenizerFast of the checkpoint
    model: PlainModel
    optimizer: torch.optim.Optimizer
    scheduler: object  # transformers' linear warm-up and decay
    sizes: dict[str, int]  # task name -> training examples
    steps_per_epoch: int
    batches: dict[str, Batches]
    rng: np.random.Generator


def set_up(args: argparse.Namespace) -> Training:
    """Seed, read the data and build the model, optimizer, schedule and batch draws."""
    from transformers import BertTokenizerFast, get_linear_schedule_with_warmup

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    data, _ = load_data(
        list(TASKS), lambda t, s: Path(args.data_dir) / t.files[s], False, args.limit
    )
    checkpoint = resolve_checkpoint_dir(args.checkpoint)
    tokenizer = BertTokenizerFast.from_pretrained(checkpoint)
    model = PlainModel(checkpoint, args.dropout).to(args.device)
    model.train()
    optimizer = make_optimizer(model, args.lr, args.weight_decay)
    sizes = {name: len(data[name]["train"]) for name in TASKS}
    steps_per_epoch = math.ceil(sum(sizes.values()) / args.batch_size)
    total = steps_per_epoch * args.epochs
    scheduler = get_linear_schedule_with_warmup(optimizer, int(args.warmup * total), total)
    batches = {n: Batches(sizes[n], args.batch_size, args.draw, rng) for n in TASKS}
    return Training(
        data, tokenizer, model, optimizer, scheduler, sizes, steps_per_epoch, batches, rng
    )


def train_epoch(run: Training, epoch: int, args: argparse.Namespace) -> None:
    """One epoch: each step draws its task (annealed sampling), then a batch of that task."""
    probabilities = task_probabilities(run.sizes, annealed_alpha(epoch, args.epochs))
    schedule = run.rng.choice(list(TASKS), size=run.steps_per_epoch, p=list(probabilities.values()))
    for name in tqdm(schedule, desc=f"epoch {epoch}/{args.epochs}", mininterval=10):
        task = get_task(name)
        chosen = [run.data[name]["train"][i] for i in run.batches[name].next()]
        inputs = encode(run.tokenizer, chosen, args.max_length, args.device)
        with precision(args.bf16, args.device):
            outputs = run.model(name, inputs)
        labels = task.label_tensor([e.label for e in chosen]).to(args.device)
        loss = task.loss(outputs.float(), labels)
        run.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        run.optimizer.step()
        run.scheduler.step()


def write_results(
    out_dir: Path, args: argparse.Namespace, run: Training, best: float, wall: float
) -> None:
    """summary.json, parameters.json and config.json, as a driver run folder has them."""
    total = run.steps_per_epoch * args.epochs
    summary = {
        "best_overall": best,
        "wall_clock_s": round(wall, 1),
        "train_examples_per_s": round(total * args.batch_size / wall, 2),
        "steps": total,
        "train_examples": total * args.batch_size,
        "processes": 1,
    }
    trainable = sum(p.numel() for p in run.model.parameters() if p.requires_grad)
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out_dir / "parameters.json").write_text(json.dumps({"trainable": trainable}, indent=2) + "\n")
    (out_dir / "config.json").write_text(json.dumps(vars(args), indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from transformers.utils import logging

    logging.set_verbosity_error()  # the load report lists the unused pooler weights: expected
    out_dir = prepare_out_dir(parser, args)
    run = set_up(args)
    start, metrics_file = time.time(), out_dir / "metrics.jsonl"
    metrics_file.write_text("")
    best = -math.inf
    for epoch in range(1, args.epochs + 1):
        train_epoch(run, epoch, args)
        metrics = evaluate(run.model, run.tokenizer, run.data, args)
        best = max(best, metrics["overall"])
        print(f"epoch {epoch}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        with metrics_file.open("a") as f:
            step = epoch * run.steps_per_epoch
            f.write(json.dumps({"step": step, "epoch": epoch, **metrics}) + "\n")
    write_results(out_dir, args, run, best, time.time() - start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
