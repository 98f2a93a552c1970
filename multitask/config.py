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
from multitask.devices import THREADS_RANGE, pick_device
from multitask.errors import UsageError, lab_part
from multitask.model import ModelSettings
from multitask.run import RunFolder, folder_kind, merge_config, overlapping
from multitask.step import loss_weights
from tasks import TASKS, get_task
from tasks.base import SPLITS, RegressionTask, Task
from tasks.metrics import OVERALL_TASKS

# The lab's optional parts whose flags the student tree parses but does not offer (``needs``).
DISTILLATION, COMPILED = "multitask.distillation", "multitask.compiled"
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
        (
            "which task each step trains: round-robin cycles the tasks; proportional draws task i "
            "with p_i ∝ N_i (training-set size); square-root with p_i ∝ √N_i; annealed with p_i ∝ "
            "N_i^α, α = 1 − 0.8·(e − 1)/(E − 1) in epoch e of E (Stickland & Murray 2019)"
        ),
        group="what to train",
    )
    step_gradient: Literal["one-task", "summed", "pcgrad"] = setting(
        "one-task",
        (
            "one-task: a step trains the task --sampling draws; summed: a batch of every task, "
            "gradients added (no sampling; an epoch has 1/K the steps); pcgrad: the same, "
            "conflicting gradients projected (Yu et al. 2020)"
        ),
        needs={"pcgrad": "minbert.pcgrad"},
    )
    tasks: list[str] = setting(
        help="comma-separated subset of the registered tasks (tasks/: cfimdb, para, sst, sts)",
        factory=lambda: list(OVERALL_TASKS),
    )
    loss_weights: list[str] = setting(
        help=(
            "TASK=W,...: multiply TASK's loss by W (e.g. sst=2,sts=0.5; unnamed tasks 1); the "
            "logged training loss is the weighted one"
        ),
        factory=list,
    )
    data_dir: str = setting("data", "folder with the course's data files", group="data")
    limit: int | None = setting(
        None, "at most N examples per task and split (default: all)", within="[1, inf)"
    )
    train_fraction: float = setting(
        1.0,
        (
            "train on this fraction of each training file: a random subsample drawn with a fixed "
            "generator, so every run (any --seed) sees the same rows; for low-resource experiments "
            "(dev and test stay whole)"
        ),
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
        (
            "examples per batch of an evaluation or prediction (default: twice --batch_size; no "
            "gradients are kept, so a GPU takes far more; another size pads differently and may "
            "change the last float bits of an output)"
        ),
        within="[1, inf)",
    )
    batch_pool: int = setting(
        50,
        (
            "length grouping: shuffle, sort pools of N batches by length, cut them into batches "
            "(less padding, multitask/batching.py); 1: plain random batches"
        ),
        within="[1, inf)",
    )
    pad_multiple: int = setting(
        1,
        (
            "pad each training batch to the next multiple of N tokens (at most --max_length) "
            "instead of to its longest input, so that steps take a handful of shapes, as a "
            "compiled or CUDA-graphed step needs (--compile); padding is masked, so the loss "
            "is the same (1: no extra padding)"
        ),
        within="[1, inf)",
    )
    encoder_lr: float | None = setting(
        None,
        (
            "with --train_encoder: the learning rate of the encoder's own weights, while the "
            "plug-ins and heads train at --lr (default: 5e-5, the finetune rate; the sources "
            "fine-tune BERT at 1e-5 to 5e-5)"
        ),
        within="(0, 10]",
    )
    lr: float | None = setting(
        None, "peak learning rate (default: 5e-5 for finetune, else 1e-3)", within="(0, 10]"
    )
    warmup: float = setting(0.1, "warm-up steps, as a fraction of all steps", within="[0, 1)")
    optimizer: Literal["foreach", "fused"] = setting(
        "foreach",
        "foreach: the hand-written AdamW in multi-tensor operations (the student tree's own "
        "loop where it lacks them); fused: torch's fused AdamW, the same update up to float "
        "rounding in one kernel a chunk of tensors (for a GPU, where a step waits on its "
        "launches; a lab extra)",
        needs="minbert.optimizer_foreach",
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
        (
            "layer-wise learning-rate decay γ: encoder layer l of L trains at lr·γ^(L+1−l), the "
            "embeddings at lr·γ^(L+1), heads at lr, each plug-in at its layer's rate (1: one rate "
            "for all; see minbert/optimizer.py)"
        ),
        within="(0, 1]",
    )
    swap_pairs: bool = setting(
        False,
        (
            "train symmetric pair tasks (para, sts) on each pair in a random order, (a, b) or (b, "
            "a), so that the model cannot rely on which sentence comes first"
        ),
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
        "on a NaN or infinite loss: stop the run (naming step and task) or skip that batch; "
        "either way it updates nothing. On a GPU the loss is read at the next --log_every (no "
        "step waits for the host), so the message comes then; with stop no step after it "
        "updated anything either",
    )
    nonfinite_check: Literal["auto", "host", "device"] = setting(
        "auto",
        "where a step finds that its loss is not finite: host (every step reads its losses, so "
        "the host waits for the device), device (a flag on the device that the update obeys, "
        "the losses read at --log_every: multitask/step.py); auto: device on a GPU where it "
        "can (not with --smart or --step_gradient pcgrad), else host",
    )
    teachers: list[str] = setting(
        help=(
            "TASK=RUN_DIR,...: finished runs of this driver (a task alone or several, any "
            "option) whose head outputs teach the named tasks: each trains towards "
            "λ·gold + (1 − λ)·teacher (Clark et al. 2019, BAM!; a lab extra); "
            "given twice, the lists are merged (a task taught by two runs is an error)"
        ),
        factory=list,
        group="distillation from teachers",
        needs=DISTILLATION,
    )
    teacher_annealing: bool = setting(
        False,
        "λ rises linearly from 0 at the first step to 1 at the last (the default with --teachers)",
        needs=DISTILLATION,
    )
    teacher_weight: float | None = setting(
        None,
        "a constant mix instead of annealing: λ = 1 − w, the teacher's share w",
        within="[0, 1]",
        needs=DISTILLATION,
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
        (
            "evaluate only: load RUN_DIR's best checkpoint, print dev metrics, write predictions "
            "(with the run's --batch_size they match the run's bit for bit; another batch size "
            "pads differently and may change the last float bits)"
        ),
        metavar="RUN_DIR",
    )
    add_to: str | None = setting(
        None,
        (
            "add tasks to RUN_DIR, a finished plug-in run: train only the plug-ins and heads of "
            "the --tasks named here (new tasks only) while RUN_DIR's tasks stay bit-identical; the "
            "model settings (option, sizes, encoding) come from RUN_DIR's config.json"
        ),
        metavar="RUN_DIR",
    )
    init_from: str | None = setting(
        None,
        (
            "start from RUN_DIR, a finished finetune run: its encoder, and the head of each task "
            "of --tasks that it trained, are the starting weights (multitask training, then each "
            "task fine-tuned from it: MT-DNN); the model settings come from RUN_DIR's config.json"
        ),
        metavar="RUN_DIR",
    )
    init_lora: list[str] = setting(
        help=(
            "TASK=DIR,...: start each named task's LoRA (--option lora) from a PEFT adapter "
            "folder of the same base checkpoint, rank, α and targets (a lab extra, as is the "
            "export of a LoRA run in that format)"
        ),
        factory=list,
        needs="multitask.peft_format",
    )
    device: str = setting("auto", "auto (CUDA when present), cpu, cuda or cuda:N")
    bf16: bool = setting(False, "bfloat16 autocast (CUDA only)")
    compile: bool = setting(
        False,
        (
            "torch.compile each step's forward and loss (a lab extra); with "
            "--pad_multiple the shapes stay few; not with --smart or --teachers"
        ),
        needs=COMPILED,
    )
    compile_mode: Literal["auto", "default", "reduce-overhead", "aot_eager"] = setting(
        "auto",
        (
            "with --compile: torch.compile's mode; auto = reduce-overhead (CUDA graphs: a step "
            "is one launch per graph, not one per kernel) on a GPU, default elsewhere; aot_eager "
            "captures the graphs without generating code (a quick check that a step compiles)"
        ),
        needs=COMPILED,
    )
    cuda_graphs: Literal["auto", "on", "off"] = setting(
        "auto",
        "the whole training step as one CUDA graph a task and shape (multitask/cuda_graphs.py, "
        "a lab extra): auto = on with CUDA where the run allows it (else one line says why), "
        "off on the CPU; on: the same, refused off a GPU",
    )
    threads: int | None = setting(
        None,
        (
            "CPU threads for torch (default: torch's choice, one per core); on a machine shared "
            "with other jobs, fewer threads than cores avoids over-subscription"
        ),
        within=THREADS_RANGE,
    )
    no_plots: bool = setting(False, "skip the PNG learning curves")
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
        return {**flatten(self), **self.files, "base_tasks": self.base_tasks}

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> TrainConfig:
        files = {k: flat.get(k) for k in FILE_FLAGS}
        try:
            config = unflatten(cls, flat)
        except ValueError as err:
            raise UsageError(str(err)) from None
        return dataclasses.replace(config, files=files, base_tasks=flat.get("base_tasks", []))


