"""A hostile class graded at every containment level this machine offers: the root level (a
root of the runner's own, a user id of its own), the user-namespace level, and root without
namespaces (a user id of its own and Landlock, as in Gradescope's Docker). Each hostile student
does one attack at import time of its ``minbert/optimizer.py`` (leaving AdamW unwritten) and
hands in a correct sampler; an honest student is graded beside them, four at a time.

Asserted for every level: every row written; each hostile student scored on what it computed
(no AdamW points, the sampler's points); no file outside the runners' copies changed (the
instructor's tree, the other submissions, the results, a world-readable decoy solution, the
shared temporary folders); the decoy's secret never reaches a runner; no process of the class
alive after grading. Instructor-only (it copies the solution files)."""

from __future__ import annotations

import csv
import hashlib
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import pytest
import torch

from course.grading import autograder
from tests.course.containment import NAMESPACE_LEVELS, contained, own_user_level
from tests.helpers import processes_with, runner_processes, runners_left

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
MARK = "hostile-c0ffee"  # in every file an attack plants and every process it leaves behind
SECRET = "decoy-secret-7b1d"  # in the decoy solution only
CHECKS = ["--only", "adamw", "--only", "sampler", "--timeout", "20", "--memory_gb", "4"]
# Large, or written by other programs meanwhile (git, ruff); .git/hooks is looked at on its own.
SKIPPED = (".venv", "runs/", ".pytest_cache", ".ruff_cache", ".git/", "data/")
VAR_TMP = str(Path("/var", "tmp"))  # the system's folders, on every machine
PLANTED = ("/tmp", VAR_TMP, "/dev/shm")  # shared folders an attack plants a file in
SYSV_KEY = 0x6D696E62  # the key of the System V memory and queue an attack makes (IPC_CREAT)

PREAMBLE = f'''
import ctypes, os, signal, socket, subprocess, sys, time
from pathlib import Path
MARK, PROJECT, PORT = {MARK!r}, Path({{project!r}}), {{port}}
SECRET = {SECRET[:6]!r} + {SECRET[6:]!r}  # not in this file as one string: only the decoy has it
VICTIM, RESULTS, DECOY = Path({{victim!r}}), Path({{results!r}}), Path({{decoy!r}})

def attempt(f):
    try:
        return f()
    except BaseException as err:
        return err

def steal(path):
    """Run a solved optimizer found at ``path`` as this module's code."""
    text = Path(path).read_text()
    print("read", path, SECRET if SECRET in text else "", flush=True)
    exec(compile(text, "stolen", "exec"), globals())
'''

