"""Text from a submission made inert before it reaches the instructor.

A student chooses their entry's name, the names inside it and (through the judge) parts of the
notes on their row. That text ends up in a terminal, a log and a spreadsheet, each of which
obeys instructions hidden in text:

- a terminal obeys escape sequences (ESC [ ... colours, moves the cursor, rewrites earlier
  lines) and carriage returns (overprinting a line), so a name can forge another student's row;
- a CSV row ends at a line break, so a name with one can add rows of its own;
- a spreadsheet runs a cell that starts with ``=``, ``+``, ``-`` or ``@`` as a formula
  (``=HYPERLINK(...)``, OWASP's "CSV injection"), and bidirectional overrides make a cell read
  other than it is (the "Trojan Source" trick).

``clean`` removes every such character; ``csv_cell`` also defuses a formula. Standard library.
"""

from __future__ import annotations

import unicodedata

# Unicode's bidirectional embeddings, overrides and isolates, and the marks: invisible, and they
# reorder what is shown around them.
BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

# Categories removed whole: Cc is C0 (NUL..US, with TAB, LF, CR, ESC), DEL and C1 (U+0080..U+009F,
# where U+009B is a one-character ESC [); Zl and Zp are line and paragraph separators, which
# several readers (Python's str.splitlines among them) take as line breaks.
REMOVED_CATEGORIES = frozenset({"Cc", "Zl", "Zp"})

# The first characters that make a spreadsheet read a cell as a formula (OWASP: =, +, -, @, and
# TAB and CR, which some spreadsheets skip before looking).
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def clean(text: str) -> str:
    """``text`` without control characters, line separators and bidirectional controls; ordinary
    spaces and every printable character stay."""
    return "".join(
        ch for ch in text if ch not in BIDI and unicodedata.category(ch) not in REMOVED_CATEGORIES
    )


def csv_cell(text: str) -> str:
    """A text cell of the grades CSV: ``clean(text)``, with a ``'`` in front where a spreadsheet
    would read it as a formula. For text cells only (name, status, notes): the points the
    grader writes are numbers, and a ``'`` would turn them into text."""
    text = clean(text)
    # Leading spaces are looked past: a spreadsheet that trims them would see the formula.
    if text.lstrip(" ").startswith(FORMULA_START):
        return "'" + text
    return text
