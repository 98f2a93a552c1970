"""The README's test command in a fresh clone, cloned the ways users clone: inside a folder only
its owner can enter (0700, as home folders and ``mktemp -d`` are), at a path that holds a space,
run by a user who is not root, and under a umask of 077.

    python benchmarks/clone_ways.py                         # make test, every way (about an hour)
    python benchmarks/clone_ways.py --command "make check"  # the fast tier, every way
    python benchmarks/clone_ways.py --ways private space    # some of the ways

Each way clones HEAD into a fresh scratch folder with ``shared`` beside it (a link to this
checkout's ``../shared``) and runs the command there with ``PYTHON=/usr/bin/python3``, as .ci/run
does. Green: exit 0 (every test passed or skipped with its reason). Writes
benchmarks/results/clone-ways.md (command, commit, machine; per way the exit code, wall-clock and
last lines); another command's results go beside it, named after the command
(clone-ways-make-check.md). Needs root: it makes a user and changes owners.
"""

from __future__ import annotations

import argparse
import os
import pwd
import shlex
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import _common

ROOT, SHARED = _common.ROOT, _common.ROOT.parent / "shared"
TESTER = "minbert-tester"  # the non-root user the ``non-root`` way runs as (made if missing)
WAYS = {
    "private": "a clone inside a folder only its owner can enter (0700)",
    "space": "a clone whose path holds a space",
    "non-root": f"the command run by a user who is not root ({TESTER})",
    "umask": "the clone made and the command run under umask 077",
}
TAIL = 6  # the command's last lines kept in the results, less pip's notes about its indexes
NOISE = ("WARNING: Location ",)


def tester_uid() -> int:
    """The non-root user's uid, made (with a home folder) where it is missing."""
    try:
        return pwd.getpwnam(TESTER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--create-home", TESTER], check=True)
        return pwd.getpwnam(TESTER).pw_uid


def lay_out(way: str, scratch: Path) -> Path:
    """The folder the clone goes in, with ``shared`` beside it, laid out for ``way``."""
    parent = scratch / ("my projects" if way == "space" else "work")
    parent.mkdir(parents=True)
    scratch.chmod(0o700 if way == "private" else 0o755)
    (parent / "shared").symlink_to(SHARED.resolve())
    return parent / "minbert"


def clone_into(way: str, clone: Path) -> None:
    """HEAD cloned into ``clone`` (by root: git refuses a repository another user owns), under
    umask 077 for that way."""
    umask = "umask 077; " if way == "umask" else ""
    line = f"{umask}git clone --quiet {shlex.quote(str(ROOT))} {shlex.quote(str(clone))}"
    subprocess.run(["bash", "-c", line], check=True)


def run_way(way: str, command: str, timeout: float) -> dict:
    """Clone and run the command the ``way``; its exit code, wall-clock and last lines."""
    scratch = Path(tempfile.mkdtemp(prefix=f"clone-{way}-"))
    try:
        clone = lay_out(way, scratch)
        clone_into(way, clone)
        python = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else "python3"
        umask = "umask 077; " if way == "umask" else ""
        line = f"{umask}cd {shlex.quote(str(clone))} && {command} PYTHON={python}"
        argv = ["bash", "-c", line]
        if way == "non-root":
            uid = tester_uid()
            subprocess.run(["chown", "-R", f"{uid}:{uid}", str(scratch)], check=True)
            argv = ["runuser", "-u", TESTER, "--", "bash", "-c", line]
        env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
        env["CI"] = "true"
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=timeout, env=env, stdin=None
            )
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as err:
            code, output = "timed out", (err.stdout or b"").decode(errors="replace")
        wall = time.monotonic() - started
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [ln for ln in output.splitlines() if ln.strip() and not ln.startswith(NOISE)]
    # a file of the clone as a user reads it from the clone's root, any other scratch path as
    # $TMPDIR/...: no path of this machine
    kept = [_common.portable(ln.replace(f"{clone}/", "")) for ln in lines[-TAIL:]]
    return {"code": code, "seconds": wall, "tail": kept}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--command",
        default="make test",
        help="the command to run in each clone (default: make test, the README's)",
    )
    parser.add_argument(
        "--ways", nargs="+", choices=list(WAYS), default=list(WAYS), help="which ways (all)"
    )
    parser.add_argument(
        "--timeout", type=float, default=3600, help="seconds one way may take (default 3600)"
    )
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("error: clone_ways.py makes a user and changes owners: run it as root")
    name = "clone-ways"
    if args.command != "make test":
        name += "-" + "-".join(args.command.split()).replace("/", "-")
    report = _common.Report(
        name,
        "The README's test command, cloned the ways users clone",
        f"Each way: a fresh clone of the commit below, `{args.command}` run in it from a fresh "
        "shell (`PYTHON=/usr/bin/python3`), `../shared` a link beside the clone. Green: exit 0.",
    )
    rows = ["| way | what | exit | wall-clock s |", "| --- | --- | --- | ---: |"]
    tails = []
    for way in args.ways:
        print(f"[clone_ways] {way}: {WAYS[way]}", flush=True)
        found = run_way(way, args.command, args.timeout)
        rows.append(f"| {way} | {WAYS[way]} | {found['code']} | {found['seconds']:.0f} |")
        tails.append(f"### {way}\n\n" + "\n".join(f"    {ln}" for ln in found["tail"]))
    report.add("## Every way\n\n" + "\n".join(rows))
    report.add("## What each printed last\n\n" + "\n\n".join(tails))
    report.write()


if __name__ == "__main__":
    main()
