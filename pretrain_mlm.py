"""Further pretraining with BERT's own objective, masked-language modelling (minbert/mlm.py), on the
tasks' sentences or any text, before multitask fine-tuning.

    python pretrain_mlm.py --tasks sst,para,sts --out_dir runs/mlm --steps 2000
    python pretrain_mlm.py --text corpus.txt --out_dir runs/mlm-text      # one sentence a line
    python pretrain_mlm.py --out_dir runs/mlm --resume                   # after Ctrl-C or a crash
    python train_multitask.py --checkpoint runs/mlm                      # fine-tune from it

By default the sentences are those of the chosen tasks' training files (labels unused; both
sentences of a pair), held out: their dev files' sentences. With --text, the last --held_out
lines are held out. Every --eval_every steps the masked-token accuracy and perplexity on the
held-out sentences (with fixed masks, so figures compare) go to mlm_log.jsonl. The output folder
is a checkpoint directory (config.json, model.safetensors with the MLM head, vocab.txt) that
train_multitask.py --checkpoint loads like the packaged one, plus last.pt (to resume),
mlm_config.json, mlm_log.jsonl and mlm_loss.png.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

from minbert.checkpoint import atomic_save, atomic_write_text, load_trusted
from minbert.flags import HelpFormatter
from minbert.mlm import (
    evaluate_mlm,
    load_mlm,
    mask_tokens,
    mlm_loss,
    special_ids,
    word_continuations,
)
from minbert.optimizer import adamw_for, linear_warmup_decay
from minbert.pretrained import resolve_checkpoint_dir
from minbert.tokenizer import Tokenizer
from multitask.batching import BatchStream
from multitask.data import load_data
from multitask.errors import RunStopped, UsageError, run_command
from multitask.run import RunFolder
from tasks import TASKS

SETTINGS = (
    "tasks",
    "text",
    "data_dir",
    "checkpoint",
    "steps",
    "batch_size",
    "lr",
    "warmup",
    "max_length",
    "whole_word",
    "held_out",
    "seed",
)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter, allow_abbrev=False
    )
    p.add_argument(
        "--tasks",
        default="sst,para,sts",
        help=f"tasks whose sentences to use, of {sorted(TASKS)} (ignored with --text)",
    )
    p.add_argument("--text", default=None, help="a UTF-8 text file, one sentence a line")
    p.add_argument("--data_dir", default="data", help="folder with the course's data files")
    p.add_argument(
        "--checkpoint",
        default="default",
        help="BERT to start from ('default': the packaged all-MiniLM-L6-v2)",
    )
    p.add_argument("--out_dir", default="runs/mlm", help="output checkpoint directory")
    p.add_argument("--steps", type=int, default=2000, help="optimizer steps")
    p.add_argument("--batch_size", type=int, default=32, help="sentences per step")
    p.add_argument("--lr", type=float, default=5e-5, help="peak learning rate (AdamW)")
    p.add_argument("--warmup", type=float, default=0.1, help="warm-up, a fraction of the steps")
    p.add_argument("--max_length", type=int, default=128, help="tokens per sentence")
    p.add_argument("--whole_word", action="store_true", help="mask whole words, not pieces")
    p.add_argument("--held_out", type=int, default=2000, help="held-out sentences (at most)")
    p.add_argument("--eval_every", type=int, default=200, help="evaluate every N steps")
    p.add_argument("--seed", type=int, default=11711, help="random seed (order, masks, dropout)")
    p.add_argument("--threads", type=int, default=None, help="CPU threads for torch")
    p.add_argument("--resume", action="store_true", help="continue the run in --out_dir")
    p.add_argument("--overwrite", action="store_true", help="replace a run in --out_dir")
    return p


def sentences_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(training sentences, held-out sentences); every unreadable line is reported."""
    if args.text:
        path = Path(args.text)
        if not path.is_file():
            raise UsageError(f"--text: {path} not found")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise UsageError(f"--text: {path} is not UTF-8 text ({err})") from None
        kept = [line.strip() for line in lines if line.strip()]
        if len(kept) < len(lines):
            print(f"{path}: {len(lines) - len(kept)} blank lines skipped")
        held = min(args.held_out, len(kept) // 10)
        if len(kept) - held < 1:
            raise UsageError(f"--text: {path} has no sentences")
        return kept[: len(kept) - held], kept[len(kept) - held :]
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in names if t not in TASKS]
    if unknown or not names:
        raise UsageError(f"--tasks: unknown task(s) {unknown}; known: {sorted(TASKS)}")
    data, _ = load_data(names, lambda t, s: Path(args.data_dir) / t.files[s], False, None)
    texts = {s: [t for n in names for e in data[n][s] for t in e.texts] for s in ("train", "dev")}
    return texts["train"], texts["dev"][: args.held_out]


def check(args: argparse.Namespace) -> None:
    for bad, message in [
        (args.steps < 1, f"--steps {args.steps}: must be at least 1"),
        (args.batch_size < 1, f"--batch_size {args.batch_size}: must be at least 1"),
        (not 0 < args.lr <= 10, f"--lr {args.lr}: must be a number in (0, 10]"),
        (not 0 <= args.warmup < 1, f"--warmup {args.warmup}: a fraction in [0, 1)"),
        (not 3 <= args.max_length, f"--max_length {args.max_length}: must be at least 3"),
        (args.eval_every < 1, f"--eval_every {args.eval_every}: must be at least 1"),
        (args.held_out < 1, f"--held_out {args.held_out}: must be at least 1"),
    ]:
        if bad:
            raise UsageError(message)


