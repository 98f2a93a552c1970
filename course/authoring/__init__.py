"""Writing the course, run by the instructor; never in the student tree.

``scaffold``: ``python -m course.authoring.scaffold OUT_DIR`` writes the student tree, the files
its manifest ``student_tree.txt`` names (the student's README from ``student_readme.md``), every
exercise cut out (``unused_names``: the pragmas a cut leaves needed).
``make_course_references``: ``python -m course.authoring.make_course_references`` writes
``course/reference_data.pt`` from the reference equations in ``course_references`` (the
solution). Nothing here is imported by what ships (``course/``).
"""
