"""Grading a class with a hostile submission in it (``python -m course.grading.grade``): a class of
three, one of whom does at import time each of the things a hostile submission was seen to do
(deletes and appends to the instructor's files and another student's, rewrites another
student's results.json from a daemon that outlives its check, execs another student's file,
registers an atexit hook that writes full marks, kills its parent and PID 1, exits). The
instructor's tree, the other submissions and their results stay byte-identical; every row is
written; the hostile one is scored on what it computed, with a note; no process of it is alive
after grading; a hanging check costs only that check. Then the careless instructor's flags,
each refused in one line before anything runs.

Instructor-only (it copies the solution files)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course.grading import grade, sandbox
from tests.course.containment import AS_ROOT, LEVEL, contained, level_offered
from tests.helpers import processes_with, runner_processes, runners_left

ROOT = Path(__file__).resolve().parents[2]
OPT, SAMPLING = "minbert/optimizer.py", "minbert/sampling.py"
MARKER = "hostile-daemon-3f9a"  # in the command line of the daemon the hostile code starts
INSTRUCTOR = ["minbert/bert.py", "README.md", OPT, "course/grading/judge.py"]


def solution(rel: str) -> str:
    return (ROOT / rel).read_text(encoding="utf-8")


def submit(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")


def hostile_optimizer(victim: Path, victim_results: Path, beside: Path) -> str:
    """An optimizer.py that attacks at import, then leaves AdamW unwritten."""
    return f"""
import atexit, os, sys, json
from pathlib import Path
ROOT, VICTIM, RESULTS = Path({str(ROOT)!r}), Path({str(victim)!r}), Path({str(victim_results)!r})

def attempt(f):
    try:
        f()
    except BaseException:
        pass

for rel in ("minbert/bert.py", "README.md"):
    attempt(lambda: (ROOT / rel).unlink())
attempt(lambda: VICTIM.unlink())
attempt(lambda: RESULTS.unlink())
attempt(lambda: open(ROOT / {OPT!r}, "a").write("# was here\\n"))
attempt(lambda: Path({str(beside)!r}).write_text("planted"))
full = json.dumps({{"score": 100, "tests": []}})
atexit.register(lambda: attempt(lambda: Path("results.json").write_text(full)))
atexit.register(lambda: attempt(lambda: RESULTS.write_text(full)))
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        code = "import time, pathlib; time.sleep(3); pathlib.Path(%r).write_text('0')  # {MARKER}"
        os.execv(sys.executable, [sys.executable, "-c", code % str(RESULTS)])
    os._exit(0)
