"""Every flag's --help is one short sentence (at most 100 characters); the details are in
docs/flags.md."""

from __future__ import annotations

import argparse

from multitask.config import build_parser

LONGEST = 100


def test_every_flag_has_a_help_of_at_most_100_characters():
    shown = [
        action
        for action in build_parser()._actions
        if action.option_strings and action.help != argparse.SUPPRESS
    ]
    assert len(shown) > 50  # the core's flags, the plug-ins' and the extras' present here
    too_long = {
        a.option_strings[0]: len(a.help or "") for a in shown if len(a.help or "") > LONGEST
    }
    assert not too_long, f"help over {LONGEST} characters (move the details to docs/flags.md)"
