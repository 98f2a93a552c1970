"""The old name of ``python -m tools.fusion_weights``: run, one line says the new one."""

import sys

if __name__ == "__main__":
    print(
        "python -m multitask.fusion_weights moved: run python -m tools.fusion_weights",
        file=sys.stderr,
    )
    sys.exit(2)
