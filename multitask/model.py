"""The multitask model: one shared BERT with one head per task, and how it is built from its
settings.

Shape legend: B batch, T tokens, D hidden, C head outputs (task.num_outputs).

    settings = ModelSettings(option="adapter").resolved()
    model = build_model(settings, ["sst", "para"], dropout=0.1)
    outputs = model("sst", batch)                                    # (B, 5) logits

Training one batch is ``multitask/step.py``; evaluating and predicting, ``multitask/evaluation.py``.
The driver, the tests and the benchmarks all build through ``build_model``, so a benchmark
measures exactly what the driver runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from minbert.bert import BertModel
from minbert.flags import section, setting
from minbert.plugins import (
    add_plugin,
    freeze_all_but_task,
    freeze_for_plugins,
    import_problem,
    option_kinds,
    plugin_class,
    plugin_state_dict,
)
from minbert.pretrained import load_config, load_pretrained, resolve_checkpoint_dir
from multitask import extras
from multitask.collate import Batch
from tasks.base import Task, get_task
from tasks.heads import PAIR_ENCODINGS, REPRESENTATIONS, sentence_representation

# The one place the core names an extra: AdapterFusion (the fusion extra) is a plug-in kind
# whose sources, a finished adapter run's adapters, are part of the model itself, loaded wherever
# a fusion run's model is built (training, --resume, --evaluate, predict, export), most of those
# outside a run and its extras' parts; building it through a hook would leave them without it.
FUSION = "fusion"
# The plug-in kinds that are an --option of their own, and those with flags (a section of
# ModelSettings each, ``--<flag_prefix><option>``): both read from the kinds' own files. A kind
# whose file does not import is offered without its flags and refused when chosen.
PLUGINS = tuple(option_kinds())
SECTIONS = tuple(k for k in PLUGINS if not import_problem(k) and plugin_class(k).flag_prefix)
OPTIONS = ("pretrain", "finetune", *PLUGINS, *extras.choices("option"))
# Options whose pairs are encoded apart unless --pair_encoding says otherwise: with these few
# trainable weights a cross-encoded STS head stays far below the checkpoint's own cosine
# similarity, and the adapter and LoRA encoded apart are ahead on the pair tasks at 3 epochs
# (measured in 3-epoch runs of each option). Only full fine-tuning is ahead cross-encoded.
SEPARATE_BY_DEFAULT = ("pretrain", *PLUGINS, FUSION)
# Options that give each task its own LayerNorms unless --no-train_layernorms: LHUC's scales
# alone left Quora below --option pretrain's; with the LayerNorms every task is above it (measured
# in 3-epoch runs with the defaults).
LAYERNORMS_BY_DEFAULT = ("lhuc",)
# A plug-in or head at most this many times the checkpoint's hidden size wide (--adapter_size,
# --pal_size, --lora_rank, --head_hidden): wider is a typo, and a huge one would not fit anywhere.
WIDEST_FACTOR = 16


@dataclass
class CoreModelSettings:
    """Everything that decides the model's shape besides its task list: ``--evaluate`` and
    ``--add_to`` take these from the run they read, so the model is rebuilt as it was trained.
    ``ModelSettings`` adds a section per plug-in kind with flags (``SECTIONS``)."""

    option: Literal[OPTIONS] = setting(
        "finetune",
        "what trains: pretrain (the heads), finetune (every weight), or a plug-in per task",
        group="what to train",
        needs=extras.needs("option"),
    )
    checkpoint: str = setting(
        "default",
        "pretrained BERT folder (config.json and weights); 'default': the packaged MiniLM",
    )
    representation: Literal[REPRESENTATIONS] = setting(
        "mean",
        (
            "sentence vector the heads read: BERT's pooler, the [CLS] state, or the mean of real "
            "tokens"
        ),
    )
    pair_encoding: Literal[PAIR_ENCODINGS] | None = setting(
        None,
        ("pair tasks: cross (one sequence) or separate (a and b apart) (default: by --option)"),
    )
    head_hidden: int = setting(
        0,
        ("a tanh layer of this size in each task head before its output layer (0: a linear head)"),
        within="[0, inf)",
    )
    max_length: int = setting(128, "tokens per sequence after truncation", group="data")
    train_layernorms: bool | None = setting(
        None,
        ("give each task its own copy of the encoder's LayerNorms (default: on for lhuc only)"),
        group="plug-ins (with --option adapter|pals|lhuc|lora)",
    )
    train_encoder: bool = setting(
        False,
        ("also fine-tune the shared encoder together with the plug-ins (not with --add_to)"),
    )
    also: list[str] = setting(
        help="more plug-in kinds beside --option's, comma-separated (e.g. --also lhuc)",
        factory=list,
    )
    adapters_from: str | None = setting(
        None,
        ("with --option fusion: the finished --option adapter run whose adapters each task fuses"),
        metavar="RUN_DIR",
        needs=extras.named(FUSION).module,
    )

    def resolved(self) -> ModelSettings:
        """The option-dependent defaults filled in (the one place they are decided)."""
        encoding = self.pair_encoding
        if encoding is None:
            encoding = "separate" if self.option in SEPARATE_BY_DEFAULT else "cross"
        layernorms = self.train_layernorms
        if layernorms is None:
            layernorms = self.option in LAYERNORMS_BY_DEFAULT
        return dataclasses.replace(self, pair_encoding=encoding, train_layernorms=layernorms)

    def check(self, tasks: Sequence[Task]) -> Path:
        """The checkpoint folder, once the settings fit it and ``tasks``: --max_length at least
        what an input needs ([CLS] x [SEP], or [CLS] a [SEP] b [SEP]) and at most the
        checkpoint's position table. A UsageError-worthy ValueError names the flag otherwise."""
        for kind in self.plugin_kinds:
            if problem := import_problem(kind):
                raise ValueError(
                    f"--option {self.option}: the {kind} plug-in cannot be used: {problem}"
                )
        checkpoint = resolve_checkpoint_dir(self.checkpoint)
        config = load_config(checkpoint)
        positions = config.max_position_embeddings
        self.check_widths(config.hidden_size)
        if self.train_encoder and self.plugin is None:
            raise ValueError(
                f"--train_encoder goes with a plug-in --option (adapter, pals, lhuc, lora); "
                f"--option {self.option} already decides whether the encoder trains"
            )
        extra = self.also
        if extra and (
            self.plugin is None
            or self.option in extra
            or len(set(extra)) < len(extra)
            or any(kind not in PLUGINS for kind in extra)
        ):
            raise ValueError(
                f"--also {','.join(extra)}: name other plug-in kinds than --option's, once each, "
                f"of {', '.join(PLUGINS)}, beside a plug-in --option"
            )
        if self.head_hidden < 0:
            raise ValueError(f"--head_hidden {self.head_hidden}: must be at least 0 (0: linear)")
        shortest = 5 if any(task.is_pair for task in tasks) else 3
        if not shortest <= self.max_length <= positions:
            raise ValueError(
                f"--max_length {self.max_length}: must be in {shortest}..{positions} (what the "
                "tasks' inputs need .. the checkpoint's position table)"
            )
        return checkpoint

    def check_widths(self, hidden: int) -> None:
        """A plug-in or head wider than WIDEST_FACTOR × the hidden size D is a typo, not a
        bottleneck (10**9 would ask for terabytes): a ValueError naming the flag."""
        widest = WIDEST_FACTOR * hidden
        widths = {"head_hidden": self.head_hidden}
        for kind in SECTIONS:
            kind_class = plugin_class(kind)
            for name in kind_class.widths:
                widths[f"{kind_class.flag_prefix}{name}"] = getattr(getattr(self, kind), name)
        for flag, width in widths.items():
            if width is not None and width > widest:
                raise ValueError(
                    f"--{flag} {width}: at most {widest} ({WIDEST_FACTOR} × the checkpoint's "
                    f"hidden size {hidden})"
                )

    @property
    def plugin(self) -> str | None:
        """The plug-in kind of the option, or None for pretrain and finetune."""
        return self.option if self.option in (*PLUGINS, FUSION) else None

    @property
    def plugin_kinds(self) -> list[str]:
        """Every plug-in kind to attach, in order: per-task LayerNorms first (an adapter placed
        after the LayerNorm reads the task's), then the option's, then --also's."""
        if self.plugin is None:
            return []
        return ["layernorm"] * self.train_layernorms + [self.plugin, *self.also]

    def not_alone(self, option: str, run: str, holder: str) -> str | None:
        """Why a run of these settings is not ``option``'s plug-in alone on the checkpoint's
        frozen encoder, which is what another library's adapter file (``holder``) holds; or
        None. ``run`` names such a run ("a LoRA run")."""
        if self.option != option:
            return f"--option {self.option}: only {run} is {holder}"
        if self.also:
            return f"--also {','.join(self.also)}: {holder} holds one plug-in alone"
        if self.train_layernorms:
            return f"--train_layernorms: {holder} has no per-task LayerNorms"
        if self.train_encoder:
            return "--train_encoder: the adapter would sit on weights that are not the checkpoint's"
        return None

    def plugin_options(self, kind: str) -> dict:
        """The options of plug-in ``kind``, as ``add_plugin`` takes them (fusion: those of the
        adapters it fuses; ``build_model`` adds their tasks)."""
        settings = self.adapter if kind == FUSION else getattr(self, kind, None)
        return {} if settings is None else dataclasses.asdict(settings)