def pretrain(args: argparse.Namespace) -> dict:
    out = Path(args.out_dir)
    if args.resume:  # the run's own settings; where it runs may change
        if not (out / "last.pt").is_file():
            raise UsageError(f"--resume: {out / 'last.pt'} not found; nothing to resume")
        saved = RunFolder(out).read_json("mlm_config.json", "--resume")
        args = argparse.Namespace(**{**vars(args), **saved})
    check(args)
    if not args.resume and any((out / n).exists() for n in ("mlm_config.json", "last.pt")):
        if not args.overwrite:
            raise UsageError(f"--out_dir {out} already holds a run; pass --resume or --overwrite")
    if out.resolve() == resolve_checkpoint_dir(args.checkpoint).resolve():
        raise UsageError(f"--out_dir {out} is the --checkpoint folder; choose another")
    train, held = sentences_of(args)
    tokenizer = Tokenizer.from_checkpoint(args.checkpoint, max_length=args.max_length)
    torch.manual_seed(args.seed)
    model, had_head = load_mlm(args.checkpoint)
    print(
        f"{len(train)} training sentences, {len(held)} held out; MLM head "
        f"{'from the checkpoint' if had_head else 'newly initialised'}"
    )
    folder = RunFolder(out)
    folder.start(resume=True)  # the lock and stale temporary files; nothing of a run removed
    if not args.resume:
        for name in ("mlm_log.jsonl", "last.pt", "model.safetensors"):
            (out / name).unlink(missing_ok=True)
        settings = {k: vars(args)[k] for k in SETTINGS}
        atomic_write_text(out / "mlm_config.json", json.dumps(settings, indent=2) + "\n")
    vocab = tokenizer.backend.get_vocab()
    optimizer = adamw_for(model, args.lr, 0.01)
    scheduler = linear_warmup_decay(optimizer, int(args.warmup * args.steps), args.steps)
    stream = BatchStream("mlm", tokenizer.count_tokens(train), args.batch_size, args.seed)
    continuation = word_continuations(vocab) if args.whole_word else None
    step = 0
    if args.resume:
        state = load_trusted(out / "last.pt")
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        stream.load_state_dict(state["stream"])
        torch.set_rng_state(state["rng"])
        step = state["step"]
        print(f"resumed {out} at step {step}")
    else:
        record(out, 0, evaluate_mlm(model, tokenizer, held))
    bar = tqdm(
        total=args.steps,
        initial=step,
        desc="MLM",
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 60,
    )
    recent: list[float] = []
    started = time.time() - (state.get("seconds", 0.0) if args.resume else 0.0)
    seconds = lambda: round(time.time() - started, 1)  # noqa: E731 -- training time so far
    model.train()
    try:
        while step < args.steps:
            batch = tokenizer([train[i] for i in stream.next()])
            generator = torch.Generator().manual_seed(args.seed * 1_000_003 + step)
            masked, labels = mask_tokens(
                batch["input_ids"],
                batch["attention_mask"],
                special_ids(vocab),
                vocab["[MASK]"],
                len(vocab),
                generator,
                continuation=continuation,
            )
            logits, targets = model.masked_logits(
                masked, batch["attention_mask"], labels, batch["token_type_ids"]
            )
            loss = mlm_loss(logits, targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            recent = [*recent[-49:], loss.item()]
            bar.update(1)
            bar.set_postfix(loss=f"{sum(recent) / len(recent):.3f}", refresh=False)
            if not math.isfinite(loss.item()):
                raise RunStopped(f"non-finite loss at step {step}; {folder.on_disk()}", 3)
            if step % args.eval_every == 0 or step == args.steps:
                metrics = evaluate_mlm(model, tokenizer, held)
                train_loss = sum(recent) / len(recent)
                record(out, step, {**metrics, "train_loss": train_loss, "seconds": seconds()})
                state = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "stream": stream.state_dict(),
                    "rng": torch.get_rng_state(),
                    "step": step,
                    "seconds": seconds(),
                }
                atomic_save(state, out / "last.pt")
                folder.saved_step = step
    except KeyboardInterrupt:
        raise RunStopped(
            f"interrupted at step {step}; resume with: python pretrain_mlm.py "
            f"--out_dir {out} --resume",
            130,
        ) from None
    bar.close()
    model.save_pretrained(out, resolve_checkpoint_dir(args.checkpoint) / "vocab.txt")
    plot(out)
    print(f"done: checkpoint directory {out} (train_multitask.py --checkpoint {out})")
    return folder.read_log("mlm_log.jsonl")[-1]


def record(out: Path, step: int, metrics: dict) -> None:
    line = {"step": step}
    line |= {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}
    with open(out / "mlm_log.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
    tqdm.write(f"step {step}: " + ", ".join(f"{k} {v}" for k, v in line.items() if k != "step"))


def plot(out: Path) -> None:
    """mlm_loss.png: training and held-out loss, and held-out accuracy, against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = RunFolder(out).read_log("mlm_log.jsonl")
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker="o", label="held out")
    train = [r for r in rows if "train_loss" in r]
    ax_loss.plot([r["step"] for r in train], [r["train_loss"] for r in train], label="training")
    ax_loss.set(xlabel="step", ylabel="MLM loss", title="Masked-LM loss")
    ax_loss.legend()
    ax_acc.plot([r["step"] for r in rows], [r["accuracy"] for r in rows], marker="o")
    ax_acc.set(xlabel="step", ylabel="masked-token accuracy", title="Held-out accuracy")
    fig.tight_layout()
    fig.savefig(out / "mlm_loss.png", dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    return run_command(lambda: pretrain(args))


if __name__ == "__main__":
    sys.exit(main())
