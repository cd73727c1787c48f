"""mqcore served over the network: the broker behind RocketMQ's remoting protocol, and the
name server.

- :mod:`~mqcore.server.server`: :class:`Server` (a broker and its remoting server, what
  ``mqcore serve`` runs) and :class:`NamesrvServer` (a name server alone, ``mqcore namesrv``);
- :mod:`~mqcore.server.operations`: the one request table (code -> handler, header class) and
  the helpers every handler shares;
- :mod:`~mqcore.server.processor`: dispatch through the table, and the client-facing handlers
  (send, pull, heartbeat, offsets, queries, locks, topics, routes);
  :mod:`~mqcore.server.handlers_admin` and :mod:`~mqcore.server.handlers_ha` the admin and
  replication-status ones;
- :mod:`~mqcore.server.namesrv`: the name server's route tables;
  :mod:`~mqcore.server.registration`: a broker's registration with its name servers.

The in-process broker (:mod:`mqcore.broker`) knows nothing of this package.
"""

from __future__ import annotations

from mqcore.server.operations import OPERATION_TABLE
from mqcore.server.server import NamesrvServer, Server

__all__ = ["OPERATION_TABLE", "NamesrvServer", "Server"]
