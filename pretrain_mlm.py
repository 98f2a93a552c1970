"""Further pretraining with BERT's own objective, masked-language modelling (minbert/mlm.py), on the
tasks' sentences or any text, before multitask fine-tuning.

    python pretrain_mlm.py --tasks sst,para,sts --out_dir runs/mlm --steps 2000
    python pretrain_mlm.py --text corpus.txt --out_dir runs/mlm-text      # one sentence a line
    python pretrain_mlm.py --out_dir runs/mlm --resume                   # after Ctrl-C or a crash
    python train_multitask.py --checkpoint runs/mlm                      # fine-tune from it

Design notes: docs/design/entry-points.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
from torch import nn
from tqdm import tqdm

from minbert.flags import ArgumentParser, HelpFormatter, add_flags, flatten, setting, unflatten
from minbert.mlm import (
    IGNORE,
    BertForMaskedLM,
    evaluate_mlm,
    load_mlm,
    mask_batch,
    mlm_loss,
    word_continuations,
)
from minbert.pretrained import load_config, resolve_checkpoint_dir
from minbert.tokenizer import Tokenizer
from multitask import extras
from multitask.batching import BatchStream, derived_seed
from multitask.config import DEFAULT_OPTIMIZER, SEEDS, TrainConfig, not_a_checkpoint
from multitask.data import load_data
from multitask.devices import THREADS_RANGE
from multitask.errors import RunStopped, UsageError, run_command, stop_reason
from multitask.run import REPORTS, Layout, RunFolder, merge_config, overlapping
from multitask.step import (
    HostChecked,
    NonFiniteLoss,
    learning_rate,
    linear_warmup_decay,
    optimizer_for,
    train_step,
)
from tasks import TASKS
from tasks.reader import has_visible_text

# The MLM run folder: a checkpoint directory once finished, plus the run's own files.
MLM_FOLDER = Layout(
    command="pretrain_mlm.py",
    state=("mlm_config.json", "last.pt", "mlm_log.jsonl", "model.safetensors"),
    outputs=("mlm_loss.png", "config.json", "vocab.txt", "tokenizer_config.json", *REPORTS),
    logs=("mlm_log.jsonl",),
)
# Settings a resumed run may change: where and how it runs, not what it computes.
WHERE_IT_RUNS = ("out_dir", "resume", "overwrite", "threads")
# What every mlm_config.json holds; one without these is corrupted.
REQUIRED = ("tasks", "checkpoint", "steps", "batch_size", "lr", "eval_every", "seed")
PATHS = ("text", "data_dir", "checkpoint", "out_dir")
MASK_DRAWS = 100  # draws of a batch's masks until one masks a token (each draw is 15% a token)
HELD_OUT = ("loss", "perplexity", "accuracy")  # the evaluation's figures a reporter is told


def the_drivers(name: str) -> Any:
    """The driver's setting ``name`` (multitask/config.py's TrainConfig) as a setting of this
    command too: its default, help and range have their one owner there."""
    driver = next(f for f in dataclasses.fields(TrainConfig) if f.name == name)
    return setting(driver.default, driver.metadata["help"], within=driver.metadata["within"])


@dataclass
class MLMConfig:
    """Every knob of a further-pretraining run; the flags and their help come from here."""

    tasks: list[str] = setting(
        help="tasks whose sentences to use, comma-separated (ignored with --text)",
        factory=lambda: ["sst", "para", "sts"],
        group="data",
    )
    text: str | None = setting(None, "a UTF-8 text file, one sentence a line")
    data_dir: str = setting("data", "folder with the course's data files")
    held_out: int = setting(2000, "held-out sentences (at most)", within="[1, inf)")
    checkpoint: str = setting(
        "default", "BERT to start from ('default': the packaged all-MiniLM-L6-v2)", group="model"
    )
    max_length: int = setting(128, "tokens per sentence", within="[3, inf)")
    whole_word: bool = setting(False, "mask whole words, not pieces")
    steps: int = setting(2000, "optimizer steps", within="[1, inf)", group="optimisation")
    batch_size: int = setting(32, "sentences per step", within="[1, inf)")
    lr: float = setting(5e-5, "peak learning rate (AdamW)", within="(0, 10]")
    warmup: float = setting(0.1, "warm-up, a fraction of the steps", within="[0, 1)")
    max_grad_norm: float = the_drivers("max_grad_norm")
    eval_every: int = setting(200, "evaluate and save every N steps", within="[1, inf)")
    seed: int = setting(11711, "random seed (order, masks, dropout)", within=SEEDS)
    out_dir: str = setting("runs/mlm", "output checkpoint directory", group="run")
    resume: bool = setting(False, "continue the run in --out_dir")
    overwrite: bool = setting(False, "replace an earlier run of this command in --out_dir")
    threads: int | None = setting(None, "CPU threads for torch", within=THREADS_RANGE)
    # Not flags themselves: the settings of each present extra that reports what a run logs
    # (``reporting``), by its name; the optimizer's implementation, the driver's default
    extras: dict[str, Any] = field(default_factory=dict)
    optimizer: str = DEFAULT_OPTIMIZER

    def to_flat(self) -> dict[str, Any]:
        """mlm_config.json: {flag name: value} of what the run computes (not where it runs)."""
        own = {key: value for s in self.extras.values() for key, value in flatten(s).items()}
        return {k: v for k, v in {**flatten(self), **own}.items() if k not in WHERE_IT_RUNS}


def hosted() -> list[extras.Extra]:
    """The usable extras this command runs with (multitask/extras.py): those told what a run logs
    (``Extra.reports``), and the optimizer's implementations (``--optimizer``'s choices, the
    driver's default among them)."""
    return [e for e in extras.usable() if e.reports or "optimizer" in e.default]


