"""The course machinery: the student version of the project and the grader's checks.

* the scaffold (instructor-only): cuts the marked exercise regions out of the project to write
  the student tree;
* ``registry``: what a check is, the ``@check`` decorator that declares one, running, selecting
  and reporting checks (``sanity_check.py`` at the repository root is the runner);
* ``measure``: how a check measures: the difference from a reference tensor or a stored case,
  where it is largest, and the known mistake the output matches;
* ``seal``: the stored outputs in sealed form (digests and projections, no output in full);
* ``dropout``: seeded dropout for the checks in training mode; ``locate``: the student's file
  and line of an exception;
* ``checks/``: the checks, one file per graded source file, in the order of GUIDE.md; the
  reference equations they grade against are instructor-only (the instructor's reference
  script).
"""
