"""Checking that a push notification comes from the repository's host.

Two conventions are accepted, each compared in constant time:

- GitLab: the ``X-Gitlab-Token`` header equals the configured secret;
- GitHub: ``X-Hub-Signature-256`` is ``sha256=`` and the HMAC-SHA256 of the
  exact request body under the secret.

A replayed notification passes the check; it can only trigger one more fetch,
and concurrent fetch requests coalesce, so replay gains an attacker nothing.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Protocol

_SIGNATURE_PREFIX = "sha256="


class Headers(Protocol):
    """A request's headers, as Werkzeug's and a plain dict both give them."""

    def get(self, key: str, /) -> str | None:
        """The header's value, or None without it."""


def is_authentic(headers: Headers, body: bytes, secret: str) -> bool:
    """Whether the request carries the secret, GitLab- or GitHub-style."""
    token = headers.get("X-Gitlab-Token")
    if token is not None:
        return hmac.compare_digest(token.encode(), secret.encode())
    signature = headers.get("X-Hub-Signature-256")
    if signature is not None and signature.startswith(_SIGNATURE_PREFIX):
        expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        return hmac.compare_digest(signature[len(_SIGNATURE_PREFIX) :].encode(), expected.encode())
    return False
