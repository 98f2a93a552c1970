"""Class grading, run by the instructor (or by Gradescope on the instructor's zip); never in the
student tree.

``grade``: ``python -m course.grading.grade SUBMISSIONS_DIR --out grades.csv``, each submission
read by ``intake`` (names kept harmless by ``inert``), its checks computed by a contained runner
(``sandbox``: ``jail`` or ``landlock``) and compared by ``judge``; ``report``: the class's
mistakes; ``leaderboard`` and ``predictions``: the final project's board; ``autograder``: the
Gradescope zip. The grader writes each submission's tree as the scaffold writes the student tree,
so ``grade`` and ``autograder`` import ``course.authoring.scaffold``; nothing here is imported by
what ships (``course/``).
"""
