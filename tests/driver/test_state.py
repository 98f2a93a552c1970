"""The training state (multitask/state.py): one typed record, saved in last.pt in the layout runs
saved before it existed, and given back by a resume as a new record."""

from __future__ import annotations

import math

from multitask.state import TrainingState


def test_the_saved_form_round_trips_exactly():
    state = TrainingState(
        step=7,
        best=0.61,
        examples=224,
        seconds=12.5,
        eval_seconds=3.25,
        running={"sst": [1.5, 1.25], "para": []},
        train_files={"data/a.csv": "ab12"},
    )
    saved = state.saved()
    assert set(saved) == {"step", "best", "extra"}  # last.pt's layout before the record existed
    assert TrainingState.from_saved(saved) == state


def test_a_last_pt_saved_before_eval_seconds_existed_still_reads():
    saved = {"step": 3, "best": -math.inf, "extra": {"running": {"sst": []}, "examples": 96}}
    state = TrainingState.from_saved(saved)
    assert (state.step, state.examples, state.eval_seconds, state.seconds) == (3, 96, 0.0, 0.0)


def test_continue_from_takes_every_field():
    mine, resumed = TrainingState(running={"sst": []}), TrainingState(step=5, best=0.5)
    resumed.running = {"sst": [2.0]}
    mine.continue_from(resumed)
    assert mine == resumed and mine is not resumed
