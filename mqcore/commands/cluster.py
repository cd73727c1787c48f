"""``mqcore cluster status``: broker groups, their members, roles and replication lag."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.table import Table

from mqcore.commands.admin import admin_options, emit
from mqcore.errors import MQError

__all__ = ["cluster", "cluster_status"]


def _runtime(client: Any, addr: str) -> dict[str, str]:
    from mqcore.protocol.codes import RequestCode, ResponseCode
    from mqcore.remoting.command import RemotingCommand

    try:
        resp = client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    except MQError as exc:
        return {"error": str(exc)}
    if resp.code != ResponseCode.SUCCESS:
        return {"error": resp.remark or f"code {resp.code}"}
    table: dict[str, str] = json.loads(bytes(resp.body or b"{}")).get("table") or {}
    return table


def cluster_status(server: str) -> list[dict[str, Any]]:
    """One row per broker: group, id, address, role, commit-log max offset, lag in bytes.

    ``server`` is a name server (``mqcore namesrv``: every registered group) or a single
    ``mqcore serve`` (its group: itself and the slaves registered with it).
    """
    from mqcore.protocol.codes import RequestCode, ResponseCode
    from mqcore.remoting.client import RemotingClient
    from mqcore.remoting.command import RemotingCommand

    client = RemotingClient()
    try:
        resp = client.invoke(
            server, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 5
        )
        members: list[tuple[str, int, str]] = []
        if resp.code == ResponseCode.SUCCESS:
            info = json.loads(bytes(resp.body or b"{}"))
            for name, data in sorted((info.get("brokerAddrTable") or {}).items()):
                for bid, addr in sorted(data["brokerAddrs"].items(), key=lambda kv: int(kv[0])):
                    members.append((name, int(bid), addr))
        else:  # a single mqcore serve: itself, and its slaves
            own = _runtime(client, server)
            if "error" in own:
                raise click.ClickException(f"{server} answered no broker status: {own['error']}")
            name = own.get("brokerName", "?")
            members.append((name, int(own.get("brokerId", 0)), server))
            for bid, addr in sorted(json.loads(own.get("haSlaves", "{}")).items()):
                members.append((name, int(bid), addr))
        rows: list[dict[str, Any]] = []
        master_end: dict[str, int] = {}
        for name, bid, addr in members:
            rt = _runtime(client, addr)
            end = int(rt["commitLogMaxOffset"]) if "commitLogMaxOffset" in rt else None
            if bid == 0 and end is not None:
                master_end[name] = end
            rows.append(
                {
                    "broker_name": name,
                    "broker_id": bid,
                    "address": addr,
                    "role": rt.get("brokerRole", "?"),
                    "commitlog_max_offset": end,
                    "error": rt.get("error"),
                }
            )
        for row in rows:
            master = master_end.get(row["broker_name"])
            mine = row["commitlog_max_offset"]
            lag = None
            if row["broker_id"] != 0 and master is not None and mine is not None:
                lag = max(0, master - mine)
            row["replication_lag_bytes"] = lag
        return rows
    finally:
        client.close()


@click.group()
def cluster() -> None:
    """Broker groups and their members."""


@cluster.command("status")
@admin_options
def status(server: str, as_json: bool) -> None:
    """Groups, members, roles and replication lag (bytes a slave is behind its master).

    --server may be a name server (every registered group) or one mqcore serve.
    """
    try:
        rows = cluster_status(server)
    except MQError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from exc

    def table() -> Table:
        t = Table("group", "id", "address", "role", "commit-log max", "lag (bytes)")
        for r in rows:
            lag = r["replication_lag_bytes"]
            t.add_row(
                r["broker_name"],
                str(r["broker_id"]),
                r["address"],
                r["role"] if not r["error"] else f"unreachable: {r['error']}",
                "" if r["commitlog_max_offset"] is None else f"{r['commitlog_max_offset']:,}",
                "" if lag is None else f"{lag:,}",
            )
        return t

    emit(as_json, rows, table)
