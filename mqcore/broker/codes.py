"""RocketMQ's remoting request and response codes, re-exported from :mod:`mqcore.protocol.codes`.

The server's request table (:data:`mqcore.server.OPERATION_TABLE`) maps each request code to
the handler that calls the :class:`~mqcore.broker.Broker` method serving it.
"""

from __future__ import annotations

from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, RequestCode, ResponseCode

__all__ = ["NOT_FOUND_TOPIC_EXCEPTION", "RequestCode", "ResponseCode"]
