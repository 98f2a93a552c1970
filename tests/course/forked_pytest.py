"""pytest run many times in one student tree, each run a process forked from one that has imported
torch, pytest and its plugins and nothing of the tree: a run is what ``python -m pytest ARGS`` run
in the tree does (a process of its own, the tree first on the import path, every module of the
tree imported afresh), without paying the interpreter's start, torch's import and its exit each
time (a run ends with ``os._exit`` once its output is flushed).

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
import json, os, sys, tempfile, traceback
import pytest, torch  # imported once; the tree's modules are imported by each run, afresh

# What each run would otherwise pay again, none of it the tree's: pytest's plugins (loaded by a
# run of pytest in an empty folder), assert_close's first call (it imports torch.distributed's
# tensor package, about a second) and the Hugging Face BERT the MLM tests compare with.
with tempfile.TemporaryDirectory() as empty:
    os.chdir(empty)
    with open(os.devnull, "w") as quiet:
        sys.stdout, sys.stderr = quiet, quiet
        pytest.main(["-q", "-p", "no:cacheprovider", "--collect-only"])
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
tree = sys.argv[1]
os.chdir(tree)
torch.testing.assert_close(torch.zeros(1), torch.zeros(1))
import safetensors.torch, transformers.models.bert.modeling_bert

sys.path[0] = tree  # as python -m puts the current folder first
answers = os.fdopen(os.dup(1), "w")
for line in sys.stdin:
    output = tempfile.TemporaryFile()
    pid = os.fork()
    if pid == 0:  # the run, then out at once: finalizing torch's many modules takes seconds
        code = 3  # pytest's internal error, where pytest itself raised
        try:
            os.dup2(output.fileno(), 1)
            os.dup2(output.fileno(), 2)
            code = int(pytest.main(json.loads(line)))
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
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
