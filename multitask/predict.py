"""The old name of ``python -m tools.predict``: run, one line says the new one."""

import sys

if __name__ == "__main__":
    print(
        "python -m multitask.predict moved: run python -m tools.predict (same arguments)",
        file=sys.stderr,
    )
    sys.exit(2)
