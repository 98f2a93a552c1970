"""Grading on machines unlike ours: from a fresh venv whose base interpreter lacks torch (with
and without ``--system-site-packages``), two classes graded at once, a runner killed from
outside or an ``unshare`` that fails (tried again, then withheld: never the student's zero),
a student's time budget, and Landlock's confinement on its own. Instructor-only (it copies the
solution files)."""

from __future__ import annotations

import csv
import os
import signal
import site
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from course.grading import grade, sandbox
from course.grading.jail import CLOSE_IPC_ONLY, TREE
from tests.course.containment import (
    as_root,
    at_root_level,
    contained,
    landlock_with_tcp,
    with_unshare,
)

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
CHECKS = ["--only", "adamw", "--only", "sampler", "--timeout", "30"]


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def a_class(folder: Path, students: dict[str, dict[str, str]]) -> Path:
    for name, files in students.items():
        for rel, text in files.items():
            (folder / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / name / rel).write_text(text, encoding="utf-8")
    return folder


def honest(folder: Path) -> Path:
    """alice (both right) and bob (the sampler's α wrong: half its points)."""
    wrong = solution(SAMPLING).replace("0.8", "0.5")
    students = {
        "alice": {OPT: solution(OPT), SAMPLING: solution(SAMPLING)},
        "bob": {OPT: solution(OPT), SAMPLING: wrong},
    }
    return a_class(folder, students)


def rows_of(out: Path) -> dict[str, dict]:
    return {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}


def scores(out: Path) -> dict[str, tuple[str, str, str]]:
    rows = rows_of(out)
    return {name: (r["adamw"], r["sampler"], r["status"]) for name, r in rows.items()}


HONEST = {"alice": ("10", "5", "graded"), "bob": ("10", "2.5", "graded")}


def base_without_torch() -> str:
    """A Python without torch to make the venv from (Debian's, where it is one)."""
    for candidate in ("/usr/bin/python3", getattr(sys, "_base_executable", "")):
        if not candidate or not os.path.exists(candidate):
            continue
        probe = subprocess.run([candidate, "-c", "import torch"], capture_output=True)
        if probe.returncode != 0:
            return candidate
    pytest.skip("every Python here has torch: no base interpreter without it")


@contained
@pytest.mark.parametrize("system_site", [False, True])
def test_a_class_graded_from_a_fresh_venv_whose_base_lacks_torch(system_site, tmp_path):
    """The requirements reach the venv through a .pth file (the packages of the Python running
    these tests): the runner must start from the venv, not from its base interpreter."""
    venv = tmp_path / "venv"
    flags = ["--system-site-packages"] if system_site else []
    umask = os.umask(0o022)  # made as the Makefile makes .venv: the runners read it, any umask
    try:
        subprocess.run(
            [base_without_torch(), "-m", "venv", "--without-pip", *flags, str(venv)], check=True
        )
        python = venv / "bin" / "python"
        found = subprocess.run(
            [str(python), "-c", "import site; print(site.getsitepackages()[0])"],
            capture_output=True,
            text=True,
            check=True,
        )
        ours = [p for p in site.getsitepackages() if os.path.isdir(p)]
        Path(found.stdout.strip(), "requirements.pth").write_text("\n".join(ours) + "\n")
    finally:
        os.umask(umask)
    subs, out = honest(tmp_path / "subs"), tmp_path / "grades.csv"
    command = [str(python), "-m", "course.grading.grade", str(subs), "--out", str(out), *CHECKS]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert scores(out) == HONEST


@contained
def test_two_classes_graded_at_once_get_the_grades_they_get_alone(tmp_path):
    classes = [honest(tmp_path / f"class{i}") for i in (1, 2)]

    def command(i: int, label: str) -> list[str]:
        out = tmp_path / f"{label}{i}.csv"
        return [
            sys.executable,
            "-m",
            "course.grading.grade",
            str(classes[i - 1]),
            "--out",
            str(out),
            *CHECKS,
            "--jobs",
            "1",
        ]

    for i in (1, 2):
        subprocess.run(command(i, "alone"), cwd=ROOT, check=True, capture_output=True)
    together = [
        subprocess.Popen(command(i, "together"), cwd=ROOT, stderr=subprocess.PIPE) for i in (1, 2)
    ]
    for grader in together:
        assert grader.wait(timeout=600) == 0, grader.stderr.read()[-2000:]
    for i in (1, 2):
        assert scores(tmp_path / f"together{i}.csv") == scores(tmp_path / f"alone{i}.csv")
        assert scores(tmp_path / f"alone{i}.csv") == HONEST


