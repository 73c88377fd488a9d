"""A free loopback port, with the standard library only: the scripted
servers import it in their own processes, where importing redis (for
``redis_server``) cost half a second of every start."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on at the moment of asking, on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