attempt(lambda: exec(compile(VICTIM.read_text(), "stolen", "exec")))
attempt(lambda: os.kill(os.getppid(), 9))
attempt(lambda: os.kill(1, 9))
sys.exit(3)  # the atexit hooks run
"""


@pytest.fixture
def instructor_files():
    """The instructor's files the hostile code aims at, as they were; put back whatever happens
    (should containment fail, the test fails without leaving the checkout broken)."""
    before = {rel: (ROOT / rel).read_bytes() for rel in INSTRUCTOR}
    yield before
    for rel, data in before.items():
        if not (ROOT / rel).is_file() or (ROOT / rel).read_bytes() != data:
            (ROOT / rel).write_bytes(data)


def a_class(tmp_path: Path) -> tuple[Path, Path, dict[str, Path]]:
    """alice (correct), bob (sampler right, AdamW hanging), mallory (hostile; sampler right)."""
    subs, out = tmp_path / "submissions", tmp_path / "out" / "grades.csv"
    out.parent.mkdir()
    victim = subs / "alice" / OPT
    results = out.parent / "grades-results" / "alice.json"
    beside = tmp_path / "planted.txt"
    submit(subs / "alice", {OPT: solution(OPT), SAMPLING: solution(SAMPLING)})
    submit(subs / "bob", {OPT: "while True:\n    pass\n", SAMPLING: solution(SAMPLING)})
    mallory = {OPT: hostile_optimizer(victim, results, beside), SAMPLING: solution(SAMPLING)}
    submit(subs / "mallory", mallory)
    return subs, out, {"victim": victim, "results": results, "beside": beside}


def rows_of(out: Path) -> dict[str, dict]:
    return {r["student"]: r for r in csv.DictReader(out.open(encoding="utf-8"))}


@contained
@pytest.mark.parametrize("level", sorted({LEVEL, sandbox.USER_NAMESPACE} - {None}))
def test_a_hostile_submission_changes_nothing_outside_its_copy(
    level, tmp_path, monkeypatch, instructor_files
):
    level_offered(level)
    monkeypatch.setattr(sandbox, "containment", lambda: level)
    subs, out, paths = a_class(tmp_path)
    submitted = {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()}
    argv = [str(subs), "--out", str(out), "--only", "adamw", "--only", "sampler"]
    assert grade.main([*argv, "--timeout", "15"]) == 0
    alice_results = paths["results"].read_bytes()
    time.sleep(4)  # the daemon would have written by now
    assert {rel: (ROOT / rel).read_bytes() for rel in INSTRUCTOR} == instructor_files
    assert {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()} == submitted
    assert not paths["beside"].exists()
    assert paths["results"].read_bytes() == alice_results
    assert processes_with(MARKER) == []
    rows = rows_of(out)
    assert set(rows) == {"alice", "bob", "mallory"}
    assert (rows["alice"]["adamw"], rows["alice"]["sampler"], rows["alice"]["total"]) == (
        "10",
        "5",
        "15",
    )
    # the hang costs bob only the AdamW check; the sampler keeps its points
    assert (rows["bob"]["adamw"], rows["bob"]["sampler"]) == ("0", "5")
    assert "timed out after 15 s in adamw" in rows["bob"]["notes"]
    # mallory: scored on what its code computed (no AdamW; the sampler), with a note
    assert (rows["mallory"]["adamw"], rows["mallory"]["sampler"]) == ("0", "5")
    assert "the runner exited with code 3 in adamw" in rows["mallory"]["notes"]
    mallory = json.loads((out.parent / "grades-results" / "mallory.json").read_text())
    assert mallory["score"] == 5 and len(mallory["tests"]) == 3


@contained
def test_a_check_that_hangs_costs_only_that_check(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    sampling = solution(SAMPLING).replace(
        "def task_probabilities(",
        "def task_probabilities(*args, **kwargs):\n    while True:\n        pass\n\n\ndef _unused(",
        1,
    )
    submit(subs / "carol", {SAMPLING: sampling})
    assert grade.main([str(subs), "--out", str(out), "--only", "sampler", "--timeout", "5"]) == 0
    carol = rows_of(out)["carol"]
    assert carol["sampler"] == "2.5"  # annealed_alpha's half of the exercise
    assert "timed out after 5 s in sampler: task_probabilities" in carol["notes"]


@contained
def test_ctrl_c_ends_the_grader_in_one_line_and_leaves_no_runner(tmp_path):
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    hang = f"import time\ntime.sleep(600)  # {MARKER}-ctrl-c\n"
    submit(subs / "dave", {OPT: hang})
    command = [sys.executable, "-m", "course.grading.grade", str(subs), "--out", str(out)]
    runners_before = runner_processes()
    grader = subprocess.Popen(  # a terminal's Ctrl-C finds SIGINT's default handler, even
        [*command, "--only", "adamw"],  # where these tests run in a background shell
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while not (tmp_path / "grades-results").is_dir() and time.monotonic() < deadline:
        time.sleep(0.5)  # the results folder is made once the flags are checked
    time.sleep(8)  # the runner has started and is inside the check
    grader.send_signal(signal.SIGINT)
    _, err = grader.communicate(timeout=60)
    assert grader.returncode == 130
    assert "Traceback" not in err and err.strip().splitlines()[-1].startswith("error: interrupted")
    assert processes_with(f"{MARKER}-ctrl-c") == []
    if LEVEL == sandbox.ROOT:
        assert runners_left(runners_before) == []


CARELESS = [
    (["--timeout", "0"], "--timeout 0: give a finite number > 0"),
    (["--timeout", "-5"], "--timeout -5: give a finite number > 0"),
    (["--timeout", "nan"], "--timeout nan: give a finite number > 0"),
    (["--memory_gb", "0"], "--memory_gb 0: give a finite number > 0"),
    (["--memory_gb", "inf"], "--memory_gb inf: give a finite number > 0"),
    (["--memory_gb", "0.3"], "--memory_gb 0.3: too little for a runner to start"),
    (["--only", "nosuch"], "--only: no check matches 'nosuch'"),
    (["--only", ""], "--only '': give a check or an exercise"),
    (["--hide", "grades.csv"], "--hide grades.csv: not a folder"),
    (["--student_timeout", "0"], "--student_timeout 0: give a finite number > 0"),
    (["--jobs", "0"], "--jobs 0: give a whole number >= 1"),
]


@pytest.mark.parametrize(("flags", "said"), CARELESS)
def test_a_careless_flag_is_one_line_before_anything_runs(flags, said, tmp_path, capsys):
    subs = tmp_path / "subs"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    out = tmp_path / "grades.csv"
    assert grade.main([str(subs), "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {said}")
    assert not out.exists() and not (tmp_path / "grades-results").exists()


def out_cases(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """--out that cannot be used: the path, and what the line says."""
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "readonly").mkdir()
    (tmp_path / "in-the-way-results").write_text("a file")
    return {
        "a folder": (tmp_path / "a-folder", "a folder; give the CSV file to write"),
        "no folder": (tmp_path / "nowhere" / "g.csv", "does not exist"),
        "inside the submissions": (tmp_path / "subs" / "g.csv", "inside SUBMISSIONS_DIR"),
        "results inside the submissions": (
            tmp_path / "subs" / "x" / ".." / "g.csv",
            "inside SUBMISSIONS_DIR",
        ),
        "results folder a file": (tmp_path / "in-the-way.csv", "a file is in the way"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "a folder",
        "no folder",
        "inside the submissions",
        "results inside the submissions",
        "results folder a file",
    ],
)
def test_an_out_that_cannot_be_used_is_refused_before_grading(case, tmp_path, capsys):
    subs = tmp_path / "subs"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    (subs / "x").mkdir()
    before = {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()}
    out, said = out_cases(tmp_path)[case]
    assert grade.main([str(subs), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "--out" in err[0]
    assert {p: p.read_bytes() for p in subs.rglob("*") if p.is_file()} == before


def test_a_read_only_out_folder_is_refused_before_grading(tmp_path, capsys):
    subs, folder = tmp_path / "subs", tmp_path / "ro"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    folder.mkdir()
    mounted = subprocess.run(["mount", "--bind", "-o", "ro", str(folder), str(folder)])
    if mounted.returncode != 0:
        os.chmod(folder, 0o500)
    try:
        code = grade.main([str(subs), "--out", str(folder / "g.csv")])
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)
        os.chmod(folder, 0o700)
    err = capsys.readouterr().err.strip().splitlines()
    if mounted.returncode != 0 and AS_ROOT:
        pytest.skip("root writes through permission bits, and no bind mount here")
    assert code == 2 and len(err) == 1 and "cannot write there" in err[0]


def test_no_containment_refuses_untrusted_submissions(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "containment", lambda: None)
    subs = tmp_path / "subs"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    assert grade.main([str(subs), "--out", str(tmp_path / "g.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no containment" in err[0] and "--trusted" in err[0]
    assert not (tmp_path / "g.csv").exists()


def test_trusted_grades_uncontained_and_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sandbox, "containment", lambda: None)
    subs, out = tmp_path / "subs", tmp_path / "g.csv"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    assert grade.main([str(subs), "--out", str(out), "--only", "sampler", "--trusted"]) == 0
    assert rows_of(out)["alice"]["sampler"] == "5"
    assert "uncontained" in capsys.readouterr().err


def test_entries_that_are_not_submissions_get_their_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(sandbox, "containment", lambda: None)
    subs, out = tmp_path / "subs", tmp_path / "g.csv"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    (subs / "notes.txt").write_text("a plain file")
    odd = os.fsencode(str(subs)) + b"/b\xe9a"
    os.makedirs(odd + b"/minbert")
    with open(odd + b"/minbert/sampling.py", "wb") as f:
        f.write(solution(SAMPLING).encode())
    assert grade.main([str(subs), "--out", str(out), "--only", "sampler", "--trusted"]) == 0
    rows = rows_of(out)
    assert rows["notes.txt"]["status"] == "not a folder or a .zip (a plain file)"
    assert rows["b\\xe9a"]["sampler"] == "5" and "not UTF-8" in rows["b\\xe9a"]["notes"]
    results = tmp_path / "g-results"
    assert json.loads((results / "notes.txt.json").read_text())["score"] == 0
    assert json.loads((results / "b\\xe9a.json").read_text())["score"] == 5


def test_a_full_disk_under_out_is_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    """--out on a real full file system (a 64 KiB tmpfs, filled): exit 1, one line naming the
    file it could not write, and no half-written file."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)])
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    monkeypatch.setattr(sandbox, "containment", lambda: None)
    subs = tmp_path / "subs"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    try:
        (disk / "filler").write_bytes(b"x" * 60_000)
        with pytest.raises(OSError):  # really full
            (disk / "more").write_bytes(b"y" * 8192)
        (disk / "more").unlink(missing_ok=True)
        argv = [str(subs), "--out", str(disk / "g.csv"), "--only", "sampler", "--trusted"]
        assert grade.main(argv) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].startswith("error: ") and str(disk) in err[-1] and "Traceback" not in err
        written = [p.name for p in disk.rglob("*") if p.is_file()]
        assert not [name for name in written if name.startswith(".")]  # no temporary left
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.skipif(not AS_ROOT, reason="the own-user level's runner ids are root's")
@pytest.mark.parametrize(
    ("missing", "said"),
    [
        ("landlock", "no namespaces and no Landlock here"),
        ("seccomp", "(the kernel refused the filter)"),
    ],
)
def test_without_namespaces_a_missing_confinement_is_refused_in_one_line(
    missing, said, tmp_path, monkeypatch, capsys
):
    """Fail closed: at the level without namespaces, where the kernel refuses Landlock (a
    runner could read every file every user may) or the seccomp filter (its sockets, System V
    IPC and memfd stay open), the grader grades nothing and names what is missing and the flag
    that grades anyway."""
    from course.grading import landlock, seccomp

    if missing == "landlock":
        monkeypatch.setattr(landlock, "abi", lambda: 0)
    else:
        monkeypatch.setattr(seccomp, "works", lambda: "the kernel refused the filter")
    monkeypatch.setattr(grade, "must_be_private", lambda paths: None)
    monkeypatch.setattr(sandbox, "python_closed_to_runners", lambda private, level: None)
    err = careless_machine(tmp_path, monkeypatch, capsys, sandbox.OWN_USER)
    assert len(err) == 1 and said in err[0]
    assert err[0].endswith("or pass --trusted to run the submissions uncontained")
    assert_trusted_grades_anyway(tmp_path, capsys)


