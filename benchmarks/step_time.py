"""Training step time of each frozen-encoder option against full fine-tuning, on the same batches.

    python benchmarks/step_time.py [--threads 1] [--repeats 5] [--data_dir ../shared/data]

Each option's model and optimizer are built exactly as ``train_multitask.py --option OPTION``
builds them (its defaults: plug-in sizes, dropout 0.1, train mode; the frozen options freeze the
encoder and train plug-ins + heads, ``pretrain`` trains the heads only) and the optimizer is the
driver's ``adamw_for(model, lr, weight_decay, layer_decay)``, so frozen weights get neither
gradients nor optimizer state. A step is the driver's ``multitask.step.train_step``: forward, task
loss, zero_grad, backward, AdamW step.

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import _common
import torch
from _common import Report, interleaved, median, paired_ratio, spread, table

from multitask.batching import BatchStream
from multitask.collate import collate, token_lengths
from multitask.step import HostChecked, TrainingStep, train_step
from tasks import Task, get_task

OPTIONS = ("finetune", "pretrain", "adapter", "pals", "lhuc", "lora")
BATCHES_PER_TASK = 2


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; sets torch's thread count."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="folder of the data files")
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    return args


def start_report(repeats: int) -> Report:
    """step_time.md, with its introduction: what is measured, and how."""
    return Report(
        "step_time",
        "Step time: frozen-encoder plug-ins vs full fine-tuning",
        "Each option built as `train_multitask.py --option OPTION` builds it (driver defaults: "
        "adapter size 64, PAL size sized to D, LoRA rank 8 on query/value, dropout 0.1, train "
        "mode), optimizer `AdamW(param_groups(model, 0.01))` as in the driver. A step = forward, "
        "loss, zero_grad, backward, AdamW step. Same real batches for every option (two "
        "length-grouped batches of 32 per task); medians over "
        f"{repeats} interleaved rounds.\n\n" + _common.SHARED_MACHINE_NOTE,
    )


@dataclass
class Option:
    """One option's model and optimizer as the driver builds them, its training step, and the
    batches it trains on (each in the option's own pair encoding)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    step: TrainingStep
    batches: list[tuple[Task, dict]] = field(default_factory=list)


def build_options(data_dir: str) -> dict[str, Option]:
    """Every option's model, optimizer and training step, in train mode."""
    options = {}
    for name in OPTIONS:
        model, optimizer = _common.driver_model(_common.driver_args(name, data_dir=data_dir))
        model.train()
        options[name] = Option(model, optimizer, TrainingStep(model))
    return options


def choose_examples(base, data: dict, tokenizer, separate_of) -> list[tuple[Task, list]]:
    """``BATCHES_PER_TASK`` length-grouped batches of examples of each task, the lengths as
    ``separate_of`` (a model's ``encodes_separately``) encodes them."""
    chosen = []
    for name, splits in data.items():
        task, train = get_task(name), splits["train"]
        lengths = token_lengths(task, train, tokenizer, separate_of(task))
        stream = BatchStream(name, lengths, base.batch_size, base.seed)
        for _ in range(BATCHES_PER_TASK):
            chosen.append((task, [train[i] for i in stream.next()]))
    return chosen


def collate_for_options(chosen: list, tokenizer, options: dict[str, Option]) -> None:
    """Give every option the chosen examples collated in its own pair encoding (pretrain
    encodes pairs apart by default); each (batch, encoding) is tokenized once."""
    collated: dict[tuple[int, bool], dict] = {}  # (batch, separate) -> batch, tokenized once
    for option in options.values():
        separately = option.model.encodes_separately
        for k, (task, examples) in enumerate(chosen):
            key = (k, separately(task))
            if key not in collated:
                collated[key] = collate(task, examples, tokenizer, key[1])
            option.batches.append((task, collated[key]))


def time_options(options: dict[str, Option], repeats: int) -> dict[str, list[float]]:
    """Seconds of each option's pass over its batches, per interleaved round."""

    def one_pass(option: Option) -> None:
        for task, batch in option.batches:
            train_step(option.step, [(task, batch)], option.optimizer, HostChecked())[0].item()

    return interleaved(
        {name: (lambda o=option: one_pass(o)) for name, option in options.items()},
        repeats=repeats,
        warmup=1,
        min_seconds=0.0,
    )


def option_row(name: str, option: Option, times: dict[str, list[float]]) -> list:
    """The table row of one option: its step time and speed-up, and what its optimizer holds."""
    model, optimizer = option.model, option.optimizer
    trainable = [p for p in model.parameters() if p.requires_grad]
    moments = [s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
    return [
        name,
        f"{median(times[name]) / len(option.batches) * 1e3:.0f}",
        f"**{paired_ratio(times['finetune'], times[name]):.2f}×**",
        spread(times[name]),
        f"{sum(p.numel() for p in trainable):,}",
        len(trainable),
        len(optimizer.state),
        len(moments),
        f"{sum(v.numel() for v in moments) * 4 / 2**20:.1f}",
    ]


def state_note(options: dict[str, Option]) -> str:
    """Whether a frozen tensor got optimizer state, and the trainable tensors that got none."""
    frozen_with_state = sum(
        1 for o in options.values() for q in o.optimizer.state if not q.requires_grad
    )
    unused = {
        name: [
            n
            for n, q in o.model.named_parameters()
            if q.requires_grad and q not in o.optimizer.state
        ]
        for name, o in options.items()
    }
    return (
        (
            "No frozen tensor has optimizer state: the frozen encoder costs no optimizer memory "
            "and no update time."
            if frozen_with_state == 0
            else f"WARNING: {frozen_with_state} frozen tensors have optimizer state."
        )
        + " Trainable tensors without state (never given a gradient, so AdamW skipped them): "
        + "; ".join(f"{o}: {', '.join(u) if u else 'none'}" for o, u in unused.items())
        + "."
    )


def step_time_section(options: dict[str, Option], times: dict[str, list[float]]) -> str:
    """The report's table of every option, the batches' shapes and the adapter's target."""
    shapes = ", ".join(
        f"{task.name} {tuple(b['inputs'][0]['input_ids'].shape)}"
        for task, b in options["finetune"].batches
    )
    ratio = paired_ratio(times["finetune"], times["adapter"])
    return (
        "## Step time\n\n"
        + table(
            [
                "option",
                "ms / step",
                "speed-up vs finetune",
                "spread of rounds",
                "trainable parameters",
                "trainable tensors",
                "parameters with optimizer state",
                "state tensors (exp_avg, exp_avg_sq)",
                "state MiB",
            ],
            [option_row(name, option, times) for name, option in options.items()],
        )
        + f"\n\nBatches (B, T): {shapes}.\n\n"
        f"Adapter vs finetune: **{ratio:.2f}×** faster (target ≥ 1.3×: "
        f"{'met' if ratio >= 1.3 else 'NOT met'}). " + state_note(options)
    )


def main(argv: list[str] | None = None) -> int:
    from minbert.tokenizer import Tokenizer

    args = parse_args(argv)
    report = start_report(args.repeats)
    base = _common.driver_args("finetune", data_dir=args.data_dir)
    data = _common.driver_data(base)
    tokenizer = Tokenizer.from_checkpoint(base.model.checkpoint, max_length=base.model.max_length)
    options = build_options(args.data_dir)
    # The same examples for every option (length-grouped as the finetune model encodes them),
    # each collated in the option's own pair encoding.
    chosen = choose_examples(base, data, tokenizer, options["finetune"].model.encodes_separately)
    collate_for_options(chosen, tokenizer, options)
    report.add(step_time_section(options, time_options(options, args.repeats)))
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
