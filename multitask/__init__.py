"""How a multitask run is built, trained, saved and served, on top of ``tasks/`` (what a task is)
and ``minbert/`` (the model library). Its modules, a line each: README.md, "Where things are".
"""