def reporting() -> dict[str, type]:
    """{name: Settings} of each hosted extra that has settings: the flags this command offers
    besides its own."""
    names = {extra.name for extra in hosted()}
    return {name: s for name, s in extras.sections().items() if name in names}


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="pretrain_mlm.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=HelpFormatter,
        allow_abbrev=False,
    )
    add_flags(parser, MLMConfig)
    for settings in reporting().values():  # each reporting extra's own section
        add_flags(parser, settings)
    return parser


def parse_args(argv: list[str] | None = None) -> MLMConfig:
    """The command line as a config; with --resume, the run's own settings (a flag that would
    change one is refused, as the driver's --resume does); every value checked. A flag of an
    extra this tree lacks, or whose code does not import, is one line naming its file."""
    extras.refuse_absent({}, sys.argv[1:] if argv is None else list(argv))
    flat = vars(build_parser().parse_args(argv))
    defaults = vars(build_parser().parse_args([]))
    if empty := [k for k in PATHS if flat[k] == ""]:
        raise UsageError(f"--{empty[0]}: an empty path; give a file or folder name")
    if flat["resume"]:
        folder = RunFolder(flat["out_dir"], layout=MLM_FOLDER)
        if not folder.file("last.pt").is_file():
            raise UsageError(f"--resume: {folder.file('last.pt')} not found; nothing to resume")
        saved = folder.read_settings(MLMConfig, "--resume", "mlm_config.json", REQUIRED)
        for settings in reporting().values():
            folder.read_settings(settings, "--resume", "mlm_config.json")
        extras.refuse_absent(saved, source=f"--resume: {folder.file('mlm_config.json')}")
        inherited = [k for k in defaults if k not in WHERE_IT_RUNS]
        flat = merge_config(flat, saved, inherited, defaults, "--resume", flat["out_dir"])
    try:
        own = {name: unflatten(settings, flat) for name, settings in reporting().items()}
        cfg = dataclasses.replace(unflatten(MLMConfig, flat), extras=own)
    except ValueError as err:
        raise UsageError(str(err)) from None
    check(cfg)
    return cfg