def assert_trusted_grades_anyway(tmp_path: Path, capsys) -> None:
    """The flag a refusal names does what it says: the class is graded, uncontained."""
    out = tmp_path / "trusted.csv"
    argv = [str(tmp_path / "subs"), "--out", str(out), "--only", "sampler", "--trusted"]
    assert grade.main(argv) == 0
    assert rows_of(out)["alice"]["sampler"] == "5"
    assert "uncontained" in capsys.readouterr().err


@pytest.mark.parametrize("level", [sandbox.ROOT, sandbox.USER_NAMESPACE])
def test_with_namespaces_a_kernel_that_keeps_system_v_ipc_open_is_refused_in_one_line(
    level, tmp_path, monkeypatch, capsys
):
    """Fail closed: where the kernel will not let the jail close System V IPC in a runner's
    IPC namespace (memory kept there escapes the watch), the grader grades nothing, says so in
    one line before anyone is graded (not as a runner that never starts, every student
    withheld), and names the flag that grades anyway."""
    if level == sandbox.ROOT and not AS_ROOT:
        pytest.skip("the root level's runner ids are root's")
    refused = "[Errno 1] Operation not permitted: '/proc/sys/kernel/shmmni'"  # as the probe says it
    monkeypatch.setattr(sandbox, "system_v_ipc_refused", lambda asked: refused)
    monkeypatch.setattr(sandbox, "python_closed_to_runners", lambda private, level: None)
    err = careless_machine(tmp_path, monkeypatch, capsys, level)
    assert len(err) == 1 and f"IPC namespace ({refused})" in err[0]
    assert err[0].endswith("or pass --trusted to run the submissions uncontained")
    assert_trusted_grades_anyway(tmp_path, capsys)


