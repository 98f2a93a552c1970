"""The model layer: one shared BERT with one head per task, how it is built from its settings,
and the loss and update of one training batch (SMART included).

Shape legend: B batch, T tokens, D hidden, C head outputs (task.num_outputs).

    settings = ModelSettings(option="adapter").resolved()
    model = build_model(settings, ["sst", "para"], dropout=0.1)
    optimizer = adamw_for(model, lr=1e-3, weight_decay=0.01)         # minbert.optimizer
    loss = train_step(TrainingStep(model), task, batch, optimizer)

The driver, the tests and the benchmarks all build and train through these functions, so a
benchmark measures exactly what the driver runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from torch import nn
from tqdm import tqdm

from minbert.bert import BertModel
from minbert.flags import section
from minbert.pcgrad import surgery
from minbert.plugins import (
    PLUGINS,
    add_plugin,
    freeze_all_but_task,
    freeze_for_plugins,
    plugin_state_dict,
)
from minbert.plugins.adapter import AdapterSettings
from minbert.plugins.lora import LoRASettings
from minbert.plugins.pals import PALSettings
from minbert.pretrained import load_config, load_pretrained, resolve_checkpoint_dir
from minbert.smart import MomentumTeacher, SmartConfig, bregman_term, smart_regularizer
from minbert.tokenizer import Tokenizer
from tasks.base import Task, get_task
from tasks.batching import length_grouped_batches
from tasks.collate import batch_to, collate, token_lengths
from tasks.heads import (
    PAIR_ENCODINGS,
    REPRESENTATIONS,
    CosineSimilarityHead,
    sentence_representation,
)
from tasks.metrics import OVERALL_TASKS, overall_score
from tasks.reader import Example

OPTIONS = ("pretrain", "finetune", *PLUGINS)
# Options whose pairs are encoded apart unless --pair_encoding says otherwise: with these few
# trainable weights a cross-encoded STS head stays far below the checkpoint's own cosine
# similarity (benchmarks/results/option-encoding.md, plugins-3-epochs.md), and the adapter and
# LoRA encoded apart are ahead on the pair tasks at 3 epochs (adapter-separate-3-epochs.md,
# lora-separate-3-epochs.md). Only full fine-tuning is ahead cross-encoded (transfer-levers.md).
SEPARATE_BY_DEFAULT = ("pretrain", *PLUGINS)
# Options that give each task its own LayerNorms unless --no-train_layernorms: LHUC's scales
# alone left Quora below --option pretrain's; with the LayerNorms every task is above it
# (benchmarks/results/plugins-3-epochs-defaults.md).
LAYERNORMS_BY_DEFAULT = ("lhuc",)


@dataclass
class ModelSettings:
    """Everything that decides the model's shape besides its task list: ``--evaluate`` and
    ``--add_to`` take these from the run they read, so the model is rebuilt as it was trained."""

    # -- what to train --
    option: Literal[OPTIONS] = "finetune"  # pretrain: frozen encoder, only the task heads
    # train; finetune: every weight trains; adapter/pals/lhuc/lora: frozen encoder plus one
    # parameter-efficient plug-in per task
    checkpoint: str = "default"  # pretrained BERT directory (config.json + model.safetensors
    # or pytorch_model.bin); 'default' is the packaged all-MiniLM-L6-v2
    representation: Literal[REPRESENTATIONS] = "mean"  # sentence vector the heads read: BERT's
    # pooler, the [CLS] state, or the mean of real tokens
    pair_encoding: Literal[PAIR_ENCODINGS] | None = None  # pair tasks: cross = one sequence
    # [CLS] a [SEP] b [SEP]; separate = encode a and b apart and combine ([u,v,|u-v|,u*v] for
    # paraphrase, cosine for similarity) (default: separate for pretrain and the plug-ins,
    # which keep the checkpoint's own cosine similarity and were ahead encoded apart; cross
    # for finetune; README "Why the defaults")
    head_hidden: int = 0  # each task head gets a tanh layer of this size before its output
    # layer (the adapter study's two-layer classifier; 0: a linear head)
    # -- data --
    max_length: int = 128  # tokens per sequence after truncation
    # -- plug-ins (with --option adapter|pals|lhuc|lora) --
    train_layernorms: bool | None = None  # each task gets its own copy of every encoder layer's
    # two LayerNorms, started from the pretrained ones (Houlsby et al. 2019; the embeddings'
    # LayerNorm stays shared and frozen; minbert/plugins/layernorm.py) (default: on for lhuc,
    # whose scales alone leave Quora below --option pretrain; off for the other plug-ins;
    # --no-train_layernorms turns it off)
    train_encoder: bool = False  # also fine-tune the shared encoder together with the
    # plug-ins, as the PALs paper does (not with --add_to: earlier tasks would change)
    also: list[str] = field(default_factory=list)  # more plug-in kinds beside --option's,
    # comma-separated, each with its own flags (e.g. --option adapter --also lhuc)
    adapter: AdapterSettings = section(AdapterSettings, "adapter_")
    pals: PALSettings = section(PALSettings, "pal_")
    lora: LoRASettings = section(LoRASettings, "lora_")

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
        checkpoint = resolve_checkpoint_dir(self.checkpoint)
        positions = load_config(checkpoint).max_position_embeddings
        if self.train_encoder and self.plugin is None:
            raise ValueError(
                f"--train_encoder goes with a plug-in --option (adapter, pals, lhuc, lora); "
                f"--option {self.option} already decides whether the encoder trains"
            )
        extra = self.also
        if extra and (self.plugin is None or self.option in extra or len(set(extra)) < len(extra)
                      or any(kind not in PLUGINS for kind in extra)):  # fmt: skip
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

    @property
    def plugin(self) -> str | None:
        """The plug-in kind of the option, or None for pretrain and finetune."""
        return self.option if self.option in PLUGINS else None

    @property
    def plugin_kinds(self) -> list[str]:
        """Every plug-in kind to attach, in order: per-task LayerNorms first (an adapter placed
        after the LayerNorm reads the task's), then the option's, then --also's."""
        if self.plugin is None:
            return []
        return ["layernorm"] * self.train_layernorms + [self.plugin, *self.also]

    def plugin_options(self, kind: str) -> dict:
        """The options of plug-in ``kind``, as ``add_plugin`` takes them."""
        settings = getattr(self, kind, None)
        return {} if settings is None else dataclasses.asdict(settings)


class MultitaskModel(nn.Module):
    """A shared ``BertModel`` (``self.bert``) and one head per task (``self.heads[task.name]``).

    The forward is split like BERT's so that SMART can perturb the embeddings:
    ``embed(task, batch)`` -> a list of (B, T, D) embeddings (two for separately encoded pairs),
    ``outputs_from_embeddings(task, embeddings, batch)`` -> (B, C) head outputs.
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

    def embed(self, task_name: str, batch: dict) -> list[torch.Tensor]:
        """Token ids -> input vectors, one (B, T, D) tensor per encoded sequence."""
        return [self.bert.embed(seq["input_ids"], seq["token_type_ids"]) for seq in batch["inputs"]]

    def outputs_from_embeddings(
        self, task_name: str, embeddings: list[torch.Tensor], batch: dict
    ) -> torch.Tensor:
        """Encoder + representation + head: (B, T, D) embeddings -> (B, C) outputs."""
        reps = []
        for emb, seq in zip(embeddings, batch["inputs"]):
            out = self.bert.encode(emb, seq["attention_mask"], task=task_name)
            reps.append(sentence_representation(out, seq["attention_mask"], self.representation))
        return self.heads[task_name](*reps)

    def forward(self, task_name: str, batch: dict) -> torch.Tensor:
        return self.outputs_from_embeddings(task_name, self.embed(task_name, batch), batch)

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


def build_model(
    settings: ModelSettings,
    tasks: Sequence[str],
    dropout: float = 0.1,
    frozen_tasks: Sequence[str] = (),
) -> MultitaskModel:
    """Load the pretrained encoder, attach the option's plug-ins, set every dropout, add a head
    per task and freeze what the option freezes. ``frozen_tasks`` are tasks of an earlier run
    (joined with ``--add_to``): they get their plug-ins and heads, but only ``tasks`` train."""
    settings = settings.resolved()
    bert = load_pretrained(settings.checkpoint)
    names = [*frozen_tasks, *tasks]
    for kind in settings.plugin_kinds:
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


# ------------------------------------------------------------------------------------------------
# Prediction and evaluation


@torch.no_grad()
def head_outputs(
    model: MultitaskModel,
    task: Task,
    examples: Sequence[Example],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
    progress: bool = False,
) -> torch.Tensor:
    """The head's (N, C) outputs for the examples, in their order, in eval mode (float32, CPU);
    batches grouped by length for speed (the longest first). An output depends on its batch's
    padding in the last float bits, so the same batch size gives the same outputs bit for bit.
    ``progress`` shows a bar (standard error) when there are at least 10 batches."""
    model.eval()
    separate = model.encodes_separately(task)
    lengths = token_lengths(task, examples, tokenizer, separate)
    batches = length_grouped_batches(lengths, batch_size, None)
    outputs = torch.empty(len(examples), task.num_outputs)
    bar = tqdm(batches, desc=task.name, unit="batch", disable=not progress or len(batches) < 10)
    for indices in bar:
        batch = batch_to(collate(task, [examples[i] for i in indices], tokenizer, separate), device)
        with autocast or contextlib.nullcontext():
            outputs[indices] = model(task.name, batch).float().cpu()
    return outputs


def predict(
    model: MultitaskModel,
    task: Task,
    examples: Sequence[Example],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
) -> list:
    """The task's predictions (class, 0/1, score) of ``head_outputs``, in the examples' order."""
    return task.predict(
        head_outputs(model, task, examples, tokenizer, batch_size, device, autocast)
    )


def evaluate(
    model: MultitaskModel,
    dev: dict[str, Sequence[Example]],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    autocast: contextlib.AbstractContextManager | None = None,
) -> dict[str, float]:
    """Each task's dev metric (task -> dev examples) and the overall score: the course's
    (tasks/metrics.py), or for tasks outside it alone (``--tasks cfimdb``) the mean metric."""
    metrics = {}
    for name, examples in dev.items():
        task = get_task(name)
        predictions = predict(model, task, examples, tokenizer, batch_size, device, autocast)
        metrics[name] = task.metric(predictions, [e.label for e in examples])
    scored = any(name in OVERALL_TASKS for name in metrics)
    metrics["overall"] = overall_score(metrics) if scored else sum(metrics.values()) / len(metrics)
    return metrics


def calibrate_similarity_heads(
    model: MultitaskModel,
    train: dict[str, Sequence[Example]],
    tokenizer: Tokenizer,
    batch_size: int,
    device: torch.device,
    examples: int = 2048,
) -> dict[str, tuple[float, float]]:
    """Fit the a and b of every cosine-similarity head (``CosineSimilarityHead.calibrate``) to
    ``examples`` training pairs of its task spread evenly over its file (task -> training
    examples), with the model as it is before the first step, and say so; returns task -> (a, b)
    for the heads it set. The model is left in training mode."""
    fitted = {}
    for name, task_examples in train.items():
        head = model.heads[name]
        if not isinstance(head, CosineSimilarityHead) or not task_examples:
            continue
        sample = list(task_examples[:: -(-len(task_examples) // examples)])
        outputs = head_outputs(model, model.tasks[name], sample, tokenizer, batch_size, device)
        cosine = (outputs.squeeze(-1) - head.shift.detach().cpu()) / head.scale.detach().cpu()
        if head.calibrate(cosine, torch.tensor([float(e.label) for e in sample])):
            fitted[name] = (head.scale.item(), head.shift.item())
            print(f"[{name}] cosine head fitted to {len(sample)} training pairs: "
                  f"ŷ = {fitted[name][0]:.3f}·cos + {fitted[name][1]:.3f}")  # fmt: skip
    model.train()
    return fitted


# ------------------------------------------------------------------------------------------------
# One training batch


@dataclass
class Smart:
    """SMART during training: its hyperparameters and the momentum teacher θ̃ of the trainable
    parameters (create it after the model is on its device and frozen as it will train)."""

    config: SmartConfig
    teacher: MomentumTeacher

    @classmethod
    def for_model(cls, config: SmartConfig, model: nn.Module) -> Smart:
        trainable = [p for p in model.parameters() if p.requires_grad]
        return cls(config, MomentumTeacher(trainable, config.momentum))


def batch_loss(model: MultitaskModel, task: Task, batch: dict, smart: Smart | None) -> torch.Tensor:
    """The task loss of one batch, plus SMART's λ_s·R_s + μ·D_Breg when SMART is on
    (``minbert/smart.py``: the embeddings are computed once and perturbed, never re-embedded)."""
    embeddings = model.embed(task.name, batch)
    outputs = model.outputs_from_embeddings(task.name, embeddings, batch)
    loss = task.loss(outputs.float(), batch["labels"])
    if smart is None:
        return loss

    def perturbed_outputs(perturbed: list[torch.Tensor]) -> torch.Tensor:
        return model.outputs_from_embeddings(task.name, perturbed, batch)

    def teacher_outputs() -> torch.Tensor:
        # A trainable embedding layer differs in the teacher, so the teacher embeds again;
        # a frozen one gives the same vectors, so they are reused (one embed per step).
        if any(p.requires_grad for p in model.bert.embeddings.parameters()):
            return model(task.name, batch)
        return model.outputs_from_embeddings(task.name, [e.detach() for e in embeddings], batch)

    config = smart.config
    adversarial = smart_regularizer(perturbed_outputs, embeddings, outputs, task.smart_kind, config)
    bregman = bregman_term(teacher_outputs, outputs, smart.teacher, task.smart_kind)
    return loss + config.weight * adversarial + config.bregman_weight * bregman


def loss_weights(entries: Sequence[str], tasks: Sequence[str]) -> dict[str, float]:
    """``["sst=2", "sts=0.5"]`` -> ``{"sst": 2.0, "sts": 0.5}``: a positive weight per named task
    (``--loss_weights``); a task not named keeps weight 1. ValueError names a bad entry."""
    weights: dict[str, float] = {}
    for entry in entries:
        name, _, text = entry.partition("=")
        try:
            weight = float(text)
        except ValueError:
            weight = float("nan")
        if name not in tasks or name in weights or not 0 < weight < float("inf"):
            raise ValueError(
                f"--loss_weights {entry!r}: give TASK=WEIGHT with a task of --tasks "
                f"({','.join(tasks)}), each at most once, and a weight > 0 (e.g. sst=2)"
            )
        weights[name] = weight
    return weights


class TrainingStep(nn.Module):
    """The loss of one batch as a module, so that DistributedDataParallel sees the whole step
    (SMART's extra forwards included) as its forward.

    With ``weights`` (``--loss_weights``), task t's loss is multiplied by w_t, so the objective
    the steps follow is Σ_t w_t·L_t instead of Σ_t L_t: a per-task loss weight, the lever of
    multitask weighting studies (Kendall et al. 2018, "Multi-Task Learning Using Uncertainty to
    Weigh Losses", learn the w_t; here they are fixed).
    With one task per step, Adam's second-moment estimate is shared by every task's steps, so
    a weight changes that task's update size against the others' rather than cancelling out.
    """

    def __init__(
        self,
        model: MultitaskModel,
        smart: Smart | None = None,
        weights: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.smart = smart
        self.weights = weights or {}

    def forward(self, task: Task, batch: dict) -> torch.Tensor:
        return batch_loss(self.model, task, batch, self.smart) * self.weights.get(task.name, 1.0)


class NonFiniteLoss(FloatingPointError):
    """A batch gave a NaN or infinite loss; nothing was updated. ``task`` names its task."""

    def __init__(self, message: str, task: str) -> None:
        super().__init__(message)
        self.task = task


def train_step(
    step: nn.Module,
    task: Task,
    batch: dict,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    skip_nonfinite: bool = False,
    teacher: MomentumTeacher | None = None,
) -> torch.Tensor | None:
    """One update on one task's batch: loss (its forward under ``autocast``, e.g. bf16),
    backward, AdamW step, schedule step, and SMART's teacher update (pass ``Smart.teacher`` when
    SMART is on).

    A non-finite loss raises ``NonFiniteLoss`` before anything changes, or with
    ``skip_nonfinite`` drops the batch (the schedule still advances, so a skipped batch costs
    its step) and returns None. Returns the detached loss otherwise.
    """
    losses = train_step_tasks(
        step, [(task, batch)], optimizer, scheduler, autocast, skip_nonfinite, teacher
    )
    return None if losses is None else losses[0]


def train_step_tasks(
    step: nn.Module,
    batches: Sequence[tuple[Task, dict]],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    autocast: contextlib.AbstractContextManager | None = None,
    skip_nonfinite: bool = False,
    teacher: MomentumTeacher | None = None,
    pcgrad: int | None = None,
) -> list[torch.Tensor] | None:
    """One update from a batch of each of several tasks (``train_step`` with one): the gradients
    of the task losses are added (``--step_gradient summed``), or with a ``pcgrad`` seed combined
    by PCGrad's projection (``minbert/pcgrad.py``: each task's gradient of the shared parameters
    loses its part against any other task's it conflicts with, the order of the others drawn
    with that seed). Non-finite losses as in ``train_step``: any one stops or skips the whole
    step. Returns the detached loss of each batch.
    """
    params = [p for group in optimizer.param_groups for p in group["params"]]
    optimizer.zero_grad(set_to_none=True)
    losses, per_task, finite = [], [], True
    for task, batch in batches:
        with autocast or contextlib.nullcontext():
            loss = step(task, batch)
        if not torch.isfinite(loss):
            if not skip_nonfinite:
                raise NonFiniteLoss(f"non-finite loss ({loss.item()})", task.name)
            finite = False
        loss.backward()  # a skipped batch too: keeps every process's gradient exchange in step
        losses.append(loss.detach())
        if pcgrad is not None:  # keep this task's gradients apart from the next task's
            per_task.append([p.grad for p in params])
            optimizer.zero_grad(set_to_none=True)
    if finite:
        if pcgrad is not None:
            for p, grad in zip(params, surgery(per_task, torch.Generator().manual_seed(pcgrad))):
                p.grad = grad
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if scheduler is not None:
        scheduler.step()
    if finite and teacher is not None:
        teacher.update()
    return losses if finite else None
