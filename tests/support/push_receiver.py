"""A real HTTP server receiving push notifications, as a client of the A2A
service would run one: its own process on a free loopback port, plain or
behind TLS (``--cert``, ``--key``: a certificate for ``localhost``).

Each ``POST`` takes the next reply of the script (``{"status": 503}``,
``{"status": 429, "headers": {"Retry-After": "1"}}``, ``{"trickle": 0.2}``: a
header a byte at a time, never finished; 200 once the script is used up) and is logged as one JSON line: the path, every header, and the
body's exact bytes in base64, for a test to check the signature over them.

    python -m tests.support.push_receiver --port 8000 --script replies.json --log requests.jsonl
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import time
from pathlib import Path
from typing import Any

import trustme

from tests.support.scripted_process import Script, ScriptedHandler, ScriptedServerProcess, script_arguments, serve


class ReceiverHandler(ScriptedHandler):
    log_path: Path

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        entry = {
            "path": self.path,
            "headers": {name.lower(): value for name, value in self.headers.items()},
            "body_base64": base64.b64encode(body).decode("ascii"),
        }
        with self.log_path.open("a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")
        reply = self.script.next_reply("") or {}
        if reply.get("trickle"):
            self._trickle(float(reply["trickle"]))
            return
        self._send(int(reply.get("status", 200)), b"{}", reply.get("headers"))

    def _trickle(self, interval: float) -> None:
        """An answer that never ends: its headers a byte every ``interval``
        seconds, until the client hangs up (or a minute has passed)."""
        self.close_connection = True
        self.wfile.write(b"HTTP/1.1 200 OK\r\n")
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(interval)
        except OSError:
            pass  # the client gave up: what the test waits for


class PushReceiver(ScriptedServerProcess):
    """The receiver's process (``with PushReceiver(...) as receiver``)."""

    def __init__(
        self, directory: Path, replies: list[dict[str, Any]] | None = None, *, ca: trustme.CA | None = None
    ) -> None:
        options: list[str] = []
        health_tls = None
        if ca is not None:
            certificate = ca.issue_cert("localhost")
            certificate.private_key_and_cert_chain_pem.write_to_path(str(directory / "receiver.pem"))
            options = ["--cert", str(directory / "receiver.pem")]
            health_tls = ssl.create_default_context()
            ca.configure_trust(health_tls)
        super().__init__(
            "tests.support.push_receiver",
            replies or [],
            directory,
            script="receiver-script.json",
            log="received.jsonl",
            what="the push notification receiver",
            options=options,
            health_tls=health_tls,
        )

    def received(self) -> list[dict[str, Any]]:
        """Every notification received so far, in order, each with its ``body`` as bytes."""
        return [{**entry, "body": base64.b64decode(entry["body_base64"])} for entry in self.entries()]


def verified(entry: dict[str, Any], secret: str) -> bool:
    """What a receiver checks of an entry of ``PushReceiver.received``: the
    HMAC-SHA256 it computes itself over "{id}.{timestamp}." and the exact
    body, keyed with the secret."""
    headers = entry["headers"]
    signed = f"{headers['x-registry-notification-id']}.{headers['x-registry-timestamp']}.".encode() + entry["body"]
    expected = "v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers["x-registry-signature"])


def main() -> None:
    parser = script_arguments(__doc__.split("\n")[0])
    parser.add_argument("--cert", type=Path, help="a PEM file holding the private key and the certificate chain")
    args = parser.parse_args()
    handler = type("Handler", (ReceiverHandler,), {"script": Script.from_file(args.script), "log_path": args.log})
    tls = None
    if args.cert is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(args.cert)
    serve(args.port, handler, tls=tls)


if __name__ == "__main__":
    main()
