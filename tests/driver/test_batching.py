"""Length-grouped batching: coverage, batch sizes, reproducibility and less padding."""

from __future__ import annotations

import pytest
import torch

from multitask.batching import fixed_batches, length_grouped_batches, padding_fraction


def skewed_lengths(n: int, seed: int = 0) -> list[int]:
    """Token lengths shaped like real sentence data: mostly short, a long tail (log-normal)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.empty(n).log_normal_(mean=3.0, std=0.6, generator=g)
    return [min(512, max(3, int(x))) for x in lengths.tolist()]


def assert_covers_exactly_once(batches: list[list[int]], n: int) -> None:
    flat = [i for batch in batches for i in batch]
    assert sorted(flat) == list(range(n))


@pytest.mark.parametrize(
    "n, batch_size, pool_factor", [(0, 4, 2), (1, 4, 2), (103, 8, 3), (1000, 32, 50)]
)
@pytest.mark.parametrize("shuffle", [True, False])
def test_every_index_exactly_once(n, batch_size, pool_factor, shuffle):
    lengths = skewed_lengths(n)
    generator = torch.Generator().manual_seed(1) if shuffle else None
    batches = length_grouped_batches(lengths, batch_size, generator, pool_factor)
    assert_covers_exactly_once(batches, n)
    sizes = [len(b) for b in batches]
    assert all(1 <= s <= batch_size for s in sizes)
    assert sum(s < batch_size for s in sizes) <= 1  # at most one short batch
    assert_covers_exactly_once(fixed_batches(n, batch_size, generator), n)


def test_evaluation_order_is_sorted_by_length():
    lengths = [5, 9, 1, 9, 3, 7]
    batches = length_grouped_batches(lengths, 4, None)
    assert batches == [[1, 3, 5, 0], [4, 2]]  # longest first; ties keep index order


def test_same_generator_seed_same_batches_and_different_seed_differs():
    lengths = skewed_lengths(500)
    first = length_grouped_batches(lengths, 16, torch.Generator().manual_seed(3), pool_factor=4)
    again = length_grouped_batches(lengths, 16, torch.Generator().manual_seed(3), pool_factor=4)
    other = length_grouped_batches(lengths, 16, torch.Generator().manual_seed(4), pool_factor=4)
    assert first == again
    assert first != other


def test_length_grouping_cuts_padding():
    lengths = skewed_lengths(8000)
    g = torch.Generator().manual_seed(0)
    grouped = padding_fraction(lengths, length_grouped_batches(lengths, 32, g))
    fixed = padding_fraction(lengths, fixed_batches(len(lengths), 32, g))
    assert fixed > 0.4  # the skewed lengths make plain batches mostly padding
    assert grouped < 0.25 * fixed


def test_padding_fraction_hand_example():
    lengths = [2, 4, 3, 3]
    # batch [0, 1]: 2 · 4 = 8 positions, 6 real; batch [2, 3]: 6 positions, 6 real -> 2 / 14
    assert padding_fraction(lengths, [[0, 1], [2, 3]]) == pytest.approx(2 / 14)
    assert padding_fraction(lengths, []) == 0.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        length_grouped_batches([1, 2], 0, None)
    with pytest.raises(ValueError, match="pool_factor"):
        length_grouped_batches([1, 2], 2, None, pool_factor=0)
    with pytest.raises(ValueError, match="batch_size"):
        fixed_batches(3, 0, None)


def test_pools_of_one_batch_are_plain_random_batches():
    """--batch_pool 1: each pool is one batch, so sorting changes nothing but the order inside a
    batch; the batches are those of fixed_batches on the same shuffle."""
    lengths = skewed_lengths(300)
    grouped = length_grouped_batches(lengths, 16, torch.Generator().manual_seed(5), pool_factor=1)
    plain = fixed_batches(len(lengths), 16, torch.Generator().manual_seed(5))
    assert sorted(sorted(b) for b in grouped) == sorted(sorted(b) for b in plain)


@pytest.mark.parametrize("name,separate", [("sst", False), ("para", False), ("sts", True)])
def test_a_batch_cut_from_a_split_tokenized_once_equals_tokenizing_it(
    tiny_checkpoint, tiny_data, name, separate
):
    """EncodedSplit.batch gives exactly the tensors of tokenizing the same examples together
    (padding, types, mask, truncation count), for any subset in any order, and a swapped pair
    exactly the tensors of the pair written the other way round."""
    from dataclasses import replace

    import torch

    from minbert.tokenizer import Tokenizer
    from multitask.collate import EncodedSplit, collate
    from tasks import get_task

    task = get_task(name)
    tokenizer = Tokenizer.from_checkpoint(str(tiny_checkpoint), max_length=12)  # truncates some
    examples = task.read(tiny_data / task.files["train"])[0]
    encoded = EncodedSplit(task, examples, tokenizer, separate, swappable=True)
    generator = torch.Generator().manual_seed(0)
    for size in (1, 5, 16):
        indices = torch.randperm(len(examples), generator=generator)[:size].tolist()
        chosen = [examples[i] for i in indices]
        swap = [i % 2 == 0 for i in range(size)] if task.is_pair else None
        if swap:
            chosen = [replace(e, texts=e.texts[::-1]) if s else e for e, s in zip(chosen, swap)]
        expected, got = collate(task, chosen, tokenizer, separate), encoded.batch(indices, swap)
        assert got.ids == expected.ids and got.num_truncated == expected.num_truncated
        assert torch.equal(got.labels, expected.labels)
        for seq_got, seq_expected in zip(got.inputs, expected.inputs, strict=True):
            for key in ("input_ids", "token_type_ids", "attention_mask"):
                assert torch.equal(seq_got[key], seq_expected[key]), key
    assert sum(truncated for _, _, truncated in encoded.sequences[0]) > 0  # truncation was tried
