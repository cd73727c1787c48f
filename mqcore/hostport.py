"""``host:port`` addresses: one parser for settings, options and connections alike.

Name servers, brokers, replication ports and listening addresses are all written
``host:port`` (an IPv6 host in brackets, ``[::1]:9876``), and every refusal reads the same
way: what was given, for which setting, and an example of the right form.
"""

from __future__ import annotations

from mqcore.errors import InvalidArgumentError

__all__ = ["split_host_port"]


def split_host_port(
    address: str,
    what: str = "address",
    *,
    example: str = "127.0.0.1:9876",
    any_port: bool = False,
    default_host: str | None = None,
) -> tuple[str, int]:
    """``"host:port"`` (or ``"[v6 host]:port"``) as a ``(host, port)`` pair.

    :param what: the setting or option the address came from, for the error message
        (``"--listen"``, ``"ha_master_address"``).
    :param example: a well-formed address, shown in the error message.
    :param any_port: accept port 0 (a listening address: any free port).
    :param default_host: accept a bare ``PORT`` too, meaning this host.
    :raises InvalidArgumentError: not of that form, or the port is not in 1..65535
        (0..65535 with ``any_port``).
    """
    text = address.strip() if isinstance(address, str) else ""
    host, sep, port = text.rpartition(":")
    if not sep and default_host is not None:
        host = default_host
    lowest = 0 if any_port else 1
    if not host or not (port.isascii() and port.isdigit()) or not lowest <= int(port) <= 65535:
        form = "[HOST:]PORT" if default_host is not None else "HOST:PORT"
        raise InvalidArgumentError(f"{what} {address!r} is not {form} (e.g. {example})")
    return host.strip("[]"), int(port)
