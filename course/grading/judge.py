"""The judge: grades one submission without running any of its code.

It asks the submission's runner (``course/runner.py``, run from the tree's packed grader
``grader.pyz``, started by ``course/grading/sandbox.py``) for each check's outputs and judges them
itself with this project's references: what the runner sends is data (``course/wire.py``), and a
pass needs the outputs, which the seal hides. Each check has its own time limit and the student a
budget for all of them; a runner that hangs or dies costs that check alone. A fault of the grader is
never the student's zero: a runner that does not start, or that is killed by a signal nobody in its
own tree could send, is tried again (``TRIES`` in all), then the check is ``WITHHELD`` and
``Verdict.faults`` says why; unless the runner ended the same way in the check on every try (the
kernel at a limit the submission set, or for its memory): an end that repeats is the submission's,
and scored.

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from course import wire
from course.grading import sandbox
from course.grading.jail import OWN_CPU_LIMIT
from course.registry import FAIL, WITHHELD, Check, Context, Result, judge_check

READY_SECONDS = 120.0  # a runner's start: Python, torch and the checks imported
TRIES = 3  # starts of a runner for one check, where the grader lost the ones before


@dataclass
class Verdict:
    """One submission's results, in the order of the checks, and what happened on the way."""

    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)  # the grader's, never the submission's

    def add(self, result: Result) -> None:
        """A check's result; what happened to its runner, or a file that does not compile, in
        the notes (once each); a withheld check in the faults."""
        lost = result.max_abs_diff is None and result.detail.endswith(f"in {result.check.name}")
        said = result.detail if lost and result.status == FAIL else ""
        for note in (said, result.uncompiled):
            if note and note not in self.notes:
                self.notes.append(note)
        if result.status == WITHHELD:
            self.faults.append(f"{result.check.name}: {result.detail}")
        self.results.append(result)


@dataclass
class Limits:
    """Per check: seconds; per student: seconds; per runner: GiB of memory; the containment."""

    seconds: float
    memory_gb: float
    level: str | None
    student_seconds: float = 600.0


class RunnerFailed(Exception):
    """The runner did not answer a check (timed out, ended, or answered garbage).
    ``grader_fault``: it was lost through no doing of the submission's."""

    def __init__(self, said: str, grader_fault: bool = False, in_its_check: bool = False) -> None:
        super().__init__(said)
        self.grader_fault = grader_fault
        self.in_its_check = in_its_check  # it ended while running the submission's code


def ask(runner: sandbox.Runner, name: str, seconds: float) -> dict:
    """The runner's answer to the check ``name``: a dict, else RunnerFailed saying why."""
    try:
        runner.process.stdin.write(name.encode("utf-8") + b"\n")
        runner.process.stdin.flush()
        answer = wire.read_frame(runner.answers, seconds)
    except TimeoutError:
        raise RunnerFailed(f"timed out after {seconds:g} s") from None
    except (EOFError, BrokenPipeError):
        raise RunnerFailed(ended(runner), runner.ended_from_outside(), True) from None
    except wire.WireError as err:
        raise RunnerFailed(f"the runner's answer was not a message ({err})") from None
    if not isinstance(answer, dict):
        raise RunnerFailed("the runner's answer was not a message")
    if answer.pop("check", None) != name:  # written ahead by the submission's own code
        raise RunnerFailed("the runner's answer was not the answer to this check")
    return answer


def ended(runner: sandbox.Runner) -> str:
    """How the runner ended, in words."""
    try:
        code = runner.process.wait(timeout=5)
    except Exception:  # still running, its answer pipe closed
        return "the runner closed its answers"
    if runner.watch is not None and runner.watch.broke:
        return f"the runner was stopped: {runner.watch.broke}"
    if runner.ended_from_outside():
        return f"the runner was killed from outside its sandbox (signal {-code})"
    if code == OWN_CPU_LIMIT and runner.level in (sandbox.ROOT, sandbox.USER_NAMESPACE):
        return "the runner was killed by SIGKILL after lowering its own CPU limit"
    if code < 0:
        return f"the runner was killed (signal {-code})"
    return f"the runner exited with code {code}"


