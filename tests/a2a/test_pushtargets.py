"""Where push notifications may go (registry.a2a.pushtargets): public
addresses only, unless the operator allows a network; every URL that is
not a plain http(s) URL refused with one clear error."""

from __future__ import annotations

from ipaddress import ip_address, ip_network

import pytest

from registry.a2a.pushtargets import MAX_URL_CHARS, check_push_url, refusal
from registry.errors import InvalidRequest

LOOPBACK = ip_network("127.0.0.0/8")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "loopback"),
        ("10.0.0.1", "private"),
        ("172.16.5.4", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("224.0.1.1", "multicast"),
        ("100.64.0.1", "non-public"),
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd12:3456::1", "private"),
        ("ff0e::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a00:1", "private"),
        ("2002:7f00:1::1", "loopback"),
    ],
)
def test_addresses_that_are_not_public_are_refused_and_say_why(address: str, reason: str) -> None:
    assert refusal(ip_address(address)) == reason


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])
def test_public_addresses_are_taken(address: str) -> None:
    assert refusal(ip_address(address)) is None


def test_a_network_the_operator_allows_is_taken_in_either_form() -> None:
    allowed = [LOOPBACK, ip_network("fd00::/8")]
    assert refusal(ip_address("127.0.0.1"), allowed) is None
    assert refusal(ip_address("::ffff:127.0.0.1"), allowed) is None
    assert refusal(ip_address("fd00::5"), allowed) is None
    assert refusal(ip_address("10.0.0.1"), allowed) == "private"
    assert refusal(ip_address("::1"), allowed) == "loopback"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/hook",
        "http://10.0.0.1/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
        "http://localhost/hook",
        "http://127.1/hook",
        "http://2130706433/hook",
    ],
)
def test_a_url_reaching_the_services_own_network_is_refused(url: str) -> None:
    with pytest.raises(InvalidRequest, match="may not go to .*--allow-push-to"):
        check_push_url(url)


def test_a_name_is_judged_by_the_address_it_resolves_to() -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_push_url("http://localhost:9/hook")
    assert str(refused.value).startswith("push notifications may not go to 'localhost' (resolved to 127.0.0.1)")


def test_an_allowed_network_lets_its_addresses_and_names_through() -> None:
    target = check_push_url("http://localhost:8080/hook?x=1", allowed=[LOOPBACK])
    assert target.addresses == ("127.0.0.1",)
    assert str(target.url_for("127.0.0.1")) == "http://127.0.0.1:8080/hook?x=1"
    assert target.host_header == "localhost:8080"
    assert target.server_name == "localhost"
    ipv6 = check_push_url("https://[::1]/hook", allowed=[ip_network("::1/128")])
    assert str(ipv6.url_for("::1")) == "https://[::1]/hook"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "must be an absolute http:// or https:// URL"),
        ("garbage", "must be an absolute http:// or https:// URL"),
        ("ftp://example.com/hook", "must be an absolute http:// or https:// URL"),
        ("file:///etc/passwd", "must be an absolute http:// or https:// URL"),
        ("http:///hook", "must be an absolute http:// or https:// URL"),
        ("http://user:password@example.com/hook", "may not carry a user name or password"),
        ("http://example.com\\@127.0.0.1/hook", "may not carry a user name or password"),
        ("http://example.com/" + "a" * MAX_URL_CHARS, f"longer than {MAX_URL_CHARS} characters"),
        ("http://exa mple.com/", "spaces or control characters"),
        ("http://example.com/\r\nX-Injected: 1", "spaces or control characters"),
        ("http://example.com:99999/", "port 99999 is not between 1 and 65535"),
        ("http://[::1/", "is not a URL"),
        ("http://nothing-here.invalid/hook", "does not resolve"),
    ],
)
def test_a_url_that_is_not_a_plain_http_url_is_one_clear_error(url: str, message: str) -> None:
    with pytest.raises(InvalidRequest) as refused:
        check_push_url(url, allowed=[LOOPBACK])
    text = str(refused.value)
    assert message in text and "\n" not in text and len(text) < 300
    assert "password" not in text or "user name or password" in text
