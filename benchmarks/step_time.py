"""Training step time of each frozen-encoder option against full fine-tuning, on the same batches.

    python benchmarks/step_time.py [--threads 1] [--repeats 5] [--data_dir ../shared/data]

Each option's model and optimizer are built exactly as ``train_multitask.py --option OPTION``
builds them (its defaults: plug-in sizes, dropout 0.1, train mode; the frozen options freeze the
encoder and train plug-ins + heads, ``pretrain`` trains the heads only) and the optimizer is the
driver's ``adamw_for(model, lr, weight_decay, layer_decay)``, so frozen weights get neither
gradients nor optimizer state. A step is the driver's ``multitask.step.train_step``: forward, task
loss, zero_grad, backward, AdamW step.

All options train on the same real batches (two length-grouped batches of 32 from each of sst,
para, sts, tokenized once; the pairs of each option in its own pair encoding: pretrain encodes
them apart by default, the others as one sequence); a round runs every batch once per option,
options interleaved and their order reversed every other round; the figure is the median over
rounds of the mean step time (speed-ups: the median of the per-round ratios).
Target: adapter at least 1.3× faster than finetune. The table also counts the tensors that
hold optimizer state and the size of that state.

Writes benchmarks/results/step_time.md.
"""

from __future__ import annotations

import argparse
import sys

import _common
from _common import Report, interleaved, median, paired_ratio, spread, table

from multitask.batching import BatchStream
from multitask.collate import collate, token_lengths
from multitask.step import TrainingStep, train_step
from tasks import get_task

OPTIONS = ("finetune", "pretrain", "adapter", "pals", "lhuc", "lora")
BATCHES_PER_TASK = 2


def main(argv: list[str] | None = None) -> int:
    from minbert.tokenizer import Tokenizer

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="folder of the data files")
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)

    report = Report(
        "step_time",
        "Step time: frozen-encoder plug-ins vs full fine-tuning",
        "Each option built as `train_multitask.py --option OPTION` builds it (driver defaults: "
        "adapter size 64, PAL size sized to D, LoRA rank 8 on query/value, dropout 0.1, train "
        "mode), optimizer `AdamW(param_groups(model, 0.01))` as in the driver. A step = forward, "
        "loss, zero_grad, backward, AdamW step. Same real batches for every option (two "
        "length-grouped batches of 32 per task); medians over "
        f"{args.repeats} interleaved rounds.\n\n" + _common.SHARED_MACHINE_NOTE,
    )

    base = _common.driver_args("finetune", data_dir=args.data_dir)
    data = _common.driver_data(base)
    tokenizer = Tokenizer.from_checkpoint(base.model.checkpoint, max_length=base.model.max_length)
    models, step_modules = {}, {}
    for option in OPTIONS:
        models[option] = _common.driver_model(_common.driver_args(option, data_dir=args.data_dir))
        models[option][0].train()
        step_modules[option] = TrainingStep(models[option][0])

    # The same examples for every option (length-grouped as the finetune model encodes them),
    # each collated in the option's own pair encoding (pretrain encodes pairs apart by default).
    chosen = []
    separate_of = models["finetune"][0].encodes_separately
    for name, splits in data.items():
        task, train = get_task(name), splits["train"]
        lengths = token_lengths(task, train, tokenizer, separate_of(task))
        stream = BatchStream(name, lengths, base.batch_size, base.seed)
        for _ in range(BATCHES_PER_TASK):
            chosen.append((task, [train[i] for i in stream.next()]))
    collated: dict[tuple[int, bool], dict] = {}  # (batch, separate) -> batch, tokenized once
    batches = {}
    for option in OPTIONS:
        separately = models[option][0].encodes_separately
        batches[option] = []
        for k, (task, examples) in enumerate(chosen):
            key = (k, separately(task))
            if key not in collated:
                collated[key] = collate(task, examples, tokenizer, key[1])
            batches[option].append((task, collated[key]))
    shapes = ", ".join(
        f"{task.name} {tuple(b['inputs'][0]['input_ids'].shape)}" for task, b in batches["finetune"]
    )

    def one_pass(option: str) -> None:
        optimizer, step_module = models[option][1], step_modules[option]
        for task, batch in batches[option]:
            train_step(step_module, task, batch, optimizer).item()

    times = interleaved(
        {option: (lambda o=option: one_pass(o)) for option in OPTIONS},
        repeats=args.repeats,
        warmup=1,
        min_seconds=0.0,
    )
    step = {o: median(t) / len(chosen) for o, t in times.items()}
    rows, frozen_with_state, unused = [], 0, {}
    for option in OPTIONS:
        model, optimizer = models[option]
        trainable = [p for p in model.parameters() if p.requires_grad]
        moments = [s[k] for s in optimizer.state.values() for k in ("exp_avg", "exp_avg_sq")]
        state_tensors = len(moments)
        state_numel = sum(v.numel() for v in moments)
        frozen_with_state += sum(1 for q in optimizer.state if not q.requires_grad)
        unused[option] = [
            n for n, q in model.named_parameters() if q.requires_grad and q not in optimizer.state
        ]
        rows.append(
            [
                option,
                f"{step[option] * 1e3:.0f}",
                f"**{paired_ratio(times['finetune'], times[option]):.2f}×**",
                spread(times[option]),
                f"{sum(p.numel() for p in trainable):,}",
                len(trainable),
                len(optimizer.state),
                state_tensors,
                f"{state_numel * 4 / 2**20:.1f}",
            ]
        )
    ratio = paired_ratio(times["finetune"], times["adapter"])
    report.add(
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
            rows,
        )
        + f"\n\nBatches (B, T): {shapes}.\n\n"
        f"Adapter vs finetune: **{ratio:.2f}×** faster (target ≥ 1.3×: "
        f"{'met' if ratio >= 1.3 else 'NOT met'}). "
        + (
            "No frozen tensor has optimizer state: the frozen encoder costs no optimizer memory "
            "and no update time."
            if frozen_with_state == 0
            else f"WARNING: {frozen_with_state} frozen tensors have optimizer state."
        )
        + " Trainable tensors without state (never given a gradient, so AdamW skipped them): "
        + "; ".join(f"{o}: {', '.join(u) if u else 'none'}" for o, u in unused.items())
        + "."
    )
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
