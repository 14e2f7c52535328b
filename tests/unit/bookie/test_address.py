"""bookie.address: the one parser of host:port, every edge, and its round trip."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bookie.address import PORT_MAX, Address, parse_address
from bookie.errors import InvalidAddress


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("bookie-1.example:3181", Address("bookie-1.example", 3181)),
        ("127.0.0.1:1", Address("127.0.0.1", 1)),
        ("127.0.0.1:65535", Address("127.0.0.1", 65535)),
        ("host:080", Address("host", 80)),
        ("[::1]:3181", Address("::1", 3181)),
        ("::1:3181", Address("::1", 3181)),
        ("[fe80::1%eth0]:3181", Address("fe80::1%eth0", 3181)),
        ("bookie-1:3181:3182", Address("bookie-1:3181", 3182)),
        ("::1", Address(":", 1)),
        ("[host:3181", Address("[host", 3181)),
    ],
)
def test_accepted(text: str, expected: Address) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        ":",
        "host",
        "host:",
        ":3181",
        "[]:3181",
        "host:http",
        "host:-1",
        "host:+80",
        "host: 80",
        "host:80 ",
        "host:8_0",
        "host:²",
        "host:١٢",
        "[::1]",
    ],
)
def test_not_host_and_port(text: str) -> None:
    with pytest.raises(InvalidAddress, match="expected host:port"):
        parse_address(text)


@pytest.mark.parametrize(
    "text", ["host:0", "host:00", "host:65536", "host:99999", "host:" + "9" * 5000]
)
def test_port_out_of_range(text: str) -> None:
    with pytest.raises(InvalidAddress, match="the port must be from 1 to 65535"):
        parse_address(text)


def test_a_listener_may_ask_for_any_port() -> None:
    assert parse_address("127.0.0.1:0", port_zero=True) == Address("127.0.0.1", 0)
    with pytest.raises(InvalidAddress, match="the port must be from 0 to 65535"):
        parse_address("127.0.0.1:65536", port_zero=True)


def test_a_setting_may_leave_the_host_empty() -> None:
    assert parse_address(":3181", empty_host=True) == Address("", 3181)
    assert parse_address("[]:3181", empty_host=True) == Address("", 3181)
    with pytest.raises(InvalidAddress, match="expected host:port"):
        parse_address("3181", empty_host=True)


def test_the_message_quotes_the_text() -> None:
    with pytest.raises(InvalidAddress) as raised:
        parse_address("nohost")
    assert str(raised.value) == "'nohost': expected host:port, e.g. 127.0.0.1:3181"


def test_an_invalid_address_is_a_value_error() -> None:
    assert issubclass(InvalidAddress, ValueError)


def test_written_with_brackets_when_the_host_has_a_colon() -> None:
    assert str(Address("bookie-1", 3181)) == "bookie-1:3181"
    assert str(Address("::1", 3181)) == "[::1]:3181"


hosts = st.one_of(
    st.text(st.characters(exclude_characters="[]"), min_size=1),
    st.ip_addresses().map(str),
)


@given(hosts, st.integers(1, PORT_MAX))
def test_round_trip(host: str, port: int) -> None:
    address = Address(host, port)
    assert parse_address(str(address)) == address


@given(st.text())
def test_any_text_is_an_address_or_invalid_and_what_parses_is_written_back_the_same(
    text: str,
) -> None:
    try:
        address = parse_address(text, empty_host=True, port_zero=True)
    except InvalidAddress:
        return
    assert parse_address(str(address), empty_host=True, port_zero=True) == address
