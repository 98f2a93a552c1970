"""One shared BERT with one small head per task.

Shape legend: B batch, T tokens, D hidden, C head outputs (task.num_outputs).

Sentence representation r(h) of a (B, T, D) encoder output (``--representation``):
    pooler  tanh(W_p h_[CLS] + b_p), BERT's pooler
    cls     h_[CLS], the first token's hidden state
    mean    Σ_t m_t h_t / Σ_t m_t, the mean over real tokens (m the attention mask); the pooling
            all-MiniLM-L6-v2 (the packaged checkpoint) was trained with

Pair tasks (``--pair_encoding``):
    cross     one sequence [CLS] a [SEP] b [SEP] with token types 0/1; the head reads r(h) like a
              single-sentence task (Devlin et al. 2019)
    separate  u = r(a), v = r(b) encoded one at a time (Reimers & Gurevych 2019, Sentence-BERT);
              paraphrase: logit = W [u; v; |u − v|; u ⊙ v] + b;
              similarity: ŷ = a · cos(u, v) + b, a = b = 2.5 at the start (mapping [−1, 1]
              onto the 0..5 scale), both trained (``CosineSimilarityHead``)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from minbert.bert import BertModel
from tasks.base import Task

REPRESENTATIONS = ("pooler", "cls", "mean")
PAIR_ENCODINGS = ("cross", "separate")


def sentence_representation(
    outputs: dict[str, torch.Tensor], attention_mask: torch.Tensor, kind: str
) -> torch.Tensor:
    """r(h) for each sequence of the batch: (B, T, D) -> (B, D); see the module docstring."""
    if kind == "pooler":
        return outputs["pooler_output"]
    hidden = outputs["last_hidden_state"]
    if kind == "cls":
        return hidden[:, 0]
    if kind == "mean":
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T) -> (B, T, 1)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
    raise ValueError(f"unknown representation {kind!r}; choose one of {REPRESENTATIONS}")


class LinearHead(nn.Module):
    """outputs = W · dropout(r) + b, (B, D_in) -> (B, C)."""

    def __init__(self, in_features: int, num_outputs: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.linear = nn.Linear(in_features, num_outputs)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(r))


class PairFeatureHead(LinearHead):
    """Sentence-BERT classifier: logit = W [u; v; |u − v|; u ⊙ v] + b, (B, D) x 2 -> (B, C)."""

    def __init__(self, hidden: int, num_outputs: int, dropout: float) -> None:
        super().__init__(4 * hidden, num_outputs, dropout)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))


class CosineSimilarityHead(nn.Module):
    """ŷ = a · cos(u, v) + b: Sentence-BERT's cosine similarity, mapped onto the 0..5 scale.

    a = b = 2.5 at the start, which maps cos ∈ [−1, 1] onto [0, 5]; both are trained. They
    calibrate the scale for the squared-error loss and give a frozen encoder (``--option
    pretrain``) something to train; Pearson's r does not change under an affine map with a > 0,
    so there STS scores the checkpoint's own cosine similarity.
    """

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.5))
        self.shift = nn.Parameter(torch.tensor(2.5))

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        cosine = F.cosine_similarity(u, v, dim=-1)
        return (self.scale * cosine + self.shift).unsqueeze(-1)  # (B,) -> (B, 1)


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
        self.heads = nn.ModuleDict()
        for task in tasks:
            self.heads[task.name] = self._make_head(task, D, head_dropout)
        # Tensors no task owns that an earlier run trained and that are frozen now (its
        # LayerNorms under --train_layernorms when tasks are added with --add_to): every task's
        # checkpoint carries them, as it carries trainable shared tensors.
        self.trained_shared_keys: set[str] = set()

    def _make_head(self, task: Task, hidden: int, dropout: float) -> nn.Module:
        if not self.encodes_separately(task):
            return LinearHead(hidden, task.num_outputs, dropout)
        if task.metric_name == "pearson":
            return CosineSimilarityHead()
        return PairFeatureHead(hidden, task.num_outputs, dropout)

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

    # -- tiny per-task checkpoints -----------------------------------------------------------

    def task_keys(self, task_name: str) -> set[str]:
        """State-dict keys owned by one task: its plug-in tensors and its head."""
        keys = {f"heads.{task_name}.{k}" for k in self.heads[task_name].state_dict()}
        if len(self.bert.plugins):
            from minbert.plugins import plugin_state_dict

            keys |= {f"bert.{k}" for k in plugin_state_dict(self.bert, task_name)}
        return keys

    def task_state_dict(self, task_name: str) -> dict[str, torch.Tensor]:
        """What one task needs on top of the pretrained encoder: its plug-ins, its head, and any
        trained tensor no task owns (the LayerNorms under --train_layernorms). Trained tensors are
        those with requires_grad or in ``trained_shared_keys``, so the selection follows the
        freezing, never names."""
        trained = {n for n, p in self.named_parameters() if p.requires_grad}
        trained |= self.trained_shared_keys
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
