"""What keeps the UI safe: a strict Content-Security-Policy, CSRF tokens on
the forms that send anything, and a login whose session cookie
(``HttpOnly``, ``SameSite=Strict``) holds the bearer token only sealed
(``registry.serving.ui.sessions``: encrypted, expiring, revoked on sign-out).

When the registry has API tokens, every page needs one: the login form
checks it against the same tokens as the API and seals it in the session;
the pages then read what that token may read. Without tokens, the UI is as
open as the API, and has no sessions (nor a store of sign-outs) at all.

Signing in, and opening or revoking a session, raise ``ConfigurationError``
when the store of sign-outs cannot be used; the pages answer it with why.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from flask import Flask, Response, current_app, g, request, session

from registry.errors import InvalidRequest
from registry.serving.ui.sessions import UiSessions
from registry.settings import Settings
from registry.web.auth import token_matches

SESSIONS_KEY = "prompt_registry.ui.sessions"

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
_SEALED = "sealed"
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
    """The bearer token of the request's session, if it has one that still opens."""
    if "ui_token" not in g:
        g.ui_token = None  # also what a page shows when the session cannot be opened
        sealed = session.get(_SEALED)
        sessions = _sessions()
        if sessions is not None and isinstance(sealed, str):
            opened = sessions.open(sealed)
            g.ui_token = opened.token if opened is not None else None
    token: str | None = g.ui_token
    return token


def is_signed_in(settings: Settings) -> bool:
    token = signed_in_token()
    return token is not None and token_matches(token, settings.api_tokens + settings.admin_tokens)


def sign_in(token: str, settings: Settings) -> bool:
    """Seal ``token`` into a new session when it is one of the registry's."""
    sessions = _sessions()
    if sessions is None or not token_matches(token, settings.api_tokens + settings.admin_tokens):
        return False
    sealed = sessions.seal(token)
    session.clear()
    session[_SEALED] = sealed
    g.pop("ui_token", None)
    return True


def sign_out() -> None:
    """End the session, and revoke it: the same cookie sent again opens nothing."""
    sealed = session.get(_SEALED)
    # The cookie goes even when the revocation below fails.
    session.clear()
    g.pop("ui_token", None)
    sessions = _sessions()
    if sessions is not None and isinstance(sealed, str):
        sessions.revoke(sealed)


def _sessions() -> UiSessions | None:
    found: UiSessions | None = current_app.extensions[SESSIONS_KEY]
    return found


def install(app: Flask, settings: Settings, *, secret: str, sessions: UiSessions | None) -> None:
    """The session cookie's configuration (signed with ``secret``), and its
    sessions (None when the registry has no tokens to sign in with), for ``app``."""
    app.config.update(session_config(settings, secret))
    app.extensions[SESSIONS_KEY] = sessions


def session_config(settings: Settings, secret: str) -> dict[str, Any]:
    """The Flask configuration of the session cookie."""
    return {
        "SECRET_KEY": secret,
        "SESSION_COOKIE_NAME": "prompt_registry_ui",
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Strict",
        "SESSION_COOKIE_SECURE": settings.ui_secure_cookie,
        "SESSION_COOKIE_PATH": "/ui",
    }