def check(cfg: MLMConfig) -> None:
    """What no single flag's range catches, before anything is written."""
    unknown = [t for t in cfg.tasks if t not in TASKS]
    if not cfg.text and (unknown or not cfg.tasks or len(set(cfg.tasks)) < len(cfg.tasks)):
        raise UsageError(
            f"--tasks: unknown or repeated task(s) {cfg.tasks}; known: {sorted(TASKS)}"
        )
    if not cfg.out_dir:
        raise UsageError("--out_dir: give a folder")
    not_a_checkpoint(cfg.checkpoint)
    checkpoint = resolve_checkpoint_dir(cfg.checkpoint)
    if overlapping(Path(cfg.out_dir), checkpoint):
        raise UsageError(f"--out_dir {cfg.out_dir} and the --checkpoint folder must not overlap")
    positions = load_config(checkpoint).max_position_embeddings
    if cfg.max_length > positions:
        raise UsageError(f"--max_length {cfg.max_length}: the checkpoint has {positions} positions")
    for message in extras.Hooks(cfg, hosted()).fire("check_settings", False):
        raise UsageError(message)  # what an extra finds wrong


def sentences_of(cfg: MLMConfig) -> tuple[list[str], list[str]]:
    """(training sentences, held-out sentences); every unreadable line is reported."""
    if cfg.text:
        path = Path(cfg.text)
        if not path.is_file():
            raise UsageError(f"--text: {path} not found")
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except UnicodeDecodeError as err:
            raise UsageError(f"--text: {path} is not UTF-8 text ({err})") from None
        kept = [line.strip() for line in lines if has_visible_text(line)]
        if not kept:
            raise UsageError(
                f"--text: {path} holds no sentence: its {len(lines)} line(s) are blank or only "
                "invisible characters (zero-width spaces, lone combining marks)"
            )
        if len(kept) < len(lines):
            print(f"{path}: {len(lines) - len(kept)} blank or invisible lines skipped")
        held = min(cfg.held_out, len(kept) // 10)
        if held < 1:
            raise UsageError(
                f"--text: {path} has {len(kept)} sentences; give at least 10 (a tenth, at most "
                "--held_out, is held out for the evaluation)"
            )
        return kept[: len(kept) - held], kept[len(kept) - held :]
    data, _ = load_data(cfg.tasks, lambda t, s: Path(cfg.data_dir) / t.files[s], False, None)
    texts = {
        split: [text for name in cfg.tasks for e in data[name][split] for text in e.texts]
        for split in ("train", "dev")
    }
    return texts["train"], texts["dev"][: cfg.held_out]


# --------------------------------------------------------------------------------------------
# The run: set-up, the loop, finish
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """The one "task" of a further-pretraining run, its sentences, as ``train_step`` names a
    batch's task (in a non-finite loss) and a reporter a loss (``train/loss/mlm``)."""

    name: str = "mlm"


CORPUS = Corpus()


class Masked(NamedTuple):
    """A batch as masked for one step: ``ids`` with the chosen tokens replaced (80% [MASK], 10%
    random, 10% kept), ``labels`` the original ids there and IGNORE elsewhere."""

    ids: torch.Tensor
    labels: torch.Tensor
    attention_mask: torch.Tensor
    token_type_ids: torch.Tensor


class MaskedLM(nn.Module):
    """The step as ``train_step`` (multitask/step.py) takes it, a module of (task, batch) -> loss:
    the masked-LM loss of a ``Masked`` batch, the cross-entropy of the MLM head's prediction at
    each chosen token (minbert/mlm.py: ``mlm_loss``)."""

    def __init__(self, model: BertForMaskedLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, task: Corpus, batch: Masked) -> torch.Tensor:
        logits, targets = self.model.masked_logits(
            batch.ids, batch.attention_mask, batch.labels, batch.token_type_ids
        )
        return mlm_loss(logits, targets)


@dataclass
class MLMState:
    """Where a further-pretraining run is: ``step``, the optimizer steps taken; ``seconds``, its
    wall-clock at the last evaluation (evaluations included); ``recent``, the last ``WINDOW``
    training losses, whose mean is the logged ``train_loss`` and the progress bar's loss.

    A typed record beside the driver's ``TrainingState`` (multitask/state.py) rather than in it,
    because their fields do not mean the same: ``running`` is each task's losses since the last
    log line, emptied by every line, where ``recent`` is a window that slides across log lines;
    ``best``, ``examples``, ``eval_seconds`` and ``train_files`` have nothing to hold in a run
    without dev tasks or fingerprinted files. The window in ``running`` would change what
    mlm_log.jsonl's train_loss is; a new field in ``TrainingState`` would change the driver's
    last.pt. So last.pt keeps the top-level keys it has always had (``saved``), and one saved
    before ``seconds`` and ``recent`` were kept resumes with them empty (``from_saved``). Here,
    not in multitask/state.py, because the student tree ships that file and not this one."""

    WINDOW: ClassVar[int] = 50

    step: int = 0
    seconds: float = 0.0
    recent: list[float] = field(default_factory=list)

    def add_loss(self, value: float) -> None:
        """One step's training loss into the window (the oldest falls out)."""
        self.recent = [*self.recent[-(self.WINDOW - 1) :], value]

    def train_loss(self) -> float | None:
        """The window's mean, or None before any step trained."""
        return sum(self.recent) / len(self.recent) if self.recent else None

    def saved(self) -> dict[str, Any]:
        """The form last.pt holds: ``step``, ``seconds`` and ``recent``, at its top level."""
        return {"step": self.step, "seconds": self.seconds, "recent": list(self.recent)}

    @classmethod
    def from_saved(cls, saved: dict[str, Any]) -> MLMState:
        """A record from last.pt's ``step``, ``seconds`` and ``recent`` (``saved``'s form)."""
        recent = [float(x) for x in saved.get("recent", [])]
        return cls(step=int(saved["step"]), seconds=float(saved.get("seconds", 0.0)), recent=recent)


@dataclass
class MLMRun:
    """What the loop works with, built by ``set_up``; ``state`` is where the run is
    (multitask/state.py), which last.pt saves with the parts."""

    cfg: MLMConfig
    folder: RunFolder
    tokenizer: Tokenizer
    model: BertForMaskedLM
    optimizer: torch.optim.Optimizer
    scheduler: Any
    stream: BatchStream
    train: list[str]
    held: list[str]
    hooks: extras.Hooks  # the hosted extras' parts, told what the log says
    state: MLMState = field(default_factory=MLMState)
    step_module: nn.Module = field(init=False)  # the loss of a step: ``MaskedLM``
    update: HostChecked = field(default_factory=HostChecked)  # a non-finite loss raises

    def __post_init__(self) -> None:
        self.step_module = MaskedLM(self.model)

    def saved(self) -> dict[str, Any]:
        """What last.pt saves: everything a resume at ``state.step`` needs."""
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "stream": self.stream.state_dict(),
            "rng": torch.get_rng_state(),
            **self.state.saved(),
        }

    def restore(self) -> None:
        """Put last.pt back into the parts built as at the start."""
        saved = self.folder.load_state()
        try:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            self.scheduler.load_state_dict(saved["scheduler"])
            self.stream.load_state_dict(saved["stream"])
            torch.set_rng_state(saved["rng"])
            self.state = MLMState.from_saved(saved)
        except (KeyError, ValueError, RuntimeError, TypeError) as err:
            raise UsageError(
                f"{self.folder.file('last.pt')} does not belong to the run configured in "
                f"{self.folder.file('mlm_config.json')} ({str(err).splitlines()[0]})"
            ) from None
        self.folder.saved_step = self.state.step
        self.folder.truncate_logs(self.state.step)
        print(f"resumed {self.folder.path} at step {self.state.step}")


