"""The TLS context a client is given: built once per process, and only when
a connection could need it.

httpx builds a verifying context for every client it makes, loading the
certificate bundle each time (about 15 ms, nearly all of a client's
construction), even for an ``http://`` registry that never speaks TLS. A
gateway that makes a client per request would pay it per request. Here:

- ``https://`` (or an HTTP proxy from the environment, which may be
  ``https://``): one context, the one httpx would build (certifi's bundle, or
  ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), made by the first client that needs
  it and shared by every later one. Verification is exactly httpx's default.
- ``http://`` without a proxy: a context that trusts no certificate, so that
  if anything ever tried TLS through it, verification would fail; nothing is
  loaded, and nothing is weakened.
- a context of the caller's own (an internal CA, a client certificate), or
  ``False`` to switch verification off: given to httpx as it is.
"""

from __future__ import annotations

import ssl
import threading
import urllib.request

import httpx

_lock = threading.Lock()
_verifying: ssl.SSLContext | None = None
_trusting_nothing: ssl.SSLContext | None = None


def context_for(base_url: str, verify: ssl.SSLContext | bool) -> ssl.SSLContext | bool:
    """What to give httpx as ``verify`` for a client of ``base_url``."""
    if verify is not True:
        return verify
    if httpx.URL(base_url).scheme == "https" or urllib.request.getproxies():
        return verifying_context()
    return _context_trusting_nothing()


def verifying_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once per process."""
    global _verifying
    if _verifying is None:
        with _lock:
            if _verifying is None:
                _verifying = httpx.create_ssl_context(verify=True, trust_env=True)
    return _verifying


def _context_trusting_nothing() -> ssl.SSLContext:
    global _trusting_nothing
    if _trusting_nothing is None:
        with _lock:
            if _trusting_nothing is None:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # hostname checked, a certificate required
                _trusting_nothing = context  # and no trusted certificate loaded: every handshake fails
    return _trusting_nothing