def start(tree: Path, private: list[Path], limits: Limits, log) -> sandbox.Runner:
    """A runner that said it is ready; RunnerFailed (a grader fault) if it did not."""
    try:
        runner = sandbox.start(tree, private, limits.level, limits.memory_gb, log)
    except (OSError, sandbox.NoUserId) as err:  # the machine's, not the submission's
        raise RunnerFailed(f"the runner did not start ({err})", True) from None
    try:
        ready = wire.read_frame(runner.answers, READY_SECONDS)
    except TimeoutError:
        runner.stop()
        raise RunnerFailed(f"the runner did not start within {READY_SECONDS:g} s", True) from None
    except (EOFError, wire.WireError):
        said = ended(runner)
        runner.stop()
        raise RunnerFailed(f"the runner did not start ({said})", True) from None
    if ready != {"ready": True}:
        runner.stop()
        raise RunnerFailed("the runner did not start (its first answer was not 'ready')", True)
    return runner


class Session:
    """One submission's runners: at most one alive, started when a check needs one."""

    def __init__(self, tree: Path, private: list[Path], limits: Limits, log) -> None:
        self.tree, self.private, self.limits, self.log = tree, private, limits, log
        self.runner: sandbox.Runner | None = None
        self.cannot_start = ""  # why no runner started, after every try: the checks left wait

    def ask(self, check: Check, seconds: float) -> dict:
        """The runner's answer to ``check``, a runner started (again) as needed."""
        if self.runner is None:
            self.runner = start(self.tree, self.private, self.limits, self.log)
        try:
            answer = ask(self.runner, check.name, seconds)
        except RunnerFailed:
            self.close()
            raise
        if answer.pop("restart", False):  # the grader's code in it was replaced: a fresh one
            self.close()
        return answer

    def close(self) -> None:
        if self.runner is not None:
            self.runner.stop()
            self.runner = None


def judge_one(check: Check, session: Session, ctx: Context, seconds: float) -> Result:
    """One check, tried again where the grader lost its runner (see the module docstring)."""
    lost = []
    for _ in range(TRIES):
        try:
            computed = session.ask(check, seconds)
        except RunnerFailed as err:
            if not err.grader_fault:
                return Result(check, FAIL, None, f"{err} in {check.name}")
            lost.append(err)
            continue
        return judge_check(check, ctx, computed)
    if all(err.in_its_check for err in lost) and len({str(err) for err in lost}) == 1:
        said = f"{lost[0]} on each of {TRIES} tries: an end that repeats is the submission's"
        return Result(check, FAIL, None, f"{said} (a limit it set, or memory) in {check.name}")
    said = f"grader fault: {lost[-1]} ({TRIES} tries); withheld, not scored"
    return Result(check, WITHHELD, None, said)


def judge_within(
    check: Check, session: Session, ctx: Context, limits: Limits, deadline: float
) -> Result:
    """One check within what is left of the student's budget (``deadline``, monotonic)."""
    spent = f"student budget of {limits.student_seconds:g} s spent"
    left = deadline - time.monotonic()
    if left <= 0:
        return Result(check, FAIL, None, f"{spent} before {check.name}")
    if session.cannot_start:
        return Result(check, WITHHELD, None, session.cannot_start)
    result = judge_one(check, session, ctx, min(limits.seconds, left))
    if left < limits.seconds and result.detail.startswith("timed out"):
        result.detail = f"timed out: {spent} in {check.name}"
    if result.status == WITHHELD and "did not start" in result.detail:
        session.cannot_start = result.detail
    return result


def judge_submission(
    tree: Path, checks: list[Check], ctx: Context, private: list[Path], limits: Limits, log
) -> Verdict:
    """Every check of ``checks`` for the submission in ``tree`` (see the module docstring);
    ``private``: the paths its runner must not reach; ``log``: keeps what its runners print."""
    verdict, session = Verdict(), Session(tree, private, limits, log)
    deadline = time.monotonic() + limits.student_seconds
    try:
        for check in checks:
            verdict.add(judge_within(check, session, ctx, limits, deadline))
    finally:
        session.close()
    return verdict
