"""Where a push notification may go: an http(s) URL whose name resolves only
to public addresses, or to networks the operator allows (``--allow-push-to``).

``check_push_url`` is the one check, made when a client sets a
configuration (an early, clear error) and again before every delivery, on
the addresses the name resolves to then: a name that resolved to a public
address at configuration time and to 127.0.0.1 since (DNS rebinding) is
refused at send time. The delivery then connects to one of the addresses
this check approved (``PushTarget.url_for``), never resolving the name
again, while the request keeps the name in its ``Host`` header and TLS
verifies the certificate against the name (httpx's ``sni_hostname``
request extension).

Refused unless allowed: loopback, private (RFC 1918, IPv6 unique local
fc00::/7), link-local (169.254.0.0/16, the cloud metadata address among
them; fe80::/10), unspecified (0.0.0.0, ::), multicast, reserved, shared
(100.64.0.0/10) and documentation ranges: every address that is not
globally reachable. An IPv6 address that carries an IPv4 one
(``::ffff:127.0.0.1``, NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) is
judged by the IPv4 address it carries too.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address

import httpx

from registry.errors import InvalidRequest
from registry.models import shorten

MAX_URL_CHARS = 2048
"""The longest push URL taken."""

_SCHEMES = ("http", "https")
_NAT64 = IPv6Network("64:ff9b::/96")

Network = IPv4Network | IPv6Network
Address = IPv4Address | IPv6Address


@dataclass(frozen=True)
class PushTarget:
    """A push URL that passed the check, and the addresses its name resolved
    to, each of them allowed."""

    url: httpx.URL
    addresses: tuple[str, ...]

    @property
    def host_header(self) -> str:
        """The ``Host`` the request carries: the URL's name (in its ASCII
        form) and its port when the URL names one."""
        return self.url.netloc.decode("ascii")

    @property
    def server_name(self) -> str:
        """The name TLS verifies the certificate against (and sends as SNI)."""
        return self.url.raw_host.decode("ascii")

    def url_for(self, address: str) -> httpx.URL:
        """The URL with ``address`` in place of its name: where to connect."""
        return self.url.copy_with(host=address)


def check_push_url(url: str, *, allowed: Sequence[Network] = ()) -> PushTarget:
    """``url`` as a place to send notifications to, with the addresses its
    name resolves to now; ``InvalidRequest`` (one line) when it is not an
    http(s) URL, carries a user name or password, is too long, names
    nothing that resolves, or resolves to an address that is not public
    and not in one of the ``allowed`` networks.

    Resolving a name blocks: from an event loop, call it in a thread."""
    parsed = _parse(url)
    host = parsed.raw_host.decode("ascii")
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise InvalidRequest(f"the push URL's host {shorten(host)!r} does not resolve: {exc}") from None
    addresses = list(dict.fromkeys(str(entry[4][0]) for entry in found))
    if not addresses:
        raise InvalidRequest(f"the push URL's host {shorten(host)!r} resolves to no address")
    for text in addresses:
        reason = refusal(ip_address(text.partition("%")[0]), allowed)
        if reason is not None:
            shown = text if host == text else f"{shorten(host)!r} (resolved to {text})"
            raise InvalidRequest(
                f"push notifications may not go to {shown}: {reason} addresses are refused"
                " unless the operator allows their network (--allow-push-to)"
            )
    return PushTarget(url=parsed, addresses=tuple(addresses))


def refusal(address: Address, allowed: Sequence[Network] = ()) -> str | None:
    """Why notifications may not go to ``address`` (``"loopback"``,
    ``"private"``...), or None when they may: it is public, or in one of
    the ``allowed`` networks."""
    judged = _judged(address)
    if any(candidate in network for candidate in (address, *judged) for network in allowed):
        return None
    return next((reason for candidate in judged if (reason := _kind(candidate)) is not None), None)


def _kind(address: Address) -> str | None:
    """What makes the address no place for a notification, or None when it is public."""
    checks = (
        ("unspecified", address.is_unspecified),
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
        ("non-public", not address.is_global),
    )
    return next((name for name, applies in checks if applies), None)


def _judged(address: Address) -> tuple[Address, ...]:
    """The addresses ``address`` is judged by: an IPv4-mapped or NAT64
    address by the IPv4 address it stands for (the mapped range itself is
    "reserved"), a 6to4 address by itself and the IPv4 address it carries."""
    if isinstance(address, IPv4Address):
        return (address,)
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address in _NAT64:
        return (IPv4Address(int(address) & 0xFFFFFFFF),)
    return (address,) if address.sixtofour is None else (address, address.sixtofour)


def _parse(url: str) -> httpx.URL:
    """The URL, parsed as the delivery's HTTP client parses it (so that the
    check and the request never read it differently), or ``InvalidRequest``."""
    if len(url) > MAX_URL_CHARS:
        raise InvalidRequest(f"the push URL is longer than {MAX_URL_CHARS} characters")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise InvalidRequest("the push URL contains spaces or control characters")
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise InvalidRequest(f"the push URL is not a URL: {exc}") from None
    if parsed.scheme not in _SCHEMES or not parsed.raw_host:
        raise InvalidRequest("the push URL must be an absolute http:// or https:// URL")
    if parsed.userinfo:
        raise InvalidRequest("the push URL may not carry a user name or password")
    if parsed.port is not None and not 0 < parsed.port < 65536:
        raise InvalidRequest(f"the push URL's port {parsed.port} is not between 1 and 65535")
    return parsed