FILE_FLAGS = [f"{name}_{split}" for name in TASKS for split in SPLITS]
MODEL_KEYS = list(flatten(ModelSettings()))  # what --evaluate and --add_to take from a run
WHERE_IT_RUNS = (
    "resume",
    "device",
    "nonfinite_check",
    "bf16",
    "out_dir",
    "no_plots",
    "threads",
    "compile",
    "compile_mode",
    "cuda_graphs",
)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        description=DESCRIPTION,
        formatter_class=HelpFormatter,
        allow_abbrev=False,
        merged=("--teachers",),
    )
    add_flags(parser, TrainConfig)
    files = parser.add_argument_group("data files (default: <data_dir>/<the course's file name>)")
    for flag in FILE_FLAGS:
        files.add_argument(f"--{flag}", default=None, metavar="FILE")
    return parser


def parse_args(argv: list[str] | None = None, elsewhere: bool = False) -> TrainConfig:
    """The command line as a config: a saved run's settings merged in (--resume, --evaluate,
    --add_to), defaults resolved, every value checked. ``elsewhere``: the command was recorded
    on another machine (a results row), so the teacher runs it names are checked only where
    they are here; every setting is still checked."""
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
        stage_one = lab_part("multitask.fusion", "--adapters_from").STAGE_ONE_KEYS
        inherited = [k for k in MODEL_KEYS if k in stage_one or k.startswith("adapter_")]
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


