"""How long the test suite takes: per test folder, the slowest tests, and the wall time of a tier.

Runs pytest once (in this process's interpreter) with a JUnit XML report, reads each test's time
from it (set-up, call and tear-down together), and writes a results file with the commit and the
machine:

    python benchmarks/test_times.py                # every test, one process: test-times.md
    python benchmarks/test_times.py --tier check   # the fast tier (not slow): test-times-check.md
    python benchmarks/test_times.py --workers 2    # with pytest-xdist over two processes

The per-test times decide which tests are marked slow (the ``SLOW_*`` tables of the top-level
``conftest.py``); the fast tier's wall time is what ``make check`` costs a developer. Run it on a
quiet machine: the times of one test vary with the load.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

import _common

TIERS = {
    "all": ("test-times", "every test", []),
    "check": (
        "test-times-check",
        "the fast tier (`make check`: not marked slow)",
        ["-m", "not slow"],
    ),
}
SLOWEST = 30


def test_times(junit_xml: Path) -> list[tuple[str, float, str]]:
    """(test id, seconds, outcome) for every test case in a JUnit XML report."""
    rows = []
    for case in ET.parse(junit_xml).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")
        # pytest's classname is the module's dotted path, then a class if the test is in one.
        while module and not module[-1].startswith("test_"):
            module.pop()
        path = "/".join(module) + ".py"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = child.tag
        name = ascii(case.get("name", ""))[1:-1].replace("|", "\\|")
        name, group = name.rsplit("@", 1) if "@" in name else (name, "")
        if len(name) > 100:
            name = name[:97] + "..."
        name += f"@{group}" if group else ""  # the load group whole: group_line reads it
        rows.append((f"{path}::{name}", float(case.get("time", 0.0)), outcome))
    return rows


def cpu_jiffies() -> tuple[int, int] | None:
    """(busy, all) clock ticks of every core since boot, from /proc/stat (Linux); None
    elsewhere. Idle and waiting for I/O count as not busy."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            ticks = [int(n) for n in stat.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + ticks[4]
    return sum(ticks) - idle, sum(ticks)


def busy_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    """How busy the machine's cores were between two ``cpu_jiffies`` readings, in words."""
    if before is None or after is None or after[1] == before[1]:
        return "the cores' busy share is unknown here (no /proc/stat)"
    share = 100 * (after[0] - before[0]) / (after[1] - before[1])
    return f"the machine's cores were busy {share:.0f}% of that time (/proc/stat)"


def group_line(rows: list[tuple[str, float, str]]) -> str:
    """The tests of each pytest-xdist load group (``@group`` in their ids): one worker runs a
    group's tests one after another, so its sum is a floor under the wall time."""
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test_id, duration, _ in rows:
        if "@" in test_id:
            group = test_id.rsplit("@", 1)[1]
            seconds[group] += duration
            counts[group] += 1
    return "".join(
        f" The load group `{g}` (one worker): {counts[g]} tests, {seconds[g]:.0f} s."
        for g in sorted(seconds)
    )


def folder_of(test_id: str) -> str:
    path = test_id.split("::")[0]
    return str(Path(path).parent)


def per_folder_table(rows: list[tuple[str, float, str]]) -> str:
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for test_id, duration, _ in rows:
        seconds[folder_of(test_id)] += duration
        counts[folder_of(test_id)] += 1
    total = sum(seconds.values()) or 1.0
    lines = ["| folder | tests | seconds | share |", "| --- | ---: | ---: | ---: |"]
    for folder in sorted(seconds, key=seconds.get, reverse=True):
        share = 100 * seconds[folder] / total
        lines.append(f"| {folder} | {counts[folder]} | {seconds[folder]:.1f} | {share:.0f}% |")
    lines.append(f"| all | {len(rows)} | {sum(seconds.values()):.1f} | 100% |")
    return "\n".join(lines)


def per_file_table(rows: list[tuple[str, float, str]], count: int) -> str:
    seconds: dict[str, float] = defaultdict(float)
    for test_id, duration, _ in rows:
        seconds[test_id.split("::")[0]] += duration
    lines = ["| file | seconds |", "| --- | ---: |"]
    for path in sorted(seconds, key=seconds.get, reverse=True)[:count]:
        lines.append(f"| `{path}` | {seconds[path]:.1f} |")
    return "\n".join(lines)


def slowest_table(rows: list[tuple[str, float, str]]) -> str:
    lines = ["| test | seconds | outcome |", "| --- | ---: | --- |"]
    for test_id, duration, outcome in sorted(rows, key=lambda r: r[1], reverse=True)[:SLOWEST]:
        lines.append(f"| `{test_id}` | {duration:.1f} | {outcome} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--tier", choices=sorted(TIERS), default="all", help="which tests (default: all)"
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="pytest-xdist worker processes (default 0: one process, times of a quiet run)",
    )
    parser.add_argument("pytest_args", nargs="*", help="more arguments for pytest (after --)")
    args = parser.parse_args()
    name, label, tier_args = TIERS[args.tier]
    workers = ["-n", str(args.workers)] if args.workers else []
    report = _common.Report(
        name + (f"-{args.workers}-workers" if args.workers else ""),
        f"Test times: {label}",
        "Each test's time is its set-up, call and tear-down (pytest's JUnit report); a folder's "
        "time is the sum of its tests' (with workers, the sum exceeds the wall time). The wall "
        "time is pytest's whole process, collection included.",
    )
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}"]
        command += tier_args + workers + args.pytest_args
        started, jiffies = time.monotonic(), cpu_jiffies()
        result = subprocess.run(command, cwd=_common.ROOT)
        wall = time.monotonic() - started
        busy = busy_share(jiffies, cpu_jiffies())
        rows = test_times(junit)
    outcomes = defaultdict(int)
    for _, _, outcome in rows:
        outcomes[outcome] += 1
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(outcomes.items()))
    report.add(
        f"## Wall time\n\n`pytest {' '.join(tier_args + workers + args.pytest_args)}`: "
        f"{wall:.0f} s ({wall / 60:.1f} min), exit {result.returncode}; {summary}; {busy}."
        + group_line(rows)
    )
    report.add("## Per folder\n\n" + per_folder_table(rows))
    report.add(f"## The {SLOWEST} slowest files\n\n" + per_file_table(rows, SLOWEST))
    report.add(f"## The {SLOWEST} slowest tests\n\n" + slowest_table(rows))
    report.write()
    sys.exit(result.returncode)


if __name__ == "__main__":
    main()
