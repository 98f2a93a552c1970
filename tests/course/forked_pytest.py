"""pytest run many times in one student tree, each run a process forked from one that has imported
torch and pytest and nothing of the tree: a run is what ``python -m pytest ARGS`` run in the tree
does (a process of its own, the tree first on the import path, every module of the tree imported
afresh), without paying the interpreter's start and torch's import each time.

    with ForkedPytest(tree) as runs:
        returncode, output = runs.run(["-q", "tests/model/test_bert.py"])

Used where a test writes one form after another of a student's file into the same tree.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

# The server: one JSON list of pytest arguments a line on stdin; for each, a child forked to run
# pytest.main on them (its output to a file of its own), and one JSON line back on stdout.
SERVER = """
import json, os, sys, tempfile
import pytest, torch  # imported once; the tree's modules are imported by each run, afresh

tree = sys.argv[1]
os.chdir(tree)
sys.path[0] = tree  # as python -m puts the current folder first
answers = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    output = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the run: its exit ends this process, as pytest's would
        os.dup2(output.fileno(), 1)
        os.dup2(output.fileno(), 2)
        sys.exit(pytest.main(json.loads(line)))
    _, status = os.waitpid(pid, 0)
    output.seek(0)
    said = output.read().decode("utf-8", "replace")
    answer = {"returncode": os.waitstatus_to_exitcode(status), "output": said}
    answers.write(json.dumps(answer) + "\\n")
    answers.flush()
"""


class ForkedPytest:
    """A server of pytest runs in ``tree`` (see the module docstring); each run is bounded by
    ``timeout`` seconds."""

    def __init__(self, tree: Path, timeout: float = 900) -> None:
        self.tree, self.timeout = tree, timeout
        self.server: subprocess.Popen | None = None

    def __enter__(self) -> ForkedPytest:
        command = [sys.executable, "-c", SERVER, str(self.tree)]
        self.server = subprocess.Popen(
            command,
            cwd=self.tree,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    def run(self, args: list[str]) -> tuple[int, str]:
        """(pytest's exit status, what it printed) for one run with ``args``."""
        assert self.server is not None and self.server.stdin and self.server.stdout
        self.server.stdin.write(json.dumps(args) + "\n")
        self.server.stdin.flush()
        ready, _, _ = select.select([self.server.stdout], [], [], self.timeout)
        line = self.server.stdout.readline() if ready else ""
        if not line:
            self.server.kill()
            said = f"no answer within {self.timeout} s from pytest {args} in {self.tree}"
            raise RuntimeError(said)
        answer = json.loads(line)
        return answer["returncode"], answer["output"]

    def __exit__(self, *exc) -> None:
        assert self.server is not None
        self.server.kill()
        self.server.wait()
