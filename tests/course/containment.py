"""Which containment levels of the class grader this machine offers, as the skip markers of the
tests that need them: the one place where a test's skip condition for a containment level is
written (tests/structure/test_structure.py fails where another test file writes one).

Each condition asks the grader's own code (``course.grading.sandbox``), so a test runs exactly
where the grader would grade and skips, with the grader's reason, where it would refuse.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from course.grading import landlock, sandbox

ROOT = Path(__file__).resolve().parents[2]

AS_ROOT = os.geteuid() == 0
# The level the grader picks here (None: it refuses untrusted submissions), and every level it
# could be asked for.
LEVEL = sandbox.containment()
OFFERED = sandbox.offered()
NAMESPACE_LEVELS = [level for level in OFFERED if level in (sandbox.ROOT, sandbox.USER_NAMESPACE)]

# What the grader finds closed to its runners at each level where they are users of their own
# (``sandbox.python_closed_to_runners``, with this clone as the instructor's tree): a .venv made
# under a umask of 077 at either, a clone inside a private folder without namespaces.
CLOSED = {
    level: sandbox.python_closed_to_runners([ROOT], level) if AS_ROOT else None
    for level in (sandbox.ROOT, sandbox.OWN_USER)
}
CLOSED_REASON = "{} is closed to other users: the grader would refuse (no runner could start "
CLOSED_REASON += "this Python)"

contained = pytest.mark.skipif(
    LEVEL is None or CLOSED.get(LEVEL) is not None,
    reason="no containment on this machine (not root, and no user namespaces)"
    if LEVEL is None
    else CLOSED_REASON.format(CLOSED.get(LEVEL)),
)
at_root_level = pytest.mark.skipif(
    LEVEL != sandbox.ROOT or CLOSED[sandbox.ROOT] is not None,
    reason="the root level is not offered here: its runners are user ids"
    if LEVEL != sandbox.ROOT
    else CLOSED_REASON.format(CLOSED[sandbox.ROOT]),
)
with_unshare = pytest.mark.skipif(not NAMESPACE_LEVELS, reason="no unshare on this machine")
as_root = pytest.mark.skipif(
    not AS_ROOT, reason="runner user ids (and Gradescope's autograder) are root's"
)
landlock_with_tcp = pytest.mark.skipif(
    landlock.abi() < 4, reason="Landlock with TCP rules (ABI 4) not here"
)


def level_offered(level: str) -> None:
    """Skip a test parametrized over levels at a level this machine does not offer."""
    if level not in OFFERED:
        pytest.skip(f"the {level} level is not offered on this machine")
    if CLOSED.get(level) is not None:
        pytest.skip(CLOSED_REASON.format(CLOSED[level]))


# The level without namespaces, as Gradescope's containers have it: root, and every runner (a user
# of its own) can reach this Python. In a clone inside a private folder (a home folder of 0700, a
# ``mktemp -d``) the project's .venv is closed to other users: the grader refuses, the test skips.
own_user_level = pytest.mark.skipif(
    not AS_ROOT or CLOSED[sandbox.OWN_USER] is not None,
    reason="the level without namespaces is root's"
    if not AS_ROOT
    else CLOSED_REASON.format(CLOSED[sandbox.OWN_USER]),
)
