"""The pages for people: an index at ``/`` and Swagger UI at ``/docs``.

Swagger UI's files come from the flask-swagger-ui package (its ``dist/``
files only, not its blueprint), so the page works with no network. They are
served under a URL that names their version, so any cache may keep them for
good, and only the files the page loads are served. The pages hold no data:
like ``/openapi.json`` they stay public when tokens are required.
"""

from __future__ import annotations

import base64
import hashlib
from importlib import metadata
from pathlib import Path

import flask_swagger_ui
from flask import Blueprint, Response, current_app, jsonify, redirect, request, send_from_directory, url_for
from markupsafe import escape
from werkzeug.wrappers import Response as BaseResponse

from registry.errors import NotFound
from registry.serving.api import IMMUTABLE

bp = Blueprint("docs", __name__)

SWAGGER_UI_VERSION = metadata.version("flask-swagger-ui")  # the package follows Swagger UI's own versions
_ASSETS_DIRECTORY = Path(flask_swagger_ui.__file__).resolve().parent / "dist"
# What the page loads, with its type: the package's other files (an OAuth
# redirect page, unbundled builds) are not served.
_ASSETS = {
    "swagger-ui.css": "text/css",
    "index.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}

# The page's one inline script. The policy allows it by its hash, so no other
# inline script can run; the document's URL comes from the page, not the script.
_BOOT_SCRIPT = """
const root = document.getElementById("swagger-ui");
window.ui = SwaggerUIBundle({url: root.dataset.url, domNode: root, deepLinking: true, validatorUrl: null});
"""
_BOOT_HASH = base64.b64encode(hashlib.sha256(_BOOT_SCRIPT.encode()).digest()).decode()
# Swagger UI's stylesheet draws its icons as data: images, and the page fetches
# the document and "Try it out" requests from the registry itself. Without the
# standalone preset (whose logo is an inline <style>) no inline style is needed:
# checked in Chromium with operations open, a request executed and the
# Authorize dialog shown.
DOCS_POLICY = (
    f"default-src 'none'; script-src 'self' 'sha256-{_BOOT_HASH}'; style-src 'self'; "
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)

_DOCS_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>prompt-registry API</title>
<link rel="stylesheet" href="{swagger_ui_css}">
<link rel="stylesheet" href="{index_css}">
<link rel="icon" type="image/png" href="{favicon}" sizes="32x32">
</head>
<body>
<div id="swagger-ui" data-url="{document}"></div>
<script src="{bundle}"></script>
<script>{boot}</script>
</body>
</html>
"""


@bp.get("/")
def index() -> BaseResponse:
    """Where to go from here: the UI for a browser, JSON links for anything else."""
    links = {
        "docs": url_for("docs.api_docs"),
        "openapi": url_for("api.openapi"),
        "releases": url_for("api.list_releases"),
        "health": url_for("api.healthz"),
        "ui": url_for("ui.releases"),
    }
    if request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html":
        # A person: the UI, which links everything else.
        response = redirect(url_for("ui.releases"))
    else:
        response = jsonify({"name": "prompt-registry", "links": links})
        response.headers["Cache-Control"] = "no-cache"
    response.vary.add("Accept")
    return response


# "/docs/" too: people type it, and the page's links are absolute.
@bp.get("/docs", strict_slashes=False)
def api_docs() -> Response:
    """Swagger UI over ``/openapi.json``."""
    page = _DOCS_PAGE.format(
        swagger_ui_css=_asset_url("swagger-ui.css"),
        index_css=_asset_url("index.css"),
        favicon=_asset_url("favicon-32x32.png"),
        bundle=_asset_url("swagger-ui-bundle.js"),
        document=escape(url_for("api.openapi")),
        boot=_BOOT_SCRIPT,
    )
    return _html(page, DOCS_POLICY)


@bp.get("/docs/assets/<version>/<filename>")
def asset(version: str, filename: str) -> Response:
    """One of Swagger UI's files, from the installed package."""
    mimetype = _ASSETS.get(filename)
    if version != SWAGGER_UI_VERSION or mimetype is None:
        raise NotFound("no such file; /docs links the ones there are")
    response = send_from_directory(_ASSETS_DIRECTORY, filename, mimetype=mimetype, max_age=31536000)
    # The URL names the version, so the file behind it never changes.
    response.headers["Cache-Control"] = f"public, {IMMUTABLE}"
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def _asset_url(filename: str) -> str:
    return escape(url_for("docs.asset", version=SWAGGER_UI_VERSION, filename=filename))


def _html(page: str, policy: str) -> Response:
    response = current_app.response_class(page, mimetype="text/html")
    # The page changes only when the registry is upgraded: revalidate by ETag.
    etag = "page-" + hashlib.sha256(page.encode()).hexdigest()[:40]
    response.set_etag(etag)
    if request.if_none_match.contains_weak(etag):
        response.status_code = 304  # Werkzeug sends no body with a 304
    response.headers["Cache-Control"] = "no-cache"
    response.headers["Content-Security-Policy"] = policy
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
