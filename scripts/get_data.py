"""Make the course data files available in data/ (or --data_dir).

For each missing file, in order: copy it from a local folder that holds it (--from, default
../shared/data, where these machines keep them), else download it from the public CS224N
default-final-project repository. When neither works, stop and say which files to put where.
Files already present are left alone. The files are data only: never commit them.

    python scripts/get_data.py [--data_dir data] [--from ../shared/data]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import urllib.request
from pathlib import Path

COURSE_URL = "https://raw.githubusercontent.com/gpoesia/minbert-default-final-project/main/data/"
REQUIRED = [
    "ids-sst-train.csv",
    "ids-sst-dev.csv",
    "ids-sst-test-student.csv",
    "quora-train.csv",
    "quora-dev.csv",
    "sts-train.csv",
    "sts-dev.csv",
    "sts-test-student.csv",
]
OPTIONAL = [
    "quora-test-student.csv",
    "ids-cfimdb-train.csv",
    "ids-cfimdb-dev.csv",
    "ids-cfimdb-test-student.csv",
]


def fetch(name: str, target: Path, local: Path) -> str | None:
    """Copy or download one file into ``target``; return where it came from, or None."""
    if (local / name).is_file():
        shutil.copyfile(local / name, target)
        return str(local / name)
    tmp = target.with_suffix(".part")
    try:
        with (
            urllib.request.urlopen(COURSE_URL + name, timeout=10) as response,
            open(tmp, "wb") as f,
        ):
            shutil.copyfileobj(response, f)
    except OSError:
        tmp.unlink(missing_ok=True)
        return None
    tmp.replace(target)
    return COURSE_URL + name


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--data_dir", default="data", help="where the files go")
    p.add_argument(
        "--from", dest="local", default="../shared/data", help="local folder to copy from"
    )
    args = p.parse_args(argv)
    data_dir, local = Path(args.data_dir), Path(args.local)
    data_dir.mkdir(parents=True, exist_ok=True)
    missing = []
    for name in REQUIRED + OPTIONAL:
        target = data_dir / name
        if target.is_file():
            continue
        source = fetch(name, target, local)
        if source is not None:
            print(f"{target} <- {source}")
        elif name in REQUIRED:
            missing.append(name)
    if missing:
        print(
            f"error: could not copy or download {len(missing)} data file(s): "
            f"{', '.join(missing)}.\n"
            f"Put them in {data_dir.resolve()}/ (they are the CS224N default-final-project data "
            f"files, {COURSE_URL}), or point --from at a folder that holds them.",
            file=sys.stderr,
        )
        return 1
    print(f"data files ready in {data_dir}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
