"""The GPU path measured: minBERT against Hugging Face transformers' BertModel on one CUDA device
in float32 and under bfloat16 autocast, and the peak GPU memory and step time of every option.

    python benchmarks/gpu.py [--repeats 5] [--data_dir DIR] [--no_base]

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys

import _common
import torch
from _common import (
    Report,
    bert_outputs,
    interleaved,
    median,
    paired_ratio,
    random_batch,
    set_dropout,
    spread,
    table,
)

from minbert.bert import BertConfig, BertModel
from minbert.pretrained import default_checkpoint_dir, load_pretrained

SHAPES = [(32, 64), (32, 128), (128, 128), (256, 128)]
BASE_SHAPES = [(32, 128), (128, 128)]
OPTIONS = ("finetune", "pretrain", "adapter", "pals", "lhuc", "lora")
PRECISIONS = ("fp32", "bf16")


def precision(name: str) -> contextlib.AbstractContextManager:
    if name == "bf16":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def model_pair(base: bool) -> dict[str, tuple[torch.nn.Module, bool]]:
    """name -> (model on the GPU, is_transformers): the packaged checkpoint, or with ``base`` a
    randomly initialised BERT-base shape (the same random weights in both)."""
    import transformers
    from transformers import BertConfig as HFConfig
    from transformers import BertModel as HFModel

    transformers.utils.logging.set_verbosity_error()
    if base:
        config = BertConfig()  # its defaults are BERT-base's
        torch.manual_seed(0)
        ours = BertModel(config)
        theirs = HFModel(HFConfig(**dataclasses.asdict(config)))
        missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
        assert not unexpected and all("position_ids" in k for k in missing), (missing, unexpected)
    else:
        ours = load_pretrained()
        theirs = HFModel.from_pretrained(default_checkpoint_dir())
    return {
        "minBERT": (set_dropout(ours, 0.0).cuda(), False),
        "transformers": (set_dropout(theirs, 0.0).cuda(), True),
    }


def timed_call(model, is_hf: bool, batch: dict, mode: str, dtype: str):
    def train() -> None:
        model.zero_grad(set_to_none=True)
        with precision(dtype):
            hidden, pooled = bert_outputs(model, is_hf, batch)
        (hidden.float().square().mean() + pooled.float().mean()).backward()
        torch.cuda.synchronize()

    @torch.no_grad()
    def infer() -> None:
        with precision(dtype):
            bert_outputs(model, is_hf, batch)
        torch.cuda.synchronize()

    return train if mode == "train" else infer


def throughput(models: dict, shapes: list, repeats: int) -> str:
    rows = []
    for dtype in PRECISIONS:
        for mode in ("train", "eval"):
            for model, _ in models.values():
                model.train(mode == "train")
            for B, T in shapes:
                cpu_batch = random_batch(B, T, 30522, seed=B * 1000 + T)
                batch = {k: v.cuda() for k, v in cpu_batch.items()}
                calls = {n: timed_call(m, h, batch, mode, dtype) for n, (m, h) in models.items()}
                t = interleaved(calls, repeats=repeats, warmup=3, min_seconds=0.2)
                ratio = paired_ratio(t["transformers"], t["minBERT"])
                rows.append(
                    [
                        dtype,
                        "training" if mode == "train" else "inference",
                        f"{B} × {T}",
                        f"{B * T / median(t['minBERT']):,.0f}",
                        f"{B * T / median(t['transformers']):,.0f}",
                        f"**{ratio:.2f}**",
                        spread(t["minBERT"]),
                    ]
                )
                print(rows[-1], flush=True)
    header = [
        "precision",
        "mode",
        "B × T",
        "minBERT tok/s",
        "transformers tok/s",
        "minBERT / transformers",
        "spread of minBERT rounds",
    ]
    return table(header, rows)


def option_rows(data_dir: str, repeats: int) -> str:
    from minbert.tokenizer import Tokenizer
    from multitask.collate import batch_to
    from multitask.step import HostChecked, TrainingStep, train_step

    rows, device = [], torch.device("cuda")
    for option in OPTIONS:
        cfg = _common.driver_args(option, data_dir=data_dir)
        data = _common.driver_data(cfg)
        tokenizer = Tokenizer.from_checkpoint(cfg.model.checkpoint, cfg.model.max_length)
        for dtype in PRECISIONS:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            model, optimizer = _common.driver_model(cfg)
            model.to(device).train()
            step, g, names = TrainingStep(model), torch.Generator().manual_seed(0), list(data)
            batches = []
            for name in names:
                task, batch = _common.random_train_batch(cfg, data, name, tokenizer, model, g)
                batches.append((task, batch_to(batch, device)))
            times = []
            for i in range(3 + repeats * len(names)):
                task, batch = batches[i % len(names)]
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                train_step(
                    step, [(task, batch)], optimizer, HostChecked(), autocast=precision(dtype)
                )
                end.record()
                torch.cuda.synchronize()
                if i >= 3:
                    times.append(start.elapsed_time(end))
            trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
            rows.append(
                [
                    option,
                    dtype,
                    f"{trainable:,}",
                    f"{torch.cuda.max_memory_allocated() / 2**20:,.0f}",
                    f"{median(times):.1f}",
                ]
            )
            print(rows[-1], flush=True)
            del model, optimizer, step, batches
    header = ["option", "precision", "trainable", "peak GPU memory MiB", "step ms (median)"]
    return table(header, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds per shape")
    p.add_argument("--data_dir", default=str(_common.DATA_DIR), help="folder of the data files")
    p.add_argument("--no_base", action="store_true", help="skip the BERT-base-shaped model")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu.py needs a CUDA device; none is visible here")
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 means float32 on both sides
    torch.backends.cudnn.allow_tf32 = False
    report = Report(
        "gpu",
        "The GPU path: minBERT vs transformers' BertModel, and every option's memory and step",
        f"One CUDA device, CUDA {torch.version.cuda}; TF32 off (float32 is float32), bf16 = "
        f"`torch.autocast(dtype=torch.bfloat16)` around the forward, the driver's --bf16. "
        f"Throughputs are medians of {args.repeats} interleaved rounds; each call ends with "
        f"`torch.cuda.synchronize()`. See the script's docstring for what each figure is.",
    )
    models = model_pair(base=False)
    report.add(
        "## Throughput, packaged checkpoint (6 layers, hidden 384)\n\n"
        + throughput(models, SHAPES, args.repeats)
    )
    del models
    if not args.no_base:
        models = model_pair(base=True)
        report.add(
            "## Throughput, BERT-base shape (12 layers, hidden 768, random weights)\n\n"
            + throughput(models, BASE_SHAPES, args.repeats)
        )
        del models
    report.add(
        "## Each option: one training step on 32 examples of 128 tokens\n\n"
        + option_rows(args.data_dir, args.repeats)
    )
    report.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
