"""``mqcore serve``: a broker and name server on one address, speaking RocketMQ's remoting.

This module parses the options; :class:`mqcore.server.Server` is what runs.

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
from mqcore.hostport import split_host_port
from mqcore.remoting.tls import TlsMode, server_context
from mqcore.server.server import Server

__all__ = ["parse_settings", "serve"]

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
        split_host_port(master_ha, "--master-ha", example="127.0.0.1:10912")
        out["ha_master_address"] = master_ha
    if ha_listen is not None:
        host, port = split_host_port(
            ha_listen, "--ha-listen", example="10912", any_port=True, default_host="0.0.0.0"
        )
        out["ha_listen_port"] = port
        if ha_listen.strip().rpartition(":")[1]:  # HOST:PORT: bound there, not at --listen's
            out["ha_listen_host"] = host
    return out


def _tls_options(
    cert: Path | None, key: Path | None, ca: Path | None, mode: str | None
) -> dict[str, Any]:
    """The TLS options as the Server's ``ssl_context`` and ``tls_mode``.

    (Enforcing TLS also turns it on for replication: :func:`_ha_tls_settings`.)"""
    if (cert is None) != (key is None):
        raise InvalidArgumentError("TLS needs both --tls-cert and --tls-key")
    if cert is None or key is None:
        if ca is not None or (mode is not None and mode.lower() != "disabled"):
            raise InvalidArgumentError(
                "--tls-ca and --tls-mode need the server's --tls-cert and --tls-key"
            )
        return {}
    return {"ssl_context": server_context(cert, key, ca), "tls_mode": mode or "enforcing"}


def _ha_tls_settings(cert: Path | None, key: Path | None, ca: Path | None) -> dict[str, Any]:
    """Replication over TLS with the remoting port's files (``--set`` may change any)."""
    out: dict[str, Any] = {"ha_tls": True, "ha_tls_cert": str(cert), "ha_tls_key": str(key)}
    if ca is not None:
        out["ha_tls_ca"] = str(ca)
    return out


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
    "--metrics-listen",
    metavar="HOST:PORT",
    help="Serve Prometheus /metrics, /healthz and /readyz there (needs mqcore[metrics]).",
)
@click.option(
    "--acl",
    "acl_file",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="RocketMQ plain_acl.yml: every request must be signed by an account of it (or come "
    "from a white-listed address); reloaded when it changes. See docs/security.md.",
)
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="TLS certificate (PEM, with its chain) of the remoting and replication ports.",
)
@click.option(
    "--tls-key",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="The TLS certificate's private key (PEM).",
)
@click.option(
    "--tls-ca",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="CA of the client certificates: clients must show one it signed (mutual TLS).",
)
@click.option(
    "--tls-mode",
    type=click.Choice(["disabled", "permissive", "enforcing"], case_sensitive=False),
    help="enforcing: TLS only (the default with --tls-cert); permissive: TLS and plain TCP "
    "on one port; disabled: plain TCP.",
)
@click.option(
    "--grpc-listen",
    metavar="HOST:PORT",
    help="Serve RocketMQ 5's gRPC messaging service there too (needs mqcore[grpc]); it "
    "checks --acl too, and takes TLS only when --tls-cert is given (mode not disabled).",
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
    metrics_listen: str | None = None,
    acl_file: Path | None = None,
    tls_cert: Path | None = None,
    tls_key: Path | None = None,
    tls_ca: Path | None = None,
    tls_mode: str | None = None,
    grpc_listen: str | None = None,
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
        tls = _tls_options(tls_cert, tls_key, tls_ca, tls_mode)
        if (
            tls_cert is not None
            and tls_key is not None
            and str(tls.get("tls_mode")).lower() != "disabled"
        ):
            # One gRPC port cannot sniff TLS from plaintext: with certificates, TLS only.
            tls["grpc_tls"] = (tls_cert, tls_key, tls_ca)
        if str(tls.get("tls_mode", "")).lower() == "enforcing":
            for name, value in _ha_tls_settings(tls_cert, tls_key, tls_ca).items():
                settings.setdefault(name, value)
        server = Server(
            data_dir,
            listen,
            store,
            settings,
            metrics_listen=metrics_listen,
            grpc_listen=grpc_listen,
            acl=acl_file,
            **tls,
        )
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
        if server.acl is not None:
            click.echo(f"mqcore serve: ACL from {server.acl.path}")
        if server.remoting.tls_mode is not TlsMode.DISABLED:
            click.echo(f"mqcore serve: TLS {server.remoting.tls_mode.value}")
        if server.metrics is not None:
            click.echo(f"mqcore serve: metrics on http://{server.metrics.address}/metrics")
        if server.grpc is not None:
            click.echo(f"mqcore serve: gRPC (RocketMQ 5 clients) on {server.grpc.address}")
        sys.stdout.flush()
        while not stop.wait(1.0):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        server.close()
        click.echo("mqcore serve: stopped")
