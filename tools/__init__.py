"""The finished-run tools: commands that open a run the driver finished (``multitask/trained.py``)
and serve it: predictions, exports (Hugging Face, PEFT, AdapterHub), attention maps, AdapterFusion's
weights. The student tree leaves this folder out.

``MOVED``: each command's old name (under ``multitask``), where a one-line stub says the new one.
"""

MOVED = {
    "multitask.predict": "tools.predict",
    "multitask.export": "tools.export",
    "multitask.attention": "tools.attention",
    "multitask.fusion_weights": "tools.fusion_weights",
}
