"""Record, in every row of the multitask results files, the settings its run trained with.

A results row keeps the command that made it, but a command leaves every unnamed setting to the
defaults of its day, and defaults change (pair encoding did): the same command at HEAD may train
something else. ``benchmarks/multitask_runs.py`` now stores each run's resolved settings (its
config.json) in the row as ``settings``; this script adds them to rows written before that,
by resolving each row's recorded command with the driver's own parser at the row's recorded
commit (in a temporary git worktree; a ``-dirty`` commit is resolved at the commit itself, and
the row says so in ``settings_from``).

    python benchmarks/record_settings.py            # settings where missing, pins everywhere
    python benchmarks/record_settings.py --check    # only list the rows that lack settings

Design notes: docs/design/benchmarks.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import shlex
import subprocess
import sys
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = ROOT / "benchmarks" / "results"

# Where a run was, not what it trained: paths (of the machine it ran on) and what only steers
# the process.
NOT_SETTINGS = {"out_dir", "data_dir", "overwrite", "resume", "threads", "device", "no_plots"}
NOT_SETTINGS |= {"checkpoint", "teachers", "add_to", "evaluate"}
NOT_SETTINGS |= {
    f"{t}_{s}" for t in ("sst", "para", "sts", "cfimdb") for s in ("train", "dev", "test")
}

# Parsed with stand-ins, put back afterwards: this machine may have no CUDA, and a checkpoint
# folder a run was built on may not be here.
STAND_INS = {"--device": "cpu", "--checkpoint": "default"}


def resolve(argv: list[str], parse_args) -> dict:
    """The settings ``argv`` gives under the driver's ``parse_args``, in the form its commit
    wrote to a run's config.json (the argparse namespace of the early driver,
    ``TrainConfig.to_flat()`` since; the names are the same)."""
    argv, kept = list(argv), {}
    for i, word in enumerate(argv[:-1]):
        if word in STAND_INS:  # the last one given is the one that counts, as in argparse
            kept[word[2:]], argv[i + 1] = argv[i + 1], STAND_INS[word]
    cfg = parse_args(argv)
    return {**(cfg.to_flat() if hasattr(cfg, "to_flat") else vars(cfg)), **kept}


def head_parser() -> Callable:
    """HEAD's driver parser for a recorded command: the command ran on another machine, so the
    run folders it names (teachers) are checked only where they are here."""
    import train_multitask

    return functools.partial(train_multitask.parse_args, elsewhere=True)


def resolve_stdin() -> None:
    """Run in a worktree at a row's commit: name -> argv on stdin, name -> settings on stdout."""
    import train_multitask  # the commit's own driver (the worktree is the current directory)

    result = {}
    for key, argv in json.loads(sys.stdin.read()).items():
        try:
            result[key] = resolve(argv, train_multitask.parse_args)
        except BaseException as err:  # a parser that exits, or a command it no longer takes
            result[key] = {"error": repr(err)}
    print(json.dumps(result, default=str))


# The script a worktree runs: this file's resolve_stdin with the worktree's driver.
RESOLVE = (
    f"import sys; sys.path.insert(1, {str(Path(__file__).parent)!r}); "
    "import record_settings; record_settings.resolve_stdin()"
)


def driver_argv(command: str) -> list[str] | None:
    """The driver's arguments in a recorded command (None when it is not a driver command)."""
    words = shlex.split(command)
    scripts = [i for i, word in enumerate(words) if word.endswith("train_multitask.py")]
    return words[scripts[0] + 1 :] if scripts else None


def rows_without_settings() -> dict[str, list[tuple[Path, str, list[str]]]]:
    """commit -> (results file, row name, driver arguments) of every row lacking settings."""
    todo = defaultdict(list)
    for path, name, row in results_rows():
        if "settings" not in row:
            todo[row["commit"]].append((path, name, driver_argv(row["command"])))
    return todo


def update_row(path: Path, name: str, change: Callable[[dict], None]) -> None:
    """Apply ``change`` to a row of a results file, as its runner writes it (under its lock)."""
    import multitask_runs  # a sibling script (imported here: see suite_flags)

    multitask_runs.update_results(path, lambda results: change(results[name]))


def resolve_at(commit: str, argvs: dict[str, list[str]]) -> dict[str, dict]:
    """The settings of each command line, resolved by the parser at ``commit``."""
    with tempfile.TemporaryDirectory(prefix="settings-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(tree), commit.removesuffix("-dirty")],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            done = subprocess.run(
                [sys.executable, "-c", RESOLVE],
                cwd=tree,
                input=json.dumps(argvs),
                capture_output=True,
                text=True,
                check=True,
            )
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT)
    return json.loads(done.stdout.splitlines()[-1])


