"""Shared helpers of the benchmark scripts: the machine and commit header, interleaved timing, the
Markdown results file. Not a benchmark itself.

Importing this module puts the repository root on ``sys.path``, so every script runs as
``python benchmarks/<name>.py`` from the repository root (or from anywhere).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"
DATA_DIR = ROOT.parent / "shared" / "data"

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after the path set-up, like every import of the scripts)

SHARED_MACHINE_NOTE = (
    "The machine may be shared with other jobs (during the recorded run a long multitask "
    "training job ran on the same 2 cores), so absolute timings are noisy. Every comparison "
    "is measured interleaved in one process (the contenders alternate, repetition by "
    "repetition, in alternating order) and reported as the median of several repetitions, so "
    "the ratios are fair even when the absolute numbers are not. The load average at the "
    "start and end of the run is given below."
)


def add_threads_flag(parser) -> None:
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch intra-op threads (default: torch's default, one per core); on a machine "
        "shared with another job, 1 avoids over-subscribing the cores",
    )


def set_threads(threads: int | None) -> None:
    if threads is not None:
        if threads < 1:
            raise SystemExit("--threads must be at least 1")
        torch.set_num_threads(threads)


def git_commit(untracked: bool = True) -> str:
    """``git rev-parse HEAD``, plus ``-dirty`` when the working tree has uncommitted changes
    (modified tracked files, and with ``untracked`` untracked files that git does not ignore).
    A copy of the tree (the GPU machine's, whose .git is not the tree's: it reported the
    session's first commit) names the commit it was copied from as MINBERT_COMMIT."""
    if "MINBERT_COMMIT" in os.environ:
        return f"{os.environ['MINBERT_COMMIT']} (a copy of the tree)"
    status_cmd = ["git", "status", "--porcelain"] + ([] if untracked else ["--untracked-files=no"])
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            status_cmd, cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return head + ("-dirty" if status else "")


def machine() -> dict[str, str]:
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "CPU cores": str(os.cpu_count()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch threads": str(torch.get_num_threads()),
        "GPU": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "CUDA": str(torch.version.cuda),
    }
    try:
        import transformers

        info["transformers"] = transformers.__version__
    except ImportError:
        pass
    return info


def script() -> str:
    """The script that is running, as typed from the repository root."""
    path = Path(sys.argv[0]).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def command() -> str:
    """The command that ran this script, as typed from the repository root (``portable``)."""
    return "python " + shlex.join(portable_words([script(), *sys.argv[1:]]))


# An absolute path in a command or a line of text: at the start, after a space, a quote or a
# bracket, or after "=" or "," inside a word (--teachers TASK=DIR,...).
ABSOLUTE_PATH = re.compile(r"(?:^|(?<=[\s`'\"(=,]))/[^\s,=`'\")]*")
INTERPRETER = re.compile(r"/(?:[^/]+/)*python[0-9.]*")
RUNS_FOLDER = re.compile(r"runs[0-9]*")


def portable_path(path: str, root: Path = ROOT) -> str:
    """An absolute path of the machine that ran a command, as a user types it from the root of
    their own clone, so that a recorded command names nothing of one machine. In order: an
    interpreter is ``python``; a path under the clone is relative to it; the shared data beside
    the clone (``DATA_DIR``) is ``../shared/data``; a run folder is ``runs/...`` from its runs
    folder (``runs``, ``runs2``, ...) on; another data folder is the clone's ``data``; a
    scratch folder under /tmp is ``$TMPDIR/...``. Any other path is kept (and
    tests/structure/test_structure.py names it)."""
    parts = Path(path).parts
    if INTERPRETER.fullmatch(path):
        return "python"
    if Path(path).is_relative_to(root):
        return Path(path).relative_to(root).as_posix() or "."
    shared = parts.index("shared") if "shared" in parts[:-1] else None
    if shared is not None and parts[shared + 1] == "data":
        return Path("..", *parts[shared:]).as_posix()
    runs = [i for i, part in enumerate(parts) if RUNS_FOLDER.fullmatch(part)]
    if runs:
        return Path("runs", *parts[runs[-1] + 1 :]).as_posix()
    if "data" in parts:
        return Path(*parts[len(parts) - parts[::-1].index("data") - 1 :]).as_posix()
    if parts[:2] == ("/", "tmp") and len(parts) > 2:
        return Path("$TMPDIR", *parts[2:]).as_posix()
    return path


def portable(text: str, root: Path = ROOT) -> str:
    """Every absolute path in a command word, a command line or a text made ``portable_path``."""
    return ABSOLUTE_PATH.sub(lambda m: portable_path(m.group(0), root), text)


def portable_words(words: Sequence[str], root: Path = ROOT) -> list[str]:
    return [portable(word, root) for word in words]


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


class Report:
    """Collects a results file: the header (machine, commit, command) is filled in here."""

    def __init__(self, name: str, title: str, intro: str) -> None:
        """``name`` names the results file (benchmarks/results/<name>.md): the script's own name,
        or it with a label (``host-overhead-before``)."""
        self.name, self.title, self.intro = name, title, intro
        self.started = time.time()
        self.load_start = load_average()
        self.commit = git_commit()
        self.command = command()
        self.sections: list[str] = []

    def add(self, text: str) -> None:
        self.sections.append(text.rstrip() + "\n")
        print(text.rstrip() + "\n", flush=True)

    def write(self, path: Path | None = None) -> Path:
        """Write the Markdown file (default: benchmarks/results/<script name>.md)."""
        m = machine()
        lines = [
            f"# {self.title}",
            "",
            f"Written by `{script()}`; do not edit by hand, run it again.",
            "",
            f"- Command: `{self.command}`",
            f"- Commit: `{self.commit}`",
            f"- Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(self.started))}, "
            f"run time {time.time() - self.started:.0f} s",
            "- Machine: " + ", ".join(f"{k} {v}" for k, v in m.items()),
            f"- Load average (1, 5, 15 min) at start: {self.load_start}; at end: {load_average()}",
            "",
            self.intro.strip(),
            "",
            *self.sections,
        ]
        path = path or RESULTS_DIR / f"{self.name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
        print(f"results written to {path}")
        return path


def interleaved(
    contenders: dict[str, Callable[[], object]],
    repeats: int,
    warmup: int = 1,
    min_seconds: float = 0.25,
) -> dict[str, list[float]]:
    """Seconds per call of each contender, measured interleaved.

    1. call every contender ``warmup`` times (allocator, caches, lazy initialisation);
    2. choose ``inner`` calls per measurement so that one measurement of the slowest contender
       takes about ``min_seconds`` (the same ``inner`` for all, so each sees the same calls);
    3. ``repeats`` rounds: in each round every contender runs ``inner`` calls in a row, the
       order reversed every other round, so slow phases of a shared machine hit all alike.

    Returns name -> one seconds-per-call figure per round; take the median.
    """
    names = list(contenders)
    slowest = 0.0
    for name in names:
        for _ in range(warmup):
            start = time.perf_counter()
            contenders[name]()
            slowest = max(slowest, time.perf_counter() - start)
    inner = max(1, round(min_seconds / max(slowest, 1e-9)))
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names if r % 2 == 0 else names[::-1]:
            fn = contenders[name]
            start = time.perf_counter()
            for _ in range(inner):
                fn()
            times[name].append((time.perf_counter() - start) / inner)
    return times


def paired_ratio(slow: Sequence[float], fast: Sequence[float]) -> float:
    """Median over rounds of slow_i / fast_i: each round's two figures were taken next to each
    other, so a slow phase of a shared machine cancels out of the ratio."""
    return statistics.median([s / f for s, f in zip(slow, fast, strict=True)])


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def spread(values: Sequence[float]) -> str:
    """min–max of the rounds, relative to the median, e.g. '−3%/+8%'."""
    med = statistics.median(values)
    return f"{(min(values) / med - 1) * 100:+.0f}%/{(max(values) / med - 1) * 100:+.0f}%"


def table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def random_batch(
    batch_size: int, length: int, vocab_size: int, seed: int, pairs: bool = True
) -> dict[str, torch.Tensor]:
    """Random token ids with realistic padding: [CLS] ... [SEP] (... [SEP]) then [PAD]s.

    Each row has a length drawn uniformly from [length/2, length] (the first row is full
    length, so the batch is ``length`` wide as dynamic padding would make it); with ``pairs``,
    each row is a sentence pair whose second segment has token type 1.
    """
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab_size, (batch_size, length), generator=g)
    lengths = torch.randint(max(2, length // 2), length + 1, (batch_size,), generator=g)
    lengths[0] = length
    positions = torch.arange(length)[None, :]
    mask = (positions < lengths[:, None]).long()
    token_types = torch.zeros_like(ids)
    ids[:, 0] = 101  # [CLS]
    ids[torch.arange(batch_size), lengths - 1] = 102  # final [SEP]
    if pairs:
        middle = torch.clamp(lengths // 2, min=1)
        ids[torch.arange(batch_size), middle] = 102  # [SEP] between the segments
        token_types = ((positions > middle[:, None]) & (mask == 1)).long()
    ids = ids * mask  # [PAD] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": token_types}


def driver_args(option: str, extra: Sequence[str] = (), data_dir: Path | str = DATA_DIR):
    """The driver's resolved config (``train_multitask.TrainConfig``) for ``--option option``
    (its defaults otherwise): ``cfg.model`` holds the model settings, ``cfg.lr`` is resolved."""
    import train_multitask

    return train_multitask.parse_args(["--option", option, "--data_dir", str(data_dir), *extra])


def driver_data(cfg) -> dict:
    """The driver's data for ``cfg``: task name -> split -> list of examples (the task itself is
    ``tasks.get_task(name)``). The skipped-rows report is dropped; its first lines are printed."""
    import train_multitask

    data, _ = train_multitask.read_data(cfg)
    return data


def driver_model(cfg):
    """The MultitaskModel exactly as ``train_multitask.py`` builds it (plug-ins, freezing, heads,
    dropout), on the CPU, and the driver's optimizer:
    ``adamw_for(model, cfg.lr, cfg.weight_decay, cfg.layer_decay)``. Train a batch with
    ``train_step(TrainingStep(model), [(task, batch)], optimizer, HostChecked())``
    (``multitask.step``)."""
    import train_multitask
    from minbert.optimizer import adamw_for

    model = train_multitask.make_model(cfg, torch.device("cpu"))
    return model, adamw_for(model, cfg.lr, cfg.weight_decay, cfg.layer_decay)


def pad_batch(batch, length: int):
    """Pad every tokenized sequence of a collated batch (``multitask.collate.Batch``) with [PAD]
    (id 0, mask 0, type 0) to ``length`` tokens: the fixed-length padding the driver does not
    do."""
    inputs = [
        {k: torch.nn.functional.pad(v, (0, length - v.shape[1])) for k, v in seq.items()}
        for seq in batch.inputs
    ]
    return dataclasses.replace(batch, inputs=inputs)


def bert_outputs(model: torch.nn.Module, is_hf: bool, batch: dict) -> tuple[torch.Tensor, ...]:
    """(last hidden state, pooler output) of minBERT's BertModel or transformers' on a
    ``random_batch``."""
    if is_hf:
        out = model(**batch)
        return out.last_hidden_state, out.pooler_output
    out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    return out["last_hidden_state"], out["pooler_output"]


def set_dropout(model: torch.nn.Module, p: float) -> torch.nn.Module:
    """Every dropout of ``model`` at probability ``p``: its nn.Dropout modules and minBERT's
    attention-probability dropout (a ``dropout_p`` of each self-attention)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = p
        if hasattr(module, "dropout_p"):
            module.dropout_p = p
    return model


def random_train_batch(cfg, data: dict, name: str, tokenizer, model, generator) -> tuple:
    """(task, batch): ``cfg.batch_size`` training examples of task ``name`` drawn with
    ``generator``, collated as ``model`` encodes them and padded to ``cfg.model.max_length``
    tokens, the largest batch a run of the driver can see."""
    from multitask.collate import collate
    from tasks import get_task

    task, train = get_task(name), data[name]["train"]
    indices = torch.randperm(len(train), generator=generator)[: cfg.batch_size].tolist()
    batch = collate(task, [train[i] for i in indices], tokenizer, model.encodes_separately(task))
    return task, pad_batch(batch, cfg.model.max_length)