def read_run(source: str, flag: str) -> dict[str, Any]:
    """A saved run's config.json, read defensively: a missing key, a value of the wrong type,
    base_tasks that are not a list of names, an --add_to chain that loops are "corrupted"."""
    folder = RunFolder(source)
    saved = folder.read_settings(TrainConfig, flag, required=("option", "tasks"))
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
        if cfg.teachers:
            lab_part("multitask.distillation", "--teachers").parse_teachers(cfg.teachers, cfg.tasks)
        if cfg.init_lora and cfg.model.option != "lora":
            raise ValueError(
                f"--init_lora starts LoRA: it goes with --option lora, not {cfg.model.option}"
            )
        if cfg.init_lora:
            peft = lab_part("multitask.peft_format", "--init_lora")
            peft.adapter_folders(cfg.init_lora, cfg.tasks)
    except ValueError as err:
        raise UsageError(str(err)) from None
    for flag, module, wanted in (  # the lab's parts the student tree leaves out
        ("--step_gradient pcgrad", "minbert.pcgrad", cfg.step_gradient == "pcgrad"),
        ("--optimizer fused", "multitask.fused_adamw", cfg.optimizer == "fused"),
        ("--compile", "multitask.compiled", cfg.compile),
    ):
        if wanted:
            lab_part(module, flag)
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
    if (m.option == "fusion") != bool(m.adapters_from):
        yield "--option fusion and --adapters_from RUN_DIR (its stage-1 adapter run) go together"
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
    if cfg.teachers or cfg.teacher_annealing or cfg.teacher_weight is not None:
        yield from lab_part("multitask.distillation", "--teachers").distillation_problems(
            cfg, elsewhere
        )
    yield from host_checked_losses(cfg)
    if cfg.compile_mode != "auto" and not cfg.compile:
        yield f"--compile_mode {cfg.compile_mode} goes with --compile"
    if cfg.compile and cfg.step_gradient != "one-task":
        yield (
            f"--compile with --step_gradient {cfg.step_gradient}: a compiled step trains one "
            "task's batch (CUDA graphs would overwrite one task's gradients with the next's)"
        )
    if cfg.compile and (cfg.smart or cfg.teachers):
        yield (
            f"--compile with --{'smart' if cfg.smart else 'teachers'}: not supported (SMART's "
            "extra forwards and a teacher's mixing weight change every step); leave one out"
        )
    if add_to and (repeated := [t for t in tasks if t in cfg.base_tasks]):
        yield (
            f"--tasks: {repeated} already trained in {add_to} (tasks {cfg.base_tasks}); with "
            "--add_to, name only the new tasks"
        )


def inside_an_earlier_run(cfg: TrainConfig) -> Iterator[str]:
    """The run a command starts from or builds on (--add_to, --init_from, --adapters_from) is
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
    which of the two to drop."""
    if cfg.nonfinite_check != "device":
        return
    if cfg.smart:
        flag, why = "--smart", "SMART's teacher counts the updates"
    elif cfg.step_gradient == "pcgrad":
        flag, why = "--step_gradient pcgrad", "PCGrad projects gradients that may be NaN"
    else:
        return
    yield (
        f"--nonfinite_check device with {flag}: {why}, so the losses are checked on the host; "
        f"leave --nonfinite_check auto, or leave {flag} out"
    )
