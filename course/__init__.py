"""The course's grader, as it ships to students (the instructor's class grading and the scaffold
that writes the course are in the instructor's tree only, and nothing here imports them):

* ``registry``: what a check is, the ``@check`` decorator that declares one, running, selecting
  and reporting checks (``sanity_check.py`` at the repository root is the runner); ``checks/``:
  the checks, one file per graded source file, found by the one table in ``checks/__init__.py``;
* ``measure``, ``outcome``, ``seal``, ``dropout``, ``locate``, ``untouched``: how a check
  measures, what it observed, the sealed stored outputs, seeded dropout, where an exception was
  raised, what the student's code may not change;
* ``runner`` and ``wire``: a submission's runner, which computes the checks in its own tree and
  answers the class grader's judge; ``gradescope``: results.json and the points (``points.json``).
"""
