"""A real HTTPS server for the clients' TLS tests: a TLS socket on a free port
of 127.0.0.1, with a certificate from a throwaway CA made by trustme, that
answers every GET the way the registry answers ``GET /v1/releases``."""

from __future__ import annotations

import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import trustme

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


@contextmanager
def serving_https(ca: trustme.CA) -> Iterator[str]:
    """An HTTPS server on 127.0.0.1 whose certificate only ``ca`` vouches for."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Releases)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(context)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