ATTACKS = {
    "reads-the-instructors-solution": "attempt(lambda: steal(PROJECT / 'minbert/optimizer.py'))",
    "reads-a-decoy-solution": "attempt(lambda: steal(DECOY))",
    "searches-the-machine": """
for top in ("/srv", "/opt", "/home", "/var", "/mnt", "/media", "/work", "/dev/shm", "/tmp"):
    for folder, _, files in attempt(lambda: list(os.walk(top))) or []:
        if "optimizer.py" in files:
            attempt(lambda: steal(os.path.join(folder, "optimizer.py")))
""",
    "reads-through-proc-root": """
for pid in attempt(lambda: os.listdir("/proc")) or []:
    through = os.path.join("/proc", pid, "root") + str(PROJECT)  # that process's view of it
    attempt(lambda: steal(through + "/minbert/optimizer.py"))
""",
    "links-to-the-solution": """
attempt(lambda: os.symlink(PROJECT / "minbert/optimizer.py", "linked.py"))
attempt(lambda: steal("linked.py"))
""",
    "writes-the-instructors-tree": """
attempt(lambda: open(PROJECT / "README.md", "a").write(MARK))
attempt(lambda: (PROJECT / "minbert/bert.py").unlink())
attempt(lambda: (PROJECT / ".git/hooks").mkdir(parents=True, exist_ok=True))
attempt(lambda: (PROJECT / ".git/hooks/pre-commit").write_text(MARK))
""",
    "deletes-another-submission": "attempt(lambda: VICTIM.unlink())",
    "writes-another-students-results": "attempt(lambda: RESULTS.write_text(MARK))",
    "plants-files-in-shared-folders": """
for folder in ("/tmp", str(Path("/var", "tmp")), "/dev/shm", os.path.expanduser("~root")):
    attempt(lambda: Path(folder, MARK).write_text(MARK))
""",
    "poisons-the-interpreter": """
import site
for folder in site.getsitepackages() + [sys.prefix, sys.base_prefix]:
    attempt(lambda: Path(folder, "sitecustomize.py").write_text("print('" + MARK + "')"))
""",
    "leaves-a-daemon": """
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        code = "import time, pathlib; time.sleep(4); pathlib.Path(%r).write_text('0')  # " + MARK
        os.execv(sys.executable, [sys.executable, "-c", code % str(RESULTS)])
    os._exit(0)
""",
    "forges-at-exit": """
import atexit
atexit.register(lambda: attempt(lambda: RESULTS.write_text(MARK)))
atexit.register(lambda: attempt(lambda: Path("results.json").write_text(MARK)))
sys.exit(3)
""",
    "fork-bomb": """
for _ in range(400):
    if attempt(os.fork) == 0:
        try:
            time.sleep(30)
        finally:
            os._exit(0)
time.sleep(5)
""",
    "memory-in-many-processes": """
for _ in range(7):
    if attempt(os.fork) == 0:
        try:
            hold = bytearray(b"x") * (700 * 2**20)  # written: resident, not just reserved
            time.sleep(30)
        finally:
            os._exit(0)
time.sleep(15)
""",
    "kills-its-parent-and-init": """
attempt(lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt(lambda: os.kill(1, signal.SIGKILL))
""",
    "kills-every-process-it-may": "attempt(lambda: os.kill(-1, signal.SIGKILL))",
    "kills-the-other-runners": """
for pid in attempt(lambda: os.listdir("/proc")) or []:
    cmd = attempt(lambda: Path(f"/proc/{pid}/cmdline").read_bytes()) or b""
    if isinstance(cmd, bytes) and b"grader.pyz" in cmd and int(pid) != os.getpid():
        attempt(lambda: os.kill(int(pid), signal.SIGKILL))
""",
    "connects-out": """
sock = socket.socket()
sock.settimeout(2)
print("connected" if attempt(lambda: sock.connect(("127.0.0.1", PORT))) is None else "", MARK)
""",
    "traces-the-grader": """
libc = ctypes.CDLL(None, use_errno=True)
print("attached" if libc.ptrace(16, os.getppid(), 0, 0) == 0 else "", MARK)
""",
    "gains-privileges": """
for command in (["su", "-c", "id"], ["unshare", "-r", "id"], ["mount", "-t", "tmpfs", "x", "/"]):
    attempt(lambda: subprocess.run(command, timeout=5, capture_output=True))
attempt(lambda: os.setuid(0))
""",
    "opens-devices": """
for device in ("/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmsg", "/dev/tty"):
    attempt(lambda: open(device, "rb").read(16))
attempt(lambda: os.mknod("disk", 0o600 | 0o60000, os.makedev(8, 0)))
""",
    "raises-its-limits": """
import resource
attempt(lambda: resource.setrlimit(resource.RLIMIT_NPROC, (10**6, 10**6)))
attempt(lambda: resource.setrlimit(resource.RLIMIT_AS, (-1, -1)))
""",
    "answers-ahead": """
answers = int(sys.argv[1])
attempt(lambda: os.write(answers, (10).to_bytes(8, "big") + b'{"ready":1'))
""",
    "floods-its-output": "sys.stdout.write('x' * (80 * 2**20))",
    "fills-its-disk": "attempt(lambda: open('big', 'wb').write(b'0' * (700 * 2**20)))",
    "fills-its-disk-in-many-files": """
block, written = b"0" * (60 * 2**20), 0
for i in range(20):
    if attempt(lambda: open(f"fill{i}", "wb").write(block)) == len(block):
        written += 60
print("wrote", written, "MiB", flush=True)
""",
    "hangs": "time.sleep(600)",
    "exits": "os._exit(1)",
    "crashes": "ctypes.string_at(0)",
    "kills-itself": "os.kill(os.getpid(), signal.SIGKILL)",
    "raises-a-huge-message": "raise RuntimeError('x' * (12 * 2**20))",
    "opens-the-doors-landlock-leaves": f"""
udp = attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
if attempt(lambda: udp.sendto(MARK.encode(), ("127.0.0.1", PORT))) == len(MARK):
    print("connected: a datagram left the runner", flush=True)
for top in ("/run", str(Path("/var", "run")), "/tmp"):
    for folder, _, names in attempt(lambda: list(os.walk(top))) or []:
        for name in names:
            unix = attempt(lambda: socket.socket(socket.AF_UNIX))
            if attempt(lambda: unix.connect(os.path.join(folder, name))) is None:
                print("connected to", os.path.join(folder, name), flush=True)
listing = attempt(lambda: os.listdir("/proc"))
for pid in listing if isinstance(listing, list) else []:
    attempt(lambda: print(pid, open(f"/proc/{{pid}}/cmdline").read(), flush=True))
for pid in range(max(1, os.getpid() - 20000), os.getpid() + 20000):  # without a listing
    said = attempt(lambda: open(f"/proc/{{pid}}/cmdline").read())
    if isinstance(said, str) and SECRET in said:
        print(said, flush=True)
libc = ctypes.CDLL(None)
made = libc.shmget({SYSV_KEY}, 4096, 0o1600), libc.msgget({SYSV_KEY}, 0o1600)
if max(made) >= 0:  # memory held there is in no process's Pss, even in an IPC namespace of its own
    print("attached: System V memory or a queue made", made, flush=True)
""",
    "limits-its-own-cpu": """
import resource
resource.setrlimit(resource.RLIMIT_CPU, (1, 1))
while True:
    pass
""",
    "reads-the-machine": """
for path in ("/etc/shadow", "/etc/passwd", "/proc/1/environ", "~root/.bash_history"):
    path = os.path.expanduser(path)
    attempt(lambda: print(path, len(open(path).read()), flush=True))
""",
    "writes-the-references": """
for rel in ("course/reference_data.pt", "sanity_check_reference.pt", "course/grading/judge.py"):
    attempt(lambda: (PROJECT / rel).write_bytes(b"0"))
""",
    "patches-the-runner": """
import course.registry, course.wire
course.registry.judge_check = lambda *a: None
attempt(lambda: course.wire.write_frame(open(int(sys.argv[1]), "wb"), {"ready": True}))
""",
}


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def digest(folder: Path, skip: tuple[str, ...] = ()) -> dict[str, str]:
    """Every file under ``folder`` (but those under ``skip``) by the SHA-256 of its bytes."""
    found = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        if "__pycache__/" in rel or rel.startswith(skip):
            continue
        if path.is_file() and not path.is_symlink():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


