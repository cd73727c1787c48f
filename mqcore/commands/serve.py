"""``mqcore serve``: a broker and name server on one address, speaking RocketMQ's remoting.

Any :class:`~mqcore.config.BrokerConfig` setting can be given by its snake-case name, in a
TOML file (``--config``) or as ``--set NAME=VALUE`` (repeatable; later wins over the file).
"""

from __future__ import annotations

import difflib
import json
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import attrs
import click

from mqcore.config import BrokerConfig
from mqcore.errors import InvalidArgumentError, MQError

__all__ = ["Server", "parse_settings", "serve"]

_FIELDS = {f.name: f for f in attrs.fields(BrokerConfig)}


def _convert(name: str, raw: Any) -> Any:
    """``raw`` (a string from the command line, or a TOML value) as setting ``name`` wants."""
    field = _FIELDS.get(name)
    if field is None:
        close = difflib.get_close_matches(name, list(_FIELDS), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise InvalidArgumentError(f"unknown broker setting {name!r}{hint}")
    kind = str(field.type)
    if not isinstance(raw, str):
        return raw
    try:
        if kind.startswith("bool"):
            low = raw.strip().lower()
            if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                raise ValueError(raw)
            return low in ("true", "1", "yes", "on")
        if kind.startswith("int"):
            return int(raw, 10)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("dict") or kind.startswith("list") or kind.startswith("tuple"):
            return json.loads(raw)
    except ValueError:
        raise InvalidArgumentError(f"broker setting {name}={raw!r} is not a valid {kind}") from None
    return raw


def parse_settings(config_file: Path | None, pairs: tuple[str, ...]) -> dict[str, Any]:
    """Broker settings from a TOML file and ``NAME=VALUE`` pairs, converted and checked."""
    settings: dict[str, Any] = {}
    if config_file is not None:
        if sys.version_info >= (3, 11):
            import tomllib
        else:  # Python 3.10: the same parser, from PyPI
            import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]
        try:
            data = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InvalidArgumentError(f"cannot read config file {config_file}: {exc}") from exc
        section = data.get("broker", data)
        for name, value in section.items():
            settings[name.replace("-", "_")] = _convert(name.replace("-", "_"), value)
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise InvalidArgumentError(f"--set takes NAME=VALUE, got {pair!r}")
        key = name.strip().replace("-", "_")
        settings[key] = _convert(key, value)
    return settings


def _split_listen(listen: str, option: str = "--listen") -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise InvalidArgumentError(
            f"{option} takes HOST:PORT (e.g. 127.0.0.1:9876), got {listen!r}"
        )
    return host.strip("[]"), int(port)


def _bindable(host: str, port: int) -> bool:
    """Whether ``host:port`` can be listened on now (port 0 always can)."""
    if port == 0:
        return True
    import socket

    try:
        with socket.create_server((host, port)):
            return True
    except OSError:
        return False


def _role_settings(
    role: str | None,
    broker_name: str | None,
    broker_id: int | None,
    master_ha: str | None,
    ha_listen: str | None,
) -> dict[str, Any]:
    """The replication options as broker settings (they win over --set and --config)."""
    out: dict[str, Any] = {}
    if role is not None:
        out["broker_role"] = role.upper()
    if broker_name is not None:
        out["broker_name"] = broker_name
    if broker_id is not None:
        out["broker_id"] = broker_id
    if master_ha is not None:
        _split_listen(master_ha, "--master-ha")
        out["ha_master_address"] = master_ha
    if ha_listen is not None:
        port = ha_listen.rpartition(":")[2]
        if not port.isdigit():
            raise InvalidArgumentError(f"--ha-listen takes [HOST:]PORT, got {ha_listen!r}")
        out["ha_listen_port"] = int(port)
    return out


