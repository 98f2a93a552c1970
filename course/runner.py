"""A submission's runner: computes the checks' outputs in its copy of the student tree, for the
class grader's judge, which alone compares them with the references and grades.

    python -I -B course/runner.py ANSWER_FD

Says it is ready on the file descriptor ANSWER_FD, then reads check names from its standard
input, one a line, and for each runs the check's ``compute`` on this tree's files (the
student's code) and writes what came of it as one frame (``course/wire.py``): the outputs, or
what was raised and where. What the student's code prints goes to standard output, which the
judge keeps as the submission's log. The runner is untrusted: it holds no reference output in
full and no grade, and the judge reads its answers as data only.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course import wire  # noqa: E402 (the tree's own modules, after its root is on the path)
from course.checks import CHECKS  # noqa: E402
from course.registry import Context, compute_check  # noqa: E402


def main() -> None:
    answers = open(int(sys.argv[1]), "wb", buffering=0)  # noqa: SIM115 (open for the whole run)
    checks = {check.name: check for check in CHECKS}
    ctx = Context(None, ROOT / "sanity_check_reference.pt")
    wire.write_frame(answers, {"ready": True})
    for line in sys.stdin:
        name = line.rstrip("\n")
        if name not in checks:
            wire.write_frame(answers, {"error": f"no check named {name!r}"})
            continue
        print(f"-- {name}", flush=True)
        answer = compute_check(checks[name], ctx)
        answer["check"] = name  # what the judge asked: an answer written ahead is not this one
        wire.write_frame(answers, answer)


if __name__ == "__main__":
    main()
