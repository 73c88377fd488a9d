"""Who may call what: bearer tokens for the API and for its administration.

``/v1/admin/`` always needs an admin token. The rest of ``/v1`` needs an API
token when any are configured, except the git webhook, which carries its own
secret (``registry.serving.webhooks``). Probes, metrics and the API
description stay open. Reading and comparing the tokens is shared with the
Agent Protocol service (``registry.web.auth``).
"""

from __future__ import annotations

from registry.errors import Unauthorized
from registry.settings import Settings
from registry.web.auth import bearer_token, token_matches

WEBHOOK_PATH = "/v1/hooks/git"


def authenticate(path: str, authorization: str, settings: Settings) -> None:
    """Refuse a request to ``path`` whose ``Authorization`` header does not
    carry a token it needs; ``Unauthorized`` names what is missing."""
    if path.startswith("/v1/admin/"):
        _require_bearer(
            authorization, settings.admin_tokens, "administrative endpoints need a token from REGISTRY_ADMIN_TOKENS"
        )
    elif settings.api_tokens and path.startswith("/v1/") and path != WEBHOOK_PATH:
        _require_bearer(authorization, settings.api_tokens, "this registry needs a bearer token")


def _require_bearer(authorization: str, tokens: tuple[str, ...], unconfigured: str) -> None:
    if not tokens:
        raise Unauthorized(unconfigured, bearer=True)
    if not token_matches(bearer_token(authorization), tokens):
        raise Unauthorized("the bearer token is not valid", bearer=True)
