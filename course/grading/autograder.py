"""A Gradescope autograder in one command: ``python -m course.grading.autograder OUT.zip``.

The zip holds this project's grader and student tree (``source/`` once Gradescope unpacks it),
``setup.sh`` (run once when Gradescope builds the image: the requirements and the packaged
checkpoint, as ``make install`` does) and ``run_autograder`` (run for each submission: the
submission graded by ``course.grading.grade`` as a class of one, its results.json copied to
``/autograder/results/results.json``). ``AUTOGRADER_ROOT`` replaces ``/autograder`` (a test lays
out a scratch folder), ``AUTOGRADER_ARGS`` adds flags of ``course.grading.grade``.

Design notes: docs/design/course.md.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

from course.authoring.scaffold import PROJECT_ROOT, project_files
from course.grading.predictions import LabelsError
from course.grading.predictions import read_labels as read_label_files
from minbert.checkpoint import atomic_write
from minbert.flags import ArgumentParser, nonempty_path
from multitask.errors import UsageError, run_command

LEFT_OUT = ("benchmarks/", "docs/", "RESULTS.md", ".ci/")  # not needed to grade

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, as root, in /autograder/source: install what grading needs.
set -euo pipefail
cd "$(dirname "$0")"
export PIP_BREAK_SYSTEM_PACKAGES=1  # an image's own Python, as root: Ubuntu 24.04 says PEP 668
apt-get install -y -q python3-pip util-linux >/dev/null 2>&1 || true
python3 -m pip install --quiet -r requirements.txt
python3 -m pip install --quiet --no-deps -r requirements-checkpoint.txt
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission: grade it, write results/results.json.
set -euo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$scratch/class" "$root/results"
cp -r "$root/submission" "$scratch/class/submission"
# Without namespaces a runner is a user of its own: it may read none of this.
chmod -R go-rwx "$root/source" "$root/submission" "$root/results" "$scratch"
cd "$root/source"
# shellcheck disable=SC2086
python3 -m course.grading.grade "$scratch/class" --out "$scratch/grades.csv" --jobs 1 \\
    ${AUTOGRADER_ARGS:-} 2> "$scratch/said" || true
cat "$scratch/said" >&2
if [ -f "$scratch/grades-results/submission.json" ]; then
    cp "$scratch/grades-results/submission.json" "$root/results/results.json"
else
    python3 -c 'import json, sys; said = open(sys.argv[1]).read().strip().splitlines()
print(json.dumps({"score": 0, "output": "nothing graded: " + (said[-1] if said else "?")}))' \\
        "$scratch/said" > "$root/results/results.json"
fi
"""


RUN_LEADERBOARD = """#!/usr/bin/env bash
# Gradescope runs this for each upload: its prediction files scored on the labels in labels/.
# Only data is read from the upload: no code of the student's runs.
set -euo pipefail
root="${AUTOGRADER_ROOT:-/autograder}"
mkdir -p "$root/results"
cd "$root/source"
python3 -c 'import sys; from pathlib import Path
from course.grading.leaderboard import score_upload
score_upload(Path(sys.argv[1]), Path("labels"), Path(sys.argv[2]))' \\
    "$root/submission" "$root/results/results.json"
"""


def autograder_files(root: Path = PROJECT_ROOT) -> list[str]:
    """The project's files the zip holds (relative to ``root``)."""
    return [rel for rel in project_files(root) if not rel.startswith(LEFT_OUT)]


def write_zip(out: Path, root: Path = PROJECT_ROOT, labels: Path | None = None) -> int:
    """The autograder zip at ``out`` (written whole or not at all); the number of files. With
    ``labels`` (a folder of labelled test files), the leaderboard's autograder: ``labels/`` in
    the zip and a ``run_autograder`` that scores an upload's prediction files on them."""
    files = autograder_files(root)
    label_files = read_labels(labels) if labels is not None else {}
    run = RUN if labels is None else RUN_LEADERBOARD

    def fill(stream) -> None:
        with zipfile.ZipFile(stream, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, text in (("setup.sh", SETUP), ("run_autograder", run)):
                info = zipfile.ZipInfo(name)
                info.external_attr = 0o755 << 16  # executable once unpacked
                archive.writestr(info, text)
            for rel in files:
                archive.write(root / rel, rel)
            for task in label_files.values():
                archive.write(task.file, f"labels/{task.file.name}")

    atomic_write(out, fill)
    return len(files) + 2 + len(label_files)


def read_labels(folder: Path) -> dict:
    """The leaderboard's label files, checked before the zip is written (a UsageError)."""
    try:
        return read_label_files(folder)
    except LabelsError as err:
        raise UsageError(f"--labels {err}") from None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="python -m course.grading.autograder",
        description="Write a Gradescope autograder zip (setup.sh, run_autograder, the grader).",
    )
    parser.add_argument("out", metavar="OUT.zip", type=nonempty_path, help="the zip to write")
    parser.add_argument(
        "--leaderboard",
        action="store_true",
        help="the final project's leaderboard instead: score uploaded test predictions",
    )
    parser.add_argument(
        "--labels",
        metavar="LABELS_DIR",
        type=nonempty_path,
        help="with --leaderboard: the labelled test files (as python -m "
        "course.grading.leaderboard takes)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an existing OUT.zip (without it, an existing file is never replaced)",
    )

    def body() -> None:
        args = parser.parse_args(argv)
        if args.out.suffix != ".zip" or args.out.is_dir():
            raise UsageError(f"OUT.zip {args.out}: give a file name ending in .zip")
        if not args.out.parent.is_dir():
            raise UsageError(f"OUT.zip {args.out}: its folder does not exist")
        if (args.out.exists() or args.out.is_symlink()) and not args.overwrite:
            raise UsageError(
                f"OUT.zip {args.out} exists; pass --overwrite to replace it, or give another name"
            )
        if args.leaderboard != (args.labels is not None):
            raise UsageError("--leaderboard and --labels LABELS_DIR go together")
        count = write_zip(args.out, labels=args.labels)
        print(f"wrote {args.out} ({count} files): upload it as the assignment's autograder")

    return run_command(body, "no zip was written")


if __name__ == "__main__":
    sys.exit(main())
