"""What tests share besides fixtures (those are in conftest.py): the one way the tests run the
driver (``driver_argv`` / ``run_driver``; ``kill_when_resumable`` and ``signal_when_resumable``
for a run stopped as soon as it can be resumed). Import them from here:
``from tests.helpers import ...``."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def driver_argv(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> list[str]:
    """The driver's command line for a tiny run: the tiny checkpoint and data, batches of 4,
    sequences of at most 32 tokens, then ``extra``."""
    return [
        "--checkpoint",
        str(checkpoint),
        "--data_dir",
        str(data),
        "--out_dir",
        str(out_dir),
        "--batch_size",
        "4",
        "--max_length",
        "32",
        *extra,
    ]


def driver_in(folder: Path, *argv: str) -> subprocess.CompletedProcess:
    """``python train_multitask.py ARGV`` run in ``folder`` (a copy of the code, a student tree),
    in a fresh process: its exit code and output."""
    return subprocess.run(
        [sys.executable, "train_multitask.py", *argv],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )


def run_driver(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> int:
    """``train_multitask.main`` on ``driver_argv``; its exit code."""
    import train_multitask

    return train_multitask.main(driver_argv(checkpoint, data, out_dir, *extra))


def short_run(epochs: int = 2, steps: int = 3) -> tuple[str, ...]:
    """The flags of a short tiny run: ``epochs`` epochs of ``steps`` steps, no plots."""
    return ("--epochs", str(epochs), "--steps_per_epoch", str(steps), "--no_plots")


def tiny_run(
    checkpoint: Path, data: Path, out_dir: Path, *extra: str, epochs: int = 2, steps: int = 3
) -> Path:
    """A finished short tiny run (``short_run(epochs, steps)`` then ``extra``) in ``out_dir``."""
    assert run_driver(checkpoint, data, out_dir, *short_run(epochs, steps), *extra) == 0
    return out_dir


def signal_when_resumable(cmd: list[str], out_dir: Path, stop: int) -> tuple[int, str]:
    """Start ``cmd`` (from the repository root) in a fresh process and send it ``stop`` as soon
    as ``out_dir/last.pt`` exists (or after 120 s); its return code and stderr."""
    # A shell without job control starts background commands with SIGINT ignored, and Python
    # keeps an ignored SIGINT; the child gets the default back, as a terminal's Ctrl-C finds it.
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen(
        cmd,
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.time() + 120
    while not (out_dir / "last.pt").exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.send_signal(stop)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def kill_when_resumable(checkpoint: Path, data: Path, out_dir: Path, *extra: str) -> int:
    """Start the driver on ``driver_argv`` in a fresh process and kill -9 it as soon as its
    ``last.pt`` exists (or after 120 s); its return code (−SIGKILL when the kill came first)."""
    cmd = [sys.executable, "train_multitask.py", *driver_argv(checkpoint, data, out_dir, *extra)]
    return signal_when_resumable(cmd, out_dir, signal.SIGKILL)[0]


def processes_with(marker: str) -> list[int]:
    """The live processes whose command line holds ``marker`` (what a test's attack left)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def runners_left(before: set[int], seconds: float = 60.0) -> list[str]:
    """The processes of a runner user id that were not there in ``before`` (taken before the
    grading began) and are all still alive ``seconds`` later, each with its state and command
    line: what this grading left behind. A runner of another grader running beside this test
    (pytest-xdist's group does not hold them apart under pytest 9) ends within its checks'
    time limits, so only one that stays is counted."""
    from course.grading import sandbox

    found = set(sandbox.processes_of(sandbox.RUNNER_UIDS)) - before
    deadline = time.monotonic() + seconds
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found &= set(sandbox.processes_of(sandbox.RUNNER_UIDS))
    return [f"{pid} {_described(pid)}" for pid in sorted(found)]


def runner_processes() -> set[int]:
    """The live processes of a runner user id now (for ``runners_left``)."""
    from course.grading import sandbox

    return set(sandbox.processes_of(sandbox.RUNNER_UIDS))


def _described(pid: int) -> str:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0]
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, IndexError):
        return "(gone)"
    return f"state {state}: {command[:200]}"


# The project's own rules, run in a copy a recipe changed: help texts, one home per text, the
# structure's caps (but its two tests that start interpreters and train: they check no rule a
# recipe's text could break that the others miss, and take half a minute).
RULE_TESTS = (
    "tests/commands/test_help_texts.py",
    "tests/structure/test_one_home.py",
    "tests/structure/test_structure.py",
)
SLOW_RULE_TESTS = "not fresh_interpreter and not one_training_step"


def rules_hold_in(folder: Path) -> None:
    """``ruff`` (check and format) and the project's rule tests pass in ``folder``, a copy of the
    code that a recipe was followed in: each tracked file the copy lacks is copied in first, so
    the rules see the whole project with the recipe's change."""
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for rel in filter(None, tracked):
        source, target = ROOT / rel, folder / rel
        if source.is_file() and not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    for ruff in (["check", "--quiet", "."], ["format", "--check", "--quiet", "."]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *ruff], cwd=folder, capture_output=True
        )
        assert done.returncode == 0, (ruff, done.stdout.decode()[-3000:])
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x"]
    done = subprocess.run(
        [*pytest, "-k", SLOW_RULE_TESTS, *RULE_TESTS], cwd=folder, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-4000:]


def copy_of_the_code(folder: Path, names: tuple[str, ...]) -> Path:
    """``folder`` holding a copy of the project's files and folders ``names`` (bytecode left
    behind), for a test that changes code: the repository itself is never written."""
    for name in names:
        source, target = ROOT / name, folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, target)
    return folder
