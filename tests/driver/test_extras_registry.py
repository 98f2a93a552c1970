"""The registry of the lab's extras (multitask/extras.py) says what each extra's own settings
declare: the same flags with the same off values, and no flag of the core's."""

from __future__ import annotations

import dataclasses

from minbert.flags import flags_of
from multitask import extras
from multitask.config import TrainConfig


def test_each_extras_flags_are_its_settings_flags_at_their_defaults():
    sections = extras.sections()
    core = {flag.name for flag in flags_of(TrainConfig)}
    for extra in extras.present():
        declared = {
            flag.name: flag.field.default_factory()
            if flag.field.default is dataclasses.MISSING
            else flag.field.default
            for flag in (flags_of(sections[extra.name]) if extra.name in sections else ())
        }
        assert declared == dict(extra.flags), extra.name
        assert not core & set(declared), extra.name


def test_a_choice_of_an_extra_is_a_choice_of_its_core_flag():
    assert "pcgrad" in extras.choices("step_gradient")
    assert "fusion" in extras.choices("option") and "fused" in extras.choices("optimizer")
