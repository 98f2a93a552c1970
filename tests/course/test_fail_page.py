"""The page of ``sanity_check.py --html``: a mistake planted at one token (the first token's
position embedding off by one) is one red column, token 0, in every sentence's map; the page
holds the text output's words and where the output is off, nothing of the expected values; a
browser draws it where headless Chromium is installed."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from course.checks import CHECKS
from course.fail_page import page
from course.registry import FAIL, format_result, run_check
from tests.course.test_grader_mutants import BERT, ctx, forget_the_model, m, mutated  # noqa: F401

FIRST_TOKEN_OFF = m(
    "first-token-position-off-by-one",
    "embeddings",
    BERT,
    (
        "positions = self.position_ids[:, :T]",
        "positions = self.position_ids[:, :T].clone()\n        positions[:, 0] = 1",
    ),
)
SVG = re.compile(r"<svg[^>]*>(.*?)</svg>", re.S)
CELL = re.compile(r"<rect class='(off|ok)( marked)?' data-column='(\d+)' data-row='(\d+)'")


@pytest.fixture(scope="module")
def failed(ctx):  # noqa: F811 (the mutant corpus's grading context)
    """The embeddings check's result with the mistake planted."""
    with pytest.MonkeyPatch.context() as patch, mutated(FIRST_TOKEN_OFF, patch):
        results = [run_check(c, ctx) for c in CHECKS if c.exercises == ("embeddings",)]
    forget_the_model(ctx)
    assert [r.status for r in results] == [FAIL]
    return results


def test_a_mistake_at_one_token_is_one_red_column_in_every_panel(failed):
    text = page(failed)
    panels = SVG.findall(text)
    assert panels
    marked = []
    for panel in panels:
        cells = CELL.findall(panel)
        off_columns = {int(column) for state, _, column, _ in cells if state == "off"}
        assert off_columns == {0}, off_columns  # (a value dropout zeroes is right in both)
        marked += [int(column) for _, mark, column, _ in cells if mark]
    assert marked == [0]  # the value the message names, outlined once


def test_the_page_shows_where_not_what(failed):
    """Outside the maps the page holds the text output's words; the maps hold flags, positions
    and colours: no number the text output does not print."""
    text = page(failed)
    maps = "".join(SVG.findall(text))
    assert not re.search(r"\d\.\d", maps)  # pixel positions and indices only
    printed = "\n".join(format_result(r, 40) for r in failed)
    words = re.sub(r"<style>.*?</style>", "", SVG.sub("", text), flags=re.S)
    numbers = set(re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", words))
    assert numbers <= set(re.findall(r"-?\d+\.\d+(?:e[-+]?\d+)?", printed)), numbers


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no headless Chromium here")
def test_a_browser_draws_the_maps(failed, tmp_path):
    path = tmp_path / "page.html"
    path.write_text(page(failed), encoding="utf-8")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
    flags += ["--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}"]
    shot = tmp_path / "page.png"
    done = subprocess.run(
        ["chromium", *flags, f"--screenshot={shot}", "--window-size=1000,1400", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", done.stderr[-2000:]
    from PIL import Image

    colors = Image.open(shot).convert("RGB").getcolors(maxcolors=1 << 24)
    assert (0xD6, 0x27, 0x28) in {color for _, color in colors}  # the red of a cell that is off
