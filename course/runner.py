"""A submission's runner: computes the checks' outputs in its copy of the student tree, for the
class grader's judge, which alone compares them with the references and grades.

    python -I -B grader.pyz ANSWER_FD         # the packed grader of the student tree
    python -I -B course/runner.py ANSWER_FD   # the same, from the project's own folder

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

HERE = Path(__file__).resolve().parent  # course/, or grader.pyz/course
PACKED = not HERE.parent.is_dir()  # run from the archive, which is then first on the path
ROOT = HERE.parent.parent if PACKED else HERE.parent  # the tree: the student's code
sys.path.insert(1 if PACKED else 0, str(ROOT))  # after the archive: no course/ here shadows it

import torch  # noqa: E402

from course import wire  # noqa: E402 (the tree's own modules, after its root is on the path)
from course.checks import CHECKS  # noqa: E402
from course.registry import Context, compute_check  # noqa: E402


def grader_objects() -> dict[str, object]:
    """What a check's observations rest on, by name: every object the grader's modules
    (``course``, ``course.*``) hold at module level and in their classes, the code of each of
    their functions, and torch's tensor methods and functional ops. A submission that
    replaces one (``Untouched.problem = ...``, to hide a side effect of its own) is caught by
    comparing these with what was there before any of its code ran."""
    found: dict[str, object] = {}
    places = [(n, m) for n, m in sys.modules.items() if n == "course" or n.startswith("course.")]
    # not torch's own namespace: torch wraps some of its functions itself on first use (dynamo)
    places += [("torch.Tensor", torch.Tensor), ("F", torch.nn.functional)]
    for name, place in places:
        for attr, value in list(vars(place).items()):
            found[f"{name}.{attr}"] = value
            if isinstance(value, type) and value.__module__ == name:  # a class of the grader's
                for member, inner in list(vars(value).items()):
                    found[f"{name}.{attr}.{member}"] = inner
    for key, value in list(found.items()):
        if hasattr(value, "__code__"):
            found[f"{key}.__code__"] = value.__code__
    return found


CODE_PARTS = ("__code__", "__defaults__", "__kwdefaults__")


def watch_rewrites(objects: dict[str, object]) -> list[str]:
    """A list that Python's audit hook (PEP 578, which no code can remove) fills with the name
    of every function among ``objects`` whose code or defaults are set from now on: a patch
    that puts the grader's function back before its check ends (its code replaced by one that
    restores the original when called) is seen all the same. Python 3.11 audits these, not a
    class's or a module's attributes: those are compared only once the check has ended."""
    functions = {id(value): key for key, value in objects.items() if hasattr(value, "__code__")}
    seen: list[str] = []

    def hook(event: str, args: tuple) -> None:
        if event == "object.__setattr__" and args[1] in CODE_PARTS and id(args[0]) in functions:
            seen.append(f"{functions[id(args[0])]}.{args[1]}")

    sys.addaudithook(hook)
    return seen


def replaced(before: dict[str, object]) -> str:
    """The first of the grader's objects (``grader_objects``) that is no longer what it was."""
    now = grader_objects()
    return next((key for key, value in before.items() if now.get(key) is not value), "")


def main() -> None:
    if len(sys.argv) != 2 or not sys.argv[1].isdigit():  # typed by hand: say what this is
        said = "this is the class grader's runner, which the grader starts with an answer file"
        print(
            f"error: {said} descriptor; to check your code, run python sanity_check.py",
            file=sys.stderr,
        )
        sys.exit(2)
    answers = open(int(sys.argv[1]), "wb", buffering=0)  # noqa: SIM115 (open for the whole run)
    checks = {check.name: check for check in CHECKS}
    ctx = Context(None, ROOT / "sanity_check_reference.pt")
    intact = grader_objects()  # before any of the submission's code has run
    rewritten = watch_rewrites(intact)  # its objects stay alive in intact: their ids stay theirs
    wire.write_frame(answers, {"ready": True})
    for line in sys.stdin:
        name = line.rstrip("\n")
        if name not in checks:
            wire.write_frame(answers, {"error": f"no check named {name!r}"})
            continue
        print(f"-- {name}", flush=True)
        answer = compute_check(checks[name], ctx)
        if changed := replaced(intact) or next(iter(rewritten), ""):
            said = f"the submission's code replaced the grader's {changed}: nothing graded here"
            answer = {"error": said, "not_implemented": False, "restart": True}
        answer["check"] = name  # what the judge asked: an answer written ahead is not this one
        wire.write_frame(answers, answer)


if __name__ == "__main__":
    main()
