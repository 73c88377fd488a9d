"""Jinja templates (and YAML, JSON) as HTML, coloured by Pygments on the server.

Pygments escapes what it is given, so untrusted template text comes out as
text; the colours are CSS classes (``pygments_css``), which the strict
Content-Security-Policy allows, never inline styles.
"""

from __future__ import annotations

from functools import cache

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer, TextLexer, YamlLexer
from pygments.lexers.templates import HtmlDjangoLexer

MAX_HIGHLIGHTED = 256 * 1024
"""Longer texts are shown escaped but not coloured: lexing a megabyte of
hostile template text costs more than a page may."""

_LEXERS = {"jinja": HtmlDjangoLexer, "yaml": YamlLexer, "json": JsonLexer}


@cache
def _formatter() -> HtmlFormatter[str]:
    return HtmlFormatter(nowrap=True, classprefix="hl-")


def highlighted(text: str, language: str) -> Markup:
    """``text`` as HTML spans (without the enclosing ``<pre>``)."""
    lexer = _LEXERS.get(language, TextLexer)() if len(text) <= MAX_HIGHLIGHTED else TextLexer()
    return Markup(highlight(text, lexer, _formatter()))


@cache
def pygments_css() -> str:
    """The stylesheet of the highlighted classes, light and dark."""
    light = HtmlFormatter(classprefix="hl-", style="friendly").get_style_defs(".code")  # type: ignore[no-untyped-call]
    dark = HtmlFormatter(classprefix="hl-", style="monokai").get_style_defs(".code")  # type: ignore[no-untyped-call]
    return f"{light}\n@media (prefers-color-scheme: dark) {{\n{dark}\n}}\n"
