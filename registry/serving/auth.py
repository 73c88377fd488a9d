"""Who may call what: bearer tokens for the API and for its administration.

``/v1/admin/`` always needs an admin token. The rest of ``/v1`` needs an API
token when any are configured, except the git webhook, which carries its own
secret (``registry.serving.webhooks``). Probes, metrics and the API
description stay open.
"""

from __future__ import annotations

import hmac

from registry.errors import Unauthorized
from registry.settings import Settings

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


def bearer_token(authorization: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header; ``Unauthorized`` without one."""
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        raise Unauthorized("send the token as 'Authorization: Bearer <token>'", bearer=True)
    return credentials.strip()


def token_matches(supplied: str, tokens: tuple[str, ...]) -> bool:
    """Whether ``supplied`` is one of ``tokens``. Every token is compared, in
    constant time each, so neither the timing nor the number of comparisons
    tells which token came close."""
    given = supplied.encode("latin-1", "replace")
    matched = False
    for token in tokens:
        matched |= hmac.compare_digest(given, token.encode("utf-8"))
    return matched
