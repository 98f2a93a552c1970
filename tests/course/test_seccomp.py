"""The seccomp filter a runner gets at the level without namespaces
(``course/grading/seccomp.py``), installed in a child process as the grader installs it: every
door it closes answers EPERM, and what a runner needs (reading files, importing torch, a pipe,
a thread) still works."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from course.grading import seccomp

ROOT = Path(__file__).resolve().parents[2]

TRIED = """
import ctypes, os, socket, threading
from course.grading import seccomp
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(38, 1, 0, 0, 0)  # no new privileges, as the runner's set-up sets first
seccomp.install()

def refused(call):
    try:
        result = call()
    except PermissionError:
        return True
    return result == -1 and ctypes.get_errno() == 1

doors = {
    "udp": lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    "tcp": lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM),
    "unix": lambda: socket.socket(socket.AF_UNIX),
    "socketpair": lambda: socket.socketpair(),
    "shmget": lambda: libc.shmget(0, 4096, 0o1600),
    "msgget": lambda: libc.msgget(0, 0o1600),
    "semget": lambda: libc.semget(0, 1, 0o1600),
    "memfd": lambda: os.memfd_create("held"),
    "ptrace": lambda: libc.ptrace(0, 0, 0, 0),
}
print(sorted(name for name, call in doors.items() if not refused(call)))
import torch
read, write = os.pipe()
thread = threading.Thread(target=lambda: os.write(write, b"ok"))
thread.start()
thread.join()
with open("course/grading/seccomp.py", encoding="utf-8") as source:
    print(torch.ones(3).sum().item(), os.read(read, 2).decode(), "seccomp" in source.read())
"""


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp table for this architecture")
def test_the_filter_closes_its_doors_and_leaves_what_a_runner_needs():
    done = subprocess.run(
        [sys.executable, "-c", TRIED], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[]", "3.0 ok True"]


@pytest.mark.skipif(not seccomp.supported(), reason="no seccomp table for this architecture")
def test_the_grader_finds_the_filter_works_here():
    assert seccomp.works() is None


def test_each_refused_call_has_its_two_instructions():
    """The program: the architecture checked (else kill), the number loaded, x32's numbers
    killed, a test and an EPERM return per refused call, then allow."""
    arch, refused = seccomp.REFUSED["x86_64"]
    code = seccomp.program(arch, refused, x32=True)
    assert len(code) == 8 * (4 + 2 + 2 * len(refused) + 1)
    assert code[-8:] == (0x06).to_bytes(2, "little") + b"\0\0" + seccomp.ALLOW.to_bytes(4, "little")
