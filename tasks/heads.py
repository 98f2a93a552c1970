"""The task heads, and the sentence vector they read (used by ``multitask.model.MultitaskModel``).

Shape legend: B batch, T tokens, D hidden, C head outputs (task.num_outputs).

Pair tasks (``--pair_encoding``):
    cross     one sequence [CLS] a [SEP] b [SEP] with token types 0/1; the head reads r(h) like a
              single-sentence task (Devlin et al. 2019)
    separate  u = r(a), v = r(b) encoded one at a time (Reimers & Gurevych 2019, Sentence-BERT);
              paraphrase: logit = W [u; v; |u − v|; u ⊙ v] + b;
              similarity: ŷ = a · cos(u, v) + b, a and b fitted by least squares to the
              training labels before training starts (``CosineSimilarityHead.calibrate``), both
              trained
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

REPRESENTATIONS = ("pooler", "cls", "mean")
PAIR_ENCODINGS = ("cross", "separate")


def sentence_representation(
    outputs: dict[str, torch.Tensor], attention_mask: torch.Tensor, kind: str
) -> torch.Tensor:
    """r(h) for each sequence of the batch: (B, T, D) -> (B, D), by ``kind`` (``--representation``).

    pooler  tanh(W_p h_[CLS] + b_p), BERT's pooler
    cls     h_[CLS], the first token's hidden state
    mean (the ``pooling`` exercise):  r_b = Σ_t m_bt h_bt / Σ_t m_bt,  m (B, T) the attention
    mask, 1 for a real token and 0 for padding: the padding's hidden states (which are not zero)
    do not count, and each sentence is divided by its own number of real tokens; the pooling
    all-MiniLM-L6-v2 (the packaged checkpoint) was trained with.
    """
    if kind == "pooler":
        return outputs["pooler_output"]
    hidden = outputs["last_hidden_state"]
    if kind == "cls":
        return hidden[:, 0]
    if kind == "mean":
        # HINT: r_b of the docstring: the mean of each sentence's hidden states over its real
        # HINT: tokens only (padding counts neither in the sum nor in the count), as a float.
        # BEGIN SOLUTION: pooling
        m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T) -> (B, T, 1)
        return (hidden * m).sum(1) / m.sum(1).clamp(min=1.0)
        # END SOLUTION
    raise ValueError(f"unknown representation {kind!r}; choose one of {REPRESENTATIONS}")


class LinearHead(nn.Module):
    """outputs = W · dropout(r) + b, (B, D_in) -> (B, C); with ``hidden`` = H > 0 the two-layer
    classifier W · dropout(tanh(W_h · dropout(r) + b_h)) + b, (B, D_in) -> (B, H) -> (B, C).

    The two-layer form is that of BERT's pooler followed by its classifier, of Hugging Face's
    RoBERTa classification head, and of the adapter re-implementation study's task head: each
    task gets capacity of its own on top of the shared encoder (``--head_hidden``).
    """

    def __init__(self, in_features: int, num_outputs: int, dropout: float, hidden: int = 0) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.hidden = nn.Linear(in_features, hidden) if hidden else None
        self.linear = nn.Linear(hidden or in_features, num_outputs)

    def forward(self, r: torch.Tensor) -> torch.Tensor:
        r = self.dropout(r)
        if self.hidden is not None:
            r = self.dropout(torch.tanh(self.hidden(r)))  # (B, D_in) -> (B, H)
        return self.linear(r)


class PairFeatureHead(LinearHead):
    """Sentence-BERT classifier: logit = W [u; v; |u − v|; u ⊙ v] + b, (B, D) x 2 -> (B, C)."""

    def __init__(self, hidden: int, num_outputs: int, dropout: float, head_hidden: int = 0) -> None:
        super().__init__(4 * hidden, num_outputs, dropout, head_hidden)

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        """logit = W [u; v; |u − v|; u ⊙ v] + b: the features of the ``pair-features`` exercise,
        (B, D) x 2 -> (B, 4D), side by side in that order (|u − v| and u ⊙ v element-wise),
        through ``LinearHead.forward`` (its dropout and layers) -> (B, C)."""
        # HINT: the docstring's four features side by side, in its order, into the parent class's
        # HINT: forward (LinearHead's: its dropout and layers act on them too).
        # BEGIN SOLUTION: pair-features
        return super().forward(torch.cat([u, v, (u - v).abs(), u * v], dim=-1))
        # END SOLUTION


class CosineSimilarityHead(nn.Module):
    """ŷ = a · cos(u, v) + b: Sentence-BERT's cosine similarity, mapped onto the 0..5 scale.

    a = b = 2.5 when built, which maps cos ∈ [−1, 1] onto [0, 5]; a fresh run then ``calibrate``s
    them to the training labels before its first step. Both are trained. They calibrate the
    scale for the squared-error loss and give a frozen encoder (``--option pretrain``) something
    to train; Pearson's r does not change under an affine map with a > 0, so there STS scores the
    checkpoint's own cosine similarity.

    Why calibrate: the packaged checkpoint's cosines of STS training pairs have mean 0.62 and the
    labels mean 2.56, so 2.5·cos + 2.5 starts with a squared error of 3.3 where the best affine
    map has 0.66. While a and b (two parameters) are far off, the loss's gradient asks the
    encoder's trainable weights to move every cosine the same way, and a plug-in trained with
    the pairs encoded apart lost STS correlation doing so (in measured runs).
    """

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(2.5))
        self.shift = nn.Parameter(torch.tensor(2.5))

    def forward(self, u: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """ŷ_b = a · cos(u_b, v_b) + b,  cos(u, v) = u · v / (‖u‖ ‖v‖) over the hidden axis D
        (the ``cosine-head`` exercise): (B, D) x 2 -> (B, 1); a = ``self.scale``,
        b = ``self.shift``."""
        # HINT: the docstring's ŷ for each pair, its cosine taken over the hidden axis, as a
        # HINT: (B, 1) column; a and b are the head's two parameters.
        # BEGIN SOLUTION: cosine-head
        cosine = F.cosine_similarity(u, v, dim=-1)
        return (self.scale * cosine + self.shift).unsqueeze(-1)  # (B,) -> (B, 1)
        # END SOLUTION

    @torch.no_grad()
    def calibrate(self, cosine: torch.Tensor, target: torch.Tensor) -> bool:
        """Set (a, b) = argmin Σ (a·cos_i + b − y_i)² over (N,) cosines and labels, when the fit
        has a > 0 (it keeps Pearson's r of the cosine); returns whether it did."""
        x, y = cosine.double(), target.double()
        variance = ((x - x.mean()) ** 2).sum()
        if len(x) < 2 or variance == 0:
            return False
        a = ((x - x.mean()) * (y - y.mean())).sum() / variance
        if a <= 0:
            return False
        self.scale.fill_(a.item())
        self.shift.fill_((y.mean() - a * x.mean()).item())
        return True
