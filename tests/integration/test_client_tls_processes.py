"""The clients' TLS in fresh interpreters (subprocesses): SSL_CERT_FILE honoured
as httpx honours it, and a client of a real registry process over plain HTTP
never builds the verifying context."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.conftest import LibraryRepo
from tests.support.https_server import serving_https
from tests.support.servers import RegistryProcess, clean_environment


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def https_base(ca: trustme.CA) -> Iterator[str]:
    with serving_https(ca) as base:
        yield base


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
