"""Where a submission's runner runs: the containment this machine offers (``containment``:
``root``, ``user namespace``, ``own user``, or None for ``--trusted``), and the process that
starts it there (``start``), watches it (``Watch``: its processes' memory together and their
number) and ends it (``Runner.stop``). Each runner with a user id of its own takes it from
``RUNNER_UIDS`` under a lock of that id (``UserIds``), so graders side by side never share one
and each kills only its own.

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import fcntl
import json
import os
import pwd
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from course.authoring.pack import ARCHIVE
from course.grading import landlock, seccomp
from course.grading.jail import (
    CLOSE_IPC_ONLY,
    DEVICES,
    IPC_REFUSED,
    PR_SET_NO_NEW_PRIVS,
    ROOT_BYTES,
    TREE,
    give,
    libc,
)

JAIL = Path(__file__).resolve().with_name("jail.py")
RUNNER_UIDS = range(61_000, 62_000)  # runners' users where the grader is root (checked: no account)
UIDS_VARIABLE = "MINBERT_RUNNER_UIDS"  # FIRST-LAST: another range, where accounts hold this one
# The first that can be made: /run is root's alone, so nobody can make its folder first.
LOCKS = ("/run/minbert-runners", "/run/lock/minbert-runners", "/tmp/minbert-runners")
FILE_SIZE = 64 * 2**20  # bytes: the largest file a runner may write (its log included)
PROCESSES = 64  # a runner's processes at once, all of them (counted by its watch)
THREADS = 1024  # RLIMIT_NPROC counts threads: torch and BLAS start one per core in each process
WATCH_SECONDS = 0.1  # how often a runner's processes are counted and measured
COPY_EVERY = 5  # an ``own user`` runner's copy is measured every this many watches (0.5 s)
# The system's programs and libraries: read-only in every runner's root.
SYSTEM = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin")
LOADER = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
ROOT, USER_NAMESPACE, OWN_USER = "root", "user namespace", "own user"
# No --fork: the jail forks the runner itself and ends as it ended (unshare --fork reports a
# child killed by a signal as "sigprocmask unblock failed" and exit code 1).
UNSHARE = ["unshare", "--mount", "--pid", "--net", "--ipc", "--uts"]
# Signals that only another process sends. In a PID namespace the runner is its init, which no
# process inside may send them to: such an end came from outside (see ``ended_from_outside``).
SENT_FROM_OUTSIDE = {
    signal.SIGKILL,
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGALRM,
}


class _quietly:
    """Ignore a process that is already gone."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, err, tb) -> bool:
        return kind is ProcessLookupError or kind is PermissionError


def offered() -> list[str]:
    """Every level this machine offers, best first (see the module docstring)."""
    root = os.geteuid() == 0
    levels = []
    if shutil.which("unshare") is not None:
        if root and _works(UNSHARE + ["--fork", "--mount-proc", "true"]):
            levels.append(ROOT)
        if _works(UNSHARE + ["--user", "--map-root-user", "--fork", "--mount-proc", "true"]):
            levels.append(USER_NAMESPACE)
    if root:
        levels.append(OWN_USER)
    return levels


def containment() -> str | None:
    """The best level this machine offers, or None. ``MINBERT_CONTAINMENT`` (a level's name)
    asks for a weaker one the machine offers: to try a class at another machine's level."""
    levels = offered()
    asked = os.environ.get("MINBERT_CONTAINMENT")
    if asked in levels:
        return asked
    return levels[0] if levels else None


