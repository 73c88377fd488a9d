"""Reports of an evaluation: one ``EvalRun`` (``registry.evals.results``)
written for a reader.

Each format is a function from the run to text, in ``RENDERERS``: ``text``
for a terminal (``registry.evals.reports.text``), ``markdown`` for a merge
request note, cut to fit one (``registry.evals.reports.markdown``),
``junit``, XML for CI test report widgets (``registry.evals.reports.junit``),
``json``, every field of the results (``EvalRun.as_json``), and ``html``,
one self-contained page with word diffs (``registry.evals.reports.html``). What they all
say the same way (which cases to list, in what order, why one did not pass)
is ``registry.evals.reports.facts``. A new format is a module with such a
function, added to the table; reports never run anything, and read nothing
but the run.

Colour is the caller's: a renderer is given a ``Painter`` that styles a
piece of text (``bold``, ``dim``, ``added``, ``removed``, ``error``,
``warning``), ``plain`` when the output is not a terminal.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from registry.evals.reports.html import render_html
from registry.evals.reports.junit import render_junit
from registry.evals.reports.markdown import render_markdown
from registry.evals.reports.text import Painter, plain, render_text
from registry.evals.results import EvalRun

Renderer = Callable[[EvalRun, Painter], str]


def render_json(run: EvalRun, paint: Painter = plain) -> str:
    """Everything the evaluation found, as JSON (``EvalRun.as_json``)."""
    written = json.dumps(run.as_json(), ensure_ascii=False, indent=2) + "\n"
    # A lone surrogate (a model's reply may hold one) cannot be written as
    # UTF-8; as the escape JSON has for it (\ud800), it can, and reads back the same.
    return written.encode("utf-8", "backslashreplace").decode("utf-8")


RENDERERS: dict[str, Renderer] = {
    "text": render_text,
    "markdown": render_markdown,
    "junit": render_junit,
    "json": render_json,
    "html": render_html,
}
"""The report formats, by the name ``--format`` takes."""

__all__ = [
    "RENDERERS",
    "Painter",
    "Renderer",
    "plain",
    "render_html",
    "render_json",
    "render_junit",
    "render_markdown",
    "render_text",
]