@pytest.mark.skipif(not AS_ROOT, reason="runs the probe as another user")
def test_the_probe_says_what_the_kernel_refused_with_its_own_exit_code():
    """The jail's probe run where the limits are not its to set (the machine's IPC namespace, as
    nobody): the kernel's refusal in one line and the exit code the grader reads as a refusal,
    never one an ``unshare`` that did not start gives."""
    from course.grading import jail

    before = system_v_ipc_limits()
    source = sandbox.JAIL.read_text(encoding="utf-8")  # standard library only: any Python runs it
    try:  # the clone may be closed to other users: its source goes on the command line
        done = subprocess.run(
            [sys._base_executable, "-I", "-B", "-c", source, jail.CLOSE_IPC_ONLY],
            capture_output=True,
            text=True,
            user=65534,
            group=65534,
            extra_groups=[],
        )
    except PermissionError:
        pytest.skip(f"{sys._base_executable} is closed to other users")
    assert done.returncode == jail.IPC_REFUSED
    assert done.stderr.strip().splitlines() == [
        "[Errno 13] Permission denied: '/proc/sys/kernel/shmmni'"
    ]
    assert system_v_ipc_limits() == before


def system_v_ipc_limits() -> list[str]:
    return [Path(f"/proc/sys/kernel/{name}").read_text() for name in ("shmmni", "msgmni", "sem")]


