"""Bearer tokens: reading one from a request, and checking it against the configured ones.

Both services take ``Authorization: Bearer <token>``; which routes need
which tokens is each service's own (``registry.serving.auth``,
``registry.protocol.api``).
"""

from __future__ import annotations

import hmac

from registry.errors import Unauthorized


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
