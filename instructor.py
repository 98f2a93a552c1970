"""The instructor's commands, safe to start from any folder:

    python /path/to/minbert/instructor.py COMMAND [its options]

    grade        grade a class of submissions (course/grading/grade.py)
    report       draw a graded class's report again from its CSV (course/grading/report.py)
    leaderboard  the final project's board (course/grading/leaderboard.py)
    autograder   the Gradescope zip (course/grading/autograder.py)
    scaffold     write the student tree (course/authoring/scaffold.py)

Run as a file, Python puts this file's folder, the project, first on the import path and never
the folder it was started in. `python -m course...` puts that folder first: a submission's
course/, minbert/ or torch.py there would be imported in place of the project's code, often as
root. A command's own --help says its options: python instructor.py grade --help.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "grade": "course.grading.grade",
    "report": "course.grading.report",
    "leaderboard": "course.grading.leaderboard",
    "autograder": "course.grading.autograder",
    "scaffold": "course.authoring.scaffold",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    name, *options = argv
    if name not in COMMANDS:
        print(
            f"error: instructor.py has no command {name!r}; the commands: {', '.join(COMMANDS)}",
            file=sys.stderr,
        )
        return 2
    from minbert.flags import ArgumentParser

    ArgumentParser.started_as = f"python {__file__} {name}"  # what its usage line names
    try:
        return importlib.import_module(COMMANDS[name]).main(options)
    finally:
        ArgumentParser.started_as = None


if __name__ == "__main__":
    sys.exit(main())
