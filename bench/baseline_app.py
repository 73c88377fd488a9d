"""The baseline of the serving benchmark: a bare Flask app, no registry.

It answers the same URLs as the registry with the least work Flask allows:

- ``GET /v1/agents/<usecase>/<name>?release=R`` returns bytes captured from
  the registry's own answer for ``R`` (read once, at start), with the same
  content type and ETag; so both servers send the same bytes and the
  difference is the registry's work per request.
- ``POST /v1/agents/<usecase>/<name>/render`` renders the same templates with
  plain Jinja (a default ``Environment``, partials from a ``DictLoader``,
  templates compiled once) and returns the messages as JSON: what a service
  that did nothing but render would cost.

Configured by one environment variable, ``BENCH_BASELINE``: a JSON file
written by ``bench/serving.py`` holding ``{"bodies": {release: {"body": <text>,
"etag": ...}}, "templates": {role: text}, "partials": {name: text}}``.
"""

from __future__ import annotations

import json
import os

import jinja2
from flask import Flask, Response, jsonify, request


def create_app() -> Flask:
    with open(os.environ["BENCH_BASELINE"], encoding="utf-8") as handle:
        captured = json.load(handle)
    bodies = {
        release: (answer["body"].encode("utf-8"), answer["etag"]) for release, answer in captured["bodies"].items()
    }
    environment = jinja2.Environment(loader=jinja2.DictLoader(captured["partials"]))
    templates = {role: environment.from_string(text) for role, text in captured["templates"].items()}

    app = Flask(__name__)

    @app.get("/v1/agents/<usecase>/<name>")
    def get_agent(usecase: str, name: str) -> Response:
        body, etag = bodies[request.args.get("release", "")]
        response = Response(body, mimetype="application/json")
        response.set_etag(etag)
        return response

    @app.post("/v1/agents/<usecase>/<name>/render")
    def render_agent(usecase: str, name: str) -> Response:
        inputs = (request.get_json() or {}).get("inputs", {})
        messages = [{"role": role, "content": template.render(inputs)} for role, template in templates.items()]
        return jsonify({"messages": messages})

    return app
