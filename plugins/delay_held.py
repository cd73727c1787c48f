"""What the delay-level and timer schedulers share: storing a held message again in the topic
and queue it was sent to (``REAL_TOPIC``, ``REAL_QID``) once its time has come."""

from __future__ import annotations

from typing import Protocol

from mqcore.message import PROPERTY_REAL_QUEUE_ID, PROPERTY_REAL_TOPIC, Message, MessageExt

__all__ = ["deliver_held", "real_destination"]


class _Host(Protocol):
    def deliver(
        self,
        message: Message,
        queue_id: int,
        *,
        born_timestamp: int,
        born_host: str,
        reconsume_times: int,
    ) -> None: ...


def real_destination(msg: MessageExt) -> tuple[str, int] | None:
    """``(topic, queue id)`` a held message goes to when due; None when it names none (nothing
    can ever deliver it)."""
    real_topic = msg.properties.get(PROPERTY_REAL_TOPIC)
    real_qid = msg.properties.get(PROPERTY_REAL_QUEUE_ID, "")
    if not real_topic or not real_qid.isdigit():
        return None
    return real_topic, int(real_qid)


def deliver_held(
    host: _Host, msg: MessageExt, destination: tuple[str, int], properties: dict[str, str]
) -> None:
    """Store ``msg`` with ``properties`` in ``destination`` as a plain message, keeping where and
    when it was born and how often it was consumed; raises what ``host.deliver`` raises."""
    topic, queue_id = destination
    host.deliver(
        msg.to_message(topic=topic, properties=properties, delay_level=0),
        queue_id,
        born_timestamp=msg.born_timestamp,
        born_host=msg.born_host,
        reconsume_times=msg.reconsume_times,
    )
