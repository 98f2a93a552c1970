"""Peak memory (resident set size) of a few training steps of each option, one fresh process each.

    python benchmarks/memory.py [--steps 6] [--threads 1] [--data_dir ../shared/data]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import _common
from _common import Report, table

OPTIONS = ("finetune", "pretrain", "adapter", "pals", "lhuc", "lora")
BASELINE = "loaded, no step"
FUSED_GELU = "finetune + F.gelu"  # the change benchmarks/throughput.py recommends


def worker(option: str, steps: int, data_dir: str) -> dict:
    """In the fresh process: build, train ``steps`` steps, report peak RSS (KiB on Linux)."""
    import torch

    from minbert.tokenizer import Tokenizer
    from multitask.step import HostChecked, TrainingStep, train_step

    option_flag = option if option in OPTIONS else "finetune"
    cfg = _common.driver_args(option_flag, data_dir=data_dir)
    data = _common.driver_data(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, max_length=cfg.model.max_length)
    model, optimizer = _common.driver_model(cfg)
    if option == FUSED_GELU:
        for layer in model.bert.encoder.layer:
            layer.intermediate.act = torch.nn.functional.gelu
    model.train()
    step_module = TrainingStep(model)
    g = torch.Generator().manual_seed(0)
    names = list(data)
    taken = 0
    for step in range(steps if option != BASELINE else 0):
        name = names[step % len(names)]
        task, batch = _common.random_train_batch(cfg, data, name, tokenizer, model, g)
        train_step(step_module, [(task, batch)], optimizer, HostChecked())
        taken += 1
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # bytes there
        peak_kib //= 1024
    return {
        "option": option,
        "steps": taken,
        "peak_kib": peak_kib,
        "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "state_tensors": len(optimizer.state),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--steps", type=int, default=6, help="training steps per option")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="folder of the data files")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: one option
    _common.add_threads_flag(p)
    args = p.parse_args(argv)
    _common.set_threads(args.threads)
    if args.worker is not None:
        print("RESULT " + json.dumps(worker(args.worker, args.steps, args.data_dir)), flush=True)
        return 0

    report = Report(
        "memory",
        "Peak memory of training, per option",
        f"Peak resident set size (`resource.getrusage(RUSAGE_SELF).ru_maxrss`) of a fresh "
        f"process per option that builds the driver's model and optimizer (`train_multitask.py "
        f"--option OPTION` defaults) and takes {args.steps} training steps (sst, para, sts in "
        f"turn), each on 32 real training examples padded to 128 tokens (the largest batch the "
        f"driver can see). The whole process is counted: Python, torch, the data files, the "
        f"model, gradients, optimizer state and activations. '{BASELINE}' builds the finetune "
        f"model and takes no step. '{FUSED_GELU}' is finetune with minBERT's written-out GELU "
        f"replaced by `torch.nn.functional.gelu` in the worker's model only (the change that "
        f"benchmarks/throughput.py recommends): the written-out form keeps several (B, T, F) "
        f"intermediates per layer for its backward, the fused one keeps only its input. Memory "
        f"does not depend on the machine's load.",
    )
    results = {}
    for option in (BASELINE, *OPTIONS, FUSED_GELU):
        cmd = [sys.executable, __file__, "--worker", option, "--steps", str(args.steps)]
        cmd += ["--data_dir", args.data_dir]
        if args.threads is not None:
            cmd += ["--threads", str(args.threads)]
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=_common.ROOT)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        if proc.returncode != 0 or not lines:
            raise SystemExit(f"worker {option} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        results[option] = json.loads(lines[-1][len("RESULT ") :])
        print(
            f"{option}: peak {results[option]['peak_kib'] / 1024:.0f} MiB "
            f"({time.time() - start:.0f} s)",
            flush=True,
        )
    base = results[BASELINE]["peak_kib"]
    rows = []
    for option, r in results.items():
        rows.append(
            [
                option,
                r["steps"],
                f"{r['trainable']:,}",
                r["state_tensors"],
                f"**{r['peak_kib'] / 1024:.0f}**",
                "-" if option == BASELINE else f"{(r['peak_kib'] - base) / 1024:+.0f}",
                "-"
                if option in (BASELINE, "finetune")
                else f"{r['peak_kib'] / results['finetune']['peak_kib']:.2f}",
            ]
        )
    report.add(
        "## Peak RSS\n\n"
        + table(
            [
                "option",
                "steps",
                "trainable parameters",
                "tensors with optimizer state",
                "peak RSS MiB",
                f"MiB over '{BASELINE}'",
                "peak / finetune peak",
            ],
            rows,
        )
    )
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
