"""Landlock (Linux 5.13+): a process confines itself, and everything it starts, to the files it
names, without root and without namespaces. A runner started as a user of its own where the
machine offers no namespaces (a stock Docker container) calls ``confine`` just before exec:
then it reads only Python, its packages and the system's libraries, writes only its copy of the
tree and a few devices, connects to no TCP port and signals no process outside its own domain.
Deny by default, as a root of its own is.

Standard library only (ctypes); see the kernel's ``Documentation/userspace-api/landlock.rst``.
"""

from __future__ import annotations

import ctypes
import os
import struct

CREATE_RULESET, ADD_RULE, RESTRICT_SELF = 444, 445, 446  # the same number on every architecture
VERSION = 1  # landlock_create_ruleset's flag: ask the ABI version
PATH_BENEATH = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1, 2, 4, 8
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # + truncate, ioctl
READ = EXECUTE | READ_FILE | READ_DIR
ALL_TCP = 1 | 2  # bind, connect (ABI 4)
SCOPES = 1 | 2  # abstract unix sockets, signals (ABI 6)
PR_SET_NO_NEW_PRIVS = 38

libc = ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where it has none (or a filter refuses it)."""
    version = libc.syscall(CREATE_RULESET, None, 0, VERSION)
    return max(version, 0)


def handled_fs(version: int) -> int:
    """Every file-system right the kernel of ABI ``version`` knows: all denied unless granted."""
    last = {1: 12, 2: 13, 3: 14, 4: 14}.get(version, 15)
    return (1 << (last + 1)) - 1


def _fail(what: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"landlock {what}: {os.strerror(err)}")


def confine(read: list[str], write: list[str], devices: list[str]) -> None:
    """Restrict this process to reading (and executing) ``read``, doing anything below
    ``write``, and reading and writing the files ``devices``; an OSError where it cannot."""
    version = abi()
    if version < 1:
        raise OSError("landlock: not offered by this kernel")
    handled = handled_fs(version)
    attr = struct.pack("<QQQ", handled, ALL_TCP if version >= 4 else 0, SCOPES * (version >= 6))
    size = 24 if version >= 6 else 16 if version >= 4 else 8
    ruleset = libc.syscall(CREATE_RULESET, attr, size, 0)
    if ruleset < 0:
        _fail("create_ruleset")
    rules = [(p, READ) for p in read] + [(p, handled) for p in write]
    rules += [(p, FILE_RIGHTS & handled) for p in devices]
    for path, rights in rules:
        if not os.path.exists(path):
            continue
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        if not os.path.isdir(path):
            rights &= FILE_RIGHTS
        rule = struct.pack("<Qi", rights & handled, fd)
        done = libc.syscall(ADD_RULE, ruleset, PATH_BENEATH, rule, 0)
        os.close(fd)
        if done != 0:
            _fail(f"add_rule {path}")
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("no_new_privs")
    if libc.syscall(RESTRICT_SELF, ruleset, 0) != 0:
        _fail("restrict_self")
    os.close(ruleset)