@pytest.fixture
def decoy():
    """A solved optimizer, readable by every user, outside the tree and outside /tmp."""
    base = VAR_TMP if os.access(VAR_TMP, os.W_OK) else "/dev/shm"
    folder = Path(tempfile.mkdtemp(prefix="minbert-decoy-", dir=base))
    folder.chmod(0o755)
    path = folder / "optimizer.py"
    path.write_text(solution(OPT) + f"\n# {SECRET}\n", encoding="utf-8")
    path.chmod(0o644)
    yield path
    shutil.rmtree(folder, ignore_errors=True)


def write_class(subs: Path, paths: dict[str, str]) -> None:
    """alice (correct) and one hostile student per attack; ``paths``: what the attacks aim at."""
    preamble = PREAMBLE.format(**paths)
    students = {"alice": solution(OPT)} | {n: preamble + a for n, a in ATTACKS.items()}
    for name, optimizer in students.items():
        for rel, text in {OPT: optimizer, SAMPLING: solution(SAMPLING)}.items():
            (subs / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (subs / name / rel).write_text(text, encoding="utf-8")


def system_v_left() -> list[str]:
    """This machine's System V memory segments and queues of the attack's key: one made in a
    runner's IPC namespace goes with it; one made on the machine's would outlive grading."""
    key = f"{SYSV_KEY}"
    found = []
    for table in ("shm", "msg"):
        with open(f"/proc/sysvipc/{table}", encoding="ascii") as rows:
            found += [f"{table}: {row.strip()}" for row in rows if row.split()[:1] == [key]]
    return found


def planted() -> list[str]:
    return [f"{f}/{MARK}" for f in PLANTED if os.path.exists(f"{f}/{MARK}")]


def grade_hostile_class(
    tmp_path: Path, project: Path, python: str, decoy: Path, env: dict | None = None
) -> None:
    """Grade the class with ``python -m course.grading.grade`` run from ``project``; assert what the
    module docstring says."""
    subs, out = tmp_path / "subs", tmp_path / "out" / "grades.csv"
    out.parent.mkdir()
    results = out.parent / "grades-results"
    listener = socket.create_server(("127.0.0.1", 0))  # what a connection out would reach
    holder = subprocess.Popen(  # a process of the machine's with the secret on its command line
        [python, "-c", "import time; time.sleep(1500)", SECRET]
    )
    paths = {
        "project": str(project),
        "victim": str(subs / "alice" / OPT),
        "results": str(results / "alice.json"),
        "decoy": str(decoy),
        "port": listener.getsockname()[1],
    }
    write_class(subs, paths)
    hooks = project / ".git" / "hooks"
    before = {"project": digest(project, SKIPPED), "subs": digest(subs), "hooks": digest(hooks)}
    decoy_bytes = decoy.read_bytes()
    command = [python, "-m", "course.grading.grade", str(subs), "--out", str(out), "--jobs", "4"]
    runners_before = runner_processes()
    try:
        done = subprocess.run(
            [*command, *CHECKS], cwd=project, env=env, capture_output=True, text=True, timeout=1500
        )
    finally:
        listener.close()
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stderr[-3000:]
    time.sleep(5)  # a daemon would have written by now
    assert digest(project, SKIPPED) == before["project"]
    assert digest(hooks) == before["hooks"]
    assert digest(subs) == before["subs"]
    assert decoy.read_bytes() == decoy_bytes
    assert planted() == []
    assert system_v_left() == []
    assert processes_with(MARK) == []
    assert runners_left(runners_before) == []
    rows = {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert set(rows) == {"alice", *ATTACKS}
    assert (rows["alice"]["adamw"], rows["alice"]["sampler"]) == ("10", "5")
    assert (results / "alice.json").read_text().startswith("{")
    scored = {name: (rows[name]["adamw"], rows[name]["sampler"]) for name in ATTACKS}
    assert scored == {name: ("0", "5") for name in ATTACKS}
    for name in ATTACKS:
        assert (results / f"{name}.json").stat().st_size < 2**20, name  # every message cut
        log = (results / f"{name}.log").read_text(errors="replace")
        assert SECRET not in log, name
        assert "connected" not in log and "attached" not in log, name
        assert "/etc/shadow" not in log, name
        assert "grader fault" not in rows[name]["status"], (name, rows[name]["status"])
    filled = (results / "fills-its-disk-in-many-files.log").read_text(errors="replace")
    assert [int(n) for n in re.findall(r"wrote (\d+) MiB", filled) if int(n) > 600] == []
    own_limit = rows["limits-its-own-cpu"]["notes"]  # the reason, where the jail can see it
    assert "after lowering its own CPU limit" in own_limit or "killed (signal 9)" in own_limit


def leftovers():
    """Whatever an attack planted, removed after the test (containment failing included)."""
    yield
    for path in planted():
        os.unlink(path)
    if system_v_left():
        key = str(SYSV_KEY)
        subprocess.run(["ipcrm", "--shmem-key", key, "--queue-key", key], capture_output=True)
    for pid in processes_with(MARK):
        os.kill(pid, 9)


@pytest.fixture
def clean_after():
    yield from leftovers()


@pytest.mark.parametrize("level", NAMESPACE_LEVELS)
def test_a_hostile_class_with_namespaces(level, tmp_path, decoy, clean_after):
    env = os.environ | {"MINBERT_CONTAINMENT": level}
    grade_hostile_class(tmp_path, ROOT, sys.executable, decoy, env)


def without_namespaces(tmp_path: Path) -> dict:
    """An environment where ``unshare`` cannot make namespaces (as in a stock Docker
    container): a stand-in first on PATH that fails as the real one does there."""
    fake = tmp_path / "no-namespaces"
    fake.mkdir()
    (fake / "unshare").write_text(
        "#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n"
    )
    (fake / "unshare").chmod(0o755)
    return os.environ | {"PATH": f"{fake}:{os.environ['PATH']}"}


def autograder_source(tmp_path: Path) -> Path:
    """The Gradescope zip unpacked, closed to other users as run_autograder closes it."""
    root = tmp_path / "autograder"
    root.mkdir(mode=0o700)
    assert autograder.main([str(root / "autograder.zip")]) == 0
    with zipfile.ZipFile(root / "autograder.zip") as archive:
        archive.extractall(root / "source")
    return root / "source"


@own_user_level
def test_a_hostile_class_as_root_without_namespaces(tmp_path, decoy, clean_after):
    tmp_path.chmod(0o700)
    env = without_namespaces(tmp_path)
    project = autograder_source(tmp_path)
    grade_hostile_class(tmp_path, project, sys.executable, decoy, env)


def test_the_judge_bounds_its_work_by_the_stored_shape():
    """Masks of 2,000,000 × 1 × 1 where (32, 20) is stored: judged by their shape at once, never
    broadcast against the stored batch (which would be 1.3 billion comparisons)."""
    from course.checks import CHECKS
    from course.registry import FAIL, Context, compute_check, judge_check

    check = next(c for c in CHECKS if c.name.startswith("masking"))
    ctx = Context(None, ROOT / "sanity_check_reference.pt")
    computed = compute_check(check, ctx)
    huge = torch.zeros(2_000_000, 1, 1, dtype=torch.long)
    computed["outputs"] = {name: huge for name in computed["outputs"]}
    started = time.monotonic()
    result = judge_check(check, ctx, computed)
    assert time.monotonic() - started < 10
    assert result.status == FAIL and "has shape (2000000, 1, 1), expected (32, 20)" in result.detail


@contained
def test_a_submission_that_silences_the_side_effect_probe_scores_nothing_there(tmp_path):
    """A correct sampler whose module replaces the grader's side-effect probe (the class's
    method, or a function's code) gets no points for the checks that ran its code; the same
    sampler without the patch gets them all."""
    from course.grading import grade

    patches = {
        "sly": "course.untouched.Untouched.problem = lambda self: None",
        "slier": "course.untouched.unchanged_problem.__code__ = (lambda *a, **k: None).__code__",
    }
    subs = tmp_path / "subs"
    for name, patch in {"honest": "", **patches}.items():
        (subs / name / "minbert").mkdir(parents=True)
        text = solution(SAMPLING) + f"\nimport course.untouched\n{patch}\n"
        (subs / name / SAMPLING).write_text(text, encoding="utf-8")
    out = tmp_path / "grades.csv"
    assert grade.main([str(subs), "--out", str(out), "--only", "sampler"]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert {name: rows[name]["sampler"] for name in rows} == {
        "honest": "5",
        "sly": "0",
        "slier": "0",
    }
    said = (tmp_path / "grades-results" / "sly.log").read_text()
    assert "replaced the grader's course.untouched.Untouched.problem" in said
    said = (tmp_path / "grades-results" / "slier.log").read_text()
    assert "replaced the grader's course.untouched.unchanged_problem.__code__" in said


# The probe's code replaced by code that says "unchanged" and, on its first call, puts the
# grader's own code back: by the check's end the probe is the grader's again.
PUT_BACK = """
import course.untouched
course.untouched.grader_code = course.untouched.unchanged_problem.__code__
def says_unchanged(name, before, after, axes=(), what="argument"):
    unchanged_problem.__code__ = grader_code  # run as the probe: its module's names
    return None
course.untouched.unchanged_problem.__code__ = says_unchanged.__code__
"""


@contained
def test_a_patch_of_the_probe_put_back_before_its_check_ends_scores_nothing_there(tmp_path):
    """A correct LHUC whose module rewrites the side-effect probe's code, which the probe's
    first call puts back: compared after the check, the grader's objects are all as they were,
    yet the runner's audit hook saw the rewrite; no points there, said in the log. The same
    LHUC without the patch gets its points."""
    from course.grading import grade

    lhuc = "minbert/plugins/lhuc.py"
    subs = tmp_path / "subs"
    for name, patch in {"honest": "", "puts-back": PUT_BACK}.items():
        (subs / name / "minbert" / "plugins").mkdir(parents=True)
        (subs / name / lhuc).write_text(solution(lhuc) + patch, encoding="utf-8")
    out = tmp_path / "grades.csv"
    assert grade.main([str(subs), "--out", str(out), "--only", "lhuc"]) == 0
    rows = {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}
    assert float(rows["honest"]["lhuc"]) > 0 and rows["puts-back"]["lhuc"] == "0"
    said = (tmp_path / "grades-results" / "puts-back.log").read_text()
    assert "replaced the grader's course.untouched.unchanged_problem.__code__" in said
