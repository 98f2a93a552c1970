"""The first process of a runner's namespaces: it builds the runner a root of its own, gives up
root, and becomes the runner. Standard library only (it runs before the new root exists, as
``python -I course/grading/jail.py SETTINGS_JSON``, started by ``course/grading/sandbox.py``
under ``unshare``).

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import resource
import shutil
import signal
import sys

TREE = "/tmp/submission"  # where the runner sees its copy of the tree
ROOT_BYTES = 512 * 2**20  # the new root's file system: what the runner writes there is bounded
BUILD_AT = "/tmp"  # a folder every machine has; the new root is mounted over it, in here only
DEVICES = ("null", "zero", "urandom", "random")
CLOSE_IPC_ONLY = "--close-system-v-ipc-only"  # the probe: close the IPC, run nothing
IPC_REFUSED = 123  # the probe's exit code where the kernel refused to close it
OWN_CPU_LIMIT = 125  # the jail's exit code: the runner was killed at a CPU limit it set itself
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
# statvfs's f_flag bits that a bind's read-only remount must keep (a user namespace may not
# clear a flag its parent's mount has): (ST_ bit, MS_ flag)
KEPT_FLAGS = (
    (2, MS_NOSUID),
    (4, MS_NODEV),
    (8, MS_NOEXEC),
    (1024, 1024),
    (2048, 2048),
    (4096, 1 << 21),
)
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38

libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    """mount(2), an OSError naming the target when it fails."""
    args = [None if v is None else v.encode() for v in (source, target, fstype, data or None)]
    _check(libc.mount(args[0], args[1], args[2], flags, args[3]), f"mount on {target}")


def bind_read_only(fd: int, target: str) -> None:
    """Bind the file or folder open as ``fd`` at ``target``, read-only, no set-user-ID."""
    source = f"/proc/self/fd/{fd}"
    mount(source, target, None, MS_BIND | MS_REC)
    kept = sum(ms for st, ms in KEPT_FLAGS if os.statvfs(source).f_flag & st)
    mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | kept)


def place(path: str, new_root: str, fd: int) -> None:
    """``path`` of this machine at the same path in the new root (read-only)."""
    target = new_root + path
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()  # noqa: SIM115 (a mount point, closed at once)
    bind_read_only(fd, target)


def build_root(expose: list[str], links: dict[str, str], tree: str) -> None:
    """Step 1 of the design notes: a tmpfs holding only what the runner needs, made the root.

    ``expose``: paths (files or folders) bound read-only at the same path; ``links``: symbolic
    links to recreate (``/bin`` -> ``usr/bin``); ``tree``: the folder copied to ``TREE``."""
    kept = {path: os.open(path, os.O_RDONLY | os.O_CLOEXEC) for path in expose}
    devices = {name: os.open(f"/dev/{name}", os.O_RDONLY | os.O_CLOEXEC) for name in DEVICES}
    tree_fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    os.umask(0o022)  # the folders made here open to the runner, whatever the grader's umask
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the machine
    mount("tmpfs", BUILD_AT, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0755,size={ROOT_BYTES}")
    for path in sorted(kept, key=len):  # an outer folder first: an inner one binds inside it
        place(path, BUILD_AT, kept[path])
    for path, target in links.items():
        os.makedirs(os.path.dirname(BUILD_AT + path), exist_ok=True)
        os.symlink(target, BUILD_AT + path)
    os.makedirs(f"{BUILD_AT}/dev", exist_ok=True)
    for name, fd in devices.items():
        place(f"/dev/{name}", BUILD_AT, fd)
    for name, target in (("fd", "/proc/self/fd"), ("stdout", "/proc/self/fd/1")):
        os.symlink(target, f"{BUILD_AT}/dev/{name}")
    os.makedirs(f"{BUILD_AT}/proc")
    mount("proc", f"{BUILD_AT}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(BUILD_AT + TREE)
    os.chmod(os.path.dirname(BUILD_AT + TREE), 0o1777)  # the runner's empty /tmp
    shutil.copytree(f"/proc/self/fd/{tree_fd}", BUILD_AT + TREE, symlinks=True, dirs_exist_ok=True)
    os.close(tree_fd)
    pivot_into(BUILD_AT)


def pivot_into(new_root: str) -> None:
    """Make ``new_root`` the root and detach the machine's (pivot_root(".", ".") then umount)."""
    os.chdir(new_root)
    number = PIVOT_ROOT[platform.machine()]
    _check(libc.syscall(number, b".", b"."), "pivot_root")
    _check(libc.umount2(b".", MNT_DETACH), "umount of the old root")
    os.chdir("/")