def runner_pids() -> list[int]:
    """Runners (their init: the process that runs the packed grader, grader.pyz) of every grader
    here."""
    found = []
    for pid in sandbox.processes_of(sandbox.RUNNER_UIDS):
        try:
            if b"grader.pyz" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            continue
    return found


def kill_runners_in_adamw(times: int, stop: threading.Event) -> None:
    """SIGKILL, from outside, each runner that has reached the student's AdamW (it says so by a
    file in its copy of the tree), ``times`` runners in all."""
    killed: set[int] = set()
    while len(killed) < times and not stop.is_set():
        for pid in runner_pids():
            marker = Path("/proc", str(pid), "root", TREE.lstrip("/"), "in-adamw")  # its view
            if pid not in killed and marker.exists():
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.05)


SLOW_ADAMW = "import pathlib, time\npathlib.Path('in-adamw').touch()\ntime.sleep(3)\n"


@at_root_level
@pytest.mark.parametrize("kills", [1, 3])
def test_a_runner_killed_from_outside_once_is_tried_again_and_every_time_is_scored(kills, tmp_path):
    """Killed once from outside: tried again, and graded as if nothing happened. Killed the same
    way on every try: a repeating end is the submission's own (the kernel at a limit it set, or
    for its memory), so it is scored, with the reason, never withheld."""
    future = "from __future__ import annotations\n"
    slow = solution(OPT).replace(future, future + SLOW_ADAMW, 1)
    assert slow != solution(OPT)
    students = {"carol": {OPT: slow, SAMPLING: solution(SAMPLING)}}
    subs, out = a_class(tmp_path / "subs", students), tmp_path / "grades.csv"
    stop = threading.Event()
    killer = threading.Thread(target=kill_runners_in_adamw, args=(kills, stop))
    killer.start()
    try:
        code = grade.main([str(subs), "--out", str(out), *CHECKS])
    finally:
        stop.set()
        killer.join()
    row = rows_of(out)["carol"]
    if kills == 1:  # tried again: the grade it gets when nothing happens
        assert (code, row["adamw"], row["sampler"], row["status"]) == (0, "10", "5", "graded")
        return
    assert (code, row["adamw"], row["sampler"], row["status"]) == (0, "0", "5", "graded")
    said = "killed from outside its sandbox (signal 9) on each of 3 tries"
    assert f"{said}: an end that repeats is the submission's" in row["notes"]


# The unshare a fault hits, by its last argument: a runner's (the jail's settings), or the
# grader's System V IPC probe before grading (the level probe's ``true`` is never hit).
FAILING = {
    "a runner": f'[ "$last" != true ] && [ "$last" != {CLOSE_IPC_ONLY} ]',
    "the IPC probe": f'[ "$last" = {CLOSE_IPC_ONLY} ]',
}


