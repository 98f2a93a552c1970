"""A picture of each FAIL: ``python sanity_check.py --html PAGE`` writes one offline page with
every check, and for a failed tensor check a map of where its output is off.

A map is drawn from ``Result.off`` (``course/measure.py``: ``off_map``): one flag a value, set
where the student's value is outside the tolerance by the digests. It shows where the output is
off, never by how much or what the expected value is (that would give the sealed reference
away): a cell is red or grey, and the value the message names is outlined. Each panel is one
index of the leading axes (a sentence, a head); in it the second-to-last axis runs left to right
(tokens, so a mistake at one position is one column) and the last axis top to bottom
(features, folded into at most ``MAX_ROWS`` rows: a row is red where any of its values is).
"""

from __future__ import annotations

import html
import math
from textwrap import dedent

from course.registry import FAIL, PASS, Result, format_result

CELL = 8  # pixels a side
MAX_ROWS = 48  # the last axis folded into this many rows at most
MAX_COLUMNS = 128
MAX_PANELS = 16
COLORS = {"off": "#d62728", "ok": "#dddddd"}
MARK = "<meta name='generator' content='sanity_check.py --html'>"  # a page this command wrote
STYLE = """
body { font-family: sans-serif; margin: 2em; max-width: 70em; }
.check { border-top: 1px solid #ccc; padding: 0.5em 0; }
.PASS { color: #2a7d2a; } .FAIL { color: #c62828; } .other { color: #8a6d00; }
pre { white-space: pre-wrap; background: #f6f6f6; padding: 0.5em; }
figure { display: inline-block; margin: 0.3em; } figcaption { font-size: 0.8em; }
rect.marked { stroke: #000; stroke-width: 2; }
"""


def page(results: list[Result], title: str = "sanity_check.py") -> str:
    """The whole page: a summary line, then each check with its status, message and map."""
    passed = sum(r.status == PASS for r in results)
    body = [
        f"<h1>{html.escape(title)}</h1>",
        f"<p>{passed} passed, {len(results) - passed} failed. A map shows where your output is "
        "outside the tolerance (red), never the expected values.</p>",
    ]
    body += [section(result) for result in results]
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'>{MARK}"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def written_here(path) -> bool:
    """``path`` is a page this command wrote (its generator line), which it may replace."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return MARK in f.read(4096)
    except OSError:
        return False


def section(result: Result) -> str:
    """One check: its name and status, then (a FAIL) the message lines and the map."""
    status = result.status
    kind = status if status in (PASS, FAIL) else "other"
    parts = [
        f"<div class='check'><b>{html.escape(result.check.name)}</b> "
        f"<span class='{kind}'>{html.escape(status)}</span>"
    ]
    if status != PASS:  # the lines sanity_check.py prints under the check
        text = format_result(result, 0).partition("\n")[2]
        parts.append(f"<pre>{html.escape(dedent(text))}</pre>")
    if status == FAIL and result.off is not None:
        parts.append(off_figures(result.off))
    parts.append("</div>")
    return "".join(parts)


def off_figures(off: dict) -> str:
    """The panels of one output's map (``MAX_PANELS`` at most, the rest counted)."""
    shape, axes, outside = off["shape"], off["axes"], off["outside"]
    if not shape:
        return ""
    columns, rows = (shape[-2], shape[-1]) if len(shape) >= 2 else (shape[0], 1)
    leading = shape[:-2] if len(shape) >= 2 else []
    panels = math.prod(leading)
    size = columns * rows
    figures = []
    for panel in range(min(panels, MAX_PANELS)):
        flags = outside[panel * size : (panel + 1) * size]
        marked = off["marked"] - panel * size
        caption = panel_name(panel, leading, axes[: len(leading)])
        figures.append(figure(flags, columns, rows, marked, caption, axes, len(shape)))
    if panels > MAX_PANELS:
        figures.append(f"<p>{panels - MAX_PANELS} more panels not drawn</p>")
    return f"<p>where <code>{html.escape(off['output'])}</code> is off:</p>" + "".join(figures)


def panel_name(panel: int, leading: list[int], names: list[str]) -> str:
    """ "sentence 1, head 0" for the panel's index into the leading axes."""
    index, parts = panel, []
    for size, name in zip(reversed(leading), reversed(names), strict=True):
        parts.append(f"{name} {index % size}")
        index //= size
    return ", ".join(reversed(parts))


def figure(flags, columns, rows, marked, caption, axes, ndim) -> str:
    """One panel as an SVG: a cell per (column, folded row), red where any value it holds is
    off; the cell of ``marked`` (a flat index into this panel, if in it) outlined."""
    shown_columns = min(columns, MAX_COLUMNS)
    fold = math.ceil(rows / MAX_ROWS)
    shown_rows = math.ceil(rows / fold)
    cells = []
    for column in range(shown_columns):
        for row in range(shown_rows):
            values = range(row * fold, min((row + 1) * fold, rows))
            off = any(flags[column * rows + r] for r in values)
            holds_mark = 0 <= marked < len(flags) and marked // rows == column
            holds_mark = holds_mark and marked % rows in values
            state = "off" if off else "ok"
            extra = " marked" if holds_mark else ""
            cells.append(
                f"<rect class='{state}{extra}' data-column='{column}' data-row='{row}' "
                f"x='{column * CELL}' y='{row * CELL}' width='{CELL}' height='{CELL}' "
                f"fill='{COLORS[state]}'/>"
            )
    width, height = shown_columns * CELL, shown_rows * CELL
    across = axes[-2] if ndim >= 2 else axes[-1]
    down = f"{axes[-1]} ↓" + (f" ({fold} a row)" if fold > 1 else "") if ndim >= 2 else ""
    svg = (
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
        f"viewBox='0 0 {width} {height}'>{''.join(cells)}</svg>"
    )
    label = ", ".join(part for part in (caption, f"{across} →", down) if part)
    return f"<figure>{svg}<figcaption>{html.escape(label)}</figcaption></figure>"
