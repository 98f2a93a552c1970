"""WordPiece tokenization (Wu et al. 2016, as used by BERT) through the ``tokenizers`` package.

Single sentences encode as ``[CLS] a [SEP]``; pairs as ``[CLS] a [SEP] b [SEP]`` with token type 0
for the first segment and 1 for the second. A batch is truncated to ``max_length`` tokens (never
more than the model's position table) and padded to its longest member ("dynamic padding").
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import BertWordPieceTokenizer

from minbert.pretrained import CheckpointError, resolve_checkpoint_dir


class Tokenizer:
    def __init__(
        self, vocab_file: str | Path, max_length: int = 128, lowercase: bool = True
    ) -> None:
        self.backend = BertWordPieceTokenizer(str(vocab_file), lowercase=lowercase)
        self.max_length = max_length
        self.pad_token_id = self.backend.token_to_id("[PAD]")
        self.backend.enable_truncation(max_length=max_length)
        self.backend.enable_padding(pad_id=self.pad_token_id, pad_token="[PAD]")

    @classmethod
    def from_checkpoint(
        cls, checkpoint_dir: str | Path | None = None, max_length: int = 128
    ) -> Tokenizer:
        """The tokenizer of a checkpoint directory; ``max_length`` may not exceed its position
        table."""
        from minbert.pretrained import load_config

        directory = resolve_checkpoint_dir(checkpoint_dir)
        limit = load_config(directory).max_position_embeddings
        if max_length > limit:
            raise ValueError(
                f"max_length {max_length} exceeds the checkpoint's position table ({limit})"
            )
        vocab = directory / "vocab.txt"
        if not vocab.is_file():
            raise CheckpointError(
                f"checkpoint directory {directory} has no vocab.txt (the tokenizer's vocabulary); "
                "copy it from the checkpoint these weights came from"
            )
        return cls(vocab, max_length=max_length)

    def __call__(
        self, first: list[str], second: list[str] | None = None
    ) -> dict[str, torch.Tensor]:
        """Encode a batch of sentences (or of sentence pairs) into padded (B, T) tensors:
        ``input_ids``, ``token_type_ids``, ``attention_mask`` and ``num_truncated`` (a count)."""
        if second is None:
            encodings = self.backend.encode_batch(first)
        else:
            if len(first) != len(second):
                raise ValueError(f"{len(first)} first sentences but {len(second)} second ones")
            encodings = self.backend.encode_batch(list(zip(first, second, strict=True)))
        return {
            "input_ids": torch.tensor([e.ids for e in encodings], dtype=torch.long),
            "token_type_ids": torch.tensor([e.type_ids for e in encodings], dtype=torch.long),
            "attention_mask": torch.tensor([e.attention_mask for e in encodings], dtype=torch.long),
            "num_truncated": sum(1 for e in encodings if e.overflowing),
        }

    def encode_unpadded(
        self, first: list[str], second: list[str] | None = None
    ) -> list[tuple[list[int], list[int], bool]]:
        """Each sentence (or pair) as (token ids, token types, truncated?), truncated to
        ``max_length`` like ``__call__`` but not padded: a batch cut from these and padded to its
        longest member equals ``__call__`` on the same sentences."""
        self.backend.no_padding()
        try:
            pairs = first if second is None else list(zip(first, second, strict=True))
            encodings = self.backend.encode_batch(pairs)
        finally:
            self.backend.enable_padding(pad_id=self.pad_token_id, pad_token="[PAD]")
        return [(e.ids, e.type_ids, bool(e.overflowing)) for e in encodings]

    def count_tokens(self, first: list[str], second: list[str] | None = None) -> list[int]:
        """Untruncated token counts (with special tokens), for length-grouped batching."""
        self.backend.no_truncation()
        self.backend.no_padding()
        try:
            pairs = first if second is None else list(zip(first, second, strict=True))
            return [len(e.ids) for e in self.backend.encode_batch(pairs)]
        finally:
            self.backend.enable_truncation(max_length=self.max_length)
            self.backend.enable_padding(pad_id=self.pad_token_id, pad_token="[PAD]")
