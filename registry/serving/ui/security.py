"""What keeps the UI safe: a strict Content-Security-Policy, CSRF tokens on
the forms that send anything, and a login that keeps the bearer token in the
session cookie (``HttpOnly``, ``SameSite=Strict``).

When the registry has API tokens, every page needs one: the login form
checks it against the same tokens as the API and keeps it in the session;
the pages then read what that token may read. Without tokens, the UI is as
open as the API.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from flask import Response, request, session

from registry.errors import InvalidRequest
from registry.serving.auth import token_matches
from registry.settings import Settings

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)
_CSRF = "csrf"
_TOKEN = "token"
CSRF_FIELD = "csrf_token"


def secure_headers(response: Response) -> Response:
    """Every UI answer: no script, style or frame but the app's own."""
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers.setdefault("Cache-Control", "no-store")
    return response


def csrf_token() -> str:
    """The session's CSRF token, made on first use."""
    token = session.get(_CSRF)
    if not isinstance(token, str):
        token = session[_CSRF] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Refuse a form post whose CSRF token is not the session's."""
    sent = request.form.get(CSRF_FIELD, "")
    expected = session.get(_CSRF)
    if not isinstance(expected, str) or not hmac.compare_digest(sent.encode(), expected.encode()):
        raise InvalidRequest("the form is out of date or not ours (CSRF token): reload the page and send it again")


def login_required(settings: Settings) -> bool:
    return bool(settings.api_tokens or settings.admin_tokens)


def signed_in_token() -> str | None:
    token = session.get(_TOKEN)
    return token if isinstance(token, str) else None


def is_signed_in(settings: Settings) -> bool:
    token = signed_in_token()
    return token is not None and token_matches(token, settings.api_tokens + settings.admin_tokens)


def sign_in(token: str, settings: Settings) -> bool:
    """Keep ``token`` in the session when it is one of the registry's."""
    if not token_matches(token, settings.api_tokens + settings.admin_tokens):
        return False
    session.clear()
    session[_TOKEN] = token
    return True


def sign_out() -> None:
    session.clear()


def session_config(settings: Settings) -> dict[str, Any]:
    """The Flask configuration of the session cookie."""
    return {
        "SECRET_KEY": settings.ui_secret or secrets.token_urlsafe(32),
        "SESSION_COOKIE_NAME": "prompt_registry_ui",
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Strict",
        "SESSION_COOKIE_SECURE": settings.ui_secure_cookie,
        "SESSION_COOKIE_PATH": "/ui",
    }
