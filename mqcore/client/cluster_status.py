"""A cluster's members as an operator sees them: broker groups, their members, roles,
commit-log offsets and replication state (``mqcore cluster status`` and the dashboard)."""

from __future__ import annotations

import json
from typing import Any

from mqcore.errors import BrokerError, MQError
from mqcore.protocol.codes import RequestCode, ResponseCode
from mqcore.remoting.client import RemotingClient
from mqcore.remoting.command import RemotingCommand

__all__ = ["cluster_status"]


def _runtime(client: Any, addr: str) -> dict[str, str]:
    try:
        resp = client.invoke(addr, RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), 5)
    except MQError as exc:
        return {"error": str(exc)}
    if resp.code != ResponseCode.SUCCESS:
        return {"error": resp.remark or f"code {resp.code}"}
    table: dict[str, str] = json.loads(bytes(resp.body or b"{}")).get("table") or {}
    return table


def _flag(value: str | None) -> bool | None:
    return None if value is None else value == "true"


def cluster_status(server: str, client: RemotingClient | None = None) -> list[dict[str, Any]]:
    """One row per broker: group, id, address, role, commit-log max offset, replication state
    and lag in bytes; a group without a master gets a row of broker id 0 saying so.

    ``server`` is a name server (``mqcore namesrv``: every registered group) or a single
    ``mqcore serve`` (its group: itself, its master while it reaches it, its slaves).
    ``client`` is the remoting client to ask with (an admin client's, which signs its
    requests for a cluster with ACL on); without it, one of its own, closed after.

    Replication, from each broker's GET_BROKER_RUNTIME_INFO (RocketMQ's names where they
    exist): ``ha_connected`` is a slave's ``haConnected`` (its replication connection to its
    master is up), ``ha_error`` why it is not, ``ha_slaves_connected`` a master's
    ``haConnectionCount``; ``replication_lag_bytes`` is a slave's distance behind its master's
    commit log (None when the master cannot be asked).
    """
    borrowed = client is not None
    if client is None:
        client = RemotingClient()
    try:
        resp = client.invoke(
            server, RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO), 5
        )
        members: list[tuple[str, int, str | None]] = []
        if resp.code == ResponseCode.SUCCESS:
            info = json.loads(bytes(resp.body or b"{}"))
            for name, data in sorted((info.get("brokerAddrTable") or {}).items()):
                for bid, addr in sorted(data["brokerAddrs"].items(), key=lambda kv: int(kv[0])):
                    members.append((name, int(bid), addr))
        else:  # a single mqcore serve: itself, and its slaves
            own = _runtime(client, server)
            if "error" in own:
                raise BrokerError(
                    f"{server} answered no broker status: {own['error']}",
                    code=ResponseCode.SYSTEM_ERROR,
                )
            name = own.get("brokerName", "?")
            members.append((name, int(own.get("brokerId", 0)), server))
            for bid, addr in sorted(json.loads(own.get("haSlaves", "{}")).items()):
                members.append((name, int(bid), addr))
        # A group whose master is gone (killed, or not reached by its slave) keeps a row.
        masters = {name for name, bid, _ in members if bid == 0}
        for name in sorted({name for name, _, _ in members} - masters):
            members.append((name, 0, None))
        members.sort(key=lambda m: (m[0], m[1]))
        rows: list[dict[str, Any]] = []
        master_end: dict[str, int] = {}
        for name, bid, addr in members:
            rt = _runtime(client, addr) if addr is not None else {"error": _NO_MASTER}
            end = int(rt["commitLogMaxOffset"]) if "commitLogMaxOffset" in rt else None
            if bid == 0 and end is not None:
                master_end[name] = end
            count = rt.get("haConnectionCount")
            rows.append(
                {
                    "broker_name": name,
                    "broker_id": bid,
                    "address": addr,
                    "role": rt.get("brokerRole", "?") if addr is not None else None,
                    "commitlog_max_offset": end,
                    "error": rt.get("error"),
                    "ha_connected": _flag(rt.get("haConnected")),
                    "ha_error": rt.get("haMasterError"),
                    "ha_slaves_connected": int(count) if count is not None else None,
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
        if not borrowed:
            client.close()


_NO_MASTER = "no master: none is registered or reachable (down?); sends to the group fail"