def results_rows() -> Iterator[tuple[Path, str, dict]]:
    """(results file, row name, row) of every driver run recorded in a results file."""
    for path in sorted(RESULTS_DIR.glob("*.json")):
        for name, row in json.loads(path.read_text()).items():
            if isinstance(row, dict) and driver_argv(row.get("command", "")) is not None:
                yield path, name, row


def suite_flags(command: list[str]) -> list[str] | None:
    """The flags at HEAD of the suite row that ran ``command`` (its run folder is named
    ``<suite>-<row>[-seed-N]`` by multitask_runs.py), "{runs_dir}" and "{seed}" filled in as
    the run had them; None when no suite has that row any more."""
    # A sibling script, imported here and not above: resolve_stdin runs this file inside an
    # older worktree, where importing it (and through it this tree's driver) would be wrong.
    import multitask_runs

    out_dir = Path(command[command.index("--out_dir") + 1])
    for suite in sorted(multitask_runs.SUITES, key=len, reverse=True):
        if not out_dir.name.startswith(suite + "-"):
            continue
        rows, name = dict(multitask_runs.SUITES[suite]), out_dir.name[len(suite) + 1 :]
        seeded = re.fullmatch(r"(.+)-seed-(\d+)", name)
        if name in rows:
            return multitask_runs.filled(rows[name], str(out_dir.parent))
        if seeded and seeded[1] in rows:
            return multitask_runs.filled(rows[seeded[1]], str(out_dir.parent), int(seeded[2]))
    return None


def settings_of(flat: dict) -> dict:
    """What defines the training, in JSON's own form (tuples as lists)."""
    return json.loads(json.dumps({k: v for k, v in flat.items() if k not in NOT_SETTINGS}))


def differences(row: dict, parse_args: Callable, pins: list[str] | None = None) -> dict:
    """setting -> (at HEAD, recorded) where the row's suite row, with the recorded command's
    other flags and ``pins`` (default: the row's), trains something else at HEAD than the row
    did; settings added since are new and not compared. None when no suite has the row."""
    command = driver_argv(row["command"])
    flags = suite_flags(command)
    if flags is None:
        return None
    # The recorded command first (its flags after -- and its paths), the suite row's flags at
    # HEAD after it: where they say something else, they win, and the comparison sees it.
    argv = [*command, *flags, *(row.get("pins", []) if pins is None else pins)]
    now, then = settings_of(resolve(argv, parse_args)), settings_of(row["settings"])
    return {k: (now[k], v) for k, v in then.items() if k in now and now[k] != v}


def pin(key: str, value) -> list[str]:
    """The flag that sets ``key`` to ``value``."""
    if isinstance(value, bool):
        return [f"--{key}" if value else f"--no-{key}"]
    if isinstance(value, list):
        return [f"--{key}", ",".join(map(str, value))]
    return [f"--{key}", str(value)]


def add_pins(path: Path, name: str, row: dict, parse_args: Callable) -> None:
    """Write the row's pins (none: no key) into its results file, checked by resolving them."""
    changed = differences(row, parse_args, pins=[])
    if changed is None:
        return
    pins = [word for key, (_, then) in sorted(changed.items()) for word in pin(key, then)]
    if pins and differences(row, parse_args, pins):
        print(f"{path.stem}/{name}: cannot pin {differences(row, parse_args, pins)}")
        return

    def set_pins(row: dict) -> None:
        row.pop("pins", None)
        row.update({"pins": pins} if pins else {})

    update_row(path, name, set_pins)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list rows without settings")
    args = parser.parse_args(argv)
    todo = rows_without_settings()
    for commit, rows in todo.items():
        print(f"{commit}: {', '.join(f'{p.stem}/{n}' for p, n, _ in rows)}")
    if args.check:
        return 0
    for commit, rows in todo.items():
        settings = resolve_at(commit, {f"{p}\0{n}": argv for p, n, argv in rows})
        for path, name, _ in rows:
            resolved = settings[f"{path}\0{name}"]
            if "error" in resolved:
                print(f"{path.stem}/{name}: not resolved at {commit}: {resolved['error']}")
                continue
            recorded = {"settings": resolved, "settings_from": f"the command resolved at {commit}"}
            update_row(path, name, lambda row, recorded=recorded: row.update(recorded))
    sys.path.insert(0, str(ROOT))  # HEAD's driver
    for path, name, row in results_rows():
        if "settings" in row:
            add_pins(path, name, row, head_parser())
    return 0


if __name__ == "__main__":
    sys.exit(main())