def set_up(cfg: MLMConfig) -> MLMRun:
    """Everything is read and built before the folder is touched; then the folder, on a resume
    the saved state, and the extras told the run starts (a resume's reports past its step are
    dropped first)."""
    folder = RunFolder(cfg.out_dir, layout=MLM_FOLDER)
    folder.check_can_start(cfg.resume, cfg.overwrite)
    foreign = folder.file("config.json").exists() and not folder.file("mlm_config.json").exists()
    if foreign:
        raise UsageError(
            f"--out_dir {cfg.out_dir} holds a checkpoint that pretrain_mlm.py did not write; "
            "choose another --out_dir"
        )
    train, held = sentences_of(cfg)
    tokenizer = Tokenizer.from_checkpoint(cfg.checkpoint, max_length=cfg.max_length)
    torch.manual_seed(cfg.seed)
    model, had_head = load_mlm(cfg.checkpoint)
    head = "from the checkpoint" if had_head else "newly initialised"
    print(f"{len(train)} training sentences, {len(held)} held out; MLM head {head}")
    folder.start(cfg.resume)
    hooks = extras.Hooks(cfg, hosted())
    optimizer = optimizer_for(
        model, cfg.lr, 0.01, choose=functools.partial(hooks.fire, "choose_optimizer")
    )
    scheduler = linear_warmup_decay(optimizer, int(cfg.warmup * cfg.steps), cfg.steps)
    stream = BatchStream("mlm", tokenizer.count_tokens(train), cfg.batch_size, cfg.seed)
    run = MLMRun(cfg, folder, tokenizer, model, optimizer, scheduler, stream, train, held, hooks)
    if cfg.resume:
        run.restore()
    hooks.fire("on_start", folder, run.state.step)  # a resume's reports past its step dropped
    if not cfg.resume:
        folder.write_json("mlm_config.json", cfg.to_flat())
        record(run, evaluate_mlm(model, tokenizer, held))
    return run


