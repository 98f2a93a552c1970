"""A seccomp filter for a runner at the level without namespaces: the doors Landlock leaves open
closed by system call. Installed just before exec (no new privileges already set), it answers
EPERM to every socket (UDP out of the machine, a connect() to the machine's unix sockets),
System V shared memory, queues and semaphores (which outlive the runner), ptrace and
process_vm_* (another process's memory), memfd_create (memory that no process's Pss counts) and
io_uring (which opens sockets without socket()). A call from another architecture's table (i386
or x32 on x86_64) kills the process: its numbers mean other calls.

A classic BPF program of our own (standard library only, as ``landlock.py``); see the kernel's
``Documentation/userspace-api/seccomp_filter.rst``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
LOAD_WORD, JUMP_IF_EQUAL, JUMP_IF_AT_LEAST, RETURN = 0x20, 0x15, 0x35, 0x06  # BPF opcodes
NUMBER_AT, ARCH_AT = 0, 4  # offsets in struct seccomp_data
ALLOW, KILL, REFUSE = 0x7FFF0000, 0x80000000, 0x00050000 | errno.EPERM
X32_BIT = 0x40000000

# The architecture's audit number and its numbers of the calls refused (the kernel's unistd
# tables): socket, socketpair, the System V calls, ptrace, process_vm_readv/writev,
# memfd_create, io_uring_setup.
REFUSED = {
    "x86_64": (
        0xC000003E,
        (41, 53, 29, 30, 31, 67, 64, 65, 66, 220, 68, 69, 70, 71, 101, 310, 311, 319, 425),
    ),
    "aarch64": (
        0xC00000B7,
        (198, 199, 194, 195, 196, 197, 190, 191, 192, 193, 186, 187, 188, 189, 117, 270, 271, 279)
        + (425,),
    ),
}

libc = ctypes.CDLL(None, use_errno=True)


class sock_fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def program(arch: int, refused: tuple[int, ...], x32: bool) -> bytes:
    """The filter's instructions (struct sock_filter: code, jump if true, jump if false, k)."""
    steps = [
        (LOAD_WORD, 0, 0, ARCH_AT),
        (JUMP_IF_EQUAL, 1, 0, arch),
        (RETURN, 0, 0, KILL),
        (LOAD_WORD, 0, 0, NUMBER_AT),
    ]
    if x32:
        steps += [(JUMP_IF_AT_LEAST, 0, 1, X32_BIT), (RETURN, 0, 0, KILL)]
    for number in refused:
        steps += [(JUMP_IF_EQUAL, 0, 1, number), (RETURN, 0, 0, REFUSE)]
    steps.append((RETURN, 0, 0, ALLOW))
    return b"".join(struct.pack("HBBI", *step) for step in steps)


def supported() -> bool:
    """Whether this machine's architecture has a table here."""
    return platform.machine() in REFUSED


def install() -> None:
    """Install the filter on this process and all it starts (no new privileges must be set);
    OSError if the kernel refuses it."""
    arch, refused = REFUSED[platform.machine()]
    code = program(arch, refused, x32=platform.machine() == "x86_64")
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = sock_fprog(len(code) // 8, ctypes.addressof(buffer))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"seccomp: {os.strerror(number)}")


def works() -> str | None:
    """None where the filter installs and refuses a socket in a child process; else why not, in
    words (the grader then refuses to grade at the level that needs it)."""
    if not supported():
        return f"no seccomp table for {platform.machine()}"
    child = os.fork()
    if child == 0:
        code = 1
        try:
            libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            install()
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close()
            except PermissionError:
                code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    return None if os.waitstatus_to_exitcode(status) == 0 else "the kernel refused the filter"
