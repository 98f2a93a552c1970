"""Alias of ``minbert.course.scaffold``, the course scaffolding (the student version of this
project, with the exercises cut out), so that ``python -m minbert.scaffold`` keeps working:

    python -m minbert.scaffold OUT_DIR        # same as python -m minbert.course.scaffold OUT_DIR
    python -m minbert.scaffold --list

The code and its documentation are in ``minbert/course/scaffold.py``.
"""

from __future__ import annotations

import sys

from minbert.course.scaffold import (
    BEGIN,
    END,
    EXCLUDED_DIRS,
    EXCLUDED_FILES,
    HINT,
    INSTRUCTOR_ONLY,
    LINE_LENGTH,
    MARKER_PREFIXES,
    PROJECT_ROOT,
    Region,
    ScaffoldError,
    find_exercises,
    find_regions,
    main,
    project_files,
    raise_statement,
    student_source,
    write_student_tree,
)

__all__ = [
    "BEGIN",
    "END",
    "EXCLUDED_DIRS",
    "EXCLUDED_FILES",
    "HINT",
    "INSTRUCTOR_ONLY",
    "LINE_LENGTH",
    "MARKER_PREFIXES",
    "PROJECT_ROOT",
    "Region",
    "ScaffoldError",
    "find_exercises",
    "find_regions",
    "main",
    "project_files",
    "raise_statement",
    "student_source",
    "write_student_tree",
]

if __name__ == "__main__":
    sys.exit(main())
