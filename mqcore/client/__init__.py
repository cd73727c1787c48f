"""Clients of the broker: Producer, PullConsumer (PushConsumer comes with its runtime)."""

from __future__ import annotations

from mqcore.client.producer import MessageQueueSelector, Producer
from mqcore.client.pull_consumer import PullConsumer

__all__ = ["MessageQueueSelector", "Producer", "PullConsumer"]
