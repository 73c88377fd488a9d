"""The clients' TLS: verification exactly as httpx's default, the context built
once per process and only when a connection could need it.

The HTTPS server is real (a TLS socket on a free port, with a certificate
from a throwaway CA made by trustme); it answers ``GET /v1/releases`` the
way the registry does, which is all a handshake test needs.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import trustme

from registry.client import AsyncRegistryClient, RegistryClient, RegistryUnavailable, RetryPolicy, tls
from tests.conftest import LibraryRepo
from tests.support.servers import RegistryProcess, clean_environment

NO_RETRIES = RetryPolicy(attempts=1)
RELEASES: dict[str, object] = {"releases": [], "latest": None, "channels": {}}


class _Releases(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(RELEASES).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_base(ca: trustme.CA) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 whose certificate only ``ca`` vouches for."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Releases)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


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


def _python(program: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        env={**clean_environment(), **env},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_ssl_cert_file_is_honoured_as_httpx_honours_it(https_base: str, ca: trustme.CA, tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    program = (
        "from registry.client import RegistryClient, RetryPolicy\n"
        f"with RegistryClient({https_base!r}, retries=RetryPolicy(attempts=1)) as client:\n"
        "    print(client.releases().releases)\n"
    )
    assert _python(program, SSL_CERT_FILE=str(bundle)) == "()"


def test_an_http_client_never_loads_a_certificate_bundle(released_repo: LibraryRepo) -> None:
    """In a fresh process: clients made and used against a real registry over
    plain HTTP, and the verifying context was never built."""
    with RegistryProcess("--repo", str(released_repo.path)) as server:
        program = (
            "from registry.client import RegistryClient, tls\n"
            "for _ in range(3):\n"
            f"    with RegistryClient({server.base!r}, release='^1.0') as client:\n"
            "        client.get('chat', 'minimal').render(question='q')\n"
            "print(tls._verifying is None)\n"
        )
        proxies = {k: v for k, v in os.environ.items() if k.lower().endswith("_proxy")}
        assert not proxies, "this test needs no proxy in its environment"
        assert _python(program) == "True"