class Server:
    """A :class:`~mqcore.broker.Broker` behind a remoting server; owns both.

    The constructor returns once the server can serve: its port accepts connections only
    after the store has recovered, topics and offsets are loaded and (with ``namesrv_addr``)
    the first registration with the name servers is done.

    :param data_dir: the broker's data directory.
    :param listen: ``HOST:PORT`` to listen on (port 0: any free port).
    :param store: the store plugin's name.
    :param settings: :class:`~mqcore.config.BrokerConfig` settings by name.
    """

    def __init__(
        self,
        data_dir: str | Path,
        listen: str = "127.0.0.1:9876",
        store: str = "mmap",
        settings: dict[str, Any] | None = None,
        **server_options: Any,
    ) -> None:
        from mqcore.broker import Broker
        from mqcore.broker.processor import BrokerProcessor
        from mqcore.client.common import client_ip
        from mqcore.remoting.server import RemotingServer

        host, port = _split_listen(listen)
        settings = dict(settings or {})
        # The port is taken first (the broker records it, and port 0 picks one), but listened
        # on only once the broker can serve: until then a client's connection is refused, so
        # one that connects as soon as the port accepts is answered, never told to wait.
        self.remoting = RemotingServer(None, host, port, **server_options)
        bound_host, bound_port = self.remoting.bind()
        self.registrar: Any = None
        broker: Broker | None = None
        try:
            # Records name the broker by where clients reach it (their offset message ids).
            public = client_ip() if bound_host in ("0.0.0.0", "::", "") else bound_host
            settings.setdefault("broker_ip", public)
            settings.setdefault("listen_port", bound_port)
            role = str(settings.get("broker_role", "ASYNC_MASTER")).upper()
            if role != "SLAVE" and store == "mmap" and "ha_listen_port" not in settings:
                # RocketMQ's haListenPort: the port + 1 (any free port when the port is, or
                # when the port + 1 is taken and no replication port was asked for).
                wanted = bound_port + 1 if port else 0
                settings["ha_listen_port"] = wanted if _bindable(bound_host, wanted) else 0
            settings.setdefault("ha_listen_host", bound_host)
            self.broker = broker = Broker(data_dir, store=store, config=BrokerConfig(**settings))
            self.address = f"{public}:{bound_port}"
            from mqcore.broker.ha import HAMaster

            ha = self.broker.ha
            #: ``host:port`` of the replication port slaves connect to (None: no slaves)
            self.ha_address = f"{public}:{ha.port}" if isinstance(ha, HAMaster) else None
            self.processor = BrokerProcessor(self.broker, self.address)
            self.remoting.processor = self.processor
            self.remoting.inline_codes = self.processor.inline_codes
            self.remoting.start()
            if self.broker.config.namesrv_addr:
                from mqcore.broker.registration import NamesrvRegistrar

                # Registered before start-up ends: a client that asks the name servers once
                # this server reports it listens finds the route.
                self.registrar = NamesrvRegistrar(self.broker, self.address, self.ha_address)
                self.processor.registrar = self.registrar  # topics it creates: registered first
        except BaseException:
            try:
                self.remoting.close()
            finally:
                if broker is not None:
                    broker.close()
            raise

    def close(self) -> None:
        """Close every connection, then the broker (offsets and delay progress persisted)."""
        try:
            if self.registrar is not None:
                self.registrar.close()
        finally:
            try:
                self.remoting.close()
            finally:
                self.broker.close()

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@click.command()
@click.option("--listen", default="127.0.0.1:9876", show_default=True, help="HOST:PORT to serve.")
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of the broker's store and config.",
)
@click.option("--store", default="mmap", show_default=True, help="Store plugin (mmap, lmdb...).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TOML file of broker settings (snake-case names, top level or under [broker]).",
)
@click.option(
    "--role",
    type=click.Choice(["ASYNC_MASTER", "SYNC_MASTER", "SLAVE"], case_sensitive=False),
    help="Replication role (broker_role); see docs/ha.md.",
)
@click.option("--broker-name", help="The broker group's name (broker_name).")
@click.option("--broker-id", type=int, help="0 for a master, 1 and up for slaves (broker_id).")
@click.option("--master-ha", metavar="HOST:PORT", help="A slave's master replication port.")
@click.option(
    "--ha-listen",
    metavar="[HOST:]PORT",
    help="A master's replication port (default: the --listen port + 1; 0: any free port).",
)
@click.option(
    "--namesrv",
    metavar="HOST:PORT[;HOST:PORT]",
    help="Name servers to register with (namesrv_addr); without it, serve is its own.",
)
@click.option(
    "--set",
    "pairs",
    multiple=True,
    metavar="NAME=VALUE",
    help="A broker setting, e.g. --set auto_create_topic_enable=true (repeatable).",
)
def serve(
    listen: str,
    data_dir: Path,
    store: str,
    config_file: Path | None,
    pairs: tuple[str, ...],
    role: str | None = None,
    broker_name: str | None = None,
    broker_id: int | None = None,
    master_ha: str | None = None,
    ha_listen: str | None = None,
    namesrv: str | None = None,
) -> None:
    """Run a broker and name server on one address (RocketMQ 4.x remoting protocol).

    Point any RocketMQ client's name server address at it. Stops on SIGINT or SIGTERM,
    persisting offsets and delay progress.
    """
    try:
        settings = parse_settings(config_file, pairs)
        settings.update(_role_settings(role, broker_name, broker_id, master_ha, ha_listen))
        if namesrv is not None:
            settings["namesrv_addr"] = namesrv
        server = Server(data_dir, listen, store, settings)
    except MQError as exc:
        raise click.ClickException(str(exc)) from exc
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        click.echo(f"mqcore serve: listening on {server.address} (store {store} in {data_dir})")
        cfg = server.broker.config
        if server.ha_address is not None:
            click.echo(f"mqcore serve: {cfg.broker_role} replication port {server.ha_address}")
        elif cfg.broker_role == "SLAVE":
            click.echo(f"mqcore serve: SLAVE of {cfg.ha_master_address}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.close()
        click.echo("mqcore serve: stopped")