@with_unshare
@pytest.mark.parametrize("hit", sorted(FAILING))
def test_an_unshare_that_fails_once_is_tried_again(hit, tmp_path, monkeypatch):
    """The fault seen on a loaded machine (``unshare: sigprocmask unblock failed``): the first
    runner does not start, or the grader's probe of System V IPC does not; the second does, the
    grader grades (no refusal) and the student loses nothing."""
    real, fake = sandbox.shutil.which("unshare"), tmp_path / "bin"
    fake.mkdir()
    (fake / "unshare").write_text(
        "#!/bin/sh\n"
        'last="$(eval echo \\${$#})"\n'
        f'if [ ! -e "{tmp_path}/failed" ] && {FAILING[hit]}; then\n'
        f'    touch "{tmp_path}/failed"\n'
        "    echo 'unshare: sigprocmask unblock failed: Invalid argument' >&2\n"
        "    exit 1\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    (fake / "unshare").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    subs, out = honest(tmp_path / "subs"), tmp_path / "grades.csv"
    assert grade.main([str(subs), "--out", str(out), *CHECKS, "--jobs", "1"]) == 0
    assert (tmp_path / "failed").exists()
    assert scores(out) == HONEST


@contained
def test_a_students_budget_bounds_all_of_their_checks(tmp_path):
    hang = "while True:\n    pass\n"
    subs = a_class(tmp_path / "subs", {"dave": {OPT: hang, SAMPLING: solution(SAMPLING)}})
    out = tmp_path / "grades.csv"
    assert grade.main([str(subs), "--out", str(out), *CHECKS, "--student_timeout", "8"]) == 0
    row = rows_of(out)["dave"]
    assert (row["adamw"], row["sampler"]) == ("0", "0")
    log = (tmp_path / "grades-results" / "dave.log").read_text()
    assert "timed out: student budget of 8 s spent in adamw" in log
    assert "student budget of 8 s spent before sampler" in log


CONFINED = """
import socket, sys
from course.grading import landlock
allowed, denied, python, port = sys.argv[1:5]
landlock.confine(read=[python, "/usr", "/lib", "/lib64"], write=[allowed], devices=["/dev/null"])
open(f"{allowed}/new", "w").write("ok")
for attempt in (lambda: open(f"{denied}/solution.py").read(), lambda: open(f"{denied}/x", "w")):
    try:
        attempt()
        print("reached", denied)
    except PermissionError:
        pass
try:
    socket.create_connection(("127.0.0.1", int(port)), timeout=2)
    print("connected")
except PermissionError:
    pass
"""


@landlock_with_tcp
def test_landlock_confines_reads_writes_and_connections(tmp_path):
    allowed, denied = tmp_path / "allowed", tmp_path / "denied"
    allowed.mkdir()
    denied.mkdir()
    (denied / "solution.py").write_text("class AdamW: pass\n")
    listener = socket.create_server(("127.0.0.1", 0))
    python = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    argv = [str(allowed), str(denied), python, str(listener.getsockname()[1])]
    done = subprocess.run(
        [sys.executable, "-c", CONFINED, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=os.environ | {"PYTHONPATH": str(ROOT)},
    )
    listener.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert (allowed / "new").read_text() == "ok"
    assert sorted(p.name for p in denied.iterdir()) == ["solution.py"]


@as_root
def test_a_user_id_whose_processes_outlive_the_kill_is_passed_over(tmp_path, monkeypatch):
    """A runner's children still alive when the next runner starts (being reaped, on a loaded
    machine) would be counted by the new runner's watch: their id is not handed out again."""
    monkeypatch.setattr(sandbox, "LOCKS", (str(tmp_path / "locks"),))
    lingering = sandbox.RUNNER_UIDS.start
    monkeypatch.setattr(sandbox, "kill_user", lambda uid, seconds=10.0: None)
    monkeypatch.setattr(sandbox, "processes_of", lambda uid: [4242] if uid == lingering else [])
    uid, fd = sandbox.UserIds().claim()
    try:
        assert uid == lingering + 1
    finally:
        os.close(fd)


MEMFD_HOLDER = """
import os, sys
fd = os.memfd_create("held")
again = os.dup(fd)  # one file behind two descriptors: counted once
for _ in range(64):
    os.write(fd, b"x" * 2**20)  # written, never mapped: in no process's Pss
print("ready", flush=True)
sys.stdin.read()
"""


def test_memory_written_to_a_memfd_counts_toward_a_runners_memory():
    """A runner's watch sums its processes' Pss and the memfd files they hold open, each file
    once: 64 MiB written to a memfd (never mapped) is counted, where Pss alone sees the
    interpreter's few MiB."""
    holder = subprocess.Popen(
        [sys.executable, "-c", MEMFD_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"ready"
        pid = str(holder.pid)
        assert sandbox.memfd_bytes([pid]) == sandbox.memfd_bytes([pid, pid]) == 64 * 2**20
        assert sandbox.resident_bytes([pid]) >= 64 * 2**20
    finally:
        holder.kill()
        holder.wait()


# Moves into a root of its own, a tmpfs (as the jail's runner does, unshare --mount run as root),
# and writes 48 MiB there: memory in no process's Pss.
TMPFS_ROOT_HOLDER = """
import os, sys, tempfile
root = tempfile.mkdtemp()
os.system(f"mount -t tmpfs -o size=64m tmpfs {root}")
with open(f"{root}/held", "wb") as held:
    held.write(b"x" * (48 * 2**20))
os.chroot(root)
print("ready", flush=True)
sys.stdin.read()
"""


@as_root
@with_unshare
def test_memory_written_in_a_jails_root_counts_toward_a_runners_memory():
    """At the namespace levels a runner's root is a tmpfs of its own (``jail.build_root``): what
    it writes there (its /tmp, its tree) is memory no process's Pss counts. The watch adds the
    bytes stored in that root, and nothing where a process's root is the machine's."""
    command = ["unshare", "--mount", "--propagation", "private", sys.executable, "-c"]
    holder = subprocess.Popen(
        [*command, TMPFS_ROOT_HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"ready"
        pid = str(holder.pid)
        assert 48 * 2**20 <= sandbox.jailed_root_bytes([pid]) < 49 * 2**20
        assert sandbox.resident_bytes([pid]) >= 48 * 2**20
        assert sandbox.jailed_root_bytes([str(os.getpid())]) == 0
    finally:
        holder.kill()
        holder.wait()
