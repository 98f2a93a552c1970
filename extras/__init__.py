"""The extras: optional parts of a run that the core trains without, one module each (with its
helpers), each named in ``multitask/extras.py``'s table ``EXTRAS``, where ``Part``, the shape of
an extra's part of a run, is described. The student tree leaves this folder out. Recipe:
docs/add-an-extra.md.
"""
