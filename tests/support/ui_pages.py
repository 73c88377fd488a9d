"""A page of the web UI read through Flask's test client: its status, type
and Content-Security-Policy checked and its HTML parsed strictly; and the
CSRF token of a form on it."""

from __future__ import annotations

import re

import html5lib
from flask.testing import FlaskClient


def page(client: FlaskClient, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.get_data(as_text=True)[:500])
    assert response.mimetype == "text/html"
    assert "script-src 'self'" in response.headers["Content-Security-Policy"]
    text = response.get_data(as_text=True)
    valid_html(text)
    return text


def valid_html(text: str) -> None:
    """Parsed by html5lib's strict parser: a parse error is a failure."""
    html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def csrf(text: str) -> str:
    found = re.search(r'name="csrf_token" value="([^"]+)"', text)
    assert found
    return found.group(1)
