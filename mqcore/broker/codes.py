"""RocketMQ's remoting request and response codes, re-exported from :mod:`mqcore.protocol.codes`.

Each :class:`~mqcore.broker.Broker` operation is tagged with the request code it serves
(:data:`mqcore.broker.broker.OPERATIONS`), so the remoting server maps a frame to a method.
"""

from __future__ import annotations

from mqcore.protocol.codes import NOT_FOUND_TOPIC_EXCEPTION, RequestCode, ResponseCode

__all__ = ["NOT_FOUND_TOPIC_EXCEPTION", "RequestCode", "ResponseCode"]
