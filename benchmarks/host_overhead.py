"""Host overhead: the driver's training step against a bare training loop on the same batches.

    python benchmarks/host_overhead.py [--steps 50] [--repeats 7] [--threads 1] [--label NAME]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import copy
import tempfile
from pathlib import Path

import _common
import torch
from _common import Report, interleaved, median, spread, table
from tqdm import tqdm

from minbert.bert import BertConfig, BertModel
from minbert.pretrained import default_checkpoint_dir, save_checkpoint_dir
from multitask.batching import make_batch
from tasks import get_task


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=50, help="steps per measurement")
    p.add_argument("--repeats", type=int, default=7, help="interleaved measurements")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="the course's data files")
    p.add_argument("--limit", type=int, default=2000, help="examples per task and split")
    p.add_argument("--label", default="", help="results file suffix (host-overhead-LABEL.md)")
    p.add_argument(
        "--unread",
        action="store_true",
        help="the driver takes the GPU's step on the CPU (losses' finiteness a device flag, "
        "read at --log_every): what that path costs the host",
    )
    _common.add_threads_flag(p)
    return p.parse_args()


def tiny_checkpoint(directory: Path) -> Path:
    """A checkpoint directory of ``BertConfig.tiny()`` with random weights and the real
    vocabulary, in the layout the driver's --checkpoint reads."""
    torch.manual_seed(0)
    config = BertConfig.tiny()
    state = {k: v.contiguous() for k, v in BertModel(config).state_dict().items()}
    save_checkpoint_dir(
        directory, config, state, default_checkpoint_dir() / "vocab.txt", "BertModel"
    )
    return directory


def driver_run(args: argparse.Namespace, work: Path):
    """The driver's ``Run`` (``set_up`` from its command line) and a closure that takes the
    next ``--steps`` steps of its loop."""
    import train_multitask

    argv = ["--checkpoint", str(tiny_checkpoint(work / "tiny")), "--data_dir", args.data_dir]
    argv += ["--out_dir", str(work / "run"), "--limit", str(args.limit), "--no_plots"]
    argv += ["--steps_per_epoch", "100000", "--epochs", "1"]
    argv += ["--nonfinite_check", "device" if args.unread else "host"]
    run = train_multitask.set_up(train_multitask.parse_args(argv))
    schedule = run.sampler.schedule(1, run.steps_per_epoch)
    bar = tqdm(disable=True)
    run.model.train()

    def steps() -> None:  # the loop's body: the step, and the log line every --log_every
        for _ in range(args.steps):
            run.state.step += 1
            step = run.state.step
            train_multitask.take_step(run, [schedule[(step - 1) % len(schedule)]])
            if step % run.cfg.log_every == 0:
                train_multitask.log_line(run, 1, bar)

    return run, schedule, steps


def bare_loop(args: argparse.Namespace, run, schedule: list[str]):
    """A closure that trains a twin of the driver's model for ``--steps`` steps over batches
    made beforehand from the driver's own batch streams (fresh copies, the same seed)."""
    import train_multitask

    model = train_multitask.make_model(run.cfg, torch.device("cpu"))
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=run.cfg.lr, foreach=True)
    streams = copy.deepcopy(run.streams)  # at their start: the driver has not stepped yet
    batches = []
    for name in schedule[: 4 * args.steps]:
        batch = make_batch(run.train[name], streams[name].next())
        batches.append((get_task(name), batch))
    state = {"next": 0}

    def steps() -> None:
        for _ in range(args.steps):
            task, batch = batches[state["next"] % len(batches)]
            state["next"] += 1
            loss = task.loss(model(task.name, batch).float(), batch.labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return steps


def main() -> int:
    args = parse_args()
    _common.set_threads(args.threads)
    name = "host-overhead" + (f"-{args.label}" if args.label else "")
    report = Report(name, "Host overhead: the driver's step against a bare loop", __doc__)
    with tempfile.TemporaryDirectory() as tmp:
        run, schedule, driver_steps = driver_run(args, Path(tmp))
        bare_steps = bare_loop(args, run, schedule)
        seconds = interleaved({"driver": driver_steps, "bare": bare_steps}, args.repeats, 1, 0)
    per_step = {k: [s / args.steps for s in v] for k, v in seconds.items()}
    ratios = [d / b for d, b in zip(per_step["driver"], per_step["bare"])]
    rows = [[k, f"{median(v) * 1e3:.2f}", spread(v)] for k, v in per_step.items()]
    report.add(table(["contender", "ms per step (median)", "spread"], rows))
    report.add(
        f"driver / bare: **{median(ratios):.2f}** (median of {len(ratios)} interleaved "
        f"measurements of {args.steps} steps; spread {spread(ratios)}). Target: at most 1.2."
    )
    report.write(_common.RESULTS_DIR / f"{name}.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
