"""The grader as the student tree holds it: one file, ``grader.pyz``, instead of ``course/``.

A student edits eleven files and runs ``sanity_check.py``; the grader's files (the checks, the
sealed references, the runner) are not theirs to open. So the scaffold packs them into one zip at
the tree's root: the manifest's lines ``SOURCE => grader.pyz`` name them, each kept at its path.

* ``sanity_check.py`` and the tests' ``conftest.py`` put the archive first on the import path, so
  ``course`` is the packed grader even where the tree holds a ``course/`` of its own; the grader
  reads its stored files through ``importlib.resources``, inside a zip as in a folder.
* ``python grader.pyz ANSWER_FD`` is a submission's runner (``course/runner.py``): the archive's
  ``__main__.py`` calls it, and the class grader starts each runner so, in the tree it cut.

The same files give the same bytes (entries sorted, one fixed date), so the scaffold's record tells
the archive from a file the student changed, as it does every other file.
"""

from __future__ import annotations

import io
import zipfile

ARCHIVE = "grader.pyz"  # at the student tree's root
MAIN = (
    '"""A submission\'s runner (course/runner.py)."""\n\nfrom course.runner import main\n\nmain()\n'
)
FIXED_DATE = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry holds


def inside(target: str) -> str | None:
    """The path inside the archive of a student-tree file the scaffold names
    ``grader.pyz/<path>`` (a packed file), else None."""
    prefix = f"{ARCHIVE}/"
    return target.removeprefix(prefix) if target.startswith(prefix) else None


def packed(files: dict[str, bytes]) -> bytes:
    """The archive of ``files`` (path inside it -> bytes), with the runner's ``__main__.py``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in sorted({**files, "__main__.py": MAIN.encode()}.items()):
            entry = zipfile.ZipInfo(name, FIXED_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            archive.writestr(entry, data)
    return buffer.getvalue()


def unpacked(data: bytes) -> dict[str, bytes]:
    """The files of an archive (path inside it -> bytes), ``__main__.py`` left out."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {n: archive.read(n) for n in archive.namelist() if n != "__main__.py"}