def test_the_system_v_ipc_probe_passes_here_and_leaves_the_machines_limits_alone():
    """The probe the grader asks before grading with namespaces: on this kernel the jail can
    close System V IPC at every namespace level the machine offers, and it does so in an IPC
    namespace of its own (as root, a user namespace's root may write the machine's limits)."""
    levels = [lv for lv in sandbox.offered() if lv in (sandbox.ROOT, sandbox.USER_NAMESPACE)]
    if not levels:
        pytest.skip("no namespaces here")
    before = system_v_ipc_limits()
    assert {lv: sandbox.system_v_ipc_refused(lv) for lv in levels} == dict.fromkeys(levels)
    assert system_v_ipc_limits() == before


@pytest.mark.skipif(not AS_ROOT, reason="planting another user's link needs root")
def test_a_results_link_planted_by_another_user_is_refused(tmp_path, capsys):
    """A world-writable, sticky --out folder (as /tmp) where another user made ``grades-results``
    a link to a folder of theirs: the grader refuses in one line and writes nothing through it;
    a world-writable folder without the sticky bit is refused whatever it holds."""
    subs = tmp_path / "subs"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    shared, aimed = tmp_path / "shared", tmp_path / "aimed"
    shared.mkdir()
    aimed.mkdir()
    shared.chmod(0o1777)
    (shared / "grades-results").symlink_to(aimed)
    os.lchown(shared / "grades-results", 65534, 65534)
    argv = [str(subs), "--out", str(shared / "grades.csv"), "--only", "sampler", "--trusted"]
    assert grade.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].endswith("belongs to another user (uid 65534)")
    assert list(aimed.iterdir()) == [] and not (shared / "grades.csv").exists()
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    argv[2] = str(open_to_all / "grades.csv")
    assert grade.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "every user may write in" in err[0]
    assert list(open_to_all.iterdir()) == []


