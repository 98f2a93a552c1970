"""The course machinery: the student version of the project and the grader's checks.

* ``scaffold``: cuts the marked exercise regions out of the project to write the student tree
  (``python -m minbert.course.scaffold``, alias ``python -m minbert.scaffold``);
* ``registry``: what a check is, the ``@check`` decorator that declares one, running, selecting
  and reporting checks (``sanity_check.py`` at the repository root is the runner);
* ``references``: the reference equations the checks share, written out with torch operations;
* ``checks/``: the checks, one file per graded source file, in the order of GUIDE.md.

Nothing is imported here, so ``python -m minbert.course.scaffold`` runs the module only once.
"""
