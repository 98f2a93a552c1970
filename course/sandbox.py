"""Where a submission's runner runs: the containment this machine offers, and the process that
starts it there.

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from course.jail import TREE

JAIL = Path(__file__).resolve().with_name("jail.py")
RUNNER_UID = 61_000  # the runner's user where the grader is root: no account has it
FILE_SIZE = 64 * 2**20  # bytes: the largest file a runner may write (its log included)
PROCESSES = 256  # the runner user's processes, where it has a user of its own
SYSTEM = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/dev", "/sys")
# Hidden from every runner, beside the instructor's own paths (``course/judge.py``).
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run")
ROOT, USER_NAMESPACE = "root", "user namespace"
UNSHARE = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--net", "--ipc", "--uts"]


@dataclass(frozen=True)
class Runner:
    """A started runner: its process, and the pipe end its answers come out of."""

    process: subprocess.Popen
    answers: int  # a file descriptor
    level: str | None

    def stop(self) -> None:
        """Kill the runner and everything it started; close the pipe."""
        if self.level is None:
            with _quietly():
                os.killpg(self.process.pid, signal.SIGKILL)
        self.process.kill()
        self.process.wait()
        if self.level == ROOT:
            kill_user(RUNNER_UID)
        os.close(self.answers)


class _quietly:
    """Ignore a process that is already gone."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        return kind is ProcessLookupError or kind is PermissionError


def containment() -> str | None:
    """The best level this machine offers (see the module docstring), or None."""
    if shutil.which("unshare") is None:
        return None
    if os.geteuid() == 0 and _works(UNSHARE + ["--mount-proc", "true"]):
        return ROOT
    if _works(UNSHARE + ["--user", "--map-root-user", "--mount-proc", "true"]):
        return USER_NAMESPACE
    return None


def _works(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def kill_user(uid: int, seconds: float = 10.0) -> None:
    """SIGKILL every process of ``uid`` (a runner's user: nothing else runs as it), again until
    none is left alive (a zombie is dead), or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while (alive := processes_of(uid)) and time.monotonic() < deadline:
        for pid in alive:
            with _quietly():
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def processes_of(uid: int) -> list[int]:
    """The live (not zombie) processes whose real user is ``uid``."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in status.read_text().splitlines())
        except (OSError, ValueError):
            continue
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(status.parent.name))
    return found


def python_paths() -> list[str]:
    """What a runner must be able to read: Python and its packages."""
    found = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix)}
    for entry in sys.path:
        if (
            entry
            and Path(entry).is_dir()
            and Path(entry).name in ("site-packages", "dist-packages")
        ):
            found.add(os.path.realpath(entry))
    return sorted(found)


def hidden_paths(private: list[Path], exposed: list[str], level: str) -> list[str]:
    """Every path to cover: the instructor's (``private``), the places every user can write, and
    (as another user) each folder above an exposed path that only its owner may enter."""
    paths = {os.path.realpath(p) for p in private} | set(SHARED_WRITABLE)
    if level == ROOT:
        for path in exposed:
            for folder in Path(path).parents:
                if folder != Path("/") and not folder.stat().st_mode & 0o001:
                    paths.add(str(folder))
    return sorted(p for p in paths if not _holds_the_system(p))


def _holds_the_system(path: str) -> bool:
    """Covering ``path`` would take the system's own files away (``/`` or a folder above one)."""
    return any(s == path or s.startswith(path.rstrip("/") + "/") for s in SYSTEM)


def start(tree: Path, private: list[Path], level: str | None, memory_gb: float, log) -> Runner:
    """A runner of ``tree`` (a copy of the student tree with the submission's files), its output
    to the file ``log``; contained at ``level`` (None: not contained, ``--trusted``)."""
    read, write = os.pipe()
    memory = int(memory_gb * 2**30)
    python = os.path.realpath(sys.executable)
    inside = TREE if level is not None else str(tree)
    argv = [python, "-I", "-B", f"{inside}/course/runner.py", str(write)]
    env = {"HOME": inside, "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    if level is None:
        command, setup = argv, _plain_limits(memory)
    else:
        exposed = python_paths()
        settings = {
            "hide": hidden_paths(private, exposed, level),
            "expose": exposed,
            "tree": str(tree),
            "uid": RUNNER_UID if level == ROOT else None,
            "memory": memory,
            "file_size": FILE_SIZE,
            "processes": PROCESSES,
            "argv": argv,
            "env": env,
        }
        user = ["--user", "--map-root-user"] if level == USER_NAMESPACE else []
        jail = [python, "-I", "-B", str(JAIL), json.dumps(settings)]
        command, setup = [*UNSHARE, *user, "--mount-proc", "--", *jail], None
    try:
        process = subprocess.Popen(
            command,
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
            preexec_fn=setup,
            start_new_session=setup is None,
        )
    finally:
        os.close(write)
    return Runner(process, read, level)


def _plain_limits(memory: int):
    """The uncontained runner's set-up: its own session, limited address space and file size."""

    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))

    return apply
