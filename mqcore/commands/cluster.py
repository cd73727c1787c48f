"""``mqcore cluster status``: broker groups, their members, roles and replication lag."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from mqcore.client.cluster_status import cluster_status
from mqcore.commands.admin import admin_options, emit
from mqcore.commands.security import client_security
from mqcore.errors import MQError
from mqcore.remoting.client import RemotingClient

__all__ = ["cluster", "cluster_status"]


def _replication(row: dict[str, Any]) -> str:
    """The table's replication cell."""
    if row["ha_slaves_connected"] is not None:
        n = row["ha_slaves_connected"]
        return f"{n} slave{'' if n == 1 else 's'} connected"
    if row["ha_connected"] is None:
        return ""
    if row["ha_connected"]:
        return "connected"
    return f"disconnected: {row['ha_error']}" if row["ha_error"] else "disconnected"


@click.group()
def cluster() -> None:
    """Broker groups and their members."""


@cluster.command("status")
@admin_options
def status(server: str, as_json: bool) -> None:
    """Groups, members, roles, replication state and lag (bytes a slave is behind its master).

    A group whose master is down shows a "no master" row.

    --server may be a name server (every registered group) or one mqcore serve.
    """
    security = client_security()
    client = RemotingClient(credentials=security["credentials"], ssl_context=security["tls"])
    try:
        rows = cluster_status(server, client)
    except MQError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from exc
    finally:
        client.close()

    def table() -> Table:
        t = Table("group", "id", "address", "role", "commit-log max", "replication", "lag (bytes)")
        for r in rows:
            lag = r["replication_lag_bytes"]
            if r["address"] is None:
                role = "no master"
            elif r["error"]:
                role = f"unreachable: {r['error']}"
            else:
                role = r["role"]
            t.add_row(
                r["broker_name"],
                str(r["broker_id"]),
                r["address"] or "-",
                role,
                "" if r["commitlog_max_offset"] is None else f"{r['commitlog_max_offset']:,}",
                _replication(r),
                "" if lag is None else f"{lag:,}",
            )
        return t

    emit(as_json, rows, table)
