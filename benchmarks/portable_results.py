"""Make the recorded results name nothing of the machine that made them.

A results row keeps the command that made it; rows written before commands were recorded as a
user types them begin with that machine's interpreter path and name its folders
(``/root/.pyenv/.../python train_multitask.py --data_dir /work/shared/data --out_dir
/work/main/runs/bench/...``). This script rewrites every such path in the results files (JSON
and Markdown) and the docs with ``_common.portable`` (the rule the writers use now: ``python``,
paths relative to the clone, ``../shared/data``, run folders under ``runs/``), and moves the
interpreter's version, where its path named one, and torch's into fields of their own
(``python``, ``torch``). Numbers, commits and dates are untouched; running it again changes
nothing.

    python benchmarks/portable_results.py            # rewrite
    python benchmarks/portable_results.py --check    # list the files it would change
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from _common import RESULTS_DIR, ROOT, portable

INTERPRETER_VERSION = re.compile(r"versions/(\d+\.\d+\.\d+)/bin/python")
TORCH_VERSION = re.compile(r"torch (\S+?),")


def versions(row: dict) -> dict[str, str]:
    """The interpreter's version (from the interpreter path of the row's command, when it names
    one) and torch's (from the row's machine line), where the row lacks them."""
    found = {}
    command = row.get("command") or " ".join(row.get("commands", {}).values())
    if "python" not in row and (m := INTERPRETER_VERSION.search(command)):
        found["python"] = m[1]
    if "torch" not in row and (m := TORCH_VERSION.search(row.get("machine", ""))):
        found["torch"] = m[1]
    return found


def rewritten(value):
    """``value`` with every string made portable; a row that records a machine gains the
    version fields after it."""
    if isinstance(value, str):
        return portable(value)
    if isinstance(value, list):
        return [rewritten(v) for v in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for key, v in value.items():
        out[key] = rewritten(v)
        if key == "machine" and isinstance(v, str):
            out |= versions(value)
    return out


def files() -> list[Path]:
    """The results files and the docs."""
    found = sorted(RESULTS_DIR.glob("*.json")) + sorted(RESULTS_DIR.glob("*.md"))
    return found + sorted((ROOT / "docs").glob("*.md"))


def new_text(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".json":
        return json.dumps(rewritten(json.loads(text)), indent=2) + "\n"
    return portable(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list what would change")
    args = parser.parse_args(argv)
    changed = [path for path in files() if new_text(path) != path.read_text()]
    for path in changed:
        print(path.relative_to(ROOT))
        if not args.check:
            path.write_text(new_text(path))
    print(f"{len(changed)} file(s) {'to rewrite' if args.check else 'rewritten'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