def train_steps(run: MLMRun) -> None:
    """The loop: a masked batch a step, the held-out evaluation and last.pt every --eval_every."""
    cfg, vocab = run.cfg, run.tokenizer.backend.get_vocab()
    continuation = word_continuations(vocab) if cfg.whole_word else None
    bar = tqdm(
        total=cfg.steps,
        initial=run.state.step,
        desc="MLM",
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 60,
    )
    started = time.time() - run.state.seconds
    run.model.train()
    try:
        steps(run, bar, started, vocab, continuation)
    finally:
        bar.close()  # the bar's line ends before any message


def steps(run: MLMRun, bar: tqdm, started: float, vocab: dict, continuation) -> None:
    """The steps from ``state.step`` to --steps (``train_steps`` sets up the bar)."""
    cfg, state = run.cfg, run.state
    while state.step < cfg.steps:
        batch = run.tokenizer([run.train[i] for i in run.stream.next()])
        generator = torch.Generator().manual_seed(derived_seed(cfg.seed, state.step))
        masked, labels = masks_with_a_token(batch, vocab, generator, continuation)
        state.step += 1
        bar.update(1)
        if masked is None:
            tqdm.write(f"step {state.step}: no token of this batch could be masked; step skipped")
        else:
            update(run, Masked(masked, labels, batch["attention_mask"], batch["token_type_ids"]))
            bar.set_postfix(loss=f"{state.train_loss():.3f}", refresh=False)
        if state.step % cfg.eval_every == 0 or state.step == cfg.steps:
            state.seconds = round(time.time() - started, 1)
            metrics = evaluate_mlm(run.model, run.tokenizer, run.held)
            train_loss = state.train_loss()
            record(run, {**metrics, "train_loss": train_loss, "seconds": state.seconds})
            run.folder.save_state(run.saved(), state.step)


def update(run: MLMRun, batch: Masked) -> None:
    """One optimizer step on the masked batch, the driver's ``train_step`` (its gradients clipped
    to --max_grad_norm); a non-finite loss stops the run before it updates anything
    (``HostChecked``: the weights on disk and in memory stay those of the step before)."""
    try:
        losses = train_step(
            run.step_module,
            [(CORPUS, batch)],
            run.optimizer,
            run.update,
            run.scheduler,
            max_grad_norm=run.cfg.max_grad_norm,
        )
    except NonFiniteLoss:
        raise RunStopped(
            f"non-finite loss at step {run.state.step} (is --lr too large?); the step did not "
            f"update the model; {run.folder.on_disk()}",
            3,
        ) from None
    run.state.add_loss(losses[0].item())