def close_system_v_ipc() -> None:
    """No System V shared memory, message queue or semaphore set can be made in the runner's IPC
    namespace (its own: ``unshare --ipc``): memory written into a segment and detached is in no
    process's Pss, so the grader's memory watch would not see it. Set by the namespace's root
    before it gives root up; the own-user level refuses the calls in its seccomp filter instead."""
    for name in ("shmmni", "msgmni"):  # the most segments, the most queues
        with open(f"/proc/sys/kernel/{name}", "w", encoding="ascii") as limit:
            limit.write("0")
    with open("/proc/sys/kernel/sem", encoding="ascii") as limit:
        sizes = limit.read().split()  # SEMMSL SEMMNS SEMOPM SEMMNI
    with open("/proc/sys/kernel/sem", "w", encoding="ascii") as limit:
        limit.write(" ".join([*sizes[:3], "0"]))


def give(tree: str, uid: int) -> None:
    """The runner's copy of the tree to its user: it writes there and in /tmp, nowhere else."""
    for folder, _, files in os.walk(tree):
        os.chown(folder, uid, uid)
        for name in files:
            os.lchown(os.path.join(folder, name), uid, uid)


def give_up_root(uid: int) -> None:
    """Step 2 of the design notes."""
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)


def become_runner(settings: dict) -> None:
    """The child, init of the new PID namespace: steps 1-3 of the design notes, then exec."""
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # ends with the jail that waits for it
    build_root(settings["expose"], settings["links"], settings["tree"])
    close_system_v_ipc()
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


def end_as(status: int) -> None:
    """End this process as the runner ended (its exit code, or killed by the same signal), so
    that the grader reads how the runner itself ended, not how a wrapper reports it."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number != signal.SIGKILL:
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal whose default is not to end a process
    os._exit(os.waitstatus_to_exitcode(status))


def main() -> None:
    """Fork the runner into the new PID namespace (``unshare --pid`` without ``--fork``), wait
    for it, and end as it ended. With ``CLOSE_IPC_ONLY`` in place of the settings, only close
    System V IPC and exit: the grader's probe of whether this kernel lets it (in
    ``course/grading/sandbox.py``)."""
    if sys.argv[1] == CLOSE_IPC_ONLY:
        try:
            close_system_v_ipc()
        except OSError as err:
            print(err, file=sys.stderr)
            sys.exit(IPC_REFUSED)
        return
    settings = json.loads(sys.argv[1])
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # ends with the grader
    go_on, go = os.pipe()  # the child waits until its /proc folder is open here
    child = os.fork()
    if child == 0:
        try:
            os.close(go)
            os.read(go_on, 1)
            become_runner(settings)
        finally:  # exec did not happen: say why, in the runner's log
            import traceback

            traceback.print_exc()
            os._exit(1)
    folder = os.open(f"/proc/{child}", os.O_RDONLY | os.O_DIRECTORY)  # before its root changes
    os.write(go, b"1")
    os.close(go)
    limit = own_cpu_limit(child, folder)
    _, status, usage = os.wait4(child, 0)
    if cut_by_own_cpu_limit(status, usage, limit):
        print(f"the runner was killed after lowering its own CPU limit to {limit} s", flush=True)
        os._exit(OWN_CPU_LIMIT)
    end_as(status)


def own_cpu_limit(child: int, folder: int) -> int | None:
    """The hard CPU limit (seconds) the runner ended with, None if unlimited: read from its
    ``/proc`` folder (``folder``, opened before its root changed) once it has ended but before it
    is reaped (the kernel keeps a zombie's limits until then). prlimit() would need
    CAP_SYS_RESOURCE, which a container's root often lacks."""
    os.waitid(os.P_PID, child, os.WEXITED | os.WNOWAIT)
    try:
        fd = os.open("limits", os.O_RDONLY, dir_fd=folder)
        with open(fd, encoding="ascii") as limits:
            lines = [line.split() for line in limits if line.startswith("Max cpu time")]
    except OSError:
        return None
    finally:
        os.close(folder)
    hard = lines[0][4] if lines else "unlimited"
    return int(hard) if hard.isdigit() else None


def cut_by_own_cpu_limit(status: int, usage, limit: int | None) -> bool:
    """The runner was killed by the kernel at the CPU limit it set itself (the jail sets none):
    SIGKILL once its CPU time reached the hard limit. The submission's doing, never the grader's."""
    if limit is None or not os.WIFSIGNALED(status) or os.WTERMSIG(status) != signal.SIGKILL:
        return False
    return usage.ru_utime + usage.ru_stime >= 0.8 * limit  # what rusage counts falls short


if __name__ == "__main__":
    main()