def _works(command: list[str]) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def system_v_ipc_refused(level: str) -> str | None:
    """Why this kernel will not let the jail close System V IPC in a runner's IPC namespace of
    its own (``jail.close_system_v_ipc``), or None where it does. Asked once, before grading: a
    kernel that refuses those sysctls (in a user namespace, some do) would stop every runner from
    starting, and every student would be withheld; the grader refuses in one line instead. An
    ``unshare`` that does not start (on a loaded machine it sometimes fails once) is asked again;
    one that never starts is no answer here, as for a runner (tried again, then withheld)."""
    user = ["--user", "--map-root-user"] if level == USER_NAMESPACE else []
    unshare = shutil.which("unshare") or "unshare"
    probe = [sys.executable, "-I", "-B", str(JAIL), CLOSE_IPC_ONLY]
    for _ in range(3):
        try:  # --ipc always: the machine's own limits are never touched
            done = subprocess.run(
                [unshare, "--ipc", *user, "--", *probe], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if done.returncode == 0:
            return None
        if done.returncode == IPC_REFUSED:
            return (done.stderr.strip().splitlines() or ["no message"])[-1]
    return None


class NoUserId(Exception):
    """No runner user id can be had: every one is taken, or no lock can be made."""


class UserIds:
    """Runner user ids, each held under an exclusive lock on its own file while a runner has it
    (isolate's box ids): a second grader on this machine takes others."""

    def __init__(self) -> None:
        self.ids = runner_ids()
        self.folder = _lock_folder()

    def claim(self) -> tuple[int, int]:
        """(a free user id, the open lock file that holds it); its leftovers killed first, and an
        id whose processes outlive that (a runner's children still being reaped on a loaded
        machine) passed over, so that a new runner is never watched with another's memory."""
        for uid in self.ids:
            flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(self.folder / str(uid), flags, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            kill_user(uid)  # a grader that died left them: nobody holds this id
            if processes_of(uid):  # still alive after kill_user's wait: its watch would count them
                os.close(fd)
                continue
            return uid, fd
        first, last = self.ids.start, self.ids.stop - 1
        raise NoUserId(f"every runner user id {first}-{last} is taken")


def runner_ids() -> range:
    """The runners' user ids: ``RUNNER_UIDS``, or ``MINBERT_RUNNER_UIDS=FIRST-LAST``; a NoUserId
    where the range is malformed or an account of this machine has an id in it (its processes
    would be killed as a runner's)."""
    text = os.environ.get(UIDS_VARIABLE, "")
    ids = RUNNER_UIDS
    if text:
        first, _, last = text.partition("-")
        if not (first.isdigit() and last.isdigit() and 1000 <= int(first) <= int(last) < 2**31):
            raise NoUserId(f"{UIDS_VARIABLE}={text}: give FIRST-LAST, two user ids from 1000 up")
        ids = range(int(first), int(last) + 1)
    taken = [f"{a.pw_name} ({a.pw_uid})" for a in pwd.getpwall() if a.pw_uid in ids]
    if taken:
        raise NoUserId(
            f"user ids {ids.start}-{ids.stop - 1} hold accounts of this machine "
            f"({', '.join(taken[:3])}); set {UIDS_VARIABLE}=FIRST-LAST to a range that holds none"
        )
    return ids


def _lock_folder() -> Path:
    """The first folder of ``LOCKS`` that can be made and written (a NoUserId if none); one that
    another user made, or that others may write, is refused, never passed over."""
    for candidate in LOCKS:
        try:
            os.makedirs(candidate, mode=0o755, exist_ok=True)
        except OSError:
            continue
        status = os.lstat(candidate)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
            raise NoUserId(
                f"{candidate} was made by another user (uid {status.st_uid}), not this grader: "
                "remove it and grade again"
            )
        if status.st_mode & 0o022:
            raise NoUserId(f"{candidate} may be written by other users: chmod go-w {candidate}")
        if os.access(candidate, os.W_OK):
            return Path(candidate)
    raise NoUserId(f"no folder for the runners' locks: none of {', '.join(LOCKS)} is writable")


def kill_user(uid: int, seconds: float = 10.0) -> None:
    """SIGKILL every process of ``uid`` (a runner's user: nothing else runs as it), again until
    none is left alive (a zombie is dead), or ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while (alive := processes_of(uid)) and time.monotonic() < deadline:
        for pid in alive:
            with _quietly():
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _status(pid: str) -> dict[str, str]:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return {}
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _pids() -> list[str]:
    return [p.name for p in Path("/proc").iterdir() if p.name.isdigit()]


def processes_of(uid: int | range) -> list[int]:
    """The live (not zombie) processes whose real user is ``uid`` (or in that range)."""
    uids = uid if isinstance(uid, range) else range(uid, uid + 1)
    found = []
    for pid in _pids():
        fields = _status(pid)
        if not fields or fields["State"].strip().startswith("Z"):
            continue
        if int(fields["Uid"].split()[0]) in uids:
            found.append(int(pid))
    return found


def _pid_namespace(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def members(uid: int | None, namespace: str | None) -> list[str]:
    """A runner's live processes: those of its user id, else those of its PID namespace."""
    found = []
    for pid in _pids():
        fields = _status(pid)
        if not fields or fields["State"].strip().startswith("Z"):
            continue
        if uid is not None and int(fields["Uid"].split()[0]) == uid:
            found.append(pid)
        elif uid is None and namespace is not None and _pid_namespace(pid) == namespace:
            found.append(pid)
    return found


def resident_bytes(pids: list[str]) -> int:
    """The memory ``pids`` hold together: each one's proportional share (Pss: a page shared by n
    processes counts 1/n in each, so forked children are not counted again), else its RSS; and
    the memory files they hold open (``memfd_bytes``) and what is written in a jail's root
    (``jailed_root_bytes``)."""
    total = memfd_bytes(pids) + jailed_root_bytes(pids)
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            text = ""
        field = next((line for line in text.splitlines() if line.startswith("Pss:")), "")
        kib = field.split()[1] if field else _status(pid).get("VmRSS", "0 kB").split()[0]
        total += int(kib) * 1024
    return total


def memfd_bytes(pids: list[str]) -> int:
    """The bytes stored in the memfd files (``memfd_create``) that ``pids`` hold open, each file
    once: memory written to one and never mapped is in no process's Pss, so without this a runner
    could hold any amount beyond ``--memory_gb`` (one mapped too counts twice: stricter)."""
    files: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if os.readlink(link).startswith("/memfd:"):
                    info = os.stat(link)
                    files[(info.st_dev, info.st_ino)] = info.st_blocks * 512
            except OSError:  # closed meanwhile
                continue
    return sum(files.values())


def jailed_root_bytes(pids: list[str]) -> int:
    """The bytes stored in the root the jail made for ``pids`` (``jail.build_root``), a tmpfs of
    their own: the tree, /tmp and whatever the runner writes live in memory that no process's Pss
    counts. 0 where their root is the machine's (the ``own user`` level, a jail before it moves
    in)."""
    machine = os.stat("/").st_dev
    for pid in pids:
        root = f"/proc/{pid}/root"
        try:
            if os.stat(root).st_dev != machine:
                info = os.statvfs(root)
                return (info.f_blocks - info.f_bfree) * info.f_frsize
        except OSError:  # ended meanwhile
            continue
    return 0


def within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def python_paths(private: list[Path]) -> list[str]:
    """What a runner must read: the interpreter's prefixes (a venv's and its base's, conda,
    pyenv, the system's) and every folder on ``sys.path`` (a .pth file's too), but no folder
    inside the instructor's ``private`` paths (the project's own root is on ``sys.path``)
    unless it is a package folder (site-packages, dist-packages) or inside a prefix."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))}
    found = {os.path.realpath(p) for p in prefixes} | {os.path.abspath(p) for p in prefixes}
    hidden = [os.path.realpath(p) for p in private]
    for entry in sys.path:
        if not entry or not os.path.exists(entry):
            continue
        path = os.path.realpath(entry)
        packages = any(part in ("site-packages", "dist-packages") for part in Path(path).parts)
        in_prefix = any(within(path, prefix) for prefix in found)
        if packages or in_prefix or not any(within(path, folder) for folder in hidden):
            found.add(path)
    return sorted(p for p in found if p != "/")


def root_contents(private: list[Path]) -> tuple[list[str], dict[str, str]]:
    """(paths bound read-only, symbolic links recreated) of a runner's root."""
    expose, links = [], {}
    for path in SYSTEM + LOADER:
        if os.path.islink(path):
            links[path] = os.readlink(path)
        elif os.path.exists(path):
            expose.append(path)
    for path in python_paths(private):
        if not any(within(path, system) for system in expose) and not os.path.islink(path):
            expose.append(path)
    return expose, links


def unreachable(path: Path) -> bool:
    """No other user can read ``path``: a folder above it shuts them out (no o+x), or it does
    (no o+r)."""
    path = path.resolve()
    if any(folder.stat().st_mode & 0o001 == 0 for folder in path.parents):
        return True
    return path.stat().st_mode & 0o004 == 0


class Output:
    """What a submission's runners print, the first ``limit`` bytes kept, the rest read and
    dropped: a runner that prints without end neither fills a disk nor stops the runners after
    it (each drained by a thread of its own until its last process is gone)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0  # bytes read past the limit, said at the end of ``text``
        self.lock = threading.Lock()

    def drain(self, stream) -> threading.Thread:
        def run() -> None:
            while chunk := stream.read1(65536):
                with self.lock:
                    room = max(self.limit - len(self.kept), 0)
                    self.kept += chunk[:room]
                    self.dropped += max(len(chunk) - room, 0)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def text(self) -> str:
        with self.lock:
            kept = self.kept.decode("utf-8", errors="replace")
            if self.dropped:
                kept += f"\n(cut: {self.dropped} more bytes printed past the first {self.limit})\n"
            return kept


def bytes_under(folder: str) -> int:
    """The disk space the files below ``folder`` take (their blocks: a sparse file counts what
    it holds); what cannot be read counts nothing."""
    total = 0
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += bytes_under(entry.path)
            else:
                total += entry.stat(follow_symlinks=False).st_blocks * 512
        except OSError:
            continue
    return total


@dataclass
class Watch:
    """Every ``WATCH_SECONDS``: a runner's processes, all of them together, within ``memory``
    bytes and ``PROCESSES`` processes, and an ``own user`` runner's copy within ``ROOT_BYTES``
    (the size of the jail's root), else the runner is killed and ``broke`` says why."""

    kill: Callable[[], None]  # ends the runner
    uid: int | None
    namespace: str | None
    memory: int
    copy: str | None = None  # an ``own user`` runner's copy of the tree, its only writable place
    broke: str = ""
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        ticks = 0
        while not self.done.wait(WATCH_SECONDS):
            if self.namespace is None and self.uid is None:
                return
            ticks += 1
            pids = members(self.uid, self.namespace)
            if len(pids) > PROCESSES:
                self.broke = f"its processes numbered more than {PROCESSES}"
            elif (held := resident_bytes(pids)) > self.memory:
                gib = self.memory / 2**30
                self.broke = f"its processes held {held / 2**30:.1f} GiB together, over {gib:g}"
            elif self.copy and ticks % COPY_EVERY == 0 and bytes_under(self.copy) > ROOT_BYTES:
                self.broke = f"its files held more than {ROOT_BYTES // 2**20} MiB together"
            if self.broke:
                self.kill()
                return


class RunnerStopped(Exception):
    """No runner starts: the grader is stopping."""


@dataclass(eq=False)
class Runner:
    """A started runner: its process, the pipe end its answers come out of, and what it holds
    (a user id and its lock, a copy of the tree)."""

    process: subprocess.Popen
    answers: int  # a file descriptor
    level: str | None
    uid: int | None = None
    lock: int | None = None
    copy: str | None = None
    watch: Watch | None = None
    drained: threading.Thread | None = None

    def kill(self) -> None:
        """The runner and everything it started, at once (the watch calls this too)."""
        if self.level in (None, OWN_USER):
            with _quietly():
                os.killpg(self.process.pid, signal.SIGKILL)
        with _quietly():
            self.process.kill()
        if self.uid is not None:
            kill_user(self.uid)

    def stop(self) -> None:
        """Kill the runner and everything it started, wait for them, release what it held."""
        if self.watch is not None:
            self.watch.done.set()
        self.kill()
        self.process.wait()
        if self.uid is not None:
            kill_user(self.uid)  # waited for: none alive before anyone writes a grade
        if self.drained is not None:
            self.drained.join(timeout=10)  # its last writer is gone: the pipe has ended
            self.process.stdout.close()
        if self.copy is not None:
            shutil.rmtree(self.copy, ignore_errors=True)
        if self.lock is not None:
            os.close(self.lock)
        os.close(self.answers)
        ACTIVE.discard(self)

    def ended_from_outside(self) -> bool:
        """The runner (the init of its PID namespace) was ended by a signal only another
        process sends, and not by its watch: nobody in its own tree sent it."""
        code = self.process.poll()
        if code is None or code >= 0 or self.level not in (ROOT, USER_NAMESPACE):
            return False
        return -code in SENT_FROM_OUTSIDE and not (self.watch and self.watch.broke)


ACTIVE: set[Runner] = set()  # every runner this grader has started and not yet stopped
STOPPING = threading.Event()  # set by stop_all: no runner starts after it


def stop_all() -> None:
    """Kill every runner of this grader (Ctrl-C): their judges see them end, and none starts."""
    STOPPING.set()
    for runner in list(ACTIVE):
        runner.kill()


def start(
    tree: Path, private: list[Path], level: str | None, memory_gb: float, log: Output
) -> Runner:
    """A runner of ``tree`` (a copy of the student tree with the submission's files), its output
    kept in ``log``; contained at ``level`` (None: not contained, ``--trusted``)."""
    if STOPPING.is_set():
        raise RunnerStopped("grading was stopped")
    memory = int(memory_gb * 2**30)
    uid, lock = UserIds().claim() if level in (ROOT, OWN_USER) else (None, None)
    copy = _own_copy(tree, uid) if level == OWN_USER else None
    inside = TREE if level in (ROOT, USER_NAMESPACE) else str(copy or tree)
    argv = [sys.executable, "-I", "-B", f"{inside}/{ARCHIVE}"]  # the packed grader's runner
    env = {"HOME": inside, "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    read, write = os.pipe()
    argv.append(str(write))
    if level in (ROOT, USER_NAMESPACE):
        expose, links = root_contents(private)
        settings = {
            "expose": expose,
            "links": links,
            "tree": str(tree),
            "uid": uid,
            "memory": memory,
            "file_size": FILE_SIZE,
            "processes": THREADS,
            "argv": argv,
            "env": env,
        }
        user = ["--user", "--map-root-user"] if level == USER_NAMESPACE else []
        jail = [sys.executable, "-I", "-B", str(JAIL), json.dumps(settings)]
        unshare = [shutil.which("unshare") or "unshare", *UNSHARE[1:]]  # found on the grader's PATH
        command, setup = [*unshare, *user, "--", *jail], None
    else:
        confine = own_user_confinement(private, copy) if copy is not None else None
        if copy is not None:
            env["TMPDIR"] = f"{copy}/.tmp"
            os.makedirs(env["TMPDIR"])
            os.chown(env["TMPDIR"], uid, uid)
        command, setup = argv, _plain_limits(memory, uid, confine)
    try:
        process = subprocess.Popen(
            command,
            cwd=copy or tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            pass_fds=(write,),
            preexec_fn=setup,
        )
    finally:
        os.close(write)
    runner = Runner(process, read, level, uid, lock, copy, drained=log.drain(process.stdout))
    runner.watch = Watch(runner.kill, uid, _runner_namespace(process, level), memory, copy)
    runner.watch.start()
    ACTIVE.add(runner)
    return runner


def _runner_namespace(process: subprocess.Popen, level: str | None) -> str | None:
    """The PID namespace of a user-namespace runner (``unshare``'s child), found within 5 s."""
    if level != USER_NAMESPACE:
        return None
    deadline, own = time.monotonic() + 5, _pid_namespace("self")
    while time.monotonic() < deadline and process.poll() is None:
        for pid in _pids():
            if _status(pid).get("PPid", "").strip() == str(process.pid):
                namespace = _pid_namespace(pid)
                if namespace is not None and namespace != own:
                    return namespace
        time.sleep(0.01)
    return None


def _own_copy(tree: Path, uid: int) -> str:
    """The ``own user`` level's copy of the tree: a fresh folder only ``uid`` (and root) enters."""
    copy = tempfile.mkdtemp(prefix="minbert-runner-")
    shutil.copytree(tree, copy, symlinks=True, dirs_exist_ok=True)
    give(copy, uid)  # as the jail gives its copy to its runner's user
    return copy


def _plain_limits(memory: int, uid: int | None, confine: dict | None = None):
    """An uncontained or ``own user`` runner's set-up: its own session, limited address space,
    file size and processes, and (``own user``) Landlock's confinement, its own user id, no new
    privileges and the seccomp filter."""

    def apply() -> None:
        os.setsid()
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE, FILE_SIZE))
        if uid is None:
            return
        resource.setrlimit(resource.RLIMIT_NPROC, (THREADS, THREADS))
        if confine is not None and landlock.abi() >= 1:
            landlock.confine(**confine)  # fds opened as root: before the change of user
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if confine is not None:
            seccomp.install()  # the doors Landlock leaves open, closed before any student code

    return apply


PROC_VIEWS = ("/proc/self", "/proc/cpuinfo", "/proc/meminfo", "/proc/stat", "/proc/sys/vm")


def own_user_confinement(private: list[Path], copy: str) -> dict:
    """What an ``own user`` runner may touch (``landlock.confine``'s arguments): read Python,
    its packages, the system's libraries and the kernel's views of itself and of the machine's
    CPUs and memory (``/proc/self`` is opened in the runner, so it is the runner's own folder:
    no other process's command line or environment); write its copy alone."""
    expose, _ = root_contents(private)
    views = [*PROC_VIEWS, "/sys/devices/system/cpu"]
    devices = [f"/dev/{name}" for name in DEVICES]
    return {"read": expose + views, "write": [copy], "devices": devices}


def reachable_by_others(path: str) -> bool:
    """Another user can reach ``path`` (every folder above it lets them through, it lets them
    read): a runner without namespaces, a user of its own, can run what is there."""
    return not unreachable(Path(path))


def python_closed_to_runners(private: list[Path], level: str = OWN_USER) -> str | None:
    """The first of this Python's interpreter, prefixes and package folders (``python_paths``)
    that a runner, a user of its own, cannot reach, or None. Without namespaces (``OWN_USER``)
    every folder above a path counts too; at the ``ROOT`` level the jail binds each path into a
    root of its own, made open, so only the path itself counts (a .venv made under a umask of
    077 is closed either way). The one definition of "the runners can reach this Python": the
    grader refuses where it is not None, and the tests of that level skip
    (tests/course/containment.py)."""
    for path in [os.path.realpath(sys.executable), *python_paths(private)]:
        if not os.path.exists(path):
            continue
        if level == ROOT and not open_to_others(path):
            return path
        if level != ROOT and not reachable_by_others(path):
            return path
    return None


def open_to_others(path: str) -> bool:
    """Another user may read ``path`` (and enter it, a folder), whatever the folders above say."""
    wanted = 0o005 if os.path.isdir(path) else 0o004
    return os.stat(path).st_mode & wanted == wanted