def careless_machine(tmp_path, monkeypatch, capsys, level: str = sandbox.ROOT) -> list[str]:
    """grade.main at ``level`` on a one-student class: its exit code 2 and what it said."""
    monkeypatch.setattr(sandbox, "containment", lambda: level)
    tmp_path.mkdir(parents=True, exist_ok=True)
    subs, out = tmp_path / "subs", tmp_path / "grades.csv"
    submit(subs / "alice", {SAMPLING: solution(SAMPLING)})
    assert grade.main([str(subs), "--out", str(out), "--only", "sampler"]) == 2
    assert not out.exists()
    return capsys.readouterr().err.strip().splitlines()


@pytest.mark.skipif(not AS_ROOT, reason="runner user ids are root's")
def test_an_account_in_the_runners_id_range_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """The runners' user ids are checked against the machine's accounts: one of them there
    would have its processes killed as a runner's. Another range is taken from the variable."""
    accounts = [
        *sandbox.pwd.getpwall(),
        sandbox.pwd.struct_passwd(("tutor", "x", 61005, 61005, "", "/", "/bin/sh")),
    ]
    monkeypatch.setattr(sandbox.pwd, "getpwall", lambda: accounts)
    said = careless_machine(tmp_path, monkeypatch, capsys)
    assert (
        len(said) == 1
        and "user ids 61000-61999 hold accounts of this machine (tutor (61005))" in said[0]
    )
    monkeypatch.setenv(sandbox.UIDS_VARIABLE, "63000-63999")
    assert sandbox.runner_ids() == range(63000, 64000)
    monkeypatch.setenv(sandbox.UIDS_VARIABLE, "12-x")
    said = careless_machine(tmp_path / "again", monkeypatch, capsys)
    assert len(said) == 1 and "MINBERT_RUNNER_UIDS=12-x: give FIRST-LAST" in said[0]


def test_a_python_closed_to_other_users_is_found_at_each_level(tmp_path, monkeypatch):
    """The one definition of "the runners can reach this Python": a package folder closed to
    other users (a .venv made under a umask of 077) is found at both levels whose runners are
    users of their own; a private folder above an open one only without namespaces (the jail
    binds the folder itself into a root whose folders are open)."""
    home = tmp_path / "home"
    packages = home / "venv" / "site-packages"
    packages.mkdir(parents=True)
    for folder in (tmp_path, home / "venv", packages):
        folder.chmod(0o755)
    home.chmod(0o700)
    monkeypatch.setattr(sandbox, "python_paths", lambda private: [str(packages)])
    # this machine's interpreter out of the way: it may itself be closed (pyenv's in a home)
    monkeypatch.setattr(sandbox.sys, "executable", str(tmp_path / "no-such-python"))
    assert sandbox.python_closed_to_runners([], sandbox.ROOT) is None
    assert sandbox.python_closed_to_runners([], sandbox.OWN_USER) == str(packages)
    packages.chmod(0o700)
    assert sandbox.python_closed_to_runners([], sandbox.ROOT) == str(packages)


@pytest.mark.skipif(not AS_ROOT, reason="runner user ids are root's")
def test_a_python_closed_to_the_runners_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """At the root level the runners are users of their own too: a .venv they cannot read (made
    under a umask of 077) is named with what opens it, before anything is graded (not every
    check withheld as a grader fault)."""
    closed = str(tmp_path / "venv")
    monkeypatch.setattr(sandbox, "python_closed_to_runners", lambda private, level: closed)
    said = careless_machine(tmp_path / "class", monkeypatch, capsys)
    assert len(said) == 1 and f"{closed} is closed to other users" in said[0]
    assert f"chmod -R o+rX {closed}" in said[0]


@pytest.mark.skipif(not AS_ROOT, reason="runner user ids are root's")
def test_a_lock_folder_another_user_made_first_is_refused_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """Any local user could stop every root grader by making the runners' lock folder first
    (where the folder can be made by anyone): the grader names it instead of passing it over."""
    planted = tmp_path / "locks"
    planted.mkdir()
    os.chown(planted, 65534, 65534)
    monkeypatch.setattr(sandbox, "LOCKS", (str(planted),))
    said = careless_machine(tmp_path / "class", monkeypatch, capsys)
    assert len(said) == 1 and f"{planted} was made by another user (uid 65534)" in said[0]
