"""The settings of a multitask run: ``TrainConfig`` (every flag, its default, help and range as
field metadata, ``minbert/flags.py``), the parser generated from it, and ``parse_args``, which
merges a saved run's settings (``--resume``, ``--evaluate``, ``--add_to``) and checks them all
before anything is written.

    cfg = parse_args(["--option", "adapter", "--sampling", "annealed"])
    cfg.model.option, cfg.lr, cfg.out_dir     # 'adapter', 0.001, 'runs/adapter-annealed'
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from minbert.flags import (
    ArgumentParser,
    HelpFormatter,
    add_flags,
    flatten,
    section,
    setting,
    unflatten,
)
from minbert.sampling import MODES
from minbert.smart import SmartConfig
from multitask import extras
from multitask.devices import THREADS_RANGE, pick_device
from multitask.errors import UsageError
from multitask.model import ModelSettings, stage_one_keys
from multitask.run import RunFolder, folder_kind, merge_config, overlapping
from multitask.step import loss_weights
from tasks import TASKS, get_task
from tasks.base import SPLITS, RegressionTask, Task
from tasks.metrics import OVERALL_TASKS

# The optimizer a run trains with unless --optimizer says otherwise: the implementation an extra
# makes the default where this tree has it (the multi-tensor AdamW), else the hand-written loop
# (the student tree): never a choice the tree lacks.
DEFAULT_OPTIMIZER = extras.default_choice("optimizer", otherwise="adamw")
SEEDS = "[0, 4294967295]"  # 2^32 - 1: seed·1,000,003 + step stays far inside a 64-bit generator
PATH_FLAGS = (
    "data_dir",
    "out_dir",
    "checkpoint",
    "evaluate",
    "add_to",
    "init_from",
    "adapters_from",
)
DESCRIPTION = (
    "Multitask fine-tuning of one BERT on SST-5 sentiment, Quora paraphrase and STS-B similarity."
)


@dataclass
class TrainConfig:
    """Every knob of a run. The flags, their defaults and help come from here, from the model's
    settings (multitask/model.py, with each plug-in's own) and from SmartConfig
    (minbert/smart.py)."""

    model: ModelSettings = section(ModelSettings, "")  # option, checkpoint, plug-ins, ...
    sampling: Literal[MODES] = setting(
        "annealed",
        "which task a step trains: round-robin, or drawn by size, √size or annealed",
        group="what to train",
    )
    step_gradient: Literal[("one-task", "summed", *extras.choices("step_gradient"))] = setting(
        "one-task",
        extras.described(
            "step_gradient", "one-task: one drawn task a step; summed: every task's batch"
        ),
        needs=extras.needs("step_gradient"),
    )
    tasks: list[str] = setting(
        help="comma-separated subset of the registered tasks (tasks/: cfimdb, para, sst, sts)",
        factory=lambda: list(OVERALL_TASKS),
    )
    loss_weights: list[str] = setting(
        help=(
            "TASK=W,...: multiply TASK's loss by W (unnamed tasks 1); the logged loss is weighted"
        ),
        factory=list,
    )
    data_dir: str = setting("data", "folder with the course's data files", group="data")
    limit: int | None = setting(
        None, "at most N examples per task and split (default: all)", within="[1, inf)"
    )
    train_fraction: float = setting(
        1.0,
        ("train on this fixed random fraction of each training file (dev and test stay whole)"),
        within="(0, 1]",
    )
    strict: bool = setting(False, "a malformed data row is an error, not a skip")
    epochs: int = setting(3, "training epochs", within="[1, inf)", group="optimisation")
    steps_per_epoch: int | None = setting(
        None, "steps per epoch (default: training examples / batch)", within="[1, inf)"
    )
    batch_size: int = setting(32, "examples per step", within="[1, inf)")
    eval_batch_size: int | None = setting(
        None,
        ("examples per batch of an evaluation or prediction (default: twice --batch_size)"),
        within="[1, inf)",
    )
    batch_pool: int = setting(
        50,
        ("length grouping: sort pools of N shuffled batches by length (1: plain random batches)"),
        within="[1, inf)",
    )
    pad_multiple: int = setting(
        1,
        ("pad each training batch to a multiple of N tokens, so that steps take few shapes"),
        within="[1, inf)",
    )
    encoder_lr: float | None = setting(
        None,
        ("with --train_encoder: the learning rate of the encoder's own weights (default: 5e-5)"),
        within="(0, 10]",
    )
    lr: float | None = setting(
        None, "peak learning rate (default: 5e-5 for finetune, else 1e-3)", within="(0, 10]"
    )
    warmup: float = setting(0.1, "warm-up steps, as a fraction of all steps", within="[0, 1)")
    optimizer: Literal[("adamw", *extras.choices("optimizer"))] = setting(
        DEFAULT_OPTIMIZER,
        extras.described("optimizer", "adamw: the hand-written AdamW loop"),
        needs=extras.needs("optimizer"),
    )
    weight_decay: float = setting(0.01, "AdamW decoupled weight decay", within="[0, inf)")
    max_grad_norm: float = setting(
        0.0,
        "clip the gradients' total L2 norm to this before each update (0: off)",
        within="[0, inf)",
    )
    dropout: float = setting(0.1, "dropout in the encoder and heads", within="[0, 1)")
    layer_decay: float = setting(
        1.0,
        ("layer-wise learning-rate decay γ: layer l of L trains at lr·γ^(L+1−l) (1: one rate)"),
        within="(0, 1]",
    )
    swap_pairs: bool = setting(
        False,
        ("train the pair tasks (para, sts) on each pair in a random order, (a, b) or (b, a)"),
    )
    seed: int = setting(
        11711,
        "random seed (data order, dropout, sampler; seeds derived from it fit the generators)",
        within=SEEDS,
    )
    eval_every: int = setting(
        0, "also evaluate every N steps (0: only at epoch ends)", within="[0, inf)"
    )
    log_every: int = setting(50, "write the mean training loss every N steps", within="[1, inf)")
    save_every: int = setting(
        0,
        "also write the resumable last.pt every N steps (it is always written at evaluations)",
        within="[0, inf)",
    )
    nonfinite: Literal["stop", "skip"] = setting(
        "stop",
        "on a NaN or infinite loss: stop the run (naming step and task) or skip that batch",
    )
    nonfinite_check: Literal["auto", "host", "device"] = setting(
        "auto",
        "where a step checks that its loss is finite: host, device, or auto (device on a GPU)",
    )
    smart: bool = setting(
        False,
        "add SMART's adversarial and Bregman terms",
        group="SMART regularization (Jiang et al. 2020)",
    )
    smart_settings: SmartConfig = section(SmartConfig, "smart_")
    out_dir: str | None = setting(
        None,
        "run folder (default: runs/<option>-<sampling>; with --add_to: RUN_DIR+<tasks>)",
        group="run",
    )
    resume: bool = setting(False, "continue the run in --out_dir from last.pt")
    overwrite: bool = setting(False, "reuse a non-empty --out_dir, starting over")
    evaluate: str | None = setting(
        None,
        ("evaluate only: load RUN_DIR's best checkpoint, print dev metrics, write predictions"),
        metavar="RUN_DIR",
    )
    add_to: str | None = setting(
        None,
        ("add the --tasks to RUN_DIR, a finished plug-in run whose own tasks stay bit-identical"),
        metavar="RUN_DIR",
    )
    init_from: str | None = setting(
        None,
        ("start from RUN_DIR, a finished finetune run: its encoder and its tasks' heads (MT-DNN)"),
        metavar="RUN_DIR",
    )
    device: str = setting("auto", "auto (CUDA when present), cpu, cuda or cuda:N")
    bf16: bool = setting(False, "bfloat16 autocast (CUDA only)")
    threads: int | None = setting(
        None,
        ("CPU threads for torch (default: one per core); fewer where other jobs share the machine"),
        within=THREADS_RANGE,
    )
    no_plots: bool = setting(False, "skip the PNG learning curves")
    # Not flags themselves: each present extra's settings (multitask/extras.py), by its name:
    extras: dict[str, Any] = field(default_factory=dict)
    # Not flags; saved in config.json. With --add_to, the earlier runs' tasks (frozen):
    base_tasks: list[str] = field(default_factory=list)
    # Each task file given explicitly (--<task>_<split>, generated from the task registry):
    files: dict[str, str | None] = field(default_factory=dict)

    def resolved(self) -> TrainConfig:
        """The one place where defaults that depend on other settings are decided."""
        option, add_to, init_from = self.model.option, self.add_to, self.init_from
        lr = self.lr if self.lr is not None else (5e-5 if option == "finetune" else 1e-3)
        added = f"{add_to.rstrip('/')}+{'+'.join(self.tasks)}" if add_to else None
        then = f"{init_from.rstrip('/')}-then-{'+'.join(self.tasks)}" if init_from else None
        out_dir = self.out_dir or self.evaluate or added or then or f"runs/{option}-{self.sampling}"
        encoder_lr = self.encoder_lr
        if encoder_lr is None and self.model.train_encoder:
            encoder_lr = 5e-5
        return dataclasses.replace(
            self,
            model=self.model.resolved(),
            lr=lr,
            out_dir=out_dir,
            encoder_lr=encoder_lr,
            eval_batch_size=self.eval_batch_size or 2 * self.batch_size,
        )

    def data_path(self, task: Task, split: str) -> Path:
        given = self.files.get(f"{task.name}_{split}")
        return Path(given) if given else Path(self.data_dir) / task.files[split]

    def to_flat(self) -> dict[str, Any]:
        """config.json: {flag name: value}, as the run was configured."""
        own = {key: value for s in self.extras.values() for key, value in flatten(s).items()}
        return {**flatten(self), **own, **self.files, "base_tasks": self.base_tasks}

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> TrainConfig:
        files = {k: flat.get(k) for k in FILE_FLAGS}
        try:
            config = unflatten(cls, flat)
            own = {name: unflatten(s, flat) for name, s in extras.sections().items()}
        except ValueError as err:
            raise UsageError(str(err)) from None
        base_tasks = flat.get("base_tasks", [])
        return dataclasses.replace(config, files=files, base_tasks=base_tasks, extras=own)


FILE_FLAGS = [f"{name}_{split}" for name in TASKS for split in SPLITS]
MODEL_KEYS = list(flatten(ModelSettings()))  # what --evaluate and --add_to take from a run
# The flags that say where a run runs, not what it trains: a --resume may change them.
WHERE_IT_RUNS = (
    "resume",
    "device",
    "nonfinite_check",
    "bf16",
    "out_dir",
    "no_plots",
    "threads",
    *extras.where_it_runs(),
)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
        merged=extras.merged_flags(),
    )
    add_flags(parser, TrainConfig)
    for settings in extras.sections().values():  # each present extra's own section
        add_flags(parser, settings)
    files = parser.add_argument_group("data files (default: <data_dir>/<the course's file name>)")
    for flag in FILE_FLAGS:
        files.add_argument(f"--{flag}", default=None, metavar="FILE")
    return parser


def parse_args(argv: list[str] | None = None, elsewhere: bool = False) -> TrainConfig:
    """The command line as a config: a saved run's settings merged in (--resume, --evaluate,
    --add_to), defaults resolved, every value checked. ``elsewhere``: the command was recorded
    on another machine (a results row), so the teacher runs it names are checked only where
    they are here; every setting is still checked."""
    extras.refuse_absent({}, sys.argv[1:] if argv is None else list(argv))
    flat = vars(build_parser().parse_args(argv))
    defaults = vars(build_parser().parse_args([]))
    if empty := [k for k in (*PATH_FLAGS, *FILE_FLAGS) if flat.get(k) == ""]:
        raise UsageError(f"--{empty[0]}: an empty path; give a file or folder name")
    source, flag, inherited = None, "", []
    if flat["resume"]:
        source, flag = flat["out_dir"] or TrainConfig.from_flat(flat).resolved().out_dir, "--resume"
        inherited = [k for k in [*defaults, "base_tasks"] if k not in WHERE_IT_RUNS]
    elif flat["evaluate"]:
        source, flag = flat["evaluate"], "--evaluate"
        inherited = [*MODEL_KEYS, "tasks", "add_to", "base_tasks"]
    elif flat["add_to"]:
        source, flag, inherited = flat["add_to"], "--add_to", MODEL_KEYS
    elif flat["init_from"]:
        source, flag, inherited = flat["init_from"], "--init_from", MODEL_KEYS
    elif flat["adapters_from"]:
        source, flag = flat["adapters_from"], "--adapters_from"
        inherited = [k for k in MODEL_KEYS if k in stage_one_keys() or k.startswith("adapter_")]
    if elsewhere and flag in ("--init_from", "--adapters_from") and not Path(source).is_dir():
        source = None  # a results row whose first stage is not here: its flags as recorded
    if source is not None:
        saved = read_run(source, flag)
        flat = merge_config(flat, saved, inherited, defaults | {"base_tasks": []}, flag, source)
        if flag == "--add_to":
            flat["base_tasks"] = [*saved.get("base_tasks", []), *saved["tasks"]]
        if flag == "--evaluate":
            check_evaluate_output(flat, saved, defaults)
    config = TrainConfig.from_flat(flat).resolved()
    check(config, explicit=[k for k in FILE_FLAGS if flat.get(k)], elsewhere=elsewhere)
    return config


def read_run(source: str | Path, flag: str) -> dict[str, Any]:
    """A saved run's config.json, read defensively: a missing key, a value of the wrong type or
    out of its flag's range (the extras' settings too), base_tasks that are not a list of names,
    an --add_to chain that loops are "corrupted"; a setting of an extra this tree lacks is
    refused naming its file, unless the extra changes only speed or reports (read as the core's
    value: ``extras.stood_in``). The one reader of config.json: the driver's --resume, --evaluate,
    --add_to, ... and every command that opens a finished run (predict, export, ...) read
    it here, with the same checks and messages."""
    folder = RunFolder(source)
    saved = folder.read_settings(TrainConfig, flag, required=("option", "tasks"))
    for settings in extras.sections().values():
        folder.read_settings(settings, flag)
    extras.refuse_absent(saved, source=f"{flag}: {folder.file('config.json')}")
    saved = extras.stood_in(saved)  # an extra of speed or reports only: read as the core's
    base = saved.get("base_tasks", [])
    if not isinstance(base, list) or not all(isinstance(t, str) for t in base):
        raise UsageError(f"{flag}: {folder.file('config.json')} is corrupted (base_tasks {base!r})")
    folder.chain(flag)
    return saved


def check_evaluate_output(flat: dict, saved: dict, defaults: dict) -> None:
    """--evaluate writes prediction files only where nothing else is lost: into the evaluated
    run when it predicts the run's own data, else into a new folder, an empty one, or one that
    holds only earlier predictions (never into another run or a folder of other files)."""
    out, run = Path(flat["out_dir"] or flat["evaluate"]), Path(flat["evaluate"])
    data_flags = ("data_dir", "limit", *FILE_FLAGS)
    other = [k for k in data_flags if flat.get(k) != saved.get(k, defaults.get(k))]
    if out.resolve() == run.resolve():
        if other:
            raise UsageError(
                f"--out_dir: --evaluate on other data than the run's own (--{other[0]}) would "
                f"write over {run}'s prediction files; pass --out_dir with a new folder"
            )
        return
    if out.is_dir() and (
        foreign := [p.name for p in out.iterdir() if not p.name.endswith("-output.csv")]
    ):
        kind = folder_kind(out) or f"a folder of other files ({', '.join(sorted(foreign)[:3])})"
        raise UsageError(
            f"--out_dir {out} is {kind}; --evaluate writes its predictions only into a new or "
            "empty folder, or one of earlier predictions"
        )


def check(cfg: TrainConfig, explicit: list[str], elsewhere: bool = False) -> None:
    """Every named file present and the settings consistent with each other and with the
    checkpoint, or a UsageError naming the flag and the fix, before anything is written. (Each
    flag's own range is checked where the config is read: ``minbert.flags.unflatten``.)"""
    not_a_checkpoint(cfg.model.checkpoint)
    try:
        checkpoint = cfg.model.check([get_task(t) for t in cfg.tasks if t in TASKS])
        loss_weights(cfg.loss_weights, cfg.tasks)
    except ValueError as err:
        raise UsageError(str(err)) from None
    for extra, flag in extras.chosen(flatten(cfg)):  # a choice the student tree leaves out
        extras.load(extra.name, flag)
    for message in problems(cfg, explicit, checkpoint, elsewhere):
        raise UsageError(message)
    pick_device(cfg.device)


def not_a_checkpoint(checkpoint: str) -> None:
    """A run folder given as --checkpoint is named as such (its config.json is not a BERT's)."""
    if folder_kind(Path(checkpoint)) == "a train_multitask.py run folder":
        raise UsageError(
            f"--checkpoint {checkpoint} is a train_multitask.py run folder, not a checkpoint "
            "folder; give a BERT checkpoint (an MLM pretraining run's output, or an export of "
            "the run)"
        )


def problems(
    cfg: TrainConfig, explicit: list[str], checkpoint: Path, elsewhere: bool = False
) -> Iterator[str]:
    """What is wrong with a combination of settings, first things first (``elsewhere``: see
    ``parse_args``)."""
    tasks, m, add_to = cfg.tasks, cfg.model, cfg.add_to
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        yield f"--tasks: unknown task(s) {unknown}; known: {sorted(TASKS)}"
    if len(set(tasks)) < len(tasks):
        yield f"--tasks {','.join(tasks)}: a task is named twice"
    for key in explicit:
        if not Path(cfg.files[key]).is_file():
            yield f"--{key}: file not found; give an existing file"
    pearson = [t for t in tasks if t in TASKS and isinstance(get_task(t), RegressionTask)]
    if cfg.limit is not None and cfg.limit < 2 and pearson:
        yield (
            f"--limit {cfg.limit}: {pearson[0]}'s Pearson correlation needs at least 2 dev rows; "
            "give --limit 2 or more"
        )

    yield from inside_an_earlier_run(cfg)
    if cfg.init_from and add_to:
        yield "--init_from and --add_to: give one (a run to start from, or a run to add tasks to)"
    if cfg.init_from and m.option != "finetune":
        yield (
            f"--init_from: {cfg.init_from} was trained with --option {m.option}; per-task "
            "fine-tuning starts from a finetune run (to add tasks to a plug-in run: --add_to)"
        )
    if overlapping(Path(cfg.out_dir), checkpoint):
        yield (
            f"--out_dir {cfg.out_dir} and the checkpoint folder {checkpoint} must not be the same "
            "or inside each other"
        )
    if add_to and m.plugin is None:
        yield (
            f"--add_to: {add_to} was trained with --option {m.option}, which changes weights "
            "every task shares; tasks can be added only to a plug-in run (adapter, pals, lhuc, "
            "lora)"
        )
    if add_to and m.train_encoder:
        yield (
            f"--add_to: {add_to} was trained with --train_encoder, which changes the encoder "
            "every task shares; tasks can be added only to a run whose encoder stayed frozen"
        )
    if cfg.encoder_lr is not None and not m.train_encoder:
        yield "--encoder_lr goes with --train_encoder (a plug-in option training the encoder too)"
    yield from extras.problems(cfg, elsewhere)
    yield from host_checked_losses(cfg)
    if add_to and (repeated := [t for t in tasks if t in cfg.base_tasks]):
        yield (
            f"--tasks: {repeated} already trained in {add_to} (tasks {cfg.base_tasks}); with "
            "--add_to, name only the new tasks"
        )


def inside_an_earlier_run(cfg: TrainConfig) -> Iterator[str]:
    """The run a command starts from or builds on (--add_to, --init_from, an extra's first stage) is
    read again whenever the new run's model is built: --out_dir must neither be it nor lie
    inside it, where --overwrite would remove it or the new run's files would mix with its."""
    for flag, earlier in (
        ("--add_to", cfg.add_to),
        ("--init_from", cfg.init_from),
        ("--adapters_from", cfg.model.adapters_from),
    ):
        if earlier and overlapping(Path(cfg.out_dir), Path(earlier)):
            yield f"--out_dir must differ from {flag} and lie outside it: the earlier run stays"


def host_checked_losses(cfg: TrainConfig) -> Iterator[str]:
    """--nonfinite_check device leaves the loss on the device until the next --log_every; the
    flag that needs every loss on the host at once is the one named, so that the user knows
    which of the two to drop (an extra's is named by its part's ``check_settings``)."""
    if cfg.nonfinite_check == "device" and cfg.smart:
        yield (
            "--nonfinite_check device with --smart: SMART's teacher counts the updates, so the "
            "losses are checked on the host; leave --nonfinite_check auto, or leave --smart out"
        )
