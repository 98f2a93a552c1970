"""The judge: grades one submission without running any of its code.

The judge holds the references (this project's ``course/reference_data.pt`` and
``sanity_check_reference.pt``, never the submission's copies) and the points. For each check it
asks the submission's runner (``course/runner.py``, started contained by ``course/sandbox.py``)
for the check's outputs and judges them itself (``Check.judge``): what the runner sends is
data (``course/wire.py``), and a pass needs the outputs themselves, which the seal hides.

Each check has its own time limit. A runner that does not answer in time, dies, or answers
what is not a message costs that check alone: the check fails with what happened ("timed out
after 20 s in adamw: ..."), the runner and every process it started are killed, and a fresh
runner answers the checks after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from course import sandbox, wire
from course.registry import FAIL, Check, Context, Result, judge_check

READY_SECONDS = 120.0  # a runner's start: Python, torch and the checks imported


@dataclass
class Verdict:
    """One submission's results, in the order of the checks, and what happened on the way."""

    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_started: str = ""  # why no runner started: the grader's fault, never the submission's


@dataclass
class Limits:
    """Per check: seconds; per runner: GiB of address space; the containment level."""

    seconds: float
    memory_gb: float
    level: str | None


class RunnerFailed(Exception):
    """The runner did not answer a check (timed out, ended, or answered garbage)."""


def ask(runner: sandbox.Runner, name: str, seconds: float) -> dict:
    """The runner's answer to the check ``name``: a dict, else RunnerFailed saying why."""
    try:
        runner.process.stdin.write(name.encode("utf-8") + b"\n")
        runner.process.stdin.flush()
        answer = wire.read_frame(runner.answers, seconds)
    except TimeoutError:
        raise RunnerFailed(f"timed out after {seconds:g} s") from None
    except (EOFError, BrokenPipeError):
        raise RunnerFailed(ended(runner)) from None
    except wire.WireError as err:
        raise RunnerFailed(f"the runner's answer was not a message ({err})") from None
    if not isinstance(answer, dict):
        raise RunnerFailed("the runner's answer was not a message")
    return answer


def ended(runner: sandbox.Runner) -> str:
    """How the runner ended, in words."""
    try:
        code = runner.process.wait(timeout=5)
    except Exception:  # still running, its answer pipe closed
        return "the runner closed its answers"
    if code < 0:
        return f"the runner was killed (signal {-code})"
    return f"the runner exited with code {code}"


def start(tree: Path, private: list[Path], limits: Limits, log) -> sandbox.Runner:
    """A runner that said it is ready; RunnerFailed if it did not."""
    runner = sandbox.start(tree, private, limits.level, limits.memory_gb, log)
    try:
        ready = wire.read_frame(runner.answers, READY_SECONDS)
    except TimeoutError:
        runner.stop()
        raise RunnerFailed(f"the runner did not start within {READY_SECONDS:g} s") from None
    except (EOFError, wire.WireError):
        runner.stop()
        raise RunnerFailed(f"the runner did not start ({ended(runner)})") from None
    if ready != {"ready": True}:
        runner.stop()
        raise RunnerFailed("the runner did not start (its first answer was not 'ready')")
    return runner


def judge_submission(
    tree: Path, checks: list[Check], ctx: Context, private: list[Path], limits: Limits, log
) -> Verdict:
    """Every check of ``checks`` for the submission in ``tree`` (see the module docstring);
    ``private``: the paths its runner must not reach; ``log``: where its output goes."""
    verdict, runner = Verdict(), None
    try:
        for check in checks:
            if runner is None:
                try:
                    runner = start(tree, private, limits, log)
                except RunnerFailed as err:
                    failed = [Result(c, FAIL, None, str(err)) for c in checks]
                    verdict.results += failed[len(verdict.results) :]
                    verdict.not_started = str(err)
                    return verdict
            try:
                computed = ask(runner, check.name, limits.seconds)
            except RunnerFailed as err:
                runner.stop()
                runner = None
                said = f"{err} in {check.name}"
                verdict.results.append(Result(check, FAIL, None, said))
                verdict.notes.append(said)
                continue
            verdict.results.append(judge_check(check, ctx, computed))
            if (said := verdict.results[-1].uncompiled) and said not in verdict.notes:
                verdict.notes.append(said)
    finally:
        if runner is not None:
            runner.stop()
    return verdict
