"""One parser for every ``host:port`` mqcore reads, with one style of refusal."""

from __future__ import annotations

import pytest

from mqcore.errors import InvalidArgumentError
from mqcore.hostport import split_host_port


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("127.0.0.1:9876", ("127.0.0.1", 9876)),
        (" broker-a.example:10911 ", ("broker-a.example", 10911)),
        ("[::1]:9876", ("::1", 9876)),
        ("h:65535", ("h", 65535)),
        ("h:1", ("h", 1)),
    ],
)
def test_an_address_splits_into_host_and_port(text: str, pair: tuple[str, int]) -> None:
    assert split_host_port(text) == pair


BAD = ["nohost", ":9876", "h:", "h:x", "h:-1", "h:0", "h:65536", "h:\uff11\uff12", "", "h:1 x"]


@pytest.mark.parametrize("text", BAD)
def test_a_refusal_names_the_setting_the_value_and_the_form(text: str) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        split_host_port(text, "ha_master_address", example="127.0.0.1:10912")
    assert str(info.value) == (
        f"ha_master_address {text!r} is not HOST:PORT (e.g. 127.0.0.1:10912)"
    )


def test_a_listening_address_may_ask_for_any_port() -> None:
    assert split_host_port("0.0.0.0:0", "--listen", any_port=True) == ("0.0.0.0", 0)


def test_a_bare_port_takes_the_default_host_when_there_is_one() -> None:
    assert split_host_port("7001", "--ha-listen", default_host="0.0.0.0") == ("0.0.0.0", 7001)
    assert split_host_port("10.0.0.1:7001", default_host="0.0.0.0") == ("10.0.0.1", 7001)
    with pytest.raises(InvalidArgumentError, match=r"'x' is not \[HOST:\]PORT"):
        split_host_port("x", "--ha-listen", default_host="0.0.0.0")


def test_not_a_string_is_refused_by_the_same_message() -> None:
    with pytest.raises(InvalidArgumentError, match="address 9876 is not HOST:PORT"):
        split_host_port(9876)  # type: ignore[arg-type]
