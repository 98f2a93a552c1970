"""The first process of a runner's namespaces: it hides what the runner must not reach, gives up
root, and becomes the runner. Standard library only (it runs before anything is hidden, as
``python -I course/jail.py SETTINGS_JSON``, started by ``course/sandbox.py`` under ``unshare``).

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import sys

TREE = "/tmp/submission"  # where the runner sees its copy of the tree
TREE_BYTES = 512 * 2**20  # the copy's file system: what the runner writes there is bounded
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 32, 4096, 16384
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38

libc = ctypes.CDLL(None, use_errno=True)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """mount(2), an OSError naming the target when it fails."""
    args = [None if v is None else v.encode() for v in (source, target, fstype, data or None)]
    if libc.mount(args[0], args[1], args[2], flags, args[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount on {target}: {os.strerror(err)}")


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def hide_and_expose(hide: list[str], expose: list[str], tree: str) -> None:
    """Step 1 of the module docstring (every path absolute and resolved)."""
    kept = {path: os.open(path, os.O_RDONLY | os.O_DIRECTORY) for path in expose}
    tree_fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    for path in sorted(hide, key=len):  # an outer folder first: an inner one is then gone
        if os.path.isdir(path):
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64m")
    for path, fd in kept.items():
        if any(within(path, folder) for folder in hide):
            os.makedirs(path, exist_ok=True)
            mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
            mount(None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    os.makedirs(TREE, exist_ok=True)
    mount("tmpfs", TREE, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={TREE_BYTES}")
    shutil.copytree(f"/proc/self/fd/{tree_fd}", TREE, symlinks=True, dirs_exist_ok=True)


def give(tree: str, uid: int) -> None:
    """The runner's copy of the tree to its user: it writes there and nowhere else."""
    for folder, _, files in os.walk(tree):
        os.chown(folder, uid, uid)
        for name in files:
            os.lchown(os.path.join(folder, name), uid, uid)


def give_up_root(uid: int) -> None:
    """Step 2 of the module docstring."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def main() -> None:
    settings = json.loads(sys.argv[1])
    hide_and_expose(settings["hide"], settings["expose"], settings["tree"])
    for capability in range(64):  # none after exec, even as a user namespace's root: no unmount
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)
    limits = {resource.RLIMIT_AS: settings["memory"], resource.RLIMIT_FSIZE: settings["file_size"]}
    if settings["uid"] is not None:
        give(TREE, settings["uid"])
        give_up_root(settings["uid"])
        limits[resource.RLIMIT_NPROC] = settings["processes"]  # counted per user: its own
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # a change of user cleared it
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value))
    os.setsid()  # a group of its own: kill(0, ...) reaches none of the grader's processes
    os.chdir(TREE)
    os.execve(settings["argv"][0], settings["argv"], settings["env"])


if __name__ == "__main__":
    main()