def masks_with_a_token(batch, vocab, generator, continuation):
    """``mask_batch``'s (masked ids, labels), drawn again (from the same generator, so a resumed
    run draws the same) while no token was chosen, which a batch of a few short sentences can
    give; (None, None) when none was chosen in ``MASK_DRAWS`` draws. A batch without a masked
    token has no loss (a mean over nothing), which is not a numerical fault."""
    for _ in range(MASK_DRAWS):
        drawn = mask_batch(batch, vocab, generator, continuation)
        if bool((drawn[1] != IGNORE).any()):  # the labels: IGNORE where no token was chosen
            return drawn
    return None, None


def record(run: MLMRun, metrics: dict[str, Any]) -> None:
    """One line of mlm_log.jsonl at the run's step, echoed above the progress bar, and told to
    the extras as the driver tells them its log: after a step the training loss and the
    learning rate (``on_log``), then the held-out figures (``on_evaluate``: ``HELD_OUT``)."""
    step = run.state.step
    line = {"step": step}
    line |= {k: round(v, 6) if isinstance(v, float) else v for k, v in metrics.items()}
    run.folder.append_log("mlm_log.jsonl", [line])
    tqdm.write(f"step {step}: " + ", ".join(f"{k} {v}" for k, v in line.items() if k != "step"))
    if step > 0:
        train_loss = metrics["train_loss"]
        trained = {CORPUS.name: train_loss} if train_loss is not None else {}
        run.hooks.fire("on_log", step, trained, learning_rate(run.optimizer))
    run.hooks.fire("on_evaluate", step, {name: metrics[name] for name in HELD_OUT})


def finish(run: MLMRun) -> dict[str, Any]:
    """The checkpoint directory and the loss plot; the last log line."""
    out = run.folder.path
    run.model.save_pretrained(out, resolve_checkpoint_dir(run.cfg.checkpoint) / "vocab.txt")
    plot(run.folder)
    print(f"done: checkpoint directory {out} (train_multitask.py --checkpoint {out})")
    last = run.folder.read_log("mlm_log.jsonl")[-1]
    run.hooks.fire("on_end", run.folder, last)
    return last


def plot(folder: RunFolder) -> None:
    """mlm_loss.png: training and held-out loss, and held-out accuracy, against the step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = folder.read_log("mlm_log.jsonl", ("loss", "accuracy"))
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    ax_loss.plot([r["step"] for r in rows], [r["loss"] for r in rows], marker="o", label="held out")
    train = [r for r in rows if r.get("train_loss") is not None]
    ax_loss.plot([r["step"] for r in train], [r["train_loss"] for r in train], label="training")
    ax_loss.set(xlabel="step", ylabel="MLM loss", title="Masked-LM loss")
    ax_loss.legend()
    ax_acc.plot([r["step"] for r in rows], [r["accuracy"] for r in rows], marker="o")
    ax_acc.set(xlabel="step", ylabel="masked-token accuracy", title="Held-out accuracy")
    fig.tight_layout()
    fig.savefig(folder.file("mlm_loss.png"), dpi=100)
    plt.close(fig)


def pretrain(cfg: MLMConfig) -> dict[str, Any]:
    """Set-up, the loop and finish; Ctrl-C in the loop and a write that fails (a full disk, a
    read-only or vanished folder) end in one line that says what is on disk."""
    folder, stage = RunFolder(cfg.out_dir, layout=MLM_FOLDER), "before training began"
    try:
        run = set_up(cfg)
        folder, stage = run.folder, ""
        train_steps(run)
        stage = "while writing the checkpoint directory"
        return finish(run)
    except KeyboardInterrupt as err:
        (what, code), where = stop_reason(err), stage or f"at step {run.state.step}"
        raise RunStopped(f"{what} {where}; {folder.on_disk()}", code) from None
    except OSError as err:
        raise RunStopped(f"{err}; {folder.on_disk()}", 1) from None


def main(argv: list[str] | None = None) -> int:
    def body() -> None:
        cfg = parse_args(argv)
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        pretrain(cfg)

    return run_command(body, "pretrain_mlm.py stopped before its first save, or between saves")


if __name__ == "__main__":
    sys.exit(main())
