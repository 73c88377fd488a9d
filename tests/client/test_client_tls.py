"""The clients' TLS: verification exactly as httpx's default, the context built
once per process and only when a connection could need it.

The HTTPS server is real (a TLS socket on a free port, with a certificate
from a throwaway CA made by trustme: tests/support/https_server.py); it answers
``GET /v1/releases`` the way the registry does, which is all a handshake test
needs. In fresh interpreters: tests/integration/test_client_tls_processes.py.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator

import httpx
import pytest
import trustme

from registry.client import AsyncRegistryClient, RegistryClient, RegistryUnavailable, RetryPolicy, tls
from tests.support.https_server import serving_https


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_base(ca: trustme.CA) -> Iterator[str]:
    with serving_https(ca) as base:
        yield base


NO_RETRIES = RetryPolicy(attempts=1)


def _trusting(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


def test_an_https_registry_is_verified_by_default(https_base: str) -> None:
    with RegistryClient(https_base, retries=NO_RETRIES) as client:
        with pytest.raises(RegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
            client.releases()


def test_a_context_of_ones_own_is_used_as_it_is(https_base: str, ca: trustme.CA) -> None:
    with RegistryClient(https_base, retries=NO_RETRIES, verify=_trusting(ca)) as client:
        assert client.releases().releases == ()


def test_the_async_client_verifies_the_same_way(https_base: str, ca: trustme.CA) -> None:
    async def run() -> None:
        async with AsyncRegistryClient(https_base, retries=NO_RETRIES) as client:
            with pytest.raises(RegistryUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
                await client.releases()
        async with AsyncRegistryClient(https_base, retries=NO_RETRIES, verify=_trusting(ca)) as client:
            assert (await client.releases()).releases == ()

    asyncio.run(run())


def test_https_clients_share_one_verifying_context() -> None:
    first, second = tls.context_for("https://a.example", True), tls.context_for("https://b.example:8443", True)
    assert first is second
    assert isinstance(first, ssl.SSLContext)
    assert first.verify_mode == ssl.CERT_REQUIRED and first.check_hostname
    assert first.get_ca_certs() or first.cert_store_stats()["x509_ca"] > 0


def test_an_http_registry_gets_a_context_that_trusts_nothing(https_base: str) -> None:
    """Nothing is loaded for it; and TLS through it, were it ever tried, fails."""
    context = tls.context_for("http://registry:8080", True)
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0
    with httpx.Client(verify=context) as http, pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        http.get(https_base + "/v1/releases")


def test_a_proxy_from_the_environment_gets_the_verifying_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """An http:// registry reached through a proxy may speak TLS to the proxy."""
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example:3128")
    assert tls.context_for("http://registry:8080", True) is tls.verifying_context()


def test_verification_switched_off_is_the_callers_explicit_choice() -> None:
    assert tls.context_for("https://registry", False) is False
