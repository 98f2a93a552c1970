"""The seeds a seeded run derives from its ``--seed``: one stream of random numbers per purpose.

A draw that must not depend on what else the run drew (each task's batch order in each pass,
PCGrad's order of the tasks at a step, the masks of an MLM step) gets a generator of its own,
seeded by ``derived_seed(seed, counter, stream)`` = seed·1,000,003 + stream·1,009 + counter,
with the counter (a pass, a step) and the stream (a task's place) told apart by the two primes.
"""

from __future__ import annotations


def derived_seed(seed: int, counter: int, stream: int = 0) -> int:
    """seed·1,000,003 + stream·1,009 + counter (see the module docstring)."""
    return seed * 1_000_003 + stream * 1009 + counter
