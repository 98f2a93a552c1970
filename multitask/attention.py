"""The old name of ``python -m tools.attention``: run, one line says the new one."""

import sys

if __name__ == "__main__":
    print(
        "python -m multitask.attention moved: run python -m tools.attention (same arguments)",
        file=sys.stderr,
    )
    sys.exit(2)
