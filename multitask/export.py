"""The old name of ``python -m tools.export``: run, one line says the new one."""

import sys

if __name__ == "__main__":
    print(
        "python -m multitask.export moved: run python -m tools.export (same arguments)",
        file=sys.stderr,
    )
    sys.exit(2)