def with_plugin_sections(core: type) -> type:
    """``core`` with a section per plug-in kind in ``SECTIONS``: field ``<kind>``, its flags
    ``--<flag_prefix><option>`` (``Plugin.Settings``, ``Plugin.flag_prefix``)."""
    fields = []
    for kind in SECTIONS:
        kind_class = plugin_class(kind)
        settings = section(kind_class.Settings, kind_class.flag_prefix)
        fields.append((kind, kind_class.Settings, settings))
    made = dataclasses.make_dataclass("ModelSettings", fields, bases=(core,))
    made.__module__ = __name__  # its type hints resolve here (Python 3.11 has no module=)
    return made


ModelSettings = with_plugin_sections(CoreModelSettings)


class MultitaskModel(nn.Module):
    """A shared ``BertModel`` (``self.bert``) and one head per task (``self.heads[task.name]``).

    ``model(task_name, batch)`` -> (B, C) head outputs; ``model.loss(task, batch)`` -> the task's
    loss on them, what a training step minimises (multitask/objectives.py wraps it for SMART and
    an extra's objective wraps it too). SMART perturbs the embeddings, so the forward also comes
    in two parts: ``embed(batch)`` -> a list of (B, T, D) embeddings (two for separately encoded
    pairs), ``outputs_from_embeddings(task_name, embeddings, batch)`` -> (B, C) head outputs.
    """

    def __init__(
        self,
        bert: BertModel,
        tasks: Sequence[Task],
        representation: str = "mean",
        pair_encoding: str = "cross",
        head_dropout: float = 0.1,
        head_hidden: int = 0,
    ) -> None:
        super().__init__()
        if representation not in REPRESENTATIONS:
            raise ValueError(f"unknown representation {representation!r}; choose {REPRESENTATIONS}")
        if pair_encoding not in PAIR_ENCODINGS:
            raise ValueError(f"unknown pair encoding {pair_encoding!r}; choose {PAIR_ENCODINGS}")
        self.bert = bert
        self.tasks = {task.name: task for task in tasks}
        self.representation = representation
        self.pair_encoding = pair_encoding
        D = bert.config.hidden_size
        self.heads = nn.ModuleDict(
            {
                t.name: t.make_head(D, head_dropout, self.encodes_separately(t), head_hidden)
                for t in tasks
            }
        )

    def encodes_separately(self, task: Task) -> bool:
        return task.is_pair and self.pair_encoding == "separate"

    def forward(self, task_name: str, batch: Batch) -> torch.Tensor:
        """Encoder + representation + head: token ids -> (B, C) outputs. Every sequence is
        embedded before any is encoded (two for separately encoded pairs): dropout draws its
        masks in that order, which a seeded run's results depend on."""
        return self.outputs_from_embeddings(task_name, self.embed(batch), batch)

    def loss(self, task: Task, batch: Batch) -> torch.Tensor:
        """The task's loss on this batch (in float32, also under bf16 autocast)."""
        return self.criterion(task, self(task.name, batch), batch)

    def criterion(self, task: Task, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The task's loss of ``outputs`` against the batch's labels."""
        return task.loss(outputs.float(), batch.labels)

    def embed(self, batch: Batch) -> list[torch.Tensor]:
        """Token ids -> input vectors, one (B, T, D) tensor per encoded sequence."""
        return [self.bert.embed(seq["input_ids"], seq["token_type_ids"]) for seq in batch.inputs]

    def outputs_from_embeddings(
        self, task_name: str, embeddings: list[torch.Tensor], batch: Batch
    ) -> torch.Tensor:
        """Encoder + representation + head: (B, T, D) embeddings -> (B, C) outputs."""
        reps = []
        for emb, seq in zip(embeddings, batch.inputs):
            out = self.bert.encode(emb, seq["attention_mask"], task=task_name)
            reps.append(sentence_representation(out, seq["attention_mask"], self.representation))
        return self.heads[task_name](*reps)

    # -- what a run saves --------------------------------------------------------------------

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors that training changes: every weight for finetune, else plug-ins + heads
        (and the encoder under --train_encoder). Selected by requires_grad, i.e. by the
        freezing."""
        trainable = {n for n, p in self.named_parameters() if p.requires_grad}
        return {k: v.detach().clone() for k, v in self.state_dict().items() if k in trainable}

    def task_keys(self, task_name: str) -> set[str]:
        """State-dict keys owned by one task: its plug-in tensors and its head."""
        keys = {f"heads.{task_name}.{k}" for k in self.heads[task_name].state_dict()}
        if len(self.bert.plugins):
            keys |= {f"bert.{k}" for k in plugin_state_dict(self.bert, task_name)}
        return keys

    def task_state_dict(self, task_name: str) -> dict[str, torch.Tensor]:
        """What one task needs on top of the pretrained encoder: its plug-ins, its head, and any
        trained tensor no task owns (the whole encoder under --train_encoder). Trained tensors
        are those with requires_grad, so the selection follows the freezing, never names."""
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        owned_by_others = set().union(*(self.task_keys(t) for t in self.tasks if t != task_name))
        keys = (trained - owned_by_others) | self.task_keys(task_name)
        state = self.state_dict()
        return {k: state[k].detach().contiguous().cpu() for k in sorted(keys)}

    def load_task_state_dict(self, task_name: str, state: dict[str, torch.Tensor]) -> None:
        """Load a file written from ``task_state_dict`` onto a model built with the same options."""
        expected = set(self.task_state_dict(task_name))
        if set(state) != expected:
            missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
            raise ValueError(
                f"task {task_name!r} checkpoint does not match this model: missing {missing[:5]}, "
                f"unexpected {unexpected[:5]}"
            )
        self.load_state_dict(state, strict=False)


def stage_one_keys() -> tuple[str, ...]:
    """The encoder-shaping settings (config.json keys) a fusion run takes from its first stage."""
    return extras.load(FUSION, "--adapters_from").STAGE_ONE_KEYS


def build_model(
    settings: ModelSettings,
    tasks: Sequence[str],
    dropout: float = 0.1,
    frozen_tasks: Sequence[str] = (),
    encoder: BertModel | None = None,
) -> MultitaskModel:
    """Load the pretrained encoder, attach the option's plug-ins, set every dropout, add a head
    per task and freeze what the option freezes. ``frozen_tasks`` are tasks of an earlier run
    (joined with ``--add_to``): they get their plug-ins and heads, but only ``tasks`` train.
    ``encoder`` stands in for the checkpoint's (a parameter count of a model of BERT-base's shape
    builds it on the meta device, without weights)."""
    settings = settings.resolved()
    bert = load_pretrained(settings.checkpoint) if encoder is None else encoder
    names = [*frozen_tasks, *tasks]
    for kind in settings.plugin_kinds:
        if kind == FUSION:  # the first stage's adapters, fixed
            fusion = extras.load(FUSION, "--option fusion")
            sources, state = fusion.stage_one(settings.adapters_from)
            add_plugin(bert, kind, names, sources=sources, **settings.plugin_options(kind))
            fusion.load_sources(bert.plugins[FUSION].sources, settings.adapters_from, state)
        else:
            add_plugin(bert, kind, names, **settings.plugin_options(kind))
    for module in bert.modules():
        if isinstance(module, nn.Dropout):
            module.p = dropout
        if hasattr(module, "dropout_p"):  # attention dropout: the encoder's and each PAL's
            module.dropout_p = dropout
    task_list = [get_task(name) for name in names]
    model = MultitaskModel(
        bert,
        task_list,
        settings.representation,
        settings.pair_encoding,
        dropout,
        settings.head_hidden,
    )
    if settings.option == "pretrain":
        bert.requires_grad_(False)
    elif frozen_tasks:
        freeze_all_but_task(bert, *tasks)  # earlier tasks' plug-ins and LayerNorms stay
        for name in frozen_tasks:
            model.heads[name].requires_grad_(False)
    elif settings.plugin:
        freeze_for_plugins(bert)
        if settings.train_encoder:
            bert.requires_grad_(True)
    return model
