"""Class grading, run by the instructor (or by Gradescope on the instructor's zip); never in the
student tree.

``grade``: ``python -m course.grading.grade SUBMISSIONS_DIR --out grades.csv``, each submission
read by ``intake`` (names kept harmless by ``inert``), its checks computed by a contained runner
(``sandbox``: ``jail`` or ``landlock``) and compared by ``judge``; ``report``: the class's
mistakes; ``leaderboard`` and ``predictions``: the final project's board; ``autograder``: the
Gradescope zip. The grader writes each submission's tree as the scaffold writes the student tree,
so ``grade`` and ``autograder`` import ``course.authoring.scaffold``; nothing here is imported by
what ships (``course/``).
"""

import os
import sys

# The project: three folders up from here (os only, see below)
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))


def refuse_a_foreign_current_folder() -> None:
    """Run as ``python -m course.grading.X`` from a folder that is not the project's, Python
    imports every module from that folder first: a submission's ``minbert/``, ``tasks/``,
    ``torch.py`` or ``pathlib.py`` there would run in the grader (as root, often). So a grading
    command refuses, in one line, unless the folder is the project or Python was told not to
    look there (``-P``, or ``-I``). It uses ``sys`` and ``os`` only, which Python loaded before
    any folder's module could be. A ``course/`` package in the folder runs before this can
    (nothing of ours is imported then); ``instructor.py``, run as a file, never looks there."""
    argv = sys.orig_argv
    command = argv[argv.index("-m") + 1] if "-m" in argv[:-1] else ""
    if not command.startswith("course.grading") or getattr(sys.flags, "safe_path", False):
        return
    here = os.path.realpath(sys.path[0] or ".")
    if here != PROJECT:
        print(
            f"error: python -m {command} was started in {here}, whose modules Python would "
            f"import before the project's (a submission's minbert/ or torch.py); run it in "
            f"{PROJECT}, or from any folder as python {PROJECT}/instructor.py "
            f"{command.rsplit('.', 1)[-1]} ...",
            file=sys.stderr,
        )
        raise SystemExit(2)


refuse_a_foreign_current_folder()
