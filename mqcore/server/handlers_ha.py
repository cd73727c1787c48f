"""Remoting handlers for replication and cluster status: GET_BROKER_RUNTIME_INFO (28) with
the broker's role, commit-log offsets, replication state and timer messages, as a RocketMQ
``KVTable``."""

from __future__ import annotations

import json
from typing import Any

from mqcore.broker.ha import HAMaster, HASlave
from mqcore.errors import MQError
from mqcore.protocol.admin_bodies import TIMER_RUNTIME_KEYS
from mqcore.protocol.codes import RequestCode
from mqcore.remoting.command import RemotingCommand
from mqcore.server.operations import Reply, Serving, ok, operation
from mqcore.storecaps import CommitLogBounds

__all__ = ["runtime_info"]


def runtime_info(processor: Serving) -> dict[str, str]:
    """The broker's runtime facts, every value a string (RocketMQ's KVTable)."""
    broker = processor.broker
    cfg = broker.config
    store = broker.store
    table = {
        "brokerName": cfg.broker_name,
        "brokerId": str(cfg.broker_id),
        "brokerRole": cfg.broker_role,
        "brokerAddr": processor.address,
    }
    if isinstance(store, CommitLogBounds):
        table["commitLogMaxOffset"] = str(store.commitlog_max_offset())
        table["commitLogMinOffset"] = str(store.commitlog_min_offset())
    ha = broker.ha
    if isinstance(ha, HAMaster):
        table["haConnectionCount"] = str(ha.connection_count)
        table["slaveFallBehindMuch"] = str(ha.lag())
        table["haSlaves"] = json.dumps({str(k): v for k, v in ha.slaves().items()})
    elif isinstance(ha, HASlave):
        table["haMasterAddress"] = ha.master_ha_address
        table["haConnected"] = str(ha.connected.is_set()).lower()
        if ha.last_error is not None:  # why the master cannot be reached now
            table["haMasterError"] = ha.last_error
    table.update(_timer_facts(broker.timer_scheduler))
    return table


def _timer_facts(timer: Any) -> dict[str, str]:
    """What ``mqcore timer stats --server`` shows, when the broker runs a timer scheduler
    (a slave's does not run: nothing then)."""
    if timer is None:
        return {}
    try:
        stats = timer.stats().as_dict()
    except MQError:
        return {}
    return {
        key: str(stats[name]) for name, key in TIMER_RUNTIME_KEYS.items() if stats[name] is not None
    }


@operation(RequestCode.GET_BROKER_RUNTIME_INFO)
def _runtime_info(self: Serving, req: RemotingCommand, h: Any, conn: Any) -> Reply:
    body = json.dumps({"table": runtime_info(self)}).encode()
    return ok(req, body=body)
